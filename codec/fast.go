package codec

import (
	"math"
	"unicode/utf8"
)

// The fast paths of DecodeKey and DecodeRecord: decoding is most of a
// view's work per record, and encoding/json costs about ten allocations
// per value. They read exactly the bytes EncodeRecord writes (no
// whitespace, no escapes, unsigned integers) and give up on anything
// else, which takes the general path; they accept only what the general
// path decodes without error to the same record.

// nameBits says, for each byte, whether it may appear in a role name
// (bitRole) and in a member id (bitMember).
var nameBits = func() (t [256]uint8) {
	for c := 0; c < 256; c++ {
		if isRoleByte(byte(c)) {
			t[c] |= bitRole
		}
		if isMemberByte(byte(c)) {
			t[c] |= bitMember
		}
	}
	return t
}()

const (
	bitRole   = 1
	bitMember = 2
)

// nameLen returns the length of the longest prefix of b made of bytes
// with bit set.
func nameLen(b []byte, bit uint8) int {
	for i, c := range b {
		if nameBits[c]&bit == 0 {
			return i
		}
	}
	return len(b)
}

// decodeKeyFast decodes a valid key, or reports false.
func decodeKeyFast(b []byte) (Key, bool) {
	switch {
	case len(b) > len(leasePrefix) && string(b[:len(leasePrefix)]) == leasePrefix:
		rest := b[len(leasePrefix):]
		if len(rest) > MaxNameLen || nameLen(rest, bitRole) != len(rest) {
			return Key{}, false
		}
		return Key{Kind: KindLease, Role: Role(rest)}, true
	case len(b) > len(regPrefix) && string(b[:len(regPrefix)]) == regPrefix:
		rest := b[len(regPrefix):]
		n := nameLen(rest, bitRole)
		if n == 0 || n > MaxNameLen || n == len(rest) || rest[n] != '/' {
			return Key{}, false
		}
		m := rest[n+1:]
		if len(m) == 0 || len(m) > MaxNameLen || nameLen(m, bitMember) != len(m) {
			return Key{}, false
		}
		s := string(rest) // one allocation for both names
		return Key{Kind: KindRegistration, Role: Role(s[:n]), Member: MemberID(s[n+1:])}, true
	}
	return Key{}, false
}

// RecordBuf is room for one decoded value: [RecordBuf.Decode] decodes into
// it instead of allocating, and the [Record] it returns points into it.
type RecordBuf struct {
	Registration Registration
	Lease        Lease
}

// Decode is [DecodeRecord] into buf, valid until buf is reused. member is
// a hint (the key's member, say): a value naming it shares its string;
// any member, "" too, gives the same result.
func (buf *RecordBuf) Decode(b []byte, member MemberID) (Record, error) {
	switch decodeFast(b, member, &buf.Registration, &buf.Lease) {
	case KindRegistration:
		return Record{Registration: &buf.Registration}, nil
	case KindLease:
		return Record{Lease: &buf.Lease}, nil
	}
	r, err := decodeRecordJSON(b)
	switch {
	case err != nil:
		return Record{}, err
	case r.Registration != nil:
		buf.Registration = *r.Registration
		return Record{Registration: &buf.Registration}, nil
	case r.Lease != nil:
		buf.Lease = *r.Lease
		return Record{Lease: &buf.Lease}, nil
	}
	return r, nil
}

const (
	fastHead     = `{"v":1,"kind":"`
	fastHead2    = `{"v":2,"kind":"`
	fastReg      = `registration","member":"`
	fastLease    = `lease","member":"`
	fastRegAt    = `","registered_at":`
	fastValue    = `,"value":"`
	fastInstance = `,"instance":"`
	fastProducer = `","producer_id":`
	fastEpoch    = `,"epoch":`
	fastGranted  = `,"granted_at":`
	fastDeadline = `,"deadline":`
	fastFence    = `,"fence":`
	fastCause    = `,"cause":"`
)

