package cli

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/internal/testcluster"
	"github.com/krabka/krole/processor"
)

// TestReadmeTourIsWhatKrolePrints runs the README's one-screen tour (issue
// 19, 6: "the tour's sample output must be what a user actually sees") and
// checks each line of its sample output against what krole printed:
// node-1's terminal, `krole table` and `krole describe controller` while
// node-2 queues behind it, and node-2's terminal after Ctrl-C on node-1.
// The same run checks docs/TOUR.md's tour by hand up to the handover: its
// node-1 and node-2 terminals, its table and describe, node-1's lines
// when Ctrl-C stops it and node-2's when it takes over (the failover
// after it needs a SIGKILLed process). The commands are the README's
// own, with their default timings. Producer ids, epochs, pids and times
// left differ from run to run and are compared by shape; column widths
// are not compared.
func TestReadmeTourIsWhatKrolePrints(t *testing.T) {
	t.Parallel()
	tour := readmeSection(t, "## A one-screen tour")
	cmds := codeBlocks(tour, "sh")
	require.Len(t, cmds, 1, "the tour's commands: one sh block")
	members := strings.Split(strings.TrimSpace(cmds[0]), "\n")
	require.Len(t, members, 2, "the tour starts two members")
	samples := codeBlocks(tour, "text")
	require.Len(t, samples, 3, "node-1's terminal, table and describe, node-2's terminal after Ctrl-C")
	_, byHand, ok := strings.Cut(readDoc(t, "docs/TOUR.md"), "\n## The same steps by hand\n")
	require.True(t, ok, "docs/TOUR.md has no section 'The same steps by hand'")
	long := codeBlocks(byHand, "text")
	require.GreaterOrEqual(t, len(long), 6, "docs/TOUR.md: dev, node-1, node-2, table and describe, node-1's Ctrl-C, node-2's takeover")
	longCmds := codeBlocks(byHand, "sh")
	require.GreaterOrEqual(t, len(longCmds), 3)
	for i, m := range members {
		assert.Equal(t, "./"+m, strings.TrimSpace(longCmds[i+1]), "docs/TOUR.md runs the README's members")
	}

	c := testcluster.Start(t, testcluster.Options{Partitions: 1})
	n1 := startBackground(t, tourArgs(t, c, members[0])...)
	var out1 []string
	for !strings.Contains(strings.Join(out1, "\n"), "node-1 works under token") {
		out1 = append(out1, n1.line("node-1's command prints its line"))
	}
	// krole's own line comes on the other stream, maybe after CMD's.
	awaitText(t, n1.stderr, "krole run: started CMD", "node-1 says it started CMD")
	n2 := startBackground(t, tourArgs(t, c, members[1])...)
	require.Eventually(t, func() bool {
		_, rows := tableJSON(t, c, "controller")
		return len(rows) == 1 && len(rows[0]["candidates"].([]any)) == 2
	}, time.Minute, 100*time.Millisecond, "node-2 queues behind node-1")
	awaitText(t, n2.stderr, "krole run: holder of controller is now node-1", "node-2 says who holds the role")

	// node-1's terminal: every line shown, in order within its stream; the
	// lines krole printed up to starting CMD are all shown.
	err1 := lines(n1.stderr.String())
	for i, l := range err1 {
		if strings.Contains(l, "started CMD") {
			err1 = err1[:i+1]
			break
		}
	}
	for doc, sample := range map[string]string{"README.md": samples[0], "docs/TOUR.md": long[1]} {
		assertTourLines(t, c, doc+", node-1's terminal", sample, out1, err1)
		assert.Equal(t, len(err1), countFrom(t, c, sample, err1),
			"%s shows every line node-1's krole run printed up to starting CMD:\n%s", doc, strings.Join(err1, "\n"))
	}
	// node-2's terminal while it queues: all it printed.
	err2 := lines(n2.stderr.String())
	assertTourLines(t, c, "docs/TOUR.md, node-2's terminal", long[2], nil, err2)
	assert.Equal(t, len(err2), countFrom(t, c, long[2], err2), "docs/TOUR.md shows every line node-2 printed while it queues")

	// The third terminal: each command's whole output. A one-shot table
	// or describe counts the lease from when it read it, so the times
	// left shown are about the whole lease (the README's old 7.9s, a
	// lease's deadline counted down, could not be reproduced).
	for doc, sample := range map[string]string{"README.md": samples[1], "docs/TOUR.md": long[3]} {
		lefts := regexp.MustCompile(`(?m)^controller .*\s(\d+(?:\.\d)?s)(?: left|\s+node-1, node-2)$`).FindAllStringSubmatch(sample, -1)
		require.Len(t, lefts, 2, "%s: LEFT in table's row, and describe's time left", doc)
		for _, m := range lefts {
			left, err := time.ParseDuration(m[1])
			require.NoError(t, err)
			assert.Greater(t, left, processor.DefaultLeaseDuration-time.Second, "%s shows %s left on a lease read a moment ago", doc, m[1])
			assert.LessOrEqual(t, left, processor.DefaultLeaseDuration, doc)
		}
		for _, step := range strings.Split(strings.TrimPrefix(sample, "$ "), "\n$ ") {
			cmd, want, _ := strings.Cut(step, "\n")
			args := strings.Fields(cmd)
			require.Contains(t, []string{"krole", "./krole"}, args[0], "%s: %q", doc, cmd)
			r := runOn(t, c, args[1:]...)
			requireOK(t, r)
			assert.Equal(t, normTour(c, lines(want)), normTour(c, lines(r.Stdout)), "%s: $ %s", doc, cmd)
		}
	}

	// Ctrl-C on node-1: it stops CMD and resigns; node-2 takes over.
	assert.Equal(t, ExitOK, n1.stop(), "stderr: %s", n1.stderr.String())
	stopped := lines(n1.stderr.String())[len(err1):]
	assertTourLines(t, c, "docs/TOUR.md, node-1's Ctrl-C", long[4], nil, stopped)
	assert.Equal(t, len(stopped), countFrom(t, c, long[4], stopped), "docs/TOUR.md shows every line node-1 printed when it stopped")
	var out2 []string
	for !strings.Contains(strings.Join(out2, "\n"), "node-2 works under token") {
		out2 = append(out2, n2.line("node-2's command prints its line"))
	}
	awaitText(t, n2.stderr, "krole run: started CMD", "node-2 says it started CMD")
	took := lines(n2.stderr.String())[len(err2):]
	for doc, sample := range map[string]string{"README.md": samples[2], "docs/TOUR.md": long[5]} {
		assertTourLines(t, c, doc+", node-2's terminal", sample, out2, took)
	}
	assert.Equal(t, ExitOK, n2.stop(), "stderr: %s", n2.stderr.String())
}

