package codec

import (
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

func TestNewRoleRules(t *testing.T) {
	for _, ok := range []string{"controller", "a", "A-z_0.9", strings.Repeat("r", 128)} {
		_, err := NewRole(ok)
		assert.NoError(t, err, ok)
	}
	for in, want := range map[string]string{
		"":                       "it is empty",
		strings.Repeat("r", 129): "it has 129",
		"a/b":                    `'/' at byte 1`,
		"node:1":                 `':' at byte 4`,
		"ü":                      "'ü' at byte 0",
		"aé":                     "'é' at byte 1",
		"with space":             "' ' at byte 4",
	} {
		_, err := NewRole(in)
		require.Error(t, err, in)
		assert.ErrorIs(t, err, ErrInvalid)
		assert.Contains(t, err.Error(), "1-128 characters of [A-Za-z0-9._-]", in)
		assert.Contains(t, err.Error(), want, in)
	}
}

func TestNewMemberIDRules(t *testing.T) {
	for _, ok := range []string{"node-1", "host:1234", "svc@host", "a.b_c-d"} {
		_, err := NewMemberID(ok)
		assert.NoError(t, err, ok)
	}
	for _, bad := range []string{"", "a/b", "a b", strings.Repeat("m", 129), "x\n"} {
		_, err := NewMemberID(bad)
		require.Error(t, err, bad)
		assert.ErrorIs(t, err, ErrInvalid)
		assert.Contains(t, err.Error(), "[A-Za-z0-9._:@-]")
	}
}

func TestTokenAndLeaseRules(t *testing.T) {
	_, err := NewToken(-1, 0)
	assert.ErrorContains(t, err, "producer id must be >= 0")
	_, err = NewToken(0, -1)
	assert.ErrorContains(t, err, "epoch must be >= 0")
	tok, err := NewToken(4242, 7)
	require.NoError(t, err)
	assert.Equal(t, "4242/7", tok.String())
	assert.True(t, Token{4242, 8}.Newer(tok))
	assert.False(t, tok.Newer(tok))
	assert.False(t, Token{1, 9}.Newer(tok), "tokens of different producer ids are not ordered")

	_, err = NewLease("node-1", tok, 100, 100)
	assert.ErrorContains(t, err, "deadline must be after granted_at")
	_, err = NewLease("bad/member", tok, 100, 200)
	assert.ErrorIs(t, err, ErrInvalid)
	l, err := NewLease("node-1", tok, 100, 200)
	require.NoError(t, err)
	assert.False(t, l.Expired(199))
	assert.True(t, l.Expired(200))
}

func TestKeyRoundTrip(t *testing.T) {
	for _, k := range []Key{RegistrationKey("controller", "host:1@x"), LeaseKey("a.b-c_d")} {
		got, err := DecodeKey(k.Encode())
		require.NoError(t, err)
		assert.Equal(t, k, got)
	}
	for _, bad := range []string{"", "other-app-key", "krole/reg/controller", "krole/reg/con/troller/x", "krole/lease/", "krole/lease/a/b", "krole/unknown/x"} {
		_, err := DecodeKey([]byte(bad))
		assert.ErrorIs(t, err, ErrMalformed, bad)
	}
}

func TestRecordRoundTrip(t *testing.T) {
	reg := Record{Registration: &Registration{Member: "node-1", RegisteredAt: 1_700_000_000_000}}
	lease := Record{Lease: &Lease{Member: "node-1", Token: Token{4242, 7}, GrantedAt: 1_700_000_000_000, Deadline: 1_700_000_030_000}}
	for _, r := range []Record{reg, lease} {
		b, err := EncodeRecord(r)
		require.NoError(t, err)
		got, err := DecodeRecord(b)
		require.NoError(t, err)
		assert.Equal(t, r, got)
	}
	b, err := EncodeRecord(Record{})
	require.NoError(t, err)
	assert.Nil(t, b, "a tombstone encodes to a nil value")
	got, err := DecodeRecord(nil)
	require.NoError(t, err)
	assert.True(t, got.Tombstone())
	assert.Equal(t, Kind(0), got.Kind())

	_, err = EncodeRecord(Record{Registration: reg.Registration, Lease: lease.Lease})
	assert.ErrorIs(t, err, ErrInvalid)
	_, err = EncodeRecord(Record{Lease: &Lease{Member: "n", Token: Token{1, 1}, GrantedAt: 5, Deadline: 5}})
	assert.ErrorIs(t, err, ErrInvalid, "an invalid lease is never written")
}

func TestDecodeRecordErrors(t *testing.T) {
	var uv *UnknownVersionError
	_, err := DecodeRecord([]byte(`{"v":5,"kind":"hologram","whatever":true}`))
	require.True(t, errors.As(err, &uv), "got %v", err)
	assert.Equal(t, 5, uv.Version)
	assert.NotErrorIs(t, err, ErrMalformed, "a newer version is not corruption")
	assert.Contains(t, err.Error(), "version 5 is newer")

	for _, bad := range []string{
		`garbage`, `{}`, `{"v":0}`, `{"v":1,"kind":"registration","member":"n"}`,
		`{"v":1,"kind":"lease","member":"n","producer_id":1,"epoch":1,"granted_at":5}`,
		`{"v":1,"kind":"lease","member":"n","producer_id":1,"epoch":1,"granted_at":5,"deadline":5}`,
		`{"v":1,"kind":"other","member":"n"}`, `{"v":1,"kind":"registration","member":"a/b","registered_at":1}`,
		`{"v":"1"}`,
	} {
		_, err := DecodeRecord([]byte(bad))
		assert.ErrorIs(t, err, ErrMalformed, bad)
	}
}

func TestCheckPair(t *testing.T) {
	reg := Record{Registration: &Registration{Member: "node-1", RegisteredAt: 1}}
	lease := Record{Lease: &Lease{Member: "node-1", Token: Token{1, 1}, GrantedAt: 1, Deadline: 2}}
	assert.NoError(t, CheckPair(RegistrationKey("r", "node-1"), reg))
	assert.ErrorIs(t, CheckPair(RegistrationKey("r", "node-2"), reg), ErrMalformed)
	assert.ErrorIs(t, CheckPair(LeaseKey("r"), reg), ErrMalformed)
	assert.NoError(t, CheckPair(LeaseKey("r"), lease))
	assert.ErrorIs(t, CheckPair(RegistrationKey("r", "node-1"), lease), ErrMalformed)
	assert.NoError(t, CheckPair(LeaseKey("r"), Record{}))
}

func TestPartitionDependsOnRoleOnly(t *testing.T) {
	assert.Equal(t, Partition("controller", 12), Partition("controller", 12))
	assert.Equal(t, int32(0), Partition("controller", 1))
	assert.Equal(t, int32(0), Partition("controller", 0))
	seen := map[int32]bool{}
	for i := 0; i < 200; i++ {
		p := Partition(Role("role-"+string(rune('a'+i%26))+string(rune('a'+i/26))), 8)
		require.True(t, p >= 0 && p < 8)
		seen[p] = true
	}
	assert.Len(t, seen, 8, "roles spread over every partition")
}

func TestGokaCodecs(t *testing.T) {
	k := RegistrationKey("controller", "node-1")
	b, err := KeyCodec{}.Encode(k)
	require.NoError(t, err)
	b2, err := KeyCodec{}.Encode(k.String())
	require.NoError(t, err)
	assert.Equal(t, b, b2)
	v, err := KeyCodec{}.Decode(b)
	require.NoError(t, err)
	assert.Equal(t, k, v)
	_, err = KeyCodec{}.Encode("not-a-key")
	assert.Error(t, err)
	_, err = KeyCodec{}.Encode(42)
	assert.Error(t, err)

	l := Lease{Member: "node-1", Token: Token{3, 4}, GrantedAt: 10, Deadline: 20}
	for _, in := range []any{l, &l, Record{Lease: &l}, &Record{Lease: &l}} {
		b, err := RecordCodec{}.Encode(in)
		require.NoError(t, err)
		v, err := RecordCodec{}.Decode(b)
		require.NoError(t, err)
		assert.Equal(t, Record{Lease: &l}, v)
	}
	g := Registration{Member: "node-1", RegisteredAt: 5}
	for _, in := range []any{g, &g} {
		b, err := RecordCodec{}.Encode(in)
		require.NoError(t, err)
		v, err := RecordCodec{}.Decode(b)
		require.NoError(t, err)
		assert.Equal(t, Record{Registration: &g}, v)
	}
	_, err = RecordCodec{}.Encode("x")
	assert.Error(t, err)
}

// TestGolden pins the bytes of every record kind. Rewrite with
// `go test ./codec -run TestGolden -update` only for a deliberate change of
// format: one that older readers cannot read needs a new Version; an
// optional field they ignore (as "value" is) does not.
func TestGolden(t *testing.T) {
	tok := Token{ProducerID: 4242, Epoch: 7}
	cases := []struct {
		name  string
		key   Key
		value Record
	}{
		{"registration", RegistrationKey("controller", "node-1"), Record{Registration: &Registration{Member: "node-1", RegisteredAt: 1_700_000_000_000}}},
		{"lease", LeaseKey("controller"), Record{Lease: &Lease{Member: "node-1", Token: tok, GrantedAt: 1_700_000_000_000, Deadline: 1_700_000_030_000}}},
		{"tombstone", RegistrationKey("controller", "node-1"), Record{}},
		{"registration-value", RegistrationKey("controller", "node-1"),
			Record{Registration: &Registration{Member: "node-1", RegisteredAt: 1_700_000_000_000, Value: "10.0.0.7:8080"}}},
		{"lease-value", LeaseKey("controller"),
			Record{Lease: &Lease{Member: "node-1", Token: tok, GrantedAt: 1_700_000_000_000, Deadline: 1_700_000_030_000, Value: "10.0.0.7:8080"}}},
		{"lease-session", LeaseKey("controller"),
			Record{Lease: &Lease{Member: "node-1", Token: tok, GrantedAt: 1_700_000_000_000, Deadline: 1_700_000_030_000,
				Session: &Session{ProducerID: 17, Epoch: 2, Nonce: "9f2c4e6a8b0d1f35"}}}},
		{"lease-fence", LeaseKey("controller"),
			Record{Lease: &Lease{Member: "node-1", Token: tok, GrantedAt: 1_700_000_000_000, Deadline: 1_700_000_030_000, Fence: 17,
				Session: &Session{ProducerID: 17, Epoch: 2, Nonce: "9f2c4e6a8b0d1f35"}}}},
		{"release-fence", LeaseKey("controller"), Record{Lease: &Lease{Member: "node-1", Token: tok, GrantedAt: 0, Deadline: 1, Fence: 17}}},
		{"release-cause", LeaseKey("controller"), Record{Lease: &Lease{Member: "node-1", Token: tok, GrantedAt: 0, Deadline: 1, Fence: 17, Cause: CauseDrain}}},
		{"heartbeat", SessionKey("node-1"),
			Record{Heartbeat: &Heartbeat{Member: "node-1", Session: Session{ProducerID: 17, Epoch: 3, Nonce: "9f2c4e6a8b0d1f35"},
				GrantedAt: 1_700_000_000_000, Deadline: 1_700_000_015_000, Excluded: []Role{"stuck.role"}}}},
		{"session-end", SessionKey("node-1"),
			Record{Heartbeat: &Heartbeat{Member: "node-1", Session: Session{ProducerID: 17, Epoch: 3, Nonce: "9f2c4e6a8b0d1f35"}, End: true}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			val, err := EncodeRecord(c.value)
			require.NoError(t, err)
			got := append(append(c.key.Encode(), '\n'), val...)
			path := filepath.Join("..", "testdata", "codec", c.name+".golden")
			if *update {
				require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
				require.NoError(t, os.WriteFile(path, got, 0o644))
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err, "missing golden file; run with -update once")
			assert.Equal(t, string(want), string(got), "the encoding drifted from %s", path)

			// And the golden bytes decode back to the same record.
			k, v, _ := strings.Cut(string(want), "\n")
			dk, err := DecodeKey([]byte(k))
			require.NoError(t, err)
			assert.Equal(t, c.key, dk)
			dv, err := DecodeRecord([]byte(v))
			require.NoError(t, err)
			assert.Equal(t, c.value, dv)
		})
	}
}

func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"v":1,"kind":"registration","member":"node-1","registered_at":1700000000000}`,
		`{"v":1,"kind":"lease","member":"node-1","producer_id":4242,"epoch":7,"granted_at":1,"deadline":2}`,
		`{"v":99}`, `krole/reg/controller/node-1`, `krole/lease/controller`, "\x00\xff", `{"v":1e400}`,
		`{"v":4,"kind":"drain","member":"node-1","nonce":"9f2c4e6a8b0d1f35","requested_at":1700000000000}`, `krole/drain/node-1`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeRecord(b)
		if err == nil && !r.Tombstone() {
			// Whatever decodes re-encodes and decodes to the same record.
			b2, err := EncodeRecord(r)
			if err != nil {
				t.Fatalf("decoded %q but cannot re-encode: %v", b, err)
			}
			r2, err := DecodeRecord(b2)
			if err != nil {
				t.Fatalf("re-encoded %q does not decode: %v", b2, err)
			}
			if r.Kind() != r2.Kind() {
				t.Fatalf("kind changed: %v -> %v", r.Kind(), r2.Kind())
			}
		}
		var uv *UnknownVersionError
		if err != nil && !errors.Is(err, ErrMalformed) && !errors.As(err, &uv) {
			t.Fatalf("DecodeRecord(%q) error %v is neither malformed nor unknown version", b, err)
		}
		k, err := DecodeKey(b)
		if err == nil && string(k.Encode()) != string(b) {
			t.Fatalf("key %q decodes but re-encodes as %q", b, k.Encode())
		}
	})
}

func TestReleaseLease(t *testing.T) {
	r := ReleaseLease("node-1", Token{3, 4})
	require.NoError(t, r.Validate(), "a release is a valid lease")
	assert.True(t, r.Released())
	assert.True(t, r.Expired(1), "expired under every clock past 1970")
	l, err := NewLease("node-1", Token{3, 4}, 100, 102)
	require.NoError(t, err)
	assert.False(t, l.Released(), "a 2 ms lease is not a release")
}

func BenchmarkDecodeRecord(b *testing.B) {
	v := []byte(`{"v":1,"kind":"registration","member":"node-1","registered_at":1700000000000}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeRecord(v); err != nil {
			b.Fatal(err)
		}
	}
}

