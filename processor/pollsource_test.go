package processor

import (
	"bytes"
	"context"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/testcluster"
	"github.com/krabka/krole/rolestate"
)

// pollSource is a [Source] that reads the role's partition through a
// fencing.Transport (ReadRoleRecords, folded with rolestate.Fold) every
// Poll: the Member's path for a source without a view.
//
// ReadRoleRecords skips forged lease records; when the transport counts
// them (fencing.SkipCounter, as fencing.BrokerTransport does), the source
// logs the first it sees at Warn and later ones at Debug, as the view
// does. A pollSource must not be copied after first use.
//
// Its Confirm cannot tell an open transaction from none (the transport
// does not say), so it always reports OpenProducerID -1: a member on a
// pollSource does not recognize a partition held back by another
// role's open transaction, and may take a role whose renewals that
// transaction hides.
type pollSource struct {
	// Transport is what the source reads through. Required.
	Transport fencing.Transport
	// Poll is the interval between reads for Follow. Default 1s.
	Poll time.Duration
	// Clock drives the polling. Default the system clock.
	Clock Clock
	// Log receives the report of forged lease records. Default
	// slog.Default().
	Log *slog.Logger

	forgedMu   sync.Mutex
	forgedSeen uint64 // the transport's forged-lease count last reported; 0 until the first report
}

// Role reads the role's records and folds them. It blocks for one read of
// the role's partition; when ctx ends, the read stops and Role returns its
// error.
func (s *pollSource) Role(ctx context.Context, role codec.Role) (rolestate.State, error) {
	st, err := testcluster.ReadRole(ctx, s.Transport, role)
	if err != nil {
		return rolestate.State{}, err
	}
	if sc, ok := s.Transport.(fencing.SkipCounter); ok {
		s.reportForged(ctx, role, sc.ForgedLeasesSkipped())
	}
	return st, nil
}

// Session implements [SessionSource]: it reads member's session records
// (fencing.Transport.ReadSession) and returns the latest, without a
// SeenAt (the member counts it from when it first observed it).
func (s *pollSource) Session(ctx context.Context, member codec.MemberID) (rolestate.SessionSeen, bool, error) {
	recs, err := s.Transport.ReadSession(ctx, member)
	if err != nil || len(recs) == 0 {
		return rolestate.SessionSeen{}, false, err
	}
	last := recs[len(recs)-1]
	return rolestate.SessionSeen{Offset: last.Offset, Heartbeat: *last.Record.Heartbeat}, true, nil
}

// reportForged logs forged lease records that the transport's reads
// skipped (rolestate.CheckLeaseAuthor), as the view does: the first time
// at Warn, later increases at Debug. n is the transport's count over all
// its reads (every role), so the role named is the one whose read saw the
// count rise.
func (s *pollSource) reportForged(ctx context.Context, role codec.Role, n uint64) {
	s.forgedMu.Lock()
	defer s.forgedMu.Unlock()
	if n <= s.forgedSeen {
		return
	}
	level := slog.LevelDebug
	if s.forgedSeen == 0 {
		level = slog.LevelWarn
	}
	s.forgedSeen = n
	log := s.Log
	if log == nil {
		log = slog.Default()
	}
	log.Log(ctx, level, "skipped forged lease records: written outside the role's transactions, or under a producer id that is not the role's transactional id's, by someone with Write on the role topic (see rolestate.CheckLeaseAuthor, rolestate.Authors); later ones are logged at debug",
		"role", string(role), "forged_total", n)
}

// Confirm reads the role's partition once, up to its last stable offset
// (ReadRoleRecords), and returns the folded state with OpenProducerID -1
// (see [pollSource]). It blocks for that one read; when ctx ends, the
// read stops and Confirm returns its error.
func (s *pollSource) Confirm(ctx context.Context, role codec.Role) (rolestate.Confirmed, error) {
	st, err := s.Role(ctx, role)
	if err != nil {
		return rolestate.Confirmed{}, err
	}
	return rolestate.Confirmed{State: st, OpenProducerID: -1, OpenOffset: -1}, nil
}

