package stream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/ctxcall"
)

// DefaultBatchSize is the default of [Config].BatchSize.
const DefaultBatchSize = 500

// Retries of failed transactions (see Run).
const (
	maxAttempts   = 5                      // consecutive failed resumptions before Run gives up
	retryBackoff  = 100 * time.Millisecond // times the attempt number
	maxRetryPause = time.Second
)

// Message is one input record handed to [Config].Transform. Headers are
// not carried.
type Message struct {
	// Topic is the input topic (Config.Input).
	Topic string
	// Partition is the input partition the record was read from.
	Partition int32
	// Offset is the record's offset in Partition. Offsets of one
	// partition reach Transform in increasing order, though not always
	// consecutive (compaction, transaction markers, aborted records).
	Offset int64
	// Key is the record's key; nil when it has none.
	Key []byte
	// Value is the record's value; nil for a tombstone.
	Value []byte
	// Timestamp is the record's timestamp as the broker returns it: the
	// producer's create time, or the broker's append time when the topic
	// uses LogAppendTime.
	Timestamp time.Time
}

// Commit describes one transaction Run committed; see [Config].OnCommit.
type Commit struct {
	// Records is the number of input records the transaction consumed.
	Records int
	// Outputs is the number of records it wrote.
	Outputs int
	// Offsets are the input offsets it committed: per input partition
	// that the batch read from, the offset of the next record to read.
	Offsets map[int32]int64
}

// Config of [Run].
type Config struct {
	// Transport is the transport that minted the holder's token (the one
	// the krole member holds the role with). Run writes through it and
	// takes its connection settings from it. Required.
	Transport *fencing.BrokerTransport
	// Group is the consumer group whose committed offsets on Input are the
	// processor's position. It is never joined. Required.
	Group string
	// Input is the topic to consume. Required.
	Input string
	// Output is the topic of every output message whose Topic is empty.
	// Required when Transform is nil; default none (then every output
	// message must name its topic).
	Output string
	// Transform maps one input record to the records to write (none to
	// drop it). A message with an empty Topic goes to Output; its
	// Partition may be fencing.PartitionByKey. Transform runs on Run's
	// goroutine, one record at a time in input order per partition; it may
	// run again for the same record (see the package documentation). An
	// error stops Run without committing the record's batch. Nil forwards
	// each record's key and value to Output, partitioned by key.
	Transform func(in Message) ([]fencing.Message, error)
	// BatchSize is the most input records one transaction consumes.
	// Default 500. Smaller batches commit sooner and redo less work after
	// a failover; larger ones need fewer transactions.
	BatchSize int
	// Linger is how long Run waits, once it has a record, for more to
	// fill the batch. Default 0: a batch is what has already arrived.
	Linger time.Duration
	// OnCommit, when set, is called on Run's goroutine after each
	// committed transaction, in commit order, never concurrently. Run
	// waits for it before it reads the next batch, so it should return
	// quickly. Default none.
	OnCommit func(Commit)
	// Logger receives warnings (retried transactions, consumer errors).
	// Default: discard.
	Logger *slog.Logger

	hooks hooks
}

// hooks are tests' way into a transaction.
type hooks struct {
	// afterOutputs runs inside each transaction once the outputs are
	// written, and afterOffsets once the offsets are too (before the
	// commit). An error aborts the transaction.
	afterOutputs hook
	afterOffsets hook
}

// hook is a function a test runs inside a transaction.
type hook func() error

func (c Config) check() (Config, error) {
	switch {
	case c.Transport == nil:
		return c, errors.New("stream: Config.Transport is required")
	case c.Group == "":
		return c, errors.New("stream: Config.Group is required")
	case c.Input == "":
		return c, errors.New("stream: Config.Input is required")
	case c.Transform == nil && c.Output == "":
		return c, errors.New("stream: Config.Output is required when Config.Transform is nil")
	case c.BatchSize < 0:
		return c, fmt.Errorf("stream: Config.BatchSize %d is negative", c.BatchSize)
	case c.Linger < 0:
		return c, fmt.Errorf("stream: Config.Linger %v is negative", c.Linger)
	}
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Transform == nil {
		out := c.Output
		c.Transform = func(in Message) ([]fencing.Message, error) {
			return []fencing.Message{{Topic: out, Partition: fencing.PartitionByKey, Key: in.Key, Value: in.Value}}, nil
		}
	}
	return c, nil
}

