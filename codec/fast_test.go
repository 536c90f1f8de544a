package codec

import (
	"errors"
	"hash/fnv"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// sameDecode fails t unless two decodes gave the same record and the same
// error (by message and by kind).
func sameDecode(t *testing.T, what string, in []byte, r1 Record, err1 error, r2 Record, err2 error) {
	t.Helper()
	if (err1 == nil) != (err2 == nil) || (err1 != nil && err1.Error() != err2.Error()) {
		t.Fatalf("%s(%q): error %v, general path %v", what, in, err1, err2)
	}
	if errors.Is(err1, ErrMalformed) != errors.Is(err2, ErrMalformed) {
		t.Fatalf("%s(%q): error kinds differ: %v / %v", what, in, err1, err2)
	}
	var uv1, uv2 *UnknownVersionError
	if errors.As(err1, &uv1) != errors.As(err2, &uv2) {
		t.Fatalf("%s(%q): error kinds differ: %v / %v", what, in, err1, err2)
	}
	if !reflect.DeepEqual(r1, r2) {
		t.Fatalf("%s(%q) = %+v, general path %+v", what, in, r1, r2)
	}
}

// FuzzFastDecode holds the fast paths to the general ones (encoding/json
// and the plain key parser): whatever a fast path accepts, the general path
// decodes without error to the same key or record, and DecodeKey,
// DecodeRecord and RecordBuf.Decode give exactly what the general path
// gives, error or not, for any input and any member hint.
func FuzzFastDecode(f *testing.F) {
	for _, s := range fastSeeds(f) {
		f.Add([]byte(s), "node-1")
	}
	f.Fuzz(func(t *testing.T, b []byte, hint string) {
		want, wantErr := decodeRecordJSON(b)

		var reg Registration
		var lease Lease
		switch kind := decodeFast(b, MemberID(hint), &reg, &lease); kind {
		case KindRegistration:
			sameDecode(t, "decodeFast", b, Record{Registration: &reg}, nil, want, wantErr)
		case KindLease:
			sameDecode(t, "decodeFast", b, Record{Lease: &lease}, nil, want, wantErr)
		case 0:
		default:
			t.Fatalf("decodeFast(%q) returned kind %v", b, kind)
		}

		got, err := DecodeRecord(b)
		sameDecode(t, "DecodeRecord", b, got, err, want, wantErr)
		var buf RecordBuf
		got, err = buf.Decode(b, MemberID(hint))
		sameDecode(t, "RecordBuf.Decode", b, got, err, want, wantErr)
		if got.Registration != nil && got.Registration != &buf.Registration ||
			got.Lease != nil && got.Lease != &buf.Lease {
			t.Fatalf("RecordBuf.Decode(%q) did not decode into its buffer", b)
		}

		wk, wkErr := decodeKeyGeneral(b)
		if k, ok := decodeKeyFast(b); ok && (wkErr != nil || k != wk) {
			t.Fatalf("decodeKeyFast(%q) = %+v, general path %+v, %v", b, k, wk, wkErr)
		}
		k, kErr := DecodeKey(b)
		if k != wk || (kErr == nil) != (wkErr == nil) || (kErr != nil && kErr.Error() != wkErr.Error()) {
			t.Fatalf("DecodeKey(%q) = %+v, %v; general path %+v, %v", b, k, kErr, wk, wkErr)
		}

		h := fnv.New32a()
		h.Write(b)
		for _, n := range []int32{1, 3, 7, 12, 1 << 20} {
			if got, want := Partition(Role(b), n), int32(h.Sum32()%uint32(n)); got != want {
				t.Fatalf("Partition(%q, %d) = %d, FNV-1a says %d", b, n, got, want)
			}
		}
	})
}

// fastSeeds are the golden values and keys and near misses of the fast
// paths' shapes.
func fastSeeds(tb testing.TB) []string {
	seeds := []string{
		`{"v":1,"kind":"registration","member":"node-1","registered_at":1700000000000}`,
		`{"v":1,"kind":"registration","member":"node-1","registered_at":1700000000000,"value":"10.0.0.7:8080"}`,
		`{"v":1,"kind":"registration","member":"node-1","registered_at":0,"value":""}`,
		`{"v":1,"kind":"registration","member":"node-1","registered_at":1,"value":"h\u00e9"}`,
		`{"v":1,"kind":"registration","member":"node-1","registered_at":1,"value":"hé"}`,
		`{"v":1,"kind":"registration","member":"node-1","registered_at":1,"value":"a","instance":"3f9c0a1b2d4e5f60@web-1/4242"}`,
		`{"v":1,"kind":"registration","member":"node-1","registered_at":1,"instance":""}`,
		`{"v":1,"kind":"registration","member":"node-1","registered_at":1,"instance":"a\u0001"}`,
		`{"v":1,"kind":"registration","member":"node-1","registered_at":1,"instance":"hé"}`,
		`{"v":1,"kind":"registration","member":"node-1","registered_at":1,"instance":"a","value":"b"}`,
		`{"v":1,"kind":"registration","member":"node-1","registered_at":-1}`,
		`{"v":1,"kind":"registration","member":"node-1","registered_at":01}`,
		`{"v":1,"kind":"registration","member":"node-1","registered_at":1.5}`,
		`{"v":1,"kind":"registration","member":"node-1","registered_at":1e3}`,
		`{"v":1,"kind":"registration","member":"node-1","registered_at":99999999999999999999}`,
		`{"v":1,"kind":"registration","member":"node-1","registered_at":9223372036854775807}`,
		`{"v":1,"kind":"registration","member":"node-1","registered_at":9223372036854775808}`,
		`{"v":1,"kind":"registration","member":"node-1","registered_at":18446744073709551616}`,
		`{"v":1,"kind":"lease","member":"node-1","producer_id":3582459108036610924,"epoch":0,"granted_at":1,"deadline":2}`,
		`{"v":1,"kind":"registration","member":"node-1","registered_at":1} `,
		`{"v":1,"kind":"registration","member":"node-1","registered_at":1,"member":"x"}`,
		`{"v":1,"kind":"registration","member":"a/b","registered_at":1}`,
		`{"v":1,"kind":"lease","member":"node-1","producer_id":4242,"epoch":7,"granted_at":1700000000000,"deadline":1700000030000}`,
		`{"v":1,"kind":"lease","member":"node-1","producer_id":4242,"epoch":32768,"granted_at":1,"deadline":2}`,
		`{"v":1,"kind":"lease","member":"node-1","producer_id":4242,"epoch":7,"granted_at":2,"deadline":2}`,
		`{"v":1,"kind":"lease","member":"node-1","producer_id":4242,"epoch":7,"granted_at":0,"deadline":1}`,
		`{"v":1,"kind":"lease","member":"node-1","producer_id":1,"epoch":1,"granted_at":1,"deadline":2,"value":"x"}`,
		`{"V":1,"kind":"lease","member":"node-1","producer_id":1,"epoch":1,"granted_at":1,"deadline":2}`,
		`{"v":2,"kind":"registration","member":"node-1","registered_at":1}`,
		`{"v":2,"kind":"lease","member":"node-1","producer_id":1,"epoch":1,"granted_at":1,"deadline":2,"value":"10.0.0.7:8080"}`,
		`{"v":2,"kind":"lease","member":"node-1","producer_id":1,"epoch":1,"granted_at":1,"deadline":2,"value":""}`,
		`{"v":2,"kind":"lease","member":"node-1","producer_id":1,"epoch":1,"granted_at":1,"deadline":2}`,
		`{"v":2,"kind":"lease","member":"node-1","producer_id":1,"epoch":1,"granted_at":1,"deadline":2,"value":"a\u001b"}`,
		`{"v":1,"kind":"lease","member":"node-1","producer_id":1,"epoch":1,"granted_at":0,"deadline":1,"fence":17}`,
		`{"v":1,"kind":"lease","member":"node-1","producer_id":1,"epoch":1,"granted_at":0,"deadline":1,"fence":0}`,
		`{"v":1,"kind":"lease","member":"node-1","producer_id":1,"epoch":1,"granted_at":0,"deadline":1,"fence":-1}`,
		`{"v":1,"kind":"lease","member":"node-1","producer_id":1,"epoch":1,"granted_at":0,"deadline":1,"fence":017}`,
		`{"v":2,"kind":"lease","member":"node-1","producer_id":1,"epoch":1,"granted_at":1,"deadline":2,"fence":3,"value":"x"}`,
		`{"v":2,"kind":"lease","member":"node-1","producer_id":1,"epoch":1,"granted_at":1,"deadline":2,"value":"x","fence":3}`,
		`{"v":1,"kind":"lease","member":"node-1","producer_id":1,"epoch":1,"granted_at":0,"deadline":1,"cause":"drain"}`,
		`{"v":1,"kind":"lease","member":"node-1","producer_id":1,"epoch":1,"granted_at":0,"deadline":1,"fence":3,"cause":"newer_cause"}`,
		`{"v":1,"kind":"lease","member":"node-1","producer_id":1,"epoch":1,"granted_at":0,"deadline":1,"cause":"dr\u0061in"}`,
		`{"v":1,"kind":"lease","member":"node-1","producer_id":1,"epoch":1,"granted_at":0,"deadline":1,"cause":""}`,
		`{"v":1,"kind":"lease","member":"node-1","producer_id":1,"epoch":1,"granted_at":0,"deadline":1,"cause":"Drain"}`,
		`{"v":1,"kind":"lease","member":"node-1","producer_id":1,"epoch":1,"granted_at":1,"deadline":9,"cause":"drain"}`,
		`{"v":1,"kind":"lease","member":"node-1","producer_id":1,"epoch":1,"granted_at":0,"deadline":1,"cause":"drain","fence":3}`,
		`{"v":2,"kind":"lease","member":"node-1","producer_id":1,"epoch":1,"granted_at":0,"deadline":1,"cause":"leave","value":"x"}`,
		`krole/reg/controller/node-1`, `krole/lease/controller`, `krole/reg/controller/`, `krole/lease/a/b`,
		`krole/reg/` + strings.Repeat("r", 129) + `/m`, "", "\x00\xff",
		`{"v":4,"kind":"drain","member":"node-1","nonce":"9f2c4e6a8b0d1f35","requested_at":1700000000000}`,
		`{"v":4,"kind":"drain","member":"node-1","nonce":"","requested_at":1}`,
		`krole/drain/node-1`, `krole/drain/a/b`, `krole/drain/`,
	}
	for _, name := range []string{"registration", "lease", "tombstone", "registration-value", "release-fence", "release-cause"} {
		b, err := os.ReadFile(filepath.Join("..", "testdata", "codec", name+".golden"))
		if err != nil {
			tb.Fatal(err)
		}
		k, v, _ := strings.Cut(string(b), "\n")
		seeds = append(seeds, k, v)
	}
	return seeds
}

// TestFastPathsTaken: the values and keys this package writes take the
// fast paths (the fuzz test shows only that what they take is right).
func TestFastPathsTaken(t *testing.T) {
	var reg Registration
	var lease Lease
	for _, name := range []string{"registration", "lease", "registration-value", "lease-value", "release-fence", "release-cause"} {
		b, err := os.ReadFile(filepath.Join("..", "testdata", "codec", name+".golden"))
		if err != nil {
			t.Fatal(err)
		}
		k, v, _ := strings.Cut(string(b), "\n")
		if decodeFast([]byte(v), "", &reg, &lease) == 0 {
			t.Errorf("%s: value %s takes the general path", name, v)
		}
		if _, ok := decodeKeyFast([]byte(k)); !ok {
			t.Errorf("%s: key %s takes the general path", name, k)
		}
	}
	// Any int64 takes the fast path (the producer ids of kfake, the test
	// cluster, have 19 digits).
	l := Lease{Member: "m", Token: Token{ProducerID: math.MaxInt64, Epoch: math.MaxInt16}, GrantedAt: math.MaxInt64 - 1, Deadline: math.MaxInt64}
	b, err := EncodeRecord(Record{Lease: &l})
	if err != nil {
		t.Fatal(err)
	}
	if decodeFast(b, "", &reg, &lease) != KindLease || lease != l {
		t.Errorf("%s takes the general path or decodes to %+v", b, lease)
	}

	// Written values with a value that JSON escapes take the general path,
	// and decode the same.
	r := Record{Registration: &Registration{Member: "m", RegisteredAt: 1, Value: "<a&b>\u2028é"}}
	b, err = EncodeRecord(r)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeRecord(b)
	if err != nil || !reflect.DeepEqual(got, r) {
		t.Fatalf("DecodeRecord(%s) = %+v, %v", b, got, err)
	}
}

// TestRecordBufSharesTheHint: a member id equal to the hint is the hint's
// string, not a copy.
func TestRecordBufSharesTheHint(t *testing.T) {
	var buf RecordBuf
	hint := MemberID("node-1")
	v := []byte(`{"v":1,"kind":"registration","member":"node-1","registered_at":1}`)
	allocs := testing.AllocsPerRun(100, func() {
		r, err := buf.Decode(v, hint)
		if err != nil || r.Registration.Member != hint {
			t.Fatal(r, err)
		}
	})
	if allocs != 0 {
		t.Fatalf("RecordBuf.Decode allocated %v times", allocs)
	}
}
