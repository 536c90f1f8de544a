package view

import (
	"errors"
	"fmt"
)

// ErrNotCaughtUp is returned, wrapped together with ctx.Err(), when a
// lookup or [View.WaitCaughtUp] gives up because its context ended before
// the table had caught up with the role topic. Both errors.Is(err,
// ErrNotCaughtUp) and errors.Is(err, context.DeadlineExceeded) (or
// context.Canceled) hold. The table was not consulted: no answer is given
// from a half-read table.
var ErrNotCaughtUp = errors.New("view: the table has not caught up with the role topic")

// ErrStopped is returned by lookups and [View.WaitCaughtUp] once
// [View.Run] has returned: the table is no longer updated, so it answers
// nothing rather than answer from a table that silently falls behind.
var ErrStopped = errors.New("view: stopped")

// ErrAlreadyRun is returned by a second call of [View.Run]: a View runs
// once. Make a new one with [New] to run again (with a StateDir it resumes
// where the first left off).
var ErrAlreadyRun = errors.New("view: Run was already called")

// ErrRewound is returned (wrapped, together with an
// [*OffsetsWentBackwardsError] naming the partition) by [View.Confirm]
// while the role's partition has gone backwards and the view has not yet
// rebuilt it: the partition's end (its last stable offset or high
// watermark) was found below what the view had read of it (the topic was
// recreated, or the cluster restarted without its data), and the table
// still describes the old log. The view
// rebuilds the partition's table from its start (see the package doc,
// "When the topic starts over"); once the rebuilt table has caught up and
// replaced the old one, Confirm answers again and [View.Health] is healthy
// again. Until then Health reports it too. Retry Confirm later; only when
// the view cannot rebuild (see the package doc) does it stay, until the
// view is restarted without its state dir.
var ErrRewound = errors.New("view: the role topic's offsets went backwards")

// OffsetsWentBackwardsError says that a partition of the role topic now
// ends below the offset the view had read up to: the topic was deleted and
// created again, or the cluster restarted without its data. The view
// rebuilds its table when it sees one (see the package doc, "When the
// topic starts over"); [Stats].Rebuilds counts them.
type OffsetsWentBackwardsError struct {
	Topic     string
	Partition int32
	// Offset is where the view was to read next; End is the partition's
	// end (the high watermark, or the last stable offset) as the broker
	// now gives it, below Offset.
	Offset, End int64
}

func (e *OffsetsWentBackwardsError) Error() string {
	return fmt.Sprintf("view: partition %s/%d ends at offset %d, below offset %d that the view had read up to: the topic was recreated or the cluster lost its data",
		e.Topic, e.Partition, e.End, e.Offset)
}

// SkipReason says why the view skipped a record of the role topic.
type SkipReason string

// The reasons a record is skipped. Each skipped record is counted under its
// reason in [Stats]; the first of each reason is logged at warn level with
// its partition and offset, later ones at debug level.
const (
	// SkipKey: the key is not a krole key (another application's record,
	// garbage, a bad role or member name).
	SkipKey SkipReason = "bad_key"
	// SkipValue: the value does not parse as a krole record.
	SkipValue SkipReason = "bad_value"
	// SkipVersion: the value was written in a newer format version than
	// this reader knows (codec.UnknownVersionError), or the key is of a
	// kind it does not know (codec.ErrUnknownKind).
	SkipVersion SkipReason = "unknown_version"
	// SkipMismatch: the value does not fit its key (a lease under a
	// registration key, a registration of another member).
	SkipMismatch SkipReason = "key_value_mismatch"
	// SkipPartition: the role's records belong in another partition
	// (codec.Partition); ranking by offset only holds within one partition,
	// so a misplaced record is never applied.
	SkipPartition SkipReason = "wrong_partition"
	// SkipForged: a lease or release that was not written in a transaction
	// by the producer id and epoch of the token it names (a plain append,
	// another transactional id's write, an older or newer epoch's), or a
	// tombstone on a lease key, which krole never writes. See the package
	// doc, "Who can write what".
	SkipForged SkipReason = "forged"
)

// SkipReasons lists every SkipReason, in a fixed order.
var SkipReasons = []SkipReason{SkipKey, SkipValue, SkipVersion, SkipMismatch, SkipPartition, SkipForged}
