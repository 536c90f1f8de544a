package processor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"time"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/rolestate"
)

// InstanceRegisterer is a transport that writes the registering
// process's instance into registrations, as [fencing.BrokerTransport]
// does. A [Member] on one refuses to run beside another live process
// under its id (see "One process per member id" in the package doc).
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
// runs under the member's id; the member left without writing anything
// for it. It matches [ErrMemberInUse].
type MemberInUseError struct {
	Member codec.MemberID
	// Role is the role whose records showed the other process.
	Role codec.Role
	// Instance is this process's instance; Other the other's, or "" when
	// the record that showed it names none.
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
		// Info: the error is Run's to report.
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

// instanceRules are a role's rules of one process per member id
// (docs/DESIGN.md, "One process per member id"), and what they remember;
// a member without instances has none (nil), and they never decide.
type instanceRules struct {
	m    *Member
	role codec.Role

	minted       []codec.Token  // tokens this process minted for the role
	baseLeaseOff int64          // the role's lease offset when this process first read it
	ownSeenAt    mono           // when the view first showed this process's own registration
	reassertedAt mono           // when it last registered again to answer another instance
	watch        *instanceWatch // another instance's registration watched at the start
}

// mint records a token this process minted for the role.
func (ir *instanceRules) mint(tok codec.Token) {
	if ir == nil {
		return
	}
	ir.minted = append(ir.minted, tok)
}

func (ir *instanceRules) logger() *slog.Logger { return ir.m.log.With("role", string(ir.role)) }

// verdict applies the rules at now to st (registered: this process's live
// registration, -1 none). It returns the action to take instead of
// Decide's and true, or false when Decide decides (rule 0).
func (ir *instanceRules) verdict(st rolestate.State, registered int64, holding bool, now time.Time) (Action, bool) {
	if ir == nil || ir.m.inst == "" {
		return Action{}, false
	}
	inUse := func(other, evidence string) (Action, bool) {
		ir.m.refuse(&MemberInUseError{Member: ir.m.me, Role: ir.role, Instance: ir.m.inst, Other: other, Evidence: evidence})
		return Action{Kind: DoWait, Until: now.Add(ir.m.s.LeaseDuration), Reason: "refused: " + evidence}, true
	}
	// A lease of this id since the start, under a token not minted here.
	if l := st.Lease; l != nil && !holding && l.Member == ir.m.me && !l.Released() &&
		st.LeaseOffset > ir.baseLeaseOff && !slices.Contains(ir.minted, l.Token) {
		other := ""
		if c, ok := candidate(st, ir.m.me); ok && c.Instance != ir.m.inst {
			other = c.Instance
		}
		return inUse(other, fmt.Sprintf("it wrote a lease under token %s, which this process did not mint", l.Token))
	}
	c, ok := candidate(st, ir.m.me)
	if ok && c.Instance == ir.m.inst && c.Offset == registered && ir.ownSeenAt == 0 {
		ir.ownSeenAt = monoOf(now)
	}
	if w := ir.watch; w != nil {
		switch {
		case !ok:
			ir.watch = nil // the other left (or was pruned): the id is free
			ir.logger().Info("the other instance's registration is gone; joining", "other", w.other)
			return Action{}, false
		case c.Offset > w.regOff && c.Instance != ir.m.inst:
			// (Its own instance's late registration is no sign of life.)
			return inUse(c.Instance, "it registered again within a lease of this process's start")
		case now.Before(w.from.Add(ir.m.s.LeaseDuration)):
			return Action{Kind: DoWait, Until: w.from.Add(ir.m.s.LeaseDuration),
				Reason: "another instance's registration of this member id: watching it for a lease before taking the id over"}, true
		}
		ir.watch = nil
		ir.logger().Warn("taking over the member id: its other instance showed no sign of life for a lease", "other", w.other, "lease", ir.m.s.LeaseDuration)
		return Action{}, false
	}
	// Another instance's registration, newer than this process's.
	if !ok || c.Instance == "" || c.Instance == ir.m.inst || c.Offset <= registered {
		return Action{}, false
	}
	if registered < 0 && ir.ownSeenAt == 0 && !holding {
		// At the start (or never registered yet): watch it for a lease.
		ir.watch = &instanceWatch{other: c.Instance, from: now, regOff: c.Offset, leaseOff: st.LeaseOffset}
		ir.logger().Info("another instance's registration of this member id: watching it for a lease before taking the id over",
			"other", c.Instance, "offset", c.Offset)
		return Action{Kind: DoWait, Until: now.Add(ir.m.s.LeaseDuration), Reason: "watching another instance's registration"}, true
	}
	// A newcomer: registering again refuses it, if this process has been
	// the id's live instance for a lease and not answered within one;
	// otherwise this process leaves.
	if ir.ownSeenAt == 0 || now.Sub(ir.ownSeenAt.at(now)) < ir.m.s.LeaseDuration {
		return inUse(c.Instance, "it registered after this process, which had run under the id for less than a lease")
	}
	if ir.reassertedAt != 0 && now.Sub(ir.reassertedAt.at(now)) < ir.m.s.LeaseDuration {
		return inUse(c.Instance, "it registered again after this process answered it")
	}
	ir.reassertedAt = monoOf(now)
	ir.logger().Warn("another instance registered this member id; registering again, which tells it this one is live",
		"other", c.Instance, "offset", c.Offset)
	return Action{Kind: DoRegister, Reason: "another instance registered this member id after this one"}, true
}

// ownsKey reports whether the registration of this member id that a
// deregistration would remove is this process's (or one it adopted).
func (ir *instanceRules) ownsKey(st rolestate.State, registered int64) bool {
	if ir == nil || ir.m.inst == "" {
		return true
	}
	c, ok := candidate(st, ir.m.me)
	if !ok {
		return registered >= 0
	}
	return c.Instance == ir.m.inst || c.Offset <= registered
}
