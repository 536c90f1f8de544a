package fencing_test

import (
	"errors"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
)

func heartbeats(recs []fencing.RoleRecord) []codec.Heartbeat {
	var out []codec.Heartbeat
	for _, r := range recs {
		if r.Record.Heartbeat != nil {
			out = append(out, *r.Record.Heartbeat)
		}
	}
	return out
}

func beat(s codec.Session, member codec.MemberID) codec.Heartbeat {
	now := time.Now().UnixMilli()
	return codec.Heartbeat{Member: member, Session: s, GrantedAt: now, Deadline: now + 3000}
}

// A session's heartbeats are transactions under the session's own
// transactional id: they read back in order, and a second StartSession of
// the member (another process under its id, or the member's own next
// incarnation) fences the earlier one's heartbeats, as AcquireEpoch
// fences a role's earlier holder.
func TestSessionHeartbeatsReadBackAndAreFencedByANewerIncarnation(t *testing.T) {
	onEachCluster(t, func(t *testing.T, e *env) {
		ctx := e.ctx()
		a, b := e.c.Transport(t), e.c.Transport(t)
		sa, err := a.StartSession(ctx, "node-a", "n1")
		require.NoError(t, err)
		h1 := beat(sa, "node-a")
		h1.Excluded = []codec.Role{"stuck"}
		require.NoError(t, a.Heartbeat(ctx, h1))

		sb, err := b.StartSession(ctx, "node-a", "n2")
		require.NoError(t, err)
		assert.Equal(t, sa.ProducerID, sb.ProducerID)
		assert.Greater(t, sb.Epoch, sa.Epoch)
		err = a.Heartbeat(ctx, beat(sa, "node-a"))
		assert.True(t, fencing.IsFenced(err), "got %v", err)
		assert.ErrorIs(t, a.Heartbeat(ctx, beat(sa, "node-a")), fencing.ErrNotHeld, "a fenced session is forgotten")

		end := codec.Heartbeat{Member: "node-a", Session: sb, End: true}
		require.NoError(t, b.Heartbeat(ctx, end))
		recs, err := a.ReadSession(ctx, "node-a")
		require.NoError(t, err)
		assert.Equal(t, []codec.Heartbeat{h1, end}, heartbeats(recs))
		requireOffsetOrder(t, recs)

		// Sessions and roles never mix: a role's read has no session
		// record, whatever partition they share.
		rrecs, err := a.ReadRoleRecords(ctx, "node-a")
		require.NoError(t, err)
		assert.Empty(t, rrecs)

		// A heartbeat under a session this transport did not mint
		// sends nothing.
		assert.ErrorIs(t, a.Heartbeat(ctx, beat(codec.Session{ProducerID: 99, Epoch: 0, Nonce: "x"}, "node-z")), fencing.ErrNotHeld)
	})
}

// A heartbeat counts only when the member's own session wrote it: one
// committed by a stranger under another transactional id (here a role's,
// naming its own producer id and epoch so that the batch check passes)
// and one appended without a transaction are skipped and counted as
// forged.
func TestForgedHeartbeatsAreSkipped(t *testing.T) {
	onEachCluster(t, func(t *testing.T, e *env) {
		ctx := e.ctx()
		victim, stranger := e.c.Transport(t), e.c.Transport(t)
		s, err := victim.StartSession(ctx, "node-v", "v1")
		require.NoError(t, err)
		real := beat(s, "node-v")
		require.NoError(t, victim.Heartbeat(ctx, real))

		tok, err := stranger.AcquireEpoch(ctx, "innocent")
		require.NoError(t, err)
		forged := beat(codec.Session{ProducerID: tok.ProducerID, Epoch: tok.Epoch, Nonce: "v1"}, "node-v")
		val, err := codec.EncodeRecord(codec.Record{Heartbeat: &forged})
		require.NoError(t, err)
		require.NoError(t, stranger.Transact(ctx, "innocent", tok, func(tx *fencing.Txn) error {
			_, err := tx.Produce(e.c.Config.Topic, codec.SessionPartition("node-v", partitions), codec.SessionKey("node-v").Encode(), val)
			return err
		}))
		plain := beat(s, "node-v") // names the victim's real session, but no transaction
		pval, err := codec.EncodeRecord(codec.Record{Heartbeat: &plain})
		require.NoError(t, err)
		_, _, err = rawProducer(t, e).SendMessage(&sarama.ProducerMessage{Topic: e.c.Config.Topic,
			Partition: codec.SessionPartition("node-v", partitions), Key: sarama.ByteEncoder(codec.SessionKey("node-v").Encode()), Value: sarama.ByteEncoder(pval)})
		require.NoError(t, err)

		reader := e.c.Transport(t)
		recs, err := reader.ReadSession(ctx, "node-v")
		require.NoError(t, err)
		assert.Equal(t, []codec.Heartbeat{real}, heartbeats(recs))
		assert.Equal(t, uint64(2), reader.ForgedLeasesSkipped())
	})
}

// DescribeMany answers for many roles at once: the token of each held
// role (a newer one where another member took it), and no holder for a
// role never held.
func TestDescribeManyShowsWhoHoldsEachRole(t *testing.T) {
	onEachCluster(t, func(t *testing.T, e *env) {
		ctx := e.ctx()
		a, b := e.c.Transport(t), e.c.Transport(t)
		roles := []codec.Role{"r1", "r2", "r3", "r4", "r5"}
		toks := map[codec.Role]codec.Token{}
		for _, r := range roles {
			tok, err := a.AcquireEpoch(ctx, r)
			require.NoError(t, err)
			toks[r] = tok
		}
		taken, err := b.AcquireEpoch(ctx, "r3")
		require.NoError(t, err)
		got, err := a.DescribeMany(ctx, append(roles, "never-held"))
		require.NoError(t, err)
		require.Len(t, got, 6)
		for _, r := range roles {
			want := toks[r]
			if r == "r3" {
				want = taken
			}
			assert.Equal(t, fencing.Described{Token: want, Held: true}, got[r], r)
		}
		assert.Equal(t, fencing.Described{}, got["never-held"])

		_, err = a.DescribeMany(ctx, []codec.Role{"ok", "bad/role"})
		assert.Error(t, err)
		assert.False(t, errors.Is(err, fencing.ErrFenced))
	})
}