func TestNewerVersionOfAnotherShape(t *testing.T) {
	var uv *UnknownVersionError
	_, err := DecodeRecord([]byte(`{"v":5,"member":{"id":7},"kind":["x"]}`))
	require.True(t, errors.As(err, &uv), "a future shape is an unknown version, not garbage: %v", err)
	assert.Equal(t, 5, uv.Version)
}

// TestValueLimit: a registration's value is checked on the way out and on
// the way in, with an error that names the limit.
func TestValueLimit(t *testing.T) {
	at := int64(1_700_000_000_000)
	ok := strings.Repeat("a", MaxValueLen)
	_, err := EncodeRecord(Record{Registration: &Registration{Member: "n", RegisteredAt: at, Value: ok}})
	require.NoError(t, err)

	long := ok + "b"
	_, err = EncodeRecord(Record{Registration: &Registration{Member: "n", RegisteredAt: at, Value: long}})
	var inv *InvalidError
	require.ErrorAs(t, err, &inv)
	assert.Equal(t, "value", inv.What)
	assert.Contains(t, err.Error(), "257 bytes, more than the 256")
	assert.ErrorIs(t, CheckValue("\xff"), ErrInvalid)

	// A reader refuses an oversized value as malformed rather than keep it.
	_, err = DecodeRecord([]byte(`{"v":1,"kind":"registration","member":"n","registered_at":1,"value":"` + long + `"}`))
	assert.ErrorIs(t, err, ErrMalformed)
	// A lease carries no value.
	_, err = DecodeRecord([]byte(`{"v":1,"kind":"lease","member":"n","producer_id":1,"epoch":1,"granted_at":1,"deadline":2,"value":"x"}`))
	assert.ErrorIs(t, err, ErrMalformed)
}

