package codec

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Version is the format version of every record this package writes but
// a lease with a value or a session.
const Version = 1

// LeaseValueVersion is the format version of a lease that carries a value
// and names no session; an older reader skips it as newer (counted).
const LeaseValueVersion = 2

// Kind says which kind of record a key or value belongs to.
type Kind uint8

const (
	// KindRegistration is a member's candidacy for a role.
	KindRegistration Kind = iota + 1
	// KindLease is the role's current lease.
	KindLease
	// KindSession is a member session's heartbeat or session end (see
	// [Heartbeat]); its key names the member, not a role.
	KindSession
	// KindDrain is a request that a member drain ([DrainRequest]); its
	// key names the member, not a role.
	KindDrain
)

// String returns the kind's name, or "kind(N)" for an unknown kind.
func (k Kind) String() string {
	switch k {
	case KindRegistration:
		return "registration"
	case KindLease:
		return "lease"
	case KindSession:
		return "session"
	case KindDrain:
		return "drain"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

const (
	regPrefix   = "krole/reg/"
	leasePrefix = "krole/lease/"
)

// Key is the key of a record in the role topic: the registration key of a
// (role, member), the lease key of a role (Member empty), or the session
// or drain key of a member (Role empty).
type Key struct {
	Kind   Kind     // KindRegistration, KindLease, KindSession or KindDrain
	Role   Role     // the role the record belongs to; empty for a session or drain key
	Member MemberID // the registered member, or the session's or drain's; empty for a lease key
}

// RegistrationKey is the key of member's registration for role.
func RegistrationKey(role Role, member MemberID) Key {
	return Key{Kind: KindRegistration, Role: role, Member: member}
}

// LeaseKey is the key of role's lease.
func LeaseKey(role Role) Key { return Key{Kind: KindLease, Role: role} }

// String renders the key exactly as it is written to Kafka.
func (k Key) String() string {
	switch k.Kind {
	case KindLease:
		return leasePrefix + string(k.Role)
	case KindSession:
		return sessionPrefix + string(k.Member)
	case KindDrain:
		return drainPrefix + string(k.Member)
	}
	return regPrefix + string(k.Role) + "/" + string(k.Member)
}

// Encode returns the key's bytes.
func (k Key) Encode() []byte { return []byte(k.String()) }

// Validate checks the key's kind, role and member.
func (k Key) Validate() error {
	if k.Kind == KindSession || k.Kind == KindDrain {
		if k.Role != "" {
			return &InvalidError{What: "key", Value: k.String(), Rule: "a " + k.Kind.String() + " key has no role"}
		}
		return k.Member.Validate()
	}
	if err := k.Role.Validate(); err != nil {
		return err
	}
	switch k.Kind {
	case KindLease:
		if k.Member != "" {
			return &InvalidError{What: "key", Value: k.String(), Rule: "a lease key has no member"}
		}
		return nil
	case KindRegistration:
		return k.Member.Validate()
	}
	return &InvalidError{What: "key", Value: k.String(), Rule: "unknown kind"}
}

// DecodeKey parses a key written by [Key.Encode]. A key that is not
// krole's returns an error wrapping [ErrMalformed]; one of krole's shape
// whose kind this package does not know (krole/<kind>/...) wraps
// [ErrUnknownKind] too.
func DecodeKey(b []byte) (Key, error) {
	if k, ok := decodeKeyFast(b); ok {
		return k, nil
	}
	return decodeKeyGeneral(b)
}

// decodeKeyGeneral is DecodeKey's general path, for any input.
func decodeKeyGeneral(b []byte) (Key, error) {
	s := string(b)
	var k Key
	switch {
	case strings.HasPrefix(s, leasePrefix):
		k = Key{Kind: KindLease, Role: Role(s[len(leasePrefix):])}
	case strings.HasPrefix(s, sessionPrefix):
		var err error
		if k, err = decodeMemberKey(KindSession, s, s[len(sessionPrefix):]); err != nil {
			return Key{}, err
		}
	case strings.HasPrefix(s, drainPrefix):
		var err error
		if k, err = decodeMemberKey(KindDrain, s, s[len(drainPrefix):]); err != nil {
			return Key{}, err
		}
	case strings.HasPrefix(s, regPrefix):
		rest := s[len(regPrefix):]
		i := strings.IndexByte(rest, '/')
		if i < 0 {
			return Key{}, fmt.Errorf("%w: key %q has no member", ErrMalformed, clip(s))
		}
		k = Key{Kind: KindRegistration, Role: Role(rest[:i]), Member: MemberID(rest[i+1:])}
	default:
		if kind, ok := unknownKind(s); ok {
			return Key{}, fmt.Errorf("%w: key %q %w (%q)", ErrMalformed, clip(s), ErrUnknownKind, kind)
		}
		return Key{}, fmt.Errorf("%w: key %q is not a krole key", ErrMalformed, clip(s))
	}
	if err := k.Validate(); err != nil {
		return Key{}, fmt.Errorf("%w: key %q: %w", ErrMalformed, clip(s), err)
	}
	return k, nil
}

// unknownKind returns the kind of a key of krole's shape whose kind this
// package does not know: "krole/", 1 to 32 of [a-z_], "/", and more.
func unknownKind(s string) (string, bool) {
	rest, ok := strings.CutPrefix(s, "krole/")
	if !ok {
		return "", false
	}
	kind, after, ok := strings.Cut(rest, "/")
	if !ok || after == "" || len(kind) == 0 || len(kind) > 32 {
		return "", false
	}
	for i := 0; i < len(kind); i++ {
		if c := kind[i]; !(c >= 'a' && c <= 'z' || c == '_') {
			return "", false
		}
	}
	switch kind {
	case "reg", "lease", "session", "drain":
		return "", false
	}
	return kind, true
}

// Registration says that Member is a candidate for the role of its key.
type Registration struct {
	Member       MemberID `json:"member"`          // the candidate; the same as in the record's key
	RegisteredAt int64    `json:"registered_at"`   // Unix ms, the registering member's wall clock; informative only (rank is by offset)
	Value        string   `json:"value,omitempty"` // the candidate's opaque value (often its address), at most MaxValueLen bytes; "" for none
	// Instance names the process that wrote the registration,
	// "NONCE@HOST/PID", opaque to readers ([CheckInstance]; package
	// processor, "One process per member id"); "" for none.
	Instance string `json:"instance,omitempty"`
}

// MaxInstanceLen is the longest instance a registration carries, in bytes.
const MaxInstanceLen = 160

// CheckInstance reports whether s fits in Registration.Instance: at most
// [MaxInstanceLen] bytes of valid UTF-8 without control characters.
func CheckInstance(s string) error {
	switch {
	case len(s) > MaxInstanceLen:
		return &InvalidError{What: "instance", Value: clipName(s),
			Rule: fmt.Sprintf("%d bytes, more than the %d a registration carries", len(s), MaxInstanceLen)}
	case !utf8.ValidString(s):
		return &InvalidError{What: "instance", Value: clipName(s), Rule: "not valid UTF-8"}
	case strings.ContainsFunc(s, unicode.IsControl):
		return &InvalidError{What: "instance", Value: clipName(s), Rule: "control characters are not allowed"}
	}
	return nil
}

// MaxValueLen is the longest value a registration carries, in bytes.
const MaxValueLen = 256

// CheckValue reports whether v fits in a record: at most [MaxValueLen]
// bytes of valid UTF-8.
func CheckValue(v string) error {
	switch {
	case len(v) > MaxValueLen:
		return &InvalidError{What: "value", Value: clipName(v),
			Rule: fmt.Sprintf("%d bytes, more than the %d a registration carries", len(v), MaxValueLen)}
	case !utf8.ValidString(v):
		return &InvalidError{What: "value", Value: clipName(v), Rule: "not valid UTF-8"}
	}
	return nil
}

// Validate checks the registration's member and value.
func (g Registration) Validate() error {
	if err := g.Member.Validate(); err != nil {
		return err
	}
	if err := CheckInstance(g.Instance); err != nil {
		return err
	}
	return CheckValue(g.Value)
}

// Lease says that Member holds the role of its key under Token from
// GrantedAt until Deadline (Unix ms); a release is [ReleaseLease]'s.
type Lease struct {
	Member    MemberID `json:"member"`          // the holder
	Token     Token    `json:"token"`           // the token the lease was written under
	GrantedAt int64    `json:"granted_at"`      // Unix ms, the holder's wall clock when the write began
	Deadline  int64    `json:"deadline"`        // Unix ms, GrantedAt + the lease duration
	Value     string   `json:"value,omitempty"` // the holder's value, under its token; "" for none
	// Session names the member session that keeps the lease alive
	// ([Heartbeat]); nil for a lease that lives by its own span.
	Session *Session `json:"session,omitempty"`
	// Fence is the holding's fencing number, the offset of its first
	// lease record (package processor, "The fencing number"); 0 in that
	// first lease, which readers number by its own offset
	// (rolestate.State.Fence).
	Fence int64 `json:"fence,omitempty"`
	// Cause says why the holder released the role ([Cause]); set on a
	// release only, "" for none.
	Cause Cause `json:"cause,omitempty"`
}

// NewLease validates and returns a lease: a valid member and token, and a
// deadline after grantedAt.
func NewLease(member MemberID, token Token, grantedAt, deadline int64) (Lease, error) {
	l := Lease{Member: member, Token: token, GrantedAt: grantedAt, Deadline: deadline}
	return l, l.Validate()
}

// Validate checks the lease's member, token, times, value, fence and
// cause (a release's only, of a cause's shape: [Cause]).
func (l Lease) Validate() error {
	if err := l.Member.Validate(); err != nil {
		return err
	}
	if err := CheckValue(l.Value); err != nil {
		return err
	}
	if err := l.Token.Validate(); err != nil {
		return err
	}
	if l.Session != nil {
		if err := l.Session.Validate(); err != nil {
			return err
		}
	}
	if l.Deadline <= l.GrantedAt {
		return &InvalidError{What: "lease", Value: fmt.Sprintf("granted_at=%d deadline=%d", l.GrantedAt, l.Deadline),
			Rule: "deadline must be after granted_at"}
	}
	if l.Fence < 0 {
		return &InvalidError{What: "lease", Value: fmt.Sprintf("fence=%d", l.Fence), Rule: "fence must be >= 0"}
	}
	if l.Cause != "" {
		if !l.Released() {
			return &InvalidError{What: "lease", Value: "cause=" + clipName(string(l.Cause)), Rule: "only a release carries a cause"}
		}
		return checkCause(l.Cause)
	}
	return nil
}

// Expired reports whether the lease has ended at nowMS (Unix ms).
func (l Lease) Expired(nowMS int64) bool { return nowMS >= l.Deadline }

// ReleaseLease returns the lease a resigning holder writes under its
// token: granted_at 0, deadline 1, expired under every clock, so readers
// see the role vacant at once. Its Cause, when set, says why.
func ReleaseLease(member MemberID, token Token) Lease {
	return Lease{Member: member, Token: token, GrantedAt: 0, Deadline: 1}
}

// Released reports whether l is a release: a lease that ends at most 1 ms
// after it was granted, shorter than any a member grants itself.
func (l Lease) Released() bool { return l.Deadline-l.GrantedAt <= 1 }

// Record is one value of the role topic: exactly one of Registration,
// Lease, Heartbeat and Drain is set, or none for a tombstone.
type Record struct {
	Registration *Registration // set for a registration value
	Lease        *Lease        // set for a lease value
	Heartbeat    *Heartbeat    // set for a heartbeat or session end
	Drain        *DrainRequest // set for a drain request
}

// Kind returns the kind of the record, or 0 for a tombstone.
func (r Record) Kind() Kind {
	switch {
	case r.Registration != nil:
		return KindRegistration
	case r.Lease != nil:
		return KindLease
	case r.Heartbeat != nil:
		return KindSession
	case r.Drain != nil:
		return KindDrain
	}
	return 0
}

// Tombstone reports whether r is a deletion (a nil value on the wire).
func (r Record) Tombstone() bool {
	return r.Registration == nil && r.Lease == nil && r.Heartbeat == nil && r.Drain == nil
}

// wire is the JSON shape of a value. Field order is the encoding order.
type wire struct {
	V            int      `json:"v"`
	Kind         string   `json:"kind"`
	Member       MemberID `json:"member"`
	ProducerID   *int64   `json:"producer_id,omitempty"`
	Epoch        *int16   `json:"epoch,omitempty"`
	RegisteredAt *int64   `json:"registered_at,omitempty"`
	GrantedAt    *int64   `json:"granted_at,omitempty"`
	Deadline     *int64   `json:"deadline,omitempty"`
	Fence        int64    `json:"fence,omitempty"` // leases only
	Cause        Cause    `json:"cause,omitempty"` // releases only
	Value        string   `json:"value,omitempty"`
	Instance     string   `json:"instance,omitempty"`     // registrations only
	Session      *Session `json:"session,omitempty"`      // leases (version 3) and session records
	Excluded     []Role   `json:"excluded,omitempty"`     // heartbeats only
	Group        string   `json:"group,omitempty"`        // heartbeats only
	Weight       int      `json:"weight,omitempty"`       // heartbeats only
	Drain        bool     `json:"drain,omitempty"`        // heartbeats only
	Nonce        string   `json:"nonce,omitempty"`        // drain requests only
	RequestedAt  *int64   `json:"requested_at,omitempty"` // drain requests only
}

// EncodeRecord validates r and returns its value bytes; nil for a
// tombstone.
func EncodeRecord(r Record) ([]byte, error) {
	var w wire
	n := 0
	for _, set := range []bool{r.Registration != nil, r.Lease != nil, r.Heartbeat != nil, r.Drain != nil} {
		if set {
			n++
		}
	}
	switch {
	case n > 1:
		return nil, &InvalidError{What: "record", Value: "registration+lease", Rule: "a record is one kind, not both"}
	case r.Registration != nil:
		g := *r.Registration
		if err := g.Validate(); err != nil {
			return nil, err
		}
		w = wire{V: Version, Kind: "registration", Member: g.Member, RegisteredAt: &g.RegisteredAt, Value: g.Value, Instance: g.Instance}
	case r.Lease != nil:
		l := *r.Lease
		if err := l.Validate(); err != nil {
			return nil, err
		}
		w = wire{V: Version, Kind: "lease", Member: l.Member, ProducerID: &l.Token.ProducerID,
			Epoch: &l.Token.Epoch, GrantedAt: &l.GrantedAt, Deadline: &l.Deadline, Fence: l.Fence, Cause: l.Cause, Value: l.Value}
		if l.Value != "" {
			w.V = LeaseValueVersion
		}
		if l.Session != nil {
			w.V, w.Session = SessionVersion, l.Session
		}
	case r.Heartbeat != nil:
		h := *r.Heartbeat
		if err := h.Validate(); err != nil {
			return nil, err
		}
		w = wire{V: SessionVersion, Kind: "heartbeat", Member: h.Member, Session: &h.Session,
			GrantedAt: &h.GrantedAt, Deadline: &h.Deadline, Excluded: h.Excluded, Group: h.Group, Weight: h.Weight, Drain: h.Drain}
		if h.End {
			w.Kind, w.GrantedAt, w.Deadline, w.Excluded, w.Group, w.Weight, w.Drain = "session_end", nil, nil, nil, "", 0, false
		}
	case r.Drain != nil:
		d := *r.Drain
		if err := d.Validate(); err != nil {
			return nil, err
		}
		w = wire{V: DrainVersion, Kind: "drain", Member: d.Member, Nonce: d.Nonce, RequestedAt: &d.At}
	default:
		return nil, nil
	}
	return json.Marshal(w)
}

// DecodeRecord parses value bytes. A nil or empty value is a tombstone. A
// value of a newer format version returns [*UnknownVersionError]; anything
// else that does not parse returns an error wrapping [ErrMalformed].
func DecodeRecord(b []byte) (Record, error) {
	var reg Registration
	var lease Lease
	switch decodeFast(b, "", &reg, &lease) {
	case KindRegistration:
		g := reg // only the kind decoded is allocated
		return Record{Registration: &g}, nil
	case KindLease:
		l := lease
		return Record{Lease: &l}, nil
	}
	return decodeRecordJSON(b)
}

// decodeRecordJSON is DecodeRecord's general path: encoding/json, for any
// input.
func decodeRecordJSON(b []byte) (Record, error) {
	if len(b) == 0 {
		return Record{}, nil
	}
	// A newer version may not fit this shape: a failed parse checks the
	// version before calling the bytes malformed.
	var w wire
	w.V = -1
	if err := json.Unmarshal(b, &w); err != nil {
		var head struct {
			V int `json:"v"`
		}
		if json.Unmarshal(b, &head) == nil && head.V > DrainVersion {
			return Record{}, &UnknownVersionError{Version: head.V}
		}
		return Record{}, fmt.Errorf("%w: value is not a krole record: %w", ErrMalformed, err)
	}
	switch {
	case w.V == -1:
		return Record{}, fmt.Errorf("%w: value has no format version", ErrMalformed)
	case w.V > DrainVersion:
		return Record{}, &UnknownVersionError{Version: w.V}
	case w.V < 1:
		return Record{}, fmt.Errorf("%w: format version %d", ErrMalformed, w.V)
	}
	if err := w.Member.Validate(); err != nil {
		return Record{}, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	switch w.Kind {
	case "registration":
		if w.RegisteredAt == nil {
			return Record{}, fmt.Errorf("%w: registration has no registered_at", ErrMalformed)
		}
		if err := CheckValue(w.Value); err != nil {
			return Record{}, fmt.Errorf("%w: %w", ErrMalformed, err)
		}
		if err := CheckInstance(w.Instance); err != nil {
			return Record{}, fmt.Errorf("%w: %w", ErrMalformed, err)
		}
		return Record{Registration: &Registration{Member: w.Member, RegisteredAt: *w.RegisteredAt, Value: w.Value, Instance: w.Instance}}, nil
	case "lease":
		if w.Value != "" && w.V < LeaseValueVersion {
			return Record{}, fmt.Errorf("%w: a lease of version %d carries no value", ErrMalformed, w.V)
		}
		if w.ProducerID == nil || w.Epoch == nil || w.GrantedAt == nil || w.Deadline == nil {
			return Record{}, fmt.Errorf("%w: lease lacks producer_id, epoch, granted_at or deadline", ErrMalformed)
		}
		if w.Session != nil && w.V < SessionVersion {
			return Record{}, fmt.Errorf("%w: a lease of version %d names no session", ErrMalformed, w.V)
		}
		l := Lease{Member: w.Member, Token: Token{ProducerID: *w.ProducerID, Epoch: *w.Epoch},
			GrantedAt: *w.GrantedAt, Deadline: *w.Deadline, Value: w.Value, Session: w.Session, Fence: w.Fence, Cause: w.Cause}
		if err := l.Validate(); err != nil {
			return Record{}, fmt.Errorf("%w: %w", ErrMalformed, err)
		}
		return Record{Lease: &l}, nil
	case "heartbeat", "session_end":
		if w.V < SessionVersion || w.Session == nil {
			return Record{}, fmt.Errorf("%w: a %s of version %d without a session", ErrMalformed, w.Kind, w.V)
		}
		h := Heartbeat{Member: w.Member, Session: *w.Session, Excluded: w.Excluded, End: w.Kind == "session_end", Group: w.Group, Weight: w.Weight, Drain: w.Drain}
		if !h.End {
			if w.GrantedAt == nil || w.Deadline == nil {
				return Record{}, fmt.Errorf("%w: heartbeat lacks granted_at or deadline", ErrMalformed)
			}
			h.GrantedAt, h.Deadline = *w.GrantedAt, *w.Deadline
		} else if w.GrantedAt != nil || w.Deadline != nil || len(w.Excluded) > 0 {
			return Record{}, fmt.Errorf("%w: a session end carries no times or roles", ErrMalformed)
		}
		if err := h.Validate(); err != nil {
			return Record{}, fmt.Errorf("%w: %w", ErrMalformed, err)
		}
		return Record{Heartbeat: &h}, nil
	case "drain":
		if w.V < DrainVersion || w.RequestedAt == nil {
			return Record{}, fmt.Errorf("%w: a drain request of version %d, or without requested_at", ErrMalformed, w.V)
		}
		d := DrainRequest{Member: w.Member, Nonce: w.Nonce, At: *w.RequestedAt}
		if err := d.Validate(); err != nil {
			return Record{}, fmt.Errorf("%w: %w", ErrMalformed, err)
		}
		return Record{Drain: &d}, nil
	}
	return Record{}, fmt.Errorf("%w: unknown kind %q", ErrMalformed, clip(w.Kind))
}

// CheckPair reports whether a decoded value fits its key: a registration
// under a registration key of the same member, a lease under a lease key.
// Tombstones fit any key.
func CheckPair(k Key, r Record) error {
	switch {
	case r.Tombstone():
		return nil
	case r.Registration != nil && (k.Kind != KindRegistration || k.Member != r.Registration.Member):
		return fmt.Errorf("%w: registration of %s under key %s", ErrMalformed, r.Registration.Member, k)
	case r.Lease != nil && k.Kind != KindLease:
		return fmt.Errorf("%w: lease under key %s", ErrMalformed, k)
	case r.Heartbeat != nil && (k.Kind != KindSession || k.Member != r.Heartbeat.Member):
		return fmt.Errorf("%w: session record of %s under key %s", ErrMalformed, r.Heartbeat.Member, k)
	case k.Kind == KindSession && r.Heartbeat == nil:
		return fmt.Errorf("%w: %s under session key %s", ErrMalformed, r.Kind(), k)
	case r.Drain != nil && (k.Kind != KindDrain || k.Member != r.Drain.Member):
		return fmt.Errorf("%w: drain request of %s under key %s", ErrMalformed, r.Drain.Member, k)
	case k.Kind == KindDrain && r.Drain == nil:
		return fmt.Errorf("%w: %s under drain key %s", ErrMalformed, r.Kind(), k)
	}
	return nil
}

// Partition returns role's partition among n: 32-bit FNV-1a of the name
// alone, so every writer and reader agrees, and a role's records share
// one offset order.
func Partition(role Role, n int32) int32 {
	if n <= 0 {
		return 0
	}
	// hash/fnv's New32a, without its allocations.

	h := uint32(2166136261)
	for i := 0; i < len(role); i++ {
		h ^= uint32(role[i])
		h *= 16777619
	}
	return int32(h % uint32(n))
}

// KeyPartition returns the partition among n of the records keyed k: a
// member's session and drain records lie in [SessionPartition], a role's
// registrations and lease in [Partition].
func KeyPartition(k Key, n int32) int32 {
	if k.Kind == KindSession || k.Kind == KindDrain {
		return SessionPartition(k.Member, n)
	}
	return Partition(k.Role, n)
}

// clipName cuts an input for an InvalidError's Value: its first 16 bytes
// (never mid-character) and "...".
func clipName(s string) string {
	if len(s) <= 16 {
		return s
	}
	n := 16
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
