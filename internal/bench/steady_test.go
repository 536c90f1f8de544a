package bench

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
)

// TestCountSteady counts a window's lease records and its holders'
// heartbeats: renewals, elections, handovers, releases and epochs that no
// lease carries.
func TestCountSteady(t *testing.T) {
	sessA := codec.Session{ProducerID: 90, Epoch: 0, Nonce: "na"}
	sessB := codec.Session{ProducerID: 91, Epoch: 0, Nonce: "nb"}
	lease := func(off int64, m string, epoch int16, at int64) fencing.RoleRecord {
		s := sessA
		if m == "b" {
			s = sessB
		}
		return fencing.RoleRecord{Offset: off, Key: codec.Key{Kind: codec.KindLease}, Record: codec.Record{Lease: &codec.Lease{
			Member: codec.MemberID(m), Token: codec.Token{ProducerID: 7, Epoch: epoch}, GrantedAt: at, Deadline: at + 500, Session: &s}}}
	}
	beat := func(s codec.Session, m string, at int64, excluded ...codec.Role) fencing.RoleRecord {
		return fencing.RoleRecord{Key: codec.Key{Kind: codec.KindSession, Member: codec.MemberID(m)}, Record: codec.Record{Heartbeat: &codec.Heartbeat{
			Member: codec.MemberID(m), Session: s, GrantedAt: at, Deadline: at + 500, Excluded: excluded}}}
	}
	first := *lease(10, "a", 3, 1000).Record.Lease
	recs := []fencing.RoleRecord{
		lease(5, "a", 2, 900),   // before the window: ignored
		lease(10, "a", 3, 1000), // the window's first lease
		{Offset: 11, Key: codec.Key{Kind: codec.KindRegistration, Member: "c"}, Record: codec.Record{
			Registration: &codec.Registration{Member: "c", RegisteredAt: 1050}}},
		lease(13, "a", 3, 1190), // a rewrite: a renewal
		lease(14, "b", 5, 1800), // election of b (epoch 4 wrote nothing): a handover
		lease(16, "b", 6, 2500), // b again, under a new epoch: an election, not a handover
	}
	beats := map[codec.MemberID][]fencing.RoleRecord{
		"a": {
			beat(sessA, "a", 950),  // before the window
			beat(sessA, "a", 1100), // renews a's lease
			beat(sessA, "a", 1150, "svc"),
			beat(sessA, "a", 1300), // renews the rewritten lease
			beat(codec.Session{ProducerID: 90, Epoch: 0, Nonce: "old"}, "a", 1400), // another incarnation
			beat(sessA, "a", 1900), // after b's election: not a's any more
		},
		"b": {beat(sessB, "b", 1900), {Record: codec.Record{Heartbeat: &codec.Heartbeat{Member: "b", Session: sessB, End: true}}}},
	}
	r := countSteady("svc", recs, beats, 10, first)
	assert.Equal(t, 4, r.Renewals, "a's beats at 1100 and 1300, its rewrite at 1190, b's beat at 1900")
	assert.Equal(t, 2, r.Elections)
	assert.Equal(t, 1, r.Handovers)
	assert.Equal(t, 0, r.Releases)
	assert.Equal(t, 1, r.EpochsWithoutLease, "epoch 4")
	assert.Equal(t, 3, r.Needless)
	assert.Equal(t, []float64{100, 90, 110, 500, 100, 600}, r.SamplesMS)
	assert.Equal(t, 600.0, r.MaxRenewGapMS)
	assert.Equal(t, []map[string]float64{
		{"offset": 14, "gap_ms": 500, "epoch_step": 2, "handover": 1},
		{"offset": 16, "gap_ms": 600, "epoch_step": 1, "handover": 0},
	}, r.Rounds, "one object per election")

	quiet := countSteady("svc", recs[:4], beats, 10, first)
	assert.Equal(t, 4, quiet.Renewals, "a's beats at 1100, 1300 and 1900, its rewrite at 1190")
	assert.Zero(t, quiet.Needless)
}
