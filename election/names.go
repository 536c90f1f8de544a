package election

import (
	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/processor"
)

// The names a program of this package needs, so that the common program
// imports election alone. Each is the other package's type itself (an
// alias), so values pass between the packages unconverted.
type (
	// Role is a role's name: 1-128 characters of [A-Za-z0-9._-]; see
	// [codec.Role].
	Role = codec.Role
	// MemberID is a member's id (host:port style ids are fine); see
	// [codec.MemberID].
	MemberID = codec.MemberID
	// Token is the token a holder holds a role under: (producer id,
	// epoch), minted by the cluster; see [codec.Token].
	Token = codec.Token
	// Cluster says how to reach the cluster and which role topic to use
	// (Config.Cluster); see [fencing.Config].
	Cluster = fencing.Config
	// TLSConfig and SASLConfig are Cluster's TLS and SASL settings.
	TLSConfig  = fencing.TLSConfig
	SASLConfig = fencing.SASLConfig
	// Settings are the timings (Config.Settings); see
	// [processor.Settings].
	Settings = processor.Settings
	// Work runs while this member holds a role ([Session.Run]); see
	// [processor.Work].
	Work = processor.Work
	// Held is the holding Work is given; see [processor.Held].
	Held = processor.Held
	// Event is a transition of the member (Config.OnEvent); see
	// [processor.Event].
	Event = processor.Event
	// MemberInUseError is what [Session.Run] and [Election.Campaign]
	// return when another live process runs under Config.Member; see
	// [processor.MemberInUseError].
	MemberInUseError = processor.MemberInUseError
)

// The kinds of [Event].
const (
	Elected       = processor.Elected
	Revoked       = processor.Revoked
	HolderChanged = processor.HolderChanged
)
