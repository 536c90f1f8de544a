package demo

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/krabka/krole/codec"
	"github.com/krabka/krole/fencing"
)

// The commands the demo prints name only the connection flags that differ
// from krole's defaults.
func TestDemoCommandLines(t *testing.T) {
	d := &demo{invoke: "krole", role: roleName, lease: 3 * time.Second,
		topic: fencing.DefaultTopic, prefix: fencing.DefaultTxnPrefix,
		brokers: "127.0.0.1:9092", opts: Options{DefaultBrokers: "127.0.0.1:9092"}}
	assert.Equal(t, "krole table --watch", d.command("table --watch"))
	assert.Equal(t, "krole run controller --member node-4 --lease-duration 3s -- sh -c '"+memberScript+"'", d.runCommandLine("node-4"))
	assert.Equal(t, "krole demo --keep", d.invokeDemoKeep())

	d.invoke, d.brokers, d.topic, d.prefix = "go run .", "127.0.0.1:40001", "t", "p."
	assert.Equal(t, "go run . describe controller -b 127.0.0.1:40001 --topic t --txn-prefix p.", d.command("describe controller"))
	assert.Equal(t, "krole run controller --member node-N --lease-duration 3s -b 127.0.0.1:40001 --topic t --txn-prefix p. -- sh -c '"+memberScript+"'",
		d.runCommandLineAs("krole", "node-N"))
}

// A member's output comes out line by line, each line prefixed, with an
// unfinished last line on flush.
func TestDemoMemberOutput(t *testing.T) {
	var b strings.Builder
	p := &prefixWriter{out: &lockedOut{w: &b}, prefix: "  [node-1] "}
	assert.Equal(t, "", p.lastLine())
	_, _ = p.Write([]byte("krole run: elected controller\r\nnode-1 is doing the controller work under"))
	assert.Equal(t, "  [node-1] krole run: elected controller\n", b.String())
	assert.False(t, p.seen(workLine))
	_, _ = p.Write([]byte(" token 1/0\nkrole: cannot reach the brokers"))
	p.flush()
	assert.Equal(t, "  [node-1] krole run: elected controller\n"+
		"  [node-1] node-1 is doing the controller work under token 1/0\n"+
		"  [node-1] krole: cannot reach the brokers\n", b.String())
	assert.True(t, p.seen(workLine))
	assert.Equal(t, ": cannot reach the brokers", p.lastLine())
}

func TestDemoRoundAndNames(t *testing.T) {
	assert.Equal(t, 2930*time.Millisecond, round(2934567*time.Microsecond))
	assert.Equal(t, 12*time.Millisecond, round(12345*time.Microsecond))
	assert.Equal(t, 6700*time.Microsecond, round(6712*time.Microsecond))
	assert.Equal(t, "no one", joinNames(nil))
	assert.Equal(t, "node-1", joinNames([]codec.MemberID{"node-1"}))
	assert.Equal(t, "node-1, node-2 and node-3", joinNames(memberNames))
}
