package examples

import (
	"database/sql"
	"fmt"
	"io"
	"net"
	"net/url"
	"regexp"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/internal/testdb"
)

// TestPgJob runs examples/pgjob as two processes of one role against
// PostgreSQL. It pauses the holder (SIGSTOP) while its next write waits to
// begin, until the other has taken the role and written a row, then
// resumes it: PostgreSQL must refuse the paused holder's write, which it
// logs, and in commit order no row of its fencing number follows one of
// the newer number (pgjobOrder). SIGTERM makes both exit 0.
func TestPgJob(t *testing.T) {
	r := runPgJob(t, false)
	refused := r.a.waitLine(t, r.aResumed, regexp.MustCompile(`\bmsg="refused: a newer holding has written" fence=`+fmt.Sprint(r.aFence)+` .*has written under `+fmt.Sprint(r.bFence)))
	for _, l := range r.a.stderr()[r.aResumed:refused] {
		require.NotRegexp(t, msg("wrote"), l, "a wrote before its refusal")
	}
	rows := r.stop(t)
	t.Logf("rows in commit order (n:member@fence): %v", rows)
	assert.Empty(t, pgjobOrder(rows), "rows in commit order: %v", rows)
	var a, b int
	for _, row := range rows {
		switch row.fence {
		case r.aFence:
			a++
			assert.Equal(t, "a", row.member)
		case r.bFence:
			b++
			assert.Equal(t, "b", row.member)
		}
	}
	assert.Positive(t, a, "no row of a's holding (fence %d)", r.aFence)
	assert.Positive(t, b, "no row of b's holding (fence %d)", r.bFence)
}

// TestPgJobUnfenced is TestPgJob's scenario with --unfenced: the resumed
// holder's write commits after the newer holding's rows, and pgjobOrder
// must report it. It shows that TestPgJob's check catches a write the
// fence did not refuse.
func TestPgJobUnfenced(t *testing.T) {
	r := runPgJob(t, true)
	r.a.waitLine(t, r.aResumed, regexp.MustCompile(`\bmsg=wrote n=\d+ fence=`+fmt.Sprint(r.aFence)+`( |$)`))
	rows := r.stop(t)
	vs := pgjobOrder(rows)
	t.Logf("rows in commit order (n:member@fence): %v; caught: %q", rows, vs)
	require.NotEmpty(t, vs, "rows in commit order: %v", rows)
	assert.Contains(t, vs[0], fmt.Sprintf("of a under fence %d", r.aFence))
	assert.Contains(t, vs[0], fmt.Sprintf("under fence %d", r.bFence))
}

// pgjobRun is the scenario of runPgJob, up to a's resumption.
type pgjobRun struct {
	db             *sql.DB
	role           string
	a, b           *proc
	aFence, bFence int64
	aResumed       int // a's stderr mark at its SIGCONT
}

// runPgJob starts a (holder) and b (candidate), a through a pgProxy;
// holds a's next write in the proxy between two of its transactions,
// pauses a, waits until b has taken the role and written a row, releases
// the write and resumes a.
func runPgJob(t *testing.T, unfenced bool) *pgjobRun {
	e := newEnv(t)
	srv := testdb.Postgres(t)
	r := &pgjobRun{db: srv.Open(t), role: e.c.Name("job")}
	bin := build(t, "pgjob")
	proxy := newPgProxy(t, srv.DSN)
	args := append(e.flags(), "--role", r.role, "--interval", "20ms", "--lease-duration", "1s")
	if unfenced {
		args = append(args, "--unfenced")
	}
	r.a = start(t, bin, "a", append(args, "--dsn", proxy.dsn("pgjob-a"))...)
	r.aFence = fenceOf(t, r.a, r.a.waitLine(t, 0, msg("writing rows")))
	r.waitRow(t, r.aFence)
	r.b = start(t, bin, "b", append(args, "--dsn", srv.DSN)...)
	r.b.waitLine(t, 0, msg("registered"))

	r.holdBetweenTransactions(t, proxy, "pgjob-a")
	require.NoError(t, r.a.signal(syscall.SIGSTOP))
	r.bFence = fenceOf(t, r.b, r.b.waitLine(t, 0, msg("writing rows")))
	require.Greater(t, r.bFence, r.aFence, "b's fencing number")
	r.waitRow(t, r.bFence)
	proxy.release()
	r.aResumed = r.a.mark()
	require.NoError(t, r.a.signal(syscall.SIGCONT))
	return r
}

// holdBetweenTransactions holds app's traffic in the proxy until its next
// write is waiting there while it has no transaction open in the server:
// then it holds no lock that the next holder's write would wait for, and
// its write goes on when the proxy releases it.
func (r *pgjobRun) holdBetweenTransactions(t *testing.T, p *pgProxy, app string) {
	t.Helper()
	for range 50 {
		p.hold()
		require.Eventually(t, p.waiting, waitFor, time.Millisecond, "%s sent nothing to hold", app)
		var open int
		require.NoError(t, r.db.QueryRow("SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND xact_start IS NOT NULL", app).Scan(&open))
		if open == 0 {
			return
		}
		p.release() // held inside a transaction: let it end
		time.Sleep(7 * time.Millisecond)
	}
	t.Fatalf("%s's traffic was held inside a transaction 50 times", app)
}