// tourArgs turns a README line `krole run ... -- sh -c '...'` into
// arguments for c.
func tourArgs(t *testing.T, c *testcluster.Cluster, line string) []string {
	t.Helper()
	head, script, ok := strings.Cut(line, " -- sh -c '")
	require.True(t, ok, "%q", line)
	require.True(t, strings.HasSuffix(script, "'"), "%q", line)
	args := strings.Fields(head)
	require.Equal(t, "krole", args[0], "%q", line)
	return append(append(clusterFlags(c), args[1:]...), "--", "sh", "-c", strings.TrimSuffix(script, "'"))
}

// assertTourLines checks that every line of a sample is one krole printed
// (on stdout or stderr), in the order it printed them on that stream.
func assertTourLines(t *testing.T, c *testcluster.Cluster, what, sample string, stdout, stderr []string) {
	t.Helper()
	out, errs := normTour(c, stdout), normTour(c, stderr)
	io, ie := 0, 0
	for _, want := range normTour(c, lines(sample)) {
		if i := indexFrom(errs, ie, want); i >= 0 {
			ie = i + 1
		} else if i := indexFrom(out, io, want); i >= 0 {
			io = i + 1
		} else {
			t.Errorf("%s: the sample shows %q, which krole did not print (in that order); it printed:\n%s\n%s",
				what, want, strings.Join(errs, "\n"), strings.Join(out, "\n"))
		}
	}
}

// countFrom counts the lines of printed that the sample shows.
func countFrom(t *testing.T, c *testcluster.Cluster, sample string, printed []string) int {
	t.Helper()
	n := 0
	shown := normTour(c, lines(sample))
	for _, l := range normTour(c, printed) {
		if indexFrom(shown, 0, l) >= 0 {
			n++
		}
	}
	return n
}

func indexFrom(ls []string, from int, s string) int {
	for i := from; i < len(ls); i++ {
		if ls[i] == s {
			return i
		}
	}
	return -1
}

var (
	tourToken = regexp.MustCompile(`\b\d+/\d+\b`)
	tourPid   = regexp.MustCompile(`\(pid \d+\)`)
	tourFence = regexp.MustCompile(`\bfence \d+\b`)
	tourLeft  = regexp.MustCompile(`\b\d+(\.\d)?s\b( left)?$`)
)

// normTour puts what differs from run to run in a line of the tour (the
// token, the fencing number, a pid, the time left at its end, column
// widths, the test cluster's transactional-id prefix) into one form.
func normTour(c *testcluster.Cluster, ls []string) []string {
	var out []string
	for _, l := range ls {
		l = strings.ReplaceAll(l, c.Config.TxnPrefix+"controller", "krole.controller")
		l = tourToken.ReplaceAllString(l, "PID/EPOCH")
		l = tourPid.ReplaceAllString(l, "(pid N)")
		l = tourFence.ReplaceAllString(l, "fence N")
		f := strings.Fields(l)
		if len(f) > 4 && f[0] == "controller" && f[1] == "node-1" { // a row of krole table: LEFT is its fifth column
			f[4] = tourLeft.ReplaceAllString(f[4], "LEFT")
		}
		l = tourLeft.ReplaceAllString(strings.Join(f, " "), "LEFT${2}")
		out = append(out, l)
	}
	return out
}

// lines splits s into its lines, without the last newline.
func lines(s string) []string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// readmeSection returns the README's section under heading, up to the
// next heading of its level.
func readmeSection(t *testing.T, heading string) string {
	t.Helper()
	_, s, ok := strings.Cut(readDoc(t, "README.md"), "\n"+heading+"\n")
	require.True(t, ok, "README.md has no %q", heading)
	s, _, _ = strings.Cut(s, "\n## ")
	return s
}

// codeBlocks returns the fenced code blocks of md in language lang.
func codeBlocks(md, lang string) []string {
	var out []string
	for _, part := range strings.Split(md, "```"+lang+"\n")[1:] {
		block, _, _ := strings.Cut(part, "```")
		out = append(out, strings.TrimSuffix(block, "\n"))
	}
	return out
}