// TestValueReadByOlderShape: the value is an optional field of format
// version 1, so a reader that knows only the fields before it (the wire
// shape krole wrote before values existed, copied here) reads a
// registration with a value as the registration, ignoring the value; and
// a registration without one encodes byte for byte as before.
func TestValueReadByOlderShape(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "testdata", "codec", "registration-value.golden"))
	require.NoError(t, err)
	_, v, _ := strings.Cut(string(b), "\n")
	var old struct {
		V            int      `json:"v"`
		Kind         string   `json:"kind"`
		Member       MemberID `json:"member"`
		RegisteredAt *int64   `json:"registered_at,omitempty"`
	}
	require.NoError(t, json.Unmarshal([]byte(v), &old))
	assert.Equal(t, Version, old.V)
	assert.Equal(t, "registration", old.Kind)
	assert.Equal(t, MemberID("node-1"), old.Member)
	require.NotNil(t, old.RegisteredAt)
}

// TestRegistrationInstance: a registration carries the instance that wrote
// it, round-trips through both decode paths, is checked on encode and
// decode, and a reader of the shape before instances (every field but it)
// reads it as the registration without its instance.
func TestRegistrationInstance(t *testing.T) {
	g := Registration{Member: "node-1", RegisteredAt: 1700000000000, Value: "10.0.0.7:8080", Instance: "3f9c0a1b2d4e5f60@web-1/4242"}
	b, err := EncodeRecord(Record{Registration: &g})
	require.NoError(t, err)
	assert.Equal(t, `{"v":1,"kind":"registration","member":"node-1","registered_at":1700000000000,"value":"10.0.0.7:8080","instance":"3f9c0a1b2d4e5f60@web-1/4242"}`, string(b))
	r, err := DecodeRecord(b)
	require.NoError(t, err)
	assert.Equal(t, g, *r.Registration)
	var buf RecordBuf
	r, err = buf.Decode(b, "node-1")
	require.NoError(t, err)
	assert.Equal(t, g, *r.Registration)

	var old struct {
		V      int      `json:"v"`
		Member MemberID `json:"member"`
		Value  string   `json:"value"`
	}
	require.NoError(t, json.Unmarshal(b, &old))
	assert.Equal(t, "10.0.0.7:8080", old.Value)

	for _, bad := range []string{strings.Repeat("x", MaxInstanceLen+1), "a\nb", "\xff"} {
		g := Registration{Member: "node-1", Instance: bad}
		_, err := EncodeRecord(Record{Registration: &g})
		assert.ErrorIs(t, err, ErrInvalid, "%q", bad)
		if bad == "\xff" {
			continue // encoding/json reads invalid UTF-8 as U+FFFD
		}
		raw, _ := json.Marshal(map[string]any{"v": 1, "kind": "registration", "member": "node-1", "registered_at": 1, "instance": bad})
		_, err = DecodeRecord(raw)
		assert.ErrorIs(t, err, ErrMalformed, "%q", bad)
	}
}

