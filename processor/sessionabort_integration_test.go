package processor_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/krabka/krole/codec"
)

// A member restarted after its process died (stopped with KeepOnExit, as
// a SIGKILL: its last heartbeats stay the member id's latest session
// records) has its first session heartbeat fenced, with no other process
// about: as when the coordinator aborted a heartbeat whose EndTxn it had
// refused for longer than the transaction timeout (the abort bumps the
// session's epoch, and the member's next request under the old one is
// answered INVALID_PRODUCER_EPOCH; here kfake answers one EndTxn so). The
// member id's latest session record is then still its dead predecessor's
// heartbeat, of another nonce, under an earlier epoch of the session's
// producer id: no other live process. The member starts its session again
// and takes the role. (The chaos suite saw such a member leave as "in use
// by another process", with none running: seed 8890759879001686021, m4,
// after 2 s of CONCURRENT_TRANSACTIONS on EndTxn.)
func TestIntegrationRestartedMemberSurvivesAnAbortedHeartbeat(t *testing.T) {
	e := newEnv(t, itTxnTimeout)
	e.c.RequireFake(t)
	role := codec.Role("restart-abort")
	s := itSettings()
	a, tok := e.diedHolding("node-5", role, s)

	// The restarted process's first session commit is answered fenced.
	h := e.c.Fake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, TxnID: e.c.Config.SessionTransactionalID(a.id), Err: kerr.InvalidProducerEpoch})
	defer h.Remove()
	b, errc := e.startErr("node-5", []codec.Role{role}, s)
	await(t, 20*time.Second, "the restarted node-5's first heartbeat is fenced", func() bool { return h.Hits() > 0 })

	held := e.awaitNewerToken(role, tok, "the restarted node-5 holds the role")
	e.agree(role, b.id, held)
	// Not refused: Run goes on (its error would say "in use by another
	// process"), and a heartbeat of its own session commits again.
	requireRunning(t, errc)
	await(t, 10*time.Second, "a heartbeat of node-5's new process commits", func() bool {
		hb, ok := e.rec.lastBeat(b.id)
		return ok && hb.end.After(time.Now().Add(-2*s.HeartbeatInterval))
	})
	requireRunning(t, errc)
	require.Equal(t, 1, h.Hits())
}
