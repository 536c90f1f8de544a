// Package examples holds the tests of the example programs in its
// subdirectories: each test builds an example, runs it as separate
// processes against a cluster over TCP (the embedded one, or the one
// KROLE_BROKERS names), and checks what it wrote.
package examples

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"github.com/krabka/krole/rolestate"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
	"github.com/krabka/krole/internal/testcluster"
	"github.com/krabka/krole/internal/testdb"
)

// TestMain stops the database servers the tests started (package testdb).
func TestMain(m *testing.M) { os.Exit(testdb.Run(m)) }

// waitFor bounds every wait for a process or the cluster to get somewhere.
// It is a bound on liveness for a busy machine, not a measure of speed.
const waitFor = 30 * time.Second

// build builds the example in examples/<name> into a temporary directory
// of t and returns the binary's path.
func build(t *testing.T, name string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	out, err := exec.Command("go", "build", "-o", bin, "github.com/krabka/krole/examples/"+name).CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}

// env is one test's cluster.
type env struct {
	t *testing.T
	c *testcluster.Cluster
}

func newEnv(t *testing.T) *env {
	t.Helper()
	if testing.Short() {
		t.Skip("builds an example and runs it as processes; skipped with -short")
	}
	return &env{t: t, c: testcluster.Start(t, testcluster.Options{Partitions: 1})}
}

// flags are the flags that point an example at the test's cluster.
func (e *env) flags() []string {
	return []string{"--brokers", strings.Join(e.c.Config.Brokers, ","), "--topic", e.c.Config.Topic}
}

// topic creates an application topic (cleanup.policy=delete) with a name
// of its own and returns the name.
func (e *env) topic(what string, partitions int32) string {
	e.t.Helper()
	return e.c.Topic(e.t, e.c.Name(what), partitions, waitFor)
}

// producer appends records to one topic, partitioned by key the way
// sarama's default partitioner (and fencing.KeyPartition) does it.
type producer struct {
	client sarama.Client
	prod   sarama.SyncProducer
	topic  string
}

func (e *env) producer(topic string) *producer {
	e.t.Helper()
	sc := e.c.Sarama(e.t)
	sc.Producer.Partitioner = sarama.NewHashPartitioner
	client, err := sarama.NewClient(e.c.Config.Brokers, sc)
	require.NoError(e.t, err)
	prod, err := sarama.NewSyncProducerFromClient(client)
	require.NoError(e.t, err)
	e.t.Cleanup(func() {
		_ = prod.Close()
		_ = client.Close()
	})
	return &producer{client: client, prod: prod, topic: topic}
}

// send appends records numbered from to to-1: key "key-<n mod 7>", value
// "record-<n>". It may run on any goroutine.
func (p *producer) send(from, to int) error {
	var msgs []*sarama.ProducerMessage
	for n := from; n < to; n++ {
		msgs = append(msgs, &sarama.ProducerMessage{Topic: p.topic,
			Key: sarama.StringEncoder(fmt.Sprintf("key-%d", n%7)), Value: sarama.StringEncoder(fmt.Sprintf("record-%d", n))})
	}
	return p.prod.SendMessages(msgs)
}

// end returns the end offset of every partition of the topic.
func (p *producer) end() (map[int32]int64, error) {
	ps, err := p.client.Partitions(p.topic)
	if err != nil {
		return nil, err
	}
	end := map[int32]int64{}
	for _, part := range ps {
		if end[part], err = p.client.GetOffset(p.topic, part, sarama.OffsetNewest); err != nil {
			return nil, err
		}
	}
	return end, nil
}

// committed returns the group's committed offsets on topic.
func (e *env) committed(group, topic string) (map[int32]int64, error) {
	admin, err := sarama.NewClusterAdmin(e.c.Config.Brokers, e.c.Sarama(e.t))
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	res, err := admin.ListConsumerGroupOffsets(group, nil)
	out := map[int32]int64{}
	if errors.Is(err, sarama.ErrGroupIDNotFound) {
		return out, nil // nothing committed yet (kfake's answer)
	}
	if err != nil {
		return nil, err
	}
	for p, blk := range res.Blocks[topic] {
		if blk.Err == sarama.ErrNoError && blk.Offset >= 0 {
			out[p] = blk.Offset
		}
	}
	return out, nil
}

