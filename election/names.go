package election

import (
	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/processor"
)

// Aliases of the other packages' types, so the common program imports
// election alone and values pass between the packages unconverted.
type (
	Role             = codec.Role                 // 1-128 characters of [A-Za-z0-9._-]
	MemberID         = codec.MemberID             // a member's id
	Token            = codec.Token                // (producer id, epoch), minted by the cluster
	Cluster          = fencing.Config             // Config.Cluster
	TLSConfig        = fencing.TLSConfig          // Cluster's TLS settings
	SASLConfig       = fencing.SASLConfig         // Cluster's SASL settings
	Settings         = processor.Settings         // Config.Settings, the timings
	Work             = processor.Work             // runs while this member holds a role
	Held             = processor.Held             // the holding Work is given
	Event            = processor.Event            // a transition of the member (Config.OnEvent)
	MemberInUseError = processor.MemberInUseError // another live process runs under Config.Member
)

// The kinds of [Event].
const (
	Elected       = processor.Elected
	Revoked       = processor.Revoked
	HolderChanged = processor.HolderChanged
)