// decodeFast decodes b into *reg or *lease when b is in the exact shape
// EncodeRecord writes and decodes without error, and returns its kind;
// otherwise it returns 0 and may have written to *reg or *lease.
func decodeFast(b []byte, hint MemberID, reg *Registration, lease *Lease) Kind {
	v2 := false
	i, ok := cut(b, 0, fastHead)
	if !ok {
		if i, ok = cut(b, 0, fastHead2); !ok {
			return 0
		}
		v2 = true // only a lease is written at version 2
	}
	if i, ok = cut(b, i, fastReg); ok && !v2 {
		m, i, ok := fastMember(b, i, hint)
		if !ok {
			return 0
		}
		if i, ok = cut(b, i, fastRegAt); !ok {
			return 0
		}
		at, i, ok := fastInt(b, i)
		if !ok {
			return 0
		}
		var value, instance string
		if value, i, ok = fastValueField(b, i); !ok {
			return 0
		}
		if i, ok = cut(b, i, fastInstance); ok {
			// Printable ASCII only (what NewInstance writes); anything
			// else takes the general path, which checks the rest.
			n := i
			for n < len(b) && b[n] != '"' {
				if c := b[n]; c < 0x20 || c == '\\' || c >= 0x7f {
					return 0
				}
				n++
			}
			if n == len(b) || n-i > MaxInstanceLen {
				return 0
			}
			instance, i = string(b[i:n]), n+1
		}
		if i != len(b)-1 || b[i] != '}' {
			return 0
		}
		*reg = Registration{Member: m, RegisteredAt: at, Value: value, Instance: instance}
		return KindRegistration
	}
	if i, ok = cut(b, i, fastLease); !ok {
		return 0
	}
	m, i, ok := fastMember(b, i, hint)
	if !ok {
		return 0
	}
	var pid, epoch, granted, deadline int64
	for _, f := range [...]struct {
		prefix string
		v      *int64
	}{{fastProducer, &pid}, {fastEpoch, &epoch}, {fastGranted, &granted}, {fastDeadline, &deadline}} {
		if i, ok = cut(b, i, f.prefix); !ok {
			return 0
		}
		if *f.v, i, ok = fastInt(b, i); !ok {
			return 0
		}
	}
	var fence int64
	if j, ok := cut(b, i, fastFence); ok {
		if fence, i, ok = fastInt(b, j); !ok {
			return 0
		}
	}
	var cause Cause
	if j, ok := cut(b, i, fastCause); ok {
		// A release's cause, [a-z_] only; anything else takes the general
		// path, which checks it.
		n := j
		for n < len(b) && (b[n] >= 'a' && b[n] <= 'z' || b[n] == '_') {
			n++
		}
		if n == j || n == len(b) || b[n] != '"' || n-j > MaxCauseLen || deadline-granted > 1 {
			return 0
		}
		cause, i = fastCauseOf(b[j:n]), n+1
	}
	var value string
	if v2 {
		if value, i, ok = fastValueField(b, i); !ok {
			return 0
		}
	}
	if epoch > 1<<15-1 || deadline <= granted || i != len(b)-1 || b[i] != '}' {
		return 0
	}
	*lease = Lease{Member: m, Token: Token{ProducerID: pid, Epoch: int16(epoch)}, GrantedAt: granted, Deadline: deadline, Value: value, Fence: fence, Cause: cause}
	return KindLease
}

// fastCauseOf returns cause b, sharing the constant's string when it is
// one this package writes.
func fastCauseOf(b []byte) Cause {
	for _, c := range [...]Cause{CauseRebalance, CauseDrain, CauseLeave} {
		if string(b) == string(c) {
			return c
		}
	}
	return Cause(b)
}

// fastValueField reads an optional "value" field at b[i:]: its value and
// the index after it, ("", i) when there is none; ok is false for a value
// the fast path does not take (escapes, control bytes, too long, invalid
// UTF-8).
func fastValueField(b []byte, i int) (string, int, bool) {
	i, ok := cut(b, i, fastValue)
	if !ok {
		return "", i, true
	}
	n := i
	ascii := true
	for n < len(b) && b[n] != '"' {
		c := b[n]
		if c < 0x20 || c == '\\' {
			return "", i, false
		}
		if c >= utf8.RuneSelf {
			ascii = false
		}
		n++
	}
	if n == len(b) || n-i > MaxValueLen || (!ascii && !utf8.Valid(b[i:n])) {
		return "", i, false
	}
	var value string
	if n > i {
		value = string(b[i:n])
	}
	return value, n + 1, true
}

// cut reports whether b[i:] starts with prefix, and the index after it.
func cut(b []byte, i int, prefix string) (int, bool) {
	if len(b)-i < len(prefix) || string(b[i:i+len(prefix)]) != prefix {
		return i, false
	}
	return i + len(prefix), true
}

// fastMember reads the valid member id at b[i:], up to the quote that ends
// it (which it leaves: the next field's prefix starts with it); hint is
// returned when it is the same member.
func fastMember(b []byte, i int, hint MemberID) (MemberID, int, bool) {
	n := nameLen(b[i:], bitMember)
	if n == 0 || n > MaxNameLen || i+n == len(b) || b[i+n] != '"' {
		return "", i, false
	}
	s := b[i : i+n]
	if string(s) == string(hint) {
		return hint, i + n, true
	}
	return MemberID(s), i + n, true
}

// fastInt reads the non-negative integer at b[i:] that fits in an int64,
// written without leading zeros (JSON's).
func fastInt(b []byte, i int) (int64, int, bool) {
	n := i
	var v uint64 // 19 digits fit
	for n < len(b) && n-i < 20 && b[n] >= '0' && b[n] <= '9' {
		v = v*10 + uint64(b[n]-'0')
		n++
	}
	if n == i || n-i > 19 || v > math.MaxInt64 || (n-i > 1 && b[i] == '0') {
		return 0, i, false
	}
	return int64(v), n, true
}