// TestLeaseFence: a lease carries its holding's fencing number after its
// deadline, at every version, omitted when 0; a negative one is refused
// on the way out and malformed on the way in.
func TestLeaseFence(t *testing.T) {
	tok := Token{ProducerID: 4, Epoch: 2}
	for _, l := range []Lease{
		{Member: "node-1", Token: tok, GrantedAt: 1, Deadline: 2000, Fence: 9},
		{Member: "node-1", Token: tok, GrantedAt: 1, Deadline: 2000, Fence: 9, Value: "10.0.0.7:8080"},
		{Member: "node-1", Token: tok, GrantedAt: 1, Deadline: 2000, Fence: 9, Session: &Session{ProducerID: 1, Epoch: 0, Nonce: "ab"}},
		ReleaseLease("node-1", tok),
	} {
		b, err := EncodeRecord(Record{Lease: &l})
		require.NoError(t, err)
		assert.Equal(t, l.Fence != 0, strings.Contains(string(b), `"deadline":2000,"fence":9`), "%s", b)
		assert.Equal(t, l.Fence != 0, strings.Contains(string(b), `"fence"`), "%s", b)
		r, err := DecodeRecord(b)
		require.NoError(t, err)
		assert.Equal(t, l, *r.Lease)
		var buf RecordBuf
		r, err = buf.Decode(b, "node-1")
		require.NoError(t, err)
		assert.Equal(t, l, *r.Lease)
	}
	_, err := EncodeRecord(Record{Lease: &Lease{Member: "node-1", Token: tok, GrantedAt: 1, Deadline: 2, Fence: -1}})
	assert.ErrorIs(t, err, ErrInvalid)
	assert.ErrorContains(t, err, "fence must be >= 0")
	for _, bad := range []string{
		`{"v":1,"kind":"lease","member":"n","producer_id":1,"epoch":1,"granted_at":1,"deadline":2,"fence":-1}`,
		`{"v":3,"kind":"lease","member":"n","producer_id":1,"epoch":1,"granted_at":1,"deadline":2,"fence":-5,"session":{"producer_id":1,"epoch":0,"nonce":"ab"}}`,
		`{"v":1,"kind":"lease","member":"n","producer_id":1,"epoch":1,"granted_at":1,"deadline":2,"fence":1.5}`,
		`{"v":1,"kind":"lease","member":"n","producer_id":1,"epoch":1,"granted_at":1,"deadline":2,"fence":"3"}`,
	} {
		_, err := DecodeRecord([]byte(bad))
		assert.ErrorIs(t, err, ErrMalformed, bad)
	}
}