// Run consumes cfg.Input, transforms it and writes the outputs for the
// holding of role under token, exactly once (see the package doc), until
// ctx ends or the token loses the role. It blocks until then, but not for
// its input consumer, which only reads and closes in the background.
// cfg.Transport must be the transport that minted token for role.
//
// Each batch is one transaction under token: its outputs, then the group's
// offsets past them. After a transaction fails for a reason other than a
// fence, Run resumes from the committed offsets; after 5 consecutive
// failed attempts it returns the last error.
//
// Run returns:
//   - nil when ctx ends: the batch in flight is aborted (when a request of
//     it was out, the token is retired and the role's next AcquireEpoch or
//     the transaction timeout aborts it);
//   - an error matching fencing.ErrFenced when the token no longer holds
//     the role (also matching fencing.ErrNotHeld when the transport no
//     longer holds the token);
//   - an error matching fencing.ErrUnknownOutcome when a request of a
//     batch's transaction got no answer: the token is retired and the role
//     lost, as for a fence;
//   - Transform's error, wrapped (nothing of its batch is committed);
//   - any other error when the configuration is invalid, the input cannot
//     be read, or transactions keep failing.
func Run(ctx context.Context, cfg Config, role codec.Role, token codec.Token) error {
	cfg, err := cfg.check()
	if err != nil {
		return err
	}
	r := &runner{cfg: cfg, tr: cfg.Transport, role: role, token: token, log: cfg.Logger.With("role", string(role), "token", token.String())}
	return r.run(ctx)
}

type runner struct {
	cfg   Config
	tr    *fencing.BrokerTransport
	role  codec.Role
	token codec.Token
	log   *slog.Logger
	// bg counts the input consumers closing in the background; the
	// client closes after them.
	bg sync.WaitGroup
}

// retriable marks a failure after which Run resumes from the committed
// offsets.
type retriable struct{ err error }

func (e retriable) Error() string { return e.err.Error() }
func (e retriable) Unwrap() error { return e.err }

func (r *runner) run(ctx context.Context) error {
	if err := r.settle(ctx); err != nil {
		return r.outcome(ctx, err)
	}
	sc, err := r.tr.Config().Sarama()
	if err != nil {
		return fmt.Errorf("stream: %w", err)
	}
	sc.Consumer.IsolationLevel = sarama.ReadCommitted
	sc.Consumer.Return.Errors = true
	// Bounded by the dial timeout and the metadata retries; not abandoned
	// on ctx, so the client is never left open.
	client, err := sarama.NewClient(r.tr.Config().Brokers, sc)
	if err != nil {
		return r.outcome(ctx, fmt.Errorf("stream: connecting: %w", err))
	}
	defer func() {
		go func() {
			r.bg.Wait()
			_ = client.Close()
		}()
	}()

	failures := 0
	for {
		commits, err := r.session(ctx, client)
		var re retriable
		if !errors.As(err, &re) {
			return r.outcome(ctx, err)
		}
		if commits > 0 {
			failures = 0
		}
		failures++
		if failures >= maxAttempts {
			return r.outcome(ctx, fmt.Errorf("stream: %d attempts failed in a row, the last: %w", failures, re.err))
		}
		r.log.Warn("stream: resuming from the committed offsets", "attempt", failures, "err", re.err)
		if err := ctxcall.Sleep(ctx, min(time.Duration(failures)*retryBackoff, maxRetryPause)); err != nil {
			return nil
		}
		if err := r.settle(ctx); err != nil {
			return r.outcome(ctx, err)
		}
	}
}

// settle checks that the transport holds the token and ends a transaction
// of the token that may still be open (an abort, when one may be): an
// empty transaction sends nothing else.
func (r *runner) settle(ctx context.Context) error {
	return r.tr.Transact(ctx, r.role, r.token, func(*fencing.Txn) error { return nil })
}