// Follow polls Role every Poll and sends the state when it differs from
// the last one sent. It returns at once; the polling runs on a goroutine
// of its own. Read errors are skipped (the next poll tries again). A
// reader that falls behind gets the latest state only. The channel closes
// after ctx ends, once the polling goroutine has stopped.
func (s *pollSource) Follow(ctx context.Context, role codec.Role) <-chan rolestate.State {
	clk, poll := s.Clock, s.Poll
	if clk == nil {
		clk = SystemClock()
	}
	if poll <= 0 {
		poll = time.Second
	}
	out := make(chan rolestate.State, 1)
	go func() {
		defer close(out)
		var last *rolestate.State
		for {
			if st, err := s.Role(ctx, role); err == nil && (last == nil || !reflect.DeepEqual(*last, st)) {
				last = &st
				offerState(out, st.Clone())
			}
			t := clk.NewTimer(poll)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C():
			}
		}
	}()
	return out
}

// offerState sends st on ch (capacity 1) without blocking, replacing a
// state not taken yet. Only one goroutine may send on ch.
func offerState(ch chan rolestate.State, st rolestate.State) {
	select {
	case ch <- st:
		return
	default:
	}
	select {
	case <-ch:
	default:
	}
	ch <- st
}

func TestPollSource(t *testing.T) {
	noLeaks(t)
	h := newHarness(t, "a", Settings{})
	reg := func(off int64, m codec.MemberID) fencing.RoleRecord {
		return fencing.RoleRecord{Offset: off, Key: codec.RegistrationKey(role, m),
			Record: codec.Record{Registration: &codec.Registration{Member: m}}}
	}
	one := []fencing.RoleRecord{reg(0, "a")}
	two := []fencing.RoleRecord{reg(0, "a"), reg(1, "b")}
	h.tr.On("ReadRoleRecords", mock.Anything, role).Return(one, nil).Times(3)
	h.tr.On("ReadRoleRecords", mock.Anything, role).Return(nil, errDown).Once()
	h.tr.On("ReadRoleRecords", mock.Anything, role).Return(two, nil)
	src := &pollSource{Transport: h.tr, Poll: sec, Clock: h.clk}

	st, err := src.Role(context.Background(), role)
	require.NoError(t, err)
	assert.Equal(t, []codec.MemberID{"a"}, members(st))
	c, err := src.Confirm(context.Background(), role)
	require.NoError(t, err)
	assert.Equal(t, []codec.MemberID{"a"}, members(c.State), "one read to the last stable offset")
	assert.Equal(t, int64(-1), c.OpenProducerID, "a transport source cannot see open transactions")

	ctx, cancel := context.WithCancel(context.Background())
	ch := src.Follow(ctx, role)
	assert.Equal(t, []codec.MemberID{"a"}, members(recv(t, ch)))
	h.clk.waitTimers(1)
	h.clk.Advance(sec) // the same state: nothing sent
	h.clk.waitTimers(1)
	h.clk.Advance(sec) // a failed read: skipped
	h.clk.waitTimers(1)
	h.clk.Advance(sec)
	assert.Equal(t, []codec.MemberID{"a", "b"}, members(recv(t, ch)))
	cancel()
	for range ch {
	}
}

// A member on a pollSource reports forged leases its transport's
// reads skipped, as the view does: once at Warn, later ones at Debug.
func TestPollSourceLogsForgedLeasesOnce(t *testing.T) {
	h := newHarness(t, "a", Settings{})
	h.tr.On("ReadRoleRecords", mock.Anything, role).Return([]fencing.RoleRecord(nil), nil)
	tr := &forgedCounter{Transport: h.tr}
	var buf bytes.Buffer
	src := &pollSource{Transport: tr, Clock: h.clk,
		Log: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	read := func() {
		_, err := src.Role(context.Background(), role)
		require.NoError(t, err)
	}
	read()
	assert.Empty(t, buf.String(), "nothing forged, nothing logged")
	tr.forged.Store(2)
	read()
	read() // the same count: not logged again
	tr.forged.Store(3)
	read()
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 2)
	assert.Contains(t, lines[0], "level=WARN")
	assert.Contains(t, lines[0], "skipped forged lease records")
	assert.Contains(t, lines[0], "forged_total=2")
	assert.Contains(t, lines[1], "level=DEBUG")
	assert.Contains(t, lines[1], "forged_total=3")
}
