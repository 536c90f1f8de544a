package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/krabka/krole/internal/liveness"
)

// The docs follow the commands: docs/CLI.md has a section for every
// command, and the README's table of commands names each one.
func TestDocsNameEveryCommand(t *testing.T) {
	t.Parallel()
	cli := readDoc(t, "docs/CLI.md")
	readme := readDoc(t, "README.md")
	for _, cmd := range commands() {
		if cmd.Hidden || cmd.Name == "version" {
			continue
		}
		// A section in docs/CLI.md, or a page of its own (docs/CHECK.md
		// for krole check) that docs/CLI.md links to.
		page := strings.ToUpper(cmd.Name) + ".md"
		if _, err := os.Stat(filepath.Join(repoRoot(t), "docs", page)); err == nil {
			assert.Contains(t, cli, "]("+page, "docs/CLI.md does not link to docs/%s, the page of krole %s", page, cmd.Name)
		} else {
			assert.Contains(t, cli, "\n### krole "+cmd.Name+"\n", "docs/CLI.md has no section for krole %s", cmd.Name)
		}
		assert.Contains(t, readme, "`krole "+cmd.Name, "the README's table of commands does not name krole %s", cmd.Name)
	}
}

// The README stays short enough to take in: the rest is under docs/.
func TestReadmeIsShort(t *testing.T) {
	t.Parallel()
	lines := strings.Count(readDoc(t, "README.md"), "\n")
	assert.LessOrEqual(t, lines, 300, "README.md has %d lines; move detail to docs/", lines)
}

// Every relative link of README.md and docs/*.md names a file that exists,
// and every #anchor a heading of that file.
func TestDocsLinksResolve(t *testing.T) {
	t.Parallel()
	pages, err := filepath.Glob(filepath.Join(repoRoot(t), "docs", "*.md"))
	require.NoError(t, err)
	pages = append(pages, filepath.Join(repoRoot(t), "README.md"))
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, page := range pages {
		text, err := os.ReadFile(page)
		require.NoError(t, err)
		rel, _ := filepath.Rel(repoRoot(t), page)
		for _, m := range link.FindAllStringSubmatch(stripCode(string(text)), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			path := page
			if file != "" {
				path = filepath.Join(filepath.Dir(page), file)
			}
			_, err := os.Stat(path)
			if !assert.NoError(t, err, "%s links to %s, which does not exist", rel, target) || anchor == "" {
				continue
			}
			if !strings.HasSuffix(path, ".md") {
				continue
			}
			b, err := os.ReadFile(path)
			require.NoError(t, err)
			assert.Contains(t, anchors(string(b)), anchor, "%s links to %s: no such heading", rel, target)
		}
	}
}

// anchors returns the GitHub anchors of the headings of a Markdown page.
func anchors(md string) []string {
	var out []string
	for _, line := range strings.Split(stripCode(md), "\n") {
		h, ok := strings.CutPrefix(line, "#")
		if !ok {
			continue
		}
		h = strings.TrimSpace(strings.TrimLeft(h, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(h) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
				b.WriteRune(r)
			}
		}
		out = append(out, b.String())
	}
	return out
}

// stripCode drops fenced code blocks, whose lines are neither headings
// nor links.
func stripCode(md string) string {
	var b strings.Builder
	in := false
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(line, "```") {
			in = !in
			continue
		}
		if !in {
			b.WriteString(line)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	return root
}

func readDoc(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), name))
	require.NoError(t, err)
	return string(b)
}

// The bound on how long a one-shot `krole leader` can name a dead holder,
// and the clock assumption it rests on, are stated where a
// script's author reads them: `krole leader --help`, the leader section of
// docs/CLI.md and docs/GUARANTEES.md; in step with liveness.ClockTolerance.
func TestLeaderBoundIsStated(t *testing.T) {
	t.Parallel()
	tol := liveness.ClockTolerance
	r := run(t, "leader", "--help")
	requireOK(t, r)
	cli := readDoc(t, "docs/CLI.md")
	_, cli, ok := strings.Cut(cli, "\n### krole leader\n")
	require.True(t, ok, "docs/CLI.md has no section for krole leader")
	cli, _, _ = strings.Cut(cli, "\n### ")
	for what, text := range map[string]string{"krole leader --help": r.Stdout, "docs/CLI.md, krole leader": cli} {
		text = strings.Join(strings.Fields(text), " ")
		for _, s := range []string{
			fmt.Sprintf("ran out more than %v ago by its own clock", tol),
			"exits 1 if none comes",
			fmt.Sprintf("within %v of each other", tol),
			fmt.Sprintf("never named more than %v after its lease ran out", 2*tol),
		} {
			assert.Contains(t, text, s, what)
		}
	}
	g := strings.Join(strings.Fields(readDoc(t, "docs/GUARANTEES.md")), " ")
	assert.Contains(t, g, fmt.Sprintf("ran out more than %v ago by the holder's own clock", tol))
	assert.Contains(t, g, fmt.Sprintf("the two clocks within %v of each other, that is at most %v after the lease really ran out", tol, 2*tol))
}

// The README says how to install krole with one command, names the two
// set-up commands, and shows each command beside its etcdctl and consul
// equivalent.
func TestReadmeInstallAndEquivalents(t *testing.T) {
	t.Parallel()
	readme := readDoc(t, "README.md")
	mod, _, _ := strings.Cut(readDoc(t, "go.mod"), "\n")
	mod, ok := strings.CutPrefix(mod, "module ")
	require.True(t, ok, "go.mod's first line: %q", mod)
	assert.Contains(t, readme, "go install "+mod+"@latest", "the install line names the module of go.mod")
	// go install MODULE@VERSION refuses a module whose go.mod replaces or
	// excludes modules, and installs the main package at its root.
	assert.NotRegexp(t, `(?m)^\s*(replace|exclude)\b`, readDoc(t, "go.mod"), "go install ...@latest would refuse this go.mod")
	assert.Regexp(t, `(?m)^package main$`, readDoc(t, "main.go"), "the module's root is the krole command")
	for _, h := range []string{"## Install", "## Set up", "## A one-screen tour", "## The commands at a glance"} {
		assert.Contains(t, readme, "\n"+h+"\n")
	}
	setUp := readmeSection(t, "## Set up")
	assert.Contains(t, setUp, "krole dev")
	assert.Contains(t, setUp, "krole init")
	glance := readmeSection(t, "## The commands at a glance")
	assert.Contains(t, glance, "| krole | what it does | etcdctl | consul |")
	// Everything else is under docs/, one link away.
	for _, page := range []string{"TOUR", "CLI", "LIBRARY", "OPERATING", "GUARANTEES", "BENCHMARKS"} {
		assert.Contains(t, readme, "](docs/"+page+".md)", "the README links to docs/%s.md", page)
	}
	for _, row := range []string{
		"| `krole run ROLE -- CMD` |", "`etcdctl lock NAME CMD`", "`consul lock PREFIX CMD`",
		"| `krole run ROLE --value V` |", "`etcdctl elect NAME V`",
		"| `krole leader ROLE` |", "`etcdctl elect -l NAME`",
	} {
		assert.Contains(t, glance, row)
	}
}
