package view

import (
	"errors"
	"fmt"
	"math/rand/v2"
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
	assert.True(t, e.register("a", 10, 1))
	assert.True(t, e.register("b", 12, 1))
	assert.True(t, e.register("c", 11, 1), "an out-of-order offset is placed by offset")
	assert.Equal(t, []codec.MemberID{"a", "c", "b"}, members(e.state("r").Candidates))
	assert.False(t, e.register("a", 9, 1), "an older registration is a replay")
	assert.False(t, e.deregister("b", 5), "an older tombstone is a replay")
	assert.True(t, e.register("a", 20, 1), "re-registration moves to the back")
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
// same answer for every role.
func TestTableAgreesWithFold(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	v := offlineView(t, 3)
	f := &feeder{t: t, v: v}
	var recs []fencing.RoleRecord
	roles := []codec.Role{"r0", "r1", "r2", "r3", "r4"}
	mems := []codec.MemberID{"a", "b", "c", "d", "e", "f"}
	for i := 0; i < 2000; i++ {
		role := roles[rng.IntN(len(roles))]
		m := mems[rng.IntN(len(mems))]
		var k codec.Key
		var r codec.Record
		switch n := rng.IntN(10); {
		case n < 5:
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
	v.readyOnce.Do(func() { close(v.ready) })
	for _, role := range roles {
		got, err := v.Role(testCtx(t), role)
		require.NoError(t, err)
		want := Fold(role, recs)
		if len(want.Candidates) == 0 {
			want.Candidates = nil
		}
		assert.Equal(t, want, got, fmt.Sprintf("role %s", role))
	}
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
