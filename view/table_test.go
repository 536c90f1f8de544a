package view

import (
	"errors"
	"fmt"
	"github.com/krabka/krole/rolestate"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/lovoo/goka"
	"github.com/lovoo/goka/storage"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
)

func TestEntryRanksReplaysAndOutOfOrder(t *testing.T) {
	e := &roleEntry{leaseOffset: -1, lastOffset: -1}
	assert.True(t, e.register(candidate{Member: "a", Offset: 10, RegisteredAt: 1}))
	assert.True(t, e.register(candidate{Member: "b", Offset: 12, RegisteredAt: 1}))
	assert.True(t, e.register(candidate{Member: "c", Offset: 11, RegisteredAt: 1}), "an out-of-order offset is placed by offset")
	assert.Equal(t, []codec.MemberID{"a", "c", "b"}, members(e.state("r").Candidates))
	assert.False(t, e.register(candidate{Member: "a", Offset: 9, RegisteredAt: 1}), "an older registration is a replay")
	assert.False(t, e.deregister("b", 5), "an older tombstone is a replay")
	assert.True(t, e.register(candidate{Member: "a", Offset: 20, RegisteredAt: 1}), "re-registration moves to the back")
	assert.Equal(t, []codec.MemberID{"c", "b", "a"}, members(e.state("r").Candidates))
	assert.True(t, e.deregister("c", 21))
	assert.False(t, e.deregister("c", 22), "unknown member")

	l1 := mkLease("a", 1, time.UnixMilli(1000), time.Second)
	l2 := mkLease("b", 2, time.UnixMilli(2000), time.Second)
	assert.True(t, e.setLease(l2, 30))
	assert.False(t, e.setLease(l1, 25), "an older lease is a replay")
	st := e.state("r")
	require.NotNil(t, st.Lease)
	assert.Equal(t, l2, *st.Lease)
	assert.Equal(t, int64(30), st.LeaseOffset)
	assert.Equal(t, []int{0, 1}, []int{st.Candidates[0].Rank, st.Candidates[1].Rank})
	assert.True(t, e.dropLease(31))
	assert.Nil(t, e.state("r").Lease)
	assert.Equal(t, int64(-1), e.state("r").LeaseOffset)
}

// TestTableAgreesWithFold feeds random records to the view's index and to
// Fold (which the succession rules use on ReadRoleRecords) and requires the
// same answer for every role: with few members per role (no member
// index), with enough for the hashed member index (some members' bits
// clear when they register, others sharing a bit), and with so many that
// the index becomes a map.
func TestTableAgreesWithFold(t *testing.T) {
	for _, nmem := range []int{6, 3 * indexFrom, 2 * mapFrom} {
		t.Run(fmt.Sprintf("members=%d", nmem), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(nmem)))
			v := offlineView(t, 3)
			f := &feeder{t: t, v: v}
			var recs []fencing.RoleRecord
			roles := []codec.Role{"r0", "r1", "r2", "r3", "r4"}
			var mems []codec.MemberID
			for i := 0; i < nmem; i++ {
				mems = append(mems, codec.MemberID(fmt.Sprintf("m%02d", i)))
			}
			for i := 0; i < 400*nmem; i++ {
				role := roles[rng.IntN(len(roles))]
				m := mems[rng.IntN(len(mems))]
				var k codec.Key
				var r codec.Record
				switch n := rng.IntN(10); {
				case n < 6:
					k, r = codec.RegistrationKey(role, m), codec.Record{Registration: &codec.Registration{Member: m, RegisteredAt: int64(i)}}
				case n < 8:
					k = codec.RegistrationKey(role, m)
				case n < 9:
					l := mkLease(m, int16(i%100), time.UnixMilli(int64(i)), time.Second)
					k, r = codec.LeaseKey(role), codec.Record{Lease: &l}
				default:
					k = codec.LeaseKey(role)
				}
				off := f.put(role, k, r)
				recs = append(recs, fencing.RoleRecord{Offset: off, Key: k, Record: r})
			}
			v.markReady()
			indexes := map[string]int{}
			for _, role := range roles {
				got, err := v.Role(testCtx(t), role)
				require.NoError(t, err)
				want := rolestate.Fold(role, recs)
				if len(want.Candidates) == 0 {
					want.Candidates = nil
				}
				assert.Equal(t, want, unseen(got)[0], fmt.Sprintf("role %s", role))
				if e := v.index.roles[role]; e != nil {
					indexes[memberIndexOf(t, role, e)]++
				}
			}
			switch {
			case nmem >= mapFrom:
				assert.Positive(t, indexes["map"], "some role reached mapFrom candidates")
			case nmem > indexFrom:
				assert.Positive(t, indexes["hashed"], "some role reached indexFrom candidates")
			}
		})
	}
}

