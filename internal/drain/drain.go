// Package drain asks a running member of a group, anywhere, to hand
// every role over (`krole drain`): it finds the member's live session in
// a view of the role topic, writes the drain request beside it, and
// waits until the member's heartbeats say it drains and no live lease
// names it.
package drain

import (
	"context"
	"fmt"
	"time"

	"github.com/IBM/sarama"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/ctxcall"
	"github.com/krabka/krole/internal/explain"
	"github.com/krabka/krole/internal/liveness"
	"github.com/krabka/krole/rolestate"
	"github.com/krabka/krole/view"
)

// LiveSession returns member's latest session record once v says the
// session is live (liveness.Session: a heartbeat whose span has not run
// out); it waits while the member's clock says the latest ran out and
// the next may be on its way, and fails when the session is gone.
func LiveSession(ctx context.Context, v *view.View, member codec.MemberID) (rolestate.SessionSeen, error) {
	for {
		se, ok, err := v.SessionSettled(ctx, member)
		if err != nil {
			return se, err
		}
		if !ok {
			return se, fmt.Errorf("member %s has no live session: no heartbeat of it is on the topic (is it running?)", member)
		}
		sv := liveness.Session(&se, time.Now())
		switch {
		case sv.Gone && se.Heartbeat.End:
			return se, fmt.Errorf("member %s has no live session: its session ended (it stopped)", member)
		case sv.Gone:
			return se, fmt.Errorf("member %s has no live session: its latest heartbeat ran out at %s by its clock (is it running?)", member, sv.RanOut.Format(time.RFC3339))
		case !sv.Pending:
			return se, nil
		}
		if err := ctxcall.Sleep(ctx, 25*time.Millisecond); err != nil {
			return se, err
		}
	}
}

// Write appends req under its member's drain key, in the partition of
// the member's session records, and returns its offset. It is a plain
// append, as a registration is: no transaction and no producer id, so it
// needs Write on the topic and nothing else; a copy written twice by a
// retry is the same request.
func Write(ctx context.Context, cfg fencing.Config, req codec.DrainRequest) (int64, error) {
	val, err := codec.EncodeRecord(codec.Record{Drain: &req})
	if err != nil {
		return -1, err
	}
	sc, err := cfg.Sarama()
	if err != nil {
		return -1, err
	}
	fail := func(err error) (int64, error) {
		err = fmt.Errorf("writing the drain request of %s to topic %s: %w", req.Member, cfg.Topic, err)
		if ae := fencing.AuthorizationOf(err, fencing.AuthorizationError{Operation: "WRITE", Resource: fencing.ResourceTopic, Name: cfg.Topic}); ae != nil {
			return -1, ae
		}
		return -1, explain.RunError(cfg, err)
	}
	client, err := ctxcall.Do(ctx, nil, func() (sarama.Client, error) { return sarama.NewClient(cfg.Brokers, sc) })
	if err != nil {
		return fail(err)
	}
	defer client.Close()
	parts, err := ctxcall.Do(ctx, nil, func() ([]int32, error) { return client.Partitions(cfg.Topic) })
	if err != nil {
		return fail(err)
	}
	key := codec.DrainKey(req.Member)
	msg := &sarama.ProducerMessage{Topic: cfg.Topic, Key: sarama.ByteEncoder(key.Encode()), Value: sarama.ByteEncoder(val),
		Partition: codec.KeyPartition(key, int32(len(parts)))}
	return ctxcall.Do(ctx, nil, func() (int64, error) {
		p, err := sarama.NewSyncProducerFromClient(client)
		if err != nil {
			return fail(err)
		}
		defer p.Close()
		_, off, err := p.SendMessage(msg)
		if err != nil {
			return fail(err)
		}
		return off, nil
	})
}

// Await waits until v shows that member drained the session incarnation
// nonce on the request at offset off: its heartbeat says it drains (or
// that incarnation's session ended after the request), and no live lease
// names it. It also returns, for an error, how far the member got:
// whether it drains, and the roles whose live lease names it (-1: not
// counted).
func Await(ctx context.Context, v *view.View, member codec.MemberID, nonce string, off int64) (draining bool, held int, err error) {
	held = -1
	for {
		se, ok, err := v.Session(ctx, member)
		if err != nil {
			return draining, held, err
		}
		if ok && se.Heartbeat.Session.Nonce == nonce {
			// A record after the request (the same partition: offsets
			// compare) that says it drains, or that it left.
			draining = draining || se.Offset > off && (se.Heartbeat.Drain || se.Heartbeat.End)
		} else if ok {
			return draining, held, fmt.Errorf("member %s started a new session before it drained: run krole drain again to drain the new one", member)
		}
		if draining {
			if held, err = HeldBy(ctx, v, member); err != nil {
				return draining, held, err
			}
			if held == 0 {
				return true, 0, nil
			}
		}
		if err := ctxcall.Sleep(ctx, 50*time.Millisecond); err != nil {
			return draining, held, err
		}
	}
}

// Progress says how far a drain got: whether the member's heartbeats say
// it drains, and how many roles it still holds.
func Progress(draining bool, held int) string {
	switch {
	case !draining:
		return "its heartbeats do not say it drains yet"
	case held > 0:
		return fmt.Sprintf("it drains, and still holds %d roles", held)
	}
	return "it drains"
}

// HeldBy counts the roles whose lease, live as v judges it, names member.
func HeldBy(ctx context.Context, v *view.View, member codec.MemberID) (int, error) {
	roles, err := v.Roles(ctx)
	if err != nil {
		return -1, err
	}
	holders, err := v.Holders(ctx, roles, time.Time{})
	if err != nil {
		return -1, err
	}
	n := 0
	for _, m := range holders {
		if m == member {
			n++
		}
	}
	return n, nil
}
