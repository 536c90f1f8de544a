package processor_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/processor"
)

// A role passes through three holdings: node-a's (which rewrites its
// lease, then resigns), node-b's (a handover; node-b then crashes) and
// node-a's again (a failover once node-b's lease ran out). Read back from
// the role topic by another client (franz-go, read_committed): each
// holding's Elected event carries the offset of its first lease record
// as its fencing number, the numbers grow from holding to holding, every
// later lease of a holding (the rewrite, the release) carries its
// number, its Revoked event too, another member's HolderChanged event
// gives it, and the view gives the current holding's.
func TestIntegrationFenceIsTheFirstLeaseOffset(t *testing.T) {
	e := newEnv(t, itTxnTimeout)
	role := codec.Role("numbered")
	s := itSettings()
	a := e.start("node-a", []codec.Role{role}, s, nil)
	elA := awaitElected(t, e.rec, role, a.id, time.Time{}, 10*time.Second)

	// A lease rewrite (the holder's value changed, or hourly).
	require.NoError(t, a.m.RewriteLease(role))
	await(t, 5*time.Second, "node-a's lease rewrite", func() bool {
		w, ok := e.rec.lastWrite(role, a.id)
		return ok && w.Token == elA.Token && w.Lease.Fence != 0
	})

	// A handover: node-a resigns (and queues again), node-b takes over.
	dying := s
	dying.KeepOnExit = true // it writes nothing when it stops: a crash
	b := e.start("node-b", []codec.Role{role}, dying, nil)
	e.awaitCandidate(role, b.id)
	resigned := time.Now()
	require.NoError(t, a.m.Resign(e.ctx(10*time.Second), role))
	elB := awaitElected(t, e.rec, role, b.id, resigned, s.LeaseDuration)
	e.awaitCandidate(role, a.id)

	// A failover: node-b crashes, node-a takes the role once its lease ran
	// out.
	crashed := time.Now()
	b.stop(t)()
	elA2 := awaitElected(t, e.rec, role, a.id, crashed, s.LeaseDuration+s.Stagger+slack+time.Second)
	e.agree(role, a.id, elA2.Token)

	recs := leaseRecordsOf(t, e, role)
	first := map[codec.Token]int64{} // the offset of each token's first lease
	for _, r := range recs {
		if _, ok := first[r.lease.Token]; !ok {
			first[r.lease.Token] = r.offset
		}
	}
	holdings := []stamped{elA, elB, elA2}
	for i, el := range holdings {
		off, ok := first[el.Token]
		require.True(t, ok, "%s's lease under %s is in the role topic", el.Member, el.Token)
		assert.Equal(t, off, el.Fence, "%s's holding under %s: its number is its first lease's offset", el.Member, el.Token)
		if i > 0 {
			assert.Greater(t, el.Fence, holdings[i-1].Fence, "each holding's number is greater than the one before")
		}
	}
	fenceOf := map[codec.Token]int64{elA.Token: elA.Fence, elB.Token: elB.Fence, elA2.Token: elA2.Fence}
	var rewrites, releases int
	for _, r := range recs {
		want, ok := fenceOf[r.lease.Token]
		require.True(t, ok, "a lease under %s, which no holding of the test took", r.lease.Token)
		if r.offset == want {
			assert.Zero(t, r.lease.Fence, "a holding's first lease cannot carry its own offset")
			continue
		}
		assert.Equal(t, want, r.lease.Fence, "the lease at offset %d carries its holding's number", r.offset)
		if r.lease.Released() {
			releases++
		} else {
			rewrites++
		}
	}
	assert.GreaterOrEqual(t, rewrites, 1, "node-a's rewrite")
	assert.Equal(t, 1, releases, "node-a's release when it resigned")

	for _, el := range holdings[:2] {
		rev := e.rec.find(processor.Revoked, role, func(ev stamped) bool { return ev.Token == el.Token })
		if assert.Len(t, rev, 1, "%s's holding under %s revoked", el.Member, el.Token) {
			assert.Equal(t, el.Fence, rev[0].Fence, "Revoked carries the holding's number")
		}
	}
	seen := e.rec.find(processor.HolderChanged, role, func(ev stamped) bool {
		return ev.Member == b.id && ev.Holder != nil && ev.Holder.Token == elA.Token
	})
	if assert.NotEmpty(t, seen, "node-b saw node-a hold the role") {
		assert.Equal(t, elA.Fence, seen[0].Fence, "HolderChanged carries the holder's number, from the lease node-b's view read")
	}
	assert.Equal(t, elA2.Fence, e.state(role).Fence(), "the view gives the current holding's number")
}

// leaseAtOffset is a lease record of the role topic.
type leaseAtOffset struct {
	offset int64
	lease  codec.Lease
}

// leaseRecordsOf returns role's lease records in the role topic, in
// offset order, as eachLease reads them.
func leaseRecordsOf(t *testing.T, e *env, role codec.Role) []leaseAtOffset {
	t.Helper()
	var out []leaseAtOffset
	eachLease(t, e, func(r codec.Role, off int64, l codec.Lease) {
		if r == role {
			out = append(out, leaseAtOffset{offset: off, lease: l})
		}
	})
	return out
}
