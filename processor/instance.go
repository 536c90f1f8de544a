package processor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"time"

	"github.com/krabka/krole/codec"
)

// InstanceRegisterer is a transport that writes the registering
// process's instance into registrations ([codec.Registration].Instance),
// as [fencing.BrokerTransport] does. A [Member] on one draws an instance
// ([NewInstance]) and refuses to run beside another live process under
// its member id (see the package documentation, "One process per member
// id"); on any other transport it registers through Register and does
// not tell such processes apart.
type InstanceRegisterer interface {
	RegisterInstance(ctx context.Context, role codec.Role, member codec.MemberID, instance string) (int64, error)
}

// NewInstance returns a new instance name for this process:
// "NONCE@HOST/PID", NONCE 16 random hex digits.
func NewInstance() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	inst := fmt.Sprintf("%s@%s/%d", hex.EncodeToString(b[:]), host, os.Getpid())
	if len(inst) > codec.MaxInstanceLen {
		inst = inst[:codec.MaxInstanceLen]
	}
	return inst
}

// MemberInUseError is what [Member.Run] returns when another live process
// runs under the member's id: the member left without disturbing it (it
// wrote no tombstone, no release of the other's holding, no lease). It
// matches [ErrMemberInUse].
type MemberInUseError struct {
	Member codec.MemberID
	// Role is the role whose records showed the other process.
	Role codec.Role
	// Instance is this process's instance; Other the other's, as its
	// registration names it ("NONCE@HOST/PID"), or "" when the record
	// that showed it names none (a lease, or an older writer).
	Instance, Other string
	// Evidence says what showed the other process live.
	Evidence string
}

func (e *MemberInUseError) Error() string {
	other := "another process"
	if e.Other != "" {
		other = "instance " + e.Other
	}
	return fmt.Sprintf("member id %s is in use by %s (%s, role %s); this process (instance %s) left without writing anything",
		e.Member, other, e.Evidence, e.Role, e.Instance)
}

// Is makes the error match [ErrMemberInUse].
func (e *MemberInUseError) Is(target error) bool { return target == ErrMemberInUse }

// refuse ends the member because another live process runs under its id:
// the first call's error is what Run returns.
func (m *Member) refuse(err *MemberInUseError) {
	m.mu.Lock()
	first := m.inUse == nil
	if first {
		m.inUse = err
	}
	stop := m.stop
	m.mu.Unlock()
	if first {
		// Info: the error is Run's, for its caller to report.
		m.log.Info("another live process runs under this member id; leaving without writing", "err", err.Error())
	}
	if stop != nil {
		stop()
	}
}

// Instance returns the member's instance, the name its registrations
// carry; "" when its transport is not an [InstanceRegisterer].
func (m *Member) Instance() string { return m.inst }

// instanceWatch is a role's watch, at the member's start, of a
// registration of its member id by another instance.
type instanceWatch struct {
	other    string    // the other instance
	from     time.Time // when the watch began
	regOff   int64     // the other's registration's offset then
	leaseOff int64     // the role's lease offset then
}

// checkInstance applies the rules of one process per member id (see the
// package documentation) at now, before the succession rules. It returns
// the action to take instead of theirs, and true; or false when the
// succession rules decide.
func (r *runner) checkInstance(now time.Time) (Action, bool) {
	if r.m.inst == "" {
		return Action{}, false
	}
	inUse := func(other, evidence string) (Action, bool) {
		r.m.refuse(&MemberInUseError{Member: r.m.me, Role: r.role, Instance: r.m.inst, Other: other, Evidence: evidence})
		return Action{Kind: DoWait, Until: now.Add(r.m.s.LeaseDuration), Reason: "refused: " + evidence}, true
	}
	// A lease of this member id written since this process started,
	// under a token it did not mint, while it holds nothing: another
	// process holds the role under its id.
	if l := r.st.Lease; l != nil && r.hold == nil && l.Member == r.m.me && !l.Released() &&
		r.st.LeaseOffset > r.baseLeaseOff && !r.minted[l.Token] {
		other := ""
		if c, ok := candidate(r.st, r.m.me); ok && c.Instance != r.m.inst {
			other = c.Instance
		}
		return inUse(other, fmt.Sprintf("it wrote a lease under token %s, which this process did not mint", l.Token))
	}
	c, ok := candidate(r.st, r.m.me)
	if ok && c.Instance == r.m.inst && c.Offset == r.l.registered && r.ownSeenAt.IsZero() {
		r.ownSeenAt = now
	}
	if w := r.watch; w != nil {
		switch {
		case !ok:
			r.watch = nil // the other left (or was pruned): the id is free
			r.log.Info("the other instance's registration is gone; joining", "other", w.other)
			return Action{}, false
		case c.Offset > w.regOff && c.Instance != r.m.inst:
			// (A registration of this process's own instance is no sign
			// of the other's life: a register call it gave up on, which
			// committed later. The watch goes on; the rules then adopt
			// it.)
			return inUse(c.Instance, "it registered again within a lease of this process's start")
		case now.Before(w.from.Add(r.m.s.LeaseDuration)):
			return Action{Kind: DoWait, Until: w.from.Add(r.m.s.LeaseDuration),
				Reason: "another instance's registration of this member id: watching it for a lease before taking the id over"}, true
		}
		r.watch = nil
		r.log.Warn("taking over the member id: its other instance showed no sign of life for a lease", "other", w.other, "lease", r.m.s.LeaseDuration)
		return Action{}, false
	}
	// A registration of this member id by another instance, newer than
	// this process's own.
	if !ok || c.Instance == "" || c.Instance == r.m.inst || c.Offset <= r.l.registered {
		return Action{}, false
	}
	if r.l.registered < 0 && r.ownSeenAt.IsZero() && r.hold == nil {
		// At the start (or never registered yet): watch it for a lease.
		r.watch = &instanceWatch{other: c.Instance, from: now, regOff: c.Offset, leaseOff: r.st.LeaseOffset}
		r.log.Info("another instance's registration of this member id: watching it for a lease before taking the id over",
			"other", c.Instance, "offset", c.Offset)
		return Action{Kind: DoWait, Until: now.Add(r.m.s.LeaseDuration), Reason: "watching another instance's registration"}, true
	}
	// Registered after this process: a newcomer took the id over. This
	// process answers by registering again, which refuses the newcomer,
	// if it has been the id's live instance for a lease and has not done
	// so within the last lease; otherwise it is the newcomer, or the two
	// contend, and it leaves.
	if r.ownSeenAt.IsZero() || now.Sub(r.ownSeenAt) < r.m.s.LeaseDuration {
		return inUse(c.Instance, "it registered after this process, which had run under the id for less than a lease")
	}
	if !r.reassertedAt.IsZero() && now.Sub(r.reassertedAt) < r.m.s.LeaseDuration {
		return inUse(c.Instance, "it registered again after this process answered it")
	}
	r.reassertedAt = now
	r.log.Warn("another instance registered this member id; registering again, which tells it this one is live",
		"other", c.Instance, "offset", c.Offset)
	return Action{Kind: DoRegister, Reason: "another instance registered this member id after this one"}, true
}

// ownsKey reports whether the registration of this member id that a
// deregistration would remove is this process's: with instances, the
// newest registration of the id it knows of is one it wrote (or adopted,
// one written without an instance).
func (r *runner) ownsKey() bool {
	if r.m.inst == "" {
		return true
	}
	c, ok := candidate(r.st, r.m.me)
	if !ok {
		return r.l.registered >= 0
	}
	return c.Instance == r.m.inst || c.Offset <= r.l.registered
}
