package rolestate

import (
	"errors"
	"fmt"

	"github.com/krabka/krole/codec"
)

// Batch is what a reader knows of the record batch a record came in: the
// producer id and epoch that wrote it (-1 for a plain append without
// them) and whether it was written in a transaction.
type Batch struct {
	ProducerID    int64
	Epoch         int16
	Transactional bool
}

// ErrForged marks a lease record that CheckLeaseAuthor refuses.
var ErrForged = errors.New("forged lease")

// CheckLeaseAuthor decides whether a record on a lease key (a lease, a
// release, or a tombstone) counts: only a lease written in a transaction
// by the producer id and epoch of its own token does, since only the
// holder of that token could have written it so (the broker refuses any
// other producer's transactional write under it). krole never writes a
// lease tombstone, and a tombstone names no token, so none counts. It
// returns nil for a lease that counts, else an error wrapping ErrForged
// that says why. Every reader of the role topic (the view, the
// transport's ReadRoleRecords) applies it, so that a stranger who can
// append to the topic cannot name a holder.
func CheckLeaseAuthor(rec codec.Record, b Batch) error {
	switch {
	case rec.Lease == nil:
		return fmt.Errorf("%w: a tombstone on a lease key: krole never writes one, and it names no token", ErrForged)
	case !b.Transactional:
		return fmt.Errorf("%w: lease of %s under token %d/%d not written in a transaction (batch producer id %d)",
			ErrForged, rec.Lease.Member, rec.Lease.Token.ProducerID, rec.Lease.Token.Epoch, b.ProducerID)
	case b.ProducerID != rec.Lease.Token.ProducerID || b.Epoch != rec.Lease.Token.Epoch:
		return fmt.Errorf("%w: lease of %s names token %d/%d but was written by producer id %d epoch %d",
			ErrForged, rec.Lease.Member, rec.Lease.Token.ProducerID, rec.Lease.Token.Epoch, b.ProducerID, b.Epoch)
	}
	return nil
}