// TestReleaseCause: a release carries why it was written, at version 1
// (an optional field: a reader that does not know it still reads the
// release), through both decode paths; a cause is a release's only and
// of its shape on the way out and on the way in; a cause of the right
// shape this package does not know (a newer writer's) is read as it is,
// and is not Known.
func TestReleaseCause(t *testing.T) {
	tok := Token{ProducerID: 4, Epoch: 2}
	for _, c := range []Cause{CauseRebalance, CauseDrain, CauseLeave, "newer_cause"} {
		l := ReleaseLease("node-1", tok)
		l.Fence, l.Cause = 9, c
		b, err := EncodeRecord(Record{Lease: &l})
		require.NoError(t, err)
		assert.Equal(t, `{"v":1,"kind":"lease","member":"node-1","producer_id":4,"epoch":2,"granted_at":0,"deadline":1,"fence":9,"cause":"`+string(c)+`"}`, string(b))
		r, err := DecodeRecord(b)
		require.NoError(t, err)
		assert.Equal(t, l, *r.Lease)
		var buf RecordBuf
		r, err = buf.Decode(b, "node-1")
		require.NoError(t, err)
		assert.Equal(t, l, *r.Lease)
		var reg Registration
		var lease Lease
		assert.Equal(t, KindLease, decodeFast(b, "", &reg, &lease), "the fast path takes %s", b)
		assert.Equal(t, c != "newer_cause", c.Known(), c)

		var old struct {
			V        int   `json:"v"`
			Deadline int64 `json:"deadline"`
		}
		require.NoError(t, json.Unmarshal(b, &old))
		assert.Equal(t, Version, old.V, "a reader of version 1 reads it")
	}
	plain := ReleaseLease("node-1", tok)
	b, err := EncodeRecord(Record{Lease: &plain})
	require.NoError(t, err)
	assert.NotContains(t, string(b), "cause", "no cause: the bytes of a release before causes")

	for _, bad := range []Lease{
		{Member: "node-1", Token: tok, GrantedAt: 1, Deadline: 2000, Cause: CauseDrain},
		{Member: "node-1", Token: tok, GrantedAt: 0, Deadline: 1, Cause: "Drain"},
		{Member: "node-1", Token: tok, GrantedAt: 0, Deadline: 1, Cause: "dr ain"},
		{Member: "node-1", Token: tok, GrantedAt: 0, Deadline: 1, Cause: Cause(strings.Repeat("a", MaxCauseLen+1))},
	} {
		_, err := EncodeRecord(Record{Lease: &bad})
		assert.ErrorIs(t, err, ErrInvalid, "%+v", bad)
	}
	for _, bad := range []string{
		`{"v":1,"kind":"lease","member":"n","producer_id":1,"epoch":1,"granted_at":1,"deadline":2000,"cause":"drain"}`,
		`{"v":3,"kind":"lease","member":"n","producer_id":1,"epoch":1,"granted_at":1,"deadline":2000,"cause":"leave","session":{"producer_id":1,"epoch":0,"nonce":"ab"}}`,
		`{"v":1,"kind":"lease","member":"n","producer_id":1,"epoch":1,"granted_at":0,"deadline":1,"cause":"Drain"}`,
		`{"v":1,"kind":"lease","member":"n","producer_id":1,"epoch":1,"granted_at":0,"deadline":1,"cause":"` + strings.Repeat("a", MaxCauseLen+1) + `"}`,
		`{"v":1,"kind":"lease","member":"n","producer_id":1,"epoch":1,"granted_at":0,"deadline":1,"cause":7}`,
	} {
		_, err := DecodeRecord([]byte(bad))
		assert.ErrorIs(t, err, ErrMalformed, bad)
	}
}