// waitCommitted waits until the group's committed offsets on topic reach
// end on every partition: every input record below end is processed, its
// outputs committed with the offsets.
func (e *env) waitCommitted(group, topic string, end map[int32]int64) {
	e.t.Helper()
	deadline := time.Now().Add(waitFor)
	var at map[int32]int64
	for time.Now().Before(deadline) {
		var err error
		at, err = e.committed(group, topic)
		require.NoError(e.t, err)
		reached := true
		for p, off := range end {
			reached = reached && (off == 0 || at[p] >= off)
		}
		if reached {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	e.t.Fatalf("group %s did not reach %v on %s; it is at %v", group, end, topic, at)
}

// readCommitted returns every record of topic as a read_committed consumer
// sees it, partition by partition in offset order, read up to a marker
// (see testcluster.Cluster.ReadAll).
func (e *env) readCommitted(topic string) []*sarama.ConsumerMessage {
	e.t.Helper()
	return e.c.ReadAll(e.t, topic, sarama.ReadCommitted, waitFor)
}

// roleState reads role's records from the role topic and folds them. It
// reads with the examples' transactional prefix, under which their leases
// are written: a lease counts only under the role's own producer id.
func (e *env) roleState(role string) rolestate.State {
	e.t.Helper()
	cfg := e.c.Config
	cfg.TxnPrefix = fencing.DefaultTxnPrefix
	tr, err := fencing.NewBrokerTransport(cfg)
	require.NoError(e.t, err)
	defer tr.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	// As a member reads it: the lease's member session joined.
	st, err := testcluster.ReadRole(ctx, tr, codec.Role(role))
	require.NoError(e.t, err)
	return st
}

// holder returns the member that holds role by its latest lease, and
// fails the test when no lease is live.
func (e *env) holder(role string) codec.Lease {
	e.t.Helper()
	l, ok := e.roleState(role).Holder(time.Now().UnixMilli())
	require.True(e.t, ok, "nobody holds %s", role)
	return l
}

// proc is an example running as a process, with its stderr lines.
type proc struct {
	member string
	cmd    *exec.Cmd
	exited chan struct{} // closed once the process has exited
	state  *os.ProcessState

	mu    sync.Mutex
	lines []string
}

// start starts bin with args as member. The process is killed when the
// test ends, if it still runs; its stderr is logged when the test failed.
func start(t *testing.T, bin, member string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(bin, append(args, "--member", member)...)
	pipe, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	p := &proc{member: member, cmd: cmd, exited: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			p.mu.Unlock()
		}
		_ = cmd.Wait()
		p.state = cmd.ProcessState
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = p.signal(syscall.SIGCONT) // in case the test stopped it
		select {
		case <-p.exited:
		default:
			_ = cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			t.Logf("stderr of %s --member %s:\n%s", filepath.Base(bin), member, strings.Join(p.stderr(), "\n"))
		}
	})
	return p
}

func (p *proc) signal(sig syscall.Signal) error { return p.cmd.Process.Signal(sig) }

// stderr returns the lines the process printed so far.
func (p *proc) stderr() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.lines...)
}

// mark returns the number of lines printed so far, for waitLine.
func (p *proc) mark() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.lines)
}

// waitLine waits for a line matching re at index from or later, and
// returns the index after it.
func (p *proc) waitLine(t *testing.T, from int, re *regexp.Regexp) int {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for time.Now().Before(deadline) {
		lines := p.stderr()
		for i := from; i < len(lines); i++ {
			if re.MatchString(lines[i]) {
				return i + 1
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("%s printed no line matching %s", p.member, re)
	return 0
}

// waitExit waits for the process to exit and returns its exit code.
func (p *proc) waitExit(t *testing.T) int {
	t.Helper()
	select {
	case <-p.exited:
		return p.state.ExitCode()
	case <-time.After(waitFor):
		t.Fatalf("%s did not exit", p.member)
		return 0
	}
}

// msg matches the slog text line of a message, e.g. msg=elected.
func msg(m string) *regexp.Regexp {
	if strings.Contains(m, " ") {
		m = `"` + m + `"`
	}
	return regexp.MustCompile(`\bmsg=` + regexp.QuoteMeta(m) + `( |$)`)
}

// waitAny waits for the first of the processes in marks to print a line
// matching re after its mark, and returns it.
func waitAny(t *testing.T, marks map[*proc]int, re *regexp.Regexp) *proc {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for time.Now().Before(deadline) {
		for p, from := range marks {
			lines := p.stderr()
			for i := from; i < len(lines); i++ {
				if re.MatchString(lines[i]) {
					return p
				}
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no process printed a line matching %s", re)
	return nil
}