// outcome maps a terminal error to what Run returns.
func (r *runner) outcome(ctx context.Context, err error) error {
	switch {
	case err == nil:
		return nil
	case fencing.IsFenced(err):
		return err
	case errors.Is(err, fencing.ErrNotHeld):
		return fencing.Fenced(r.role, err)
	case errors.Is(err, fencing.ErrUnknownOutcome) && ctx.Err() == nil:
		return err
	case ctx.Err() != nil:
		return nil
	}
	return err
}

// session reads the committed offsets and processes batches from them
// until an error. It returns the number of transactions it committed.
func (r *runner) session(ctx context.Context, client sarama.Client) (int, error) {
	input := r.cfg.Input
	parts, err := call(ctx, func() ([]int32, error) {
		if err := client.RefreshMetadata(input); err != nil {
			return nil, err
		}
		return client.Partitions(input)
	})
	switch {
	case errors.Is(err, sarama.ErrUnknownTopicOrPartition):
		return 0, fmt.Errorf("stream: input topic %s: %w", input, err)
	case err != nil:
		return 0, retriable{fmt.Errorf("stream: partitions of %s: %w", input, err)}
	}
	offsets, err := r.committed(ctx, client, parts)
	if err != nil {
		return 0, err
	}
	src, err := openSource(ctx, client, input, offsets, r.cfg.BatchSize, r.log, &r.bg)
	if err != nil {
		return 0, err
	}
	defer src.close(&r.bg)

	commits := 0
	for {
		batch, err := src.next(ctx, r.cfg.BatchSize, r.cfg.Linger)
		if err != nil {
			return commits, err
		}
		outs, next, err := r.transform(batch)
		if err != nil {
			return commits, err
		}
		err = r.tr.Transact(ctx, r.role, r.token, func(tx *fencing.Txn) error {
			if err := tx.Write(outs...); err != nil {
				return err
			}
			if err := r.cfg.hooks.afterOutputs.call(); err != nil {
				return err
			}
			if err := tx.CommitOffsets(r.cfg.Group, map[string]map[int32]int64{input: next}); err != nil {
				return err
			}
			return r.cfg.hooks.afterOffsets.call()
		})
		if err != nil {
			if fencing.IsFenced(err) || errors.Is(err, fencing.ErrNotHeld) || errors.Is(err, fencing.ErrUnknownOutcome) || ctx.Err() != nil {
				return commits, err
			}
			return commits, retriable{fmt.Errorf("stream: transaction of %d records: %w", len(batch), err)}
		}
		commits++
		if r.cfg.OnCommit != nil {
			r.cfg.OnCommit(Commit{Records: len(batch), Outputs: len(outs), Offsets: next})
		}
	}
}

// transform runs Transform over batch and returns the outputs and, per
// partition, the offset after the batch's last record.
func (r *runner) transform(batch []*sarama.ConsumerMessage) ([]fencing.Message, map[int32]int64, error) {
	var outs []fencing.Message
	next := make(map[int32]int64)
	for _, m := range batch {
		o, err := r.cfg.Transform(Message{Topic: m.Topic, Partition: m.Partition, Offset: m.Offset, Key: m.Key, Value: m.Value, Timestamp: m.Timestamp})
		if err != nil {
			return nil, nil, fmt.Errorf("stream: transform of %s/%d at offset %d: %w", m.Topic, m.Partition, m.Offset, err)
		}
		for _, x := range o {
			if x.Topic == "" {
				if r.cfg.Output == "" {
					return nil, nil, fmt.Errorf("stream: transform of %s/%d at offset %d: an output names no topic and Config.Output is empty", m.Topic, m.Partition, m.Offset)
				}
				x.Topic = r.cfg.Output
			}
			outs = append(outs, x)
		}
		next[m.Partition] = m.Offset + 1
	}
	return outs, next, nil
}

func (h hook) call() error {
	if h == nil {
		return nil
	}
	return h()
}

// call runs fn and returns its result, or ctx.Err() as soon as ctx ends
// (sarama's calls take no ctx; an abandoned call ends on its own within
// the client's timeouts).
func call[T any](ctx context.Context, fn func() (T, error)) (T, error) {
	return ctxcall.Do(ctx, nil, fn)
}
