package view

import (
	"fmt"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
)

// The table keeps one copy of what many roles' records repeat: the
// leases of one member session share its member id and session, and its
// registrations the member id and instance; each role's state is as its
// records say.
func TestTableSharesNames(t *testing.T) {
	v := offlineView(t, 1)
	f := &feeder{t: t, v: v}
	sess := codec.Session{ProducerID: 9, Epoch: 1, Nonce: "n1"}
	for _, role := range []codec.Role{"a", "b"} {
		f.put(role, codec.RegistrationKey(role, "m1"), codec.Record{Registration: &codec.Registration{Member: "m1", RegisteredAt: 1, Instance: "i@h/1"}})
		l := mkLease("m1", 1, time.Now(), time.Minute)
		l.Session = &sess
		f.lease(role, l)
	}
	a, b := v.index.roles["a"], v.index.roles["b"]
	require.NotNil(t, a)
	require.NotNil(t, b)
	same := func(x, y string) bool { return unsafe.StringData(x) == unsafe.StringData(y) }
	assert.True(t, a.lease.Session == b.lease.Session, "one session")
	assert.Equal(t, sess, *a.lease.Session)
	assert.True(t, same(string(a.lease.Member), string(b.lease.Member)))
	assert.True(t, same(string(a.cands[0].Member), string(b.cands[0].Member)))
	assert.True(t, a.cands[0].extra == b.cands[0].extra, "one value and instance")
	assert.Equal(t, codec.MemberID("m1"), a.cands[0].Member)
	assert.Equal(t, "i@h/1", b.cands[0].instance())

	// A registration with neither value nor instance keeps no extra; a
	// lookup still reads both as empty.
	f.put("a", codec.RegistrationKey("a", "m2"), codec.Record{Registration: &codec.Registration{Member: "m2", RegisteredAt: 2}})
	require.Len(t, a.cands, 2)
	assert.Nil(t, a.cands[1].extra)
	cs := a.candidates()
	assert.Equal(t, "i@h/1", cs[0].Instance)
	assert.Equal(t, codec.MemberID("m2"), cs[1].Member)
	assert.Empty(t, cs[1].Instance+cs[1].Value)
}

// Past maxNames the cache starts afresh: sharing is lost for a while,
// never a name.
func TestNamesBounded(t *testing.T) {
	var n names
	first := n.str("x")
	for i := range maxNames + 10 {
		s := fmt.Sprint("s", i)
		assert.Equal(t, s, n.str(s))
	}
	assert.LessOrEqual(t, len(n.strs), maxNames)
	assert.Equal(t, "x", first)
	assert.Equal(t, "x", n.str("x"))
	assert.Equal(t, "", n.str(""))

	x := n.extra("v", "i")
	for i := range maxNames + 10 {
		assert.Equal(t, candExtra{"", fmt.Sprint("i", i)}, *n.extra("", fmt.Sprint("i", i)))
	}
	assert.LessOrEqual(t, len(n.extras), maxNames)
	assert.Equal(t, candExtra{"v", "i"}, *x)
	assert.Nil(t, n.extra("", ""))
}