// waitRow waits until a row of fence is committed.
func (r *pgjobRun) waitRow(t *testing.T, fence int64) {
	t.Helper()
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, r.db.QueryRow("SELECT count(*) FROM pgjob_rows WHERE role = $1 AND fence = $2", r.role, fence).Scan(&n))
		return n > 0
	}, waitFor, 10*time.Millisecond, "no row under fence %d", fence)
}

// stop ends both processes (SIGTERM: exit 0) and returns the role's rows
// in commit order, checking that they are numbered 1, 2, 3, ...
func (r *pgjobRun) stop(t *testing.T) []pgRow {
	t.Helper()
	require.NoError(t, r.a.signal(syscall.SIGTERM))
	require.NoError(t, r.b.signal(syscall.SIGTERM))
	assert.Equal(t, 0, r.a.waitExit(t))
	assert.Equal(t, 0, r.b.waitExit(t))
	rs, err := r.db.Query("SELECT n, fence, member FROM pgjob_rows WHERE role = $1 ORDER BY n", r.role)
	require.NoError(t, err)
	defer rs.Close()
	var rows []pgRow
	for rs.Next() {
		var row pgRow
		require.NoError(t, rs.Scan(&row.n, &row.fence, &row.member))
		require.Equal(t, int64(len(rows)+1), row.n, "the rows' numbers have a gap")
		rows = append(rows, row)
	}
	require.NoError(t, rs.Err())
	return rows
}

// pgRow is a row of pgjob_rows.
type pgRow struct {
	n      int64 // commit order
	fence  int64
	member string
}

func (r pgRow) String() string { return fmt.Sprintf("%d:%s@%d", r.n, r.member, r.fence) }

// pgjobOrder returns a line for each row, in commit order, whose fencing
// number is smaller than that of a row committed before it: a write of an
// older holding committed after a newer holding had written, which the
// fence exists to refuse.
//
// Commit order is the rows' numbers n: each transaction takes its number
// from a counter row it increments (pgjob_next), and holds that row's
// lock until it ends, so of two committed rows the one with the smaller
// number committed first. That holds with or without the fence, which is
// what lets this check catch an unfenced write. (Commit timestamps would
// do too, but track_commit_timestamp needs a server restart, which
// testdb's shared server does not offer.)
func pgjobOrder(rows []pgRow) []string {
	var out []string
	var newest pgRow
	for i, row := range rows {
		if i > 0 && row.fence < newest.fence {
			out = append(out, fmt.Sprintf("row %d of %s under fence %d committed after row %d of %s under fence %d",
				row.n, row.member, row.fence, newest.n, newest.member, newest.fence))
		}
		if i == 0 || row.fence > newest.fence {
			newest = row
		}
	}
	return out
}

// TestPgJobOrder: the check reports a row of an older fence after a newer
// one, and nothing else.
func TestPgJobOrder(t *testing.T) {
	rows := []pgRow{{1, 5, "a"}, {2, 5, "a"}, {3, 9, "b"}, {4, 9, "b"}, {5, 5, "a"}, {6, 12, "a"}}
	assert.Equal(t, []string{"row 5 of a under fence 5 committed after row 3 of b under fence 9"}, pgjobOrder(rows))
	assert.Empty(t, pgjobOrder(append(rows[:4:4], pgRow{5, 12, "a"})))
}

var fenceAttr = regexp.MustCompile(`\bfence=(\d+)`)

// fenceOf returns the fence= value of the line before mark.
func fenceOf(t *testing.T, p *proc, mark int) int64 {
	t.Helper()
	line := p.stderr()[mark-1]
	m := fenceAttr.FindStringSubmatch(line)
	require.NotNil(t, m, "no fence in %q", line)
	var f int64
	_, err := fmt.Sscan(m[1], &f)
	require.NoError(t, err)
	return f
}

// pgProxy forwards TCP connections to a PostgreSQL server, and can hold
// what its clients send: a statement held waits in the proxy, not in the
// server, so the client holds no lock for it while it waits.
type pgProxy struct {
	url *url.URL // the server's DSN
	ln  net.Listener

	mu      sync.Mutex
	cond    *sync.Cond
	held    bool
	pending int // reads from clients held back
}

func newPgProxy(t *testing.T, dsn string) *pgProxy {
	t.Helper()
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &pgProxy{url: u, ln: ln}
	p.cond = sync.NewCond(&p.mu)
	var wg sync.WaitGroup
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		p.release()
		p.mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		p.mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", u.Host)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			conns = append(conns, c, s)
			p.mu.Unlock()
			wg.Go(func() { io.Copy(c, s); c.Close() })
			wg.Go(func() { p.forward(s, c); s.Close() })
		}
	})
	return p
}

// forward copies what the client sends to the server, waiting while the
// proxy holds.
func (p *pgProxy) forward(server, client net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := client.Read(buf)
		if n > 0 {
			p.mu.Lock()
			if p.held {
				p.pending++
				for p.held {
					p.cond.Wait()
				}
				p.pending--
			}
			p.mu.Unlock()
			if _, err := server.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// dsn is the connection string through the proxy, naming the client
// app (pg_stat_activity.application_name).
func (p *pgProxy) dsn(app string) string {
	u := *p.url
	u.Host = p.ln.Addr().String()
	q := u.Query()
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	return u.String()
}

func (p *pgProxy) hold() {
	p.mu.Lock()
	p.held = true
	p.mu.Unlock()
}

func (p *pgProxy) release() {
	p.mu.Lock()
	p.held = false
	p.cond.Broadcast()
	p.mu.Unlock()
}

// waiting reports whether something a client sent is held.
func (p *pgProxy) waiting() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pending > 0
}