// memberIndexOf checks that e's member index, if built, follows its
// candidates, and names it: "hashed", "map" or "".
func memberIndexOf(t *testing.T, role codec.Role, e *roleEntry) string {
	t.Helper()
	switch {
	case e.hashed() != nil:
		require.Nil(t, e.byMember(), "role %s: one index at a time", role)
		require.Len(t, e.hashed().h, len(e.cands), "role %s: the hashes follow the candidates", role)
		for i, c := range e.cands {
			assert.Equal(t, memberHash(c.Member), e.hashed().h[i], "role %s member %s", role, c.Member)
			assert.True(t, e.hashed().marked(e.hashed().h[i]), "role %s member %s", role, c.Member)
		}
		return "hashed"
	case e.byMember() != nil:
		assert.Len(t, e.byMember(), len(e.cands), "role %s: byMember follows the candidates", role)
		for _, c := range e.cands {
			assert.Equal(t, c.Offset, e.byMember()[c.Member], "role %s member %s", role, c.Member)
		}
		return "map"
	}
	return ""
}

// TestSeedIndexesLargeRoles: a role restored from the state dir (records in
// key order) with more than indexFrom candidates is ranked by offset, and
// the records that follow find its members through the member index, which
// the first of them builds.
func TestSeedIndexesLargeRoles(t *testing.T) {
	v := offlineView(t, 1)
	const n = indexFrom + 4
	var recs []storedRecord
	var folded []fencing.RoleRecord
	for i := n - 1; i >= 0; i-- { // key order is not offset order
		m := codec.MemberID(fmt.Sprintf("m%02d", i))
		off := int64(10 * (n - i))
		b, err := codec.EncodeRecord(codec.Record{Registration: &codec.Registration{Member: m, RegisteredAt: 1}})
		require.NoError(t, err)
		recs = append(recs, storedRecord{key: codec.RegistrationKey("r", m).String(), offset: off, value: b})
		folded = append(folded, fencing.RoleRecord{Offset: off, Key: codec.RegistrationKey("r", m),
			Record: codec.Record{Registration: &codec.Registration{Member: m, RegisteredAt: 1}}})
	}
	v.seed(0, recs, int64(10*n))
	assert.Empty(t, memberIndexOf(t, "r", v.index.roles["r"]), "a restore builds no index")
	f := &feeder{t: t, v: v, next: map[int32]int64{0: int64(10*n + 1)}}
	for _, m := range []codec.MemberID{"m03", "m17"} {
		off := f.unreg("r", m)
		folded = append(folded, fencing.RoleRecord{Offset: off, Key: codec.RegistrationKey("r", m)})
	}
	off := f.reg("r", "m05") // moves to the back
	folded = append(folded, fencing.RoleRecord{Offset: off, Key: codec.RegistrationKey("r", "m05"),
		Record: codec.Record{Registration: &codec.Registration{Member: "m05", RegisteredAt: 1}}})
	v.markReady()
	got, err := v.Role(testCtx(t), "r")
	require.NoError(t, err)
	sort.Slice(folded, func(i, j int) bool { return folded[i].Offset < folded[j].Offset })
	assert.Equal(t, rolestate.Fold("r", folded), got)
	e := v.index.roles["r"]
	assert.Equal(t, "hashed", memberIndexOf(t, "r", e))
	assert.Len(t, e.cands, n-2)
}

type failingStorage struct{ storage.Null }

func (*failingStorage) Set(string, []byte) error { return errors.New("disk full") }

type updateCtx struct {
	goka.DefaultUpdateContext
	p   int32
	off int64
}

func (u updateCtx) Partition() int32 { return u.p }
func (u updateCtx) Offset() int64    { return u.off }

// chunkCtx is an update context with headers, as goka hands a chunk
// message.
type chunkCtx struct {
	updateCtx
	hdrs goka.Headers
}

func (u chunkCtx) Headers() goka.Headers { return u.hdrs }

// TestStateDirWriteFailureIsFatal: a record the index applied but the state
// dir did not take must end Run, not be retried (the retry would be a
// replay, which the index ignores, and the state dir would never get it).
func TestStateDirWriteFailureIsFatal(t *testing.T) {
	v := offlineView(t, 1)
	v.opts.StateDir = t.TempDir()
	var got error
	v.fatal = func(err error) { got = err }
	b, err := codec.EncodeRecord(codec.Record{Registration: &codec.Registration{Member: "a"}})
	require.NoError(t, err)
	err = v.update(updateCtx{p: 0, off: 3}, &failingStorage{}, codec.RegistrationKey("r", "a").String(), b)
	require.ErrorContains(t, err, "disk full")
	require.Error(t, got)
	assert.ErrorContains(t, got, "offset 3")
}

// TestUpdateOfARecordAlone: a record goka hands alone (not in a chunk) is
// applied or skipped as one in a chunk is, an empty key and value too.
func TestUpdateOfARecordAlone(t *testing.T) {
	v := offlineView(t, 1)
	require.NoError(t, v.update(updateCtx{p: 0, off: 0}, nil, "", nil))
	require.NoError(t, v.update(updateCtx{p: 0, off: 1}, nil, "", []byte("x")))
	b, err := codec.EncodeRecord(codec.Record{Registration: &codec.Registration{Member: "a"}})
	require.NoError(t, err)
	require.NoError(t, v.update(updateCtx{p: 0, off: 2}, nil, codec.RegistrationKey("r", "a").String(), b))
	assert.Equal(t, int64(2), v.index.skipped[SkipKey])
	assert.Equal(t, int64(1), v.index.applied)
	require.NotNil(t, v.index.roles["r"])
	assert.Equal(t, []codec.MemberID{"a"}, members(v.index.roles["r"].candidates()))
}
