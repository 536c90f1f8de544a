package examples

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReadmeExamples checks that the Go code of docs/LIBRARY.md (the
// library guide) is the code of the examples in election/example_test.go,
// which go test compiles, and that its complete program builds as it
// stands.
func TestReadmeExamples(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the library guide's program; skipped with -short")
	}
	readme := read(t, "../docs/LIBRARY.md")
	src := read(t, "../election/example_test.go")
	var blocks []string
	for _, m := range regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(readme, -1) {
		blocks = append(blocks, m[1])
	}

	// The etcd-shaped program: election's Example, as a main.
	etcd := exampleBody(t, read(t, "../election/example_program_test.go"), "Example")
	etcdProgram := ""
	for _, b := range blocks {
		if strings.Contains(b, etcd) {
			etcdProgram = b
		}
	}
	require.NotEmpty(t, etcdProgram, "no Go block of docs/LIBRARY.md holds the body of election's Example; copy it from election/example_program_test.go:\n%s", etcd)
	buildProgram(t, etcdProgram)

	run := exampleBody(t, src, "ExampleSession_Run")
	program := ""
	for _, b := range blocks {
		if strings.Contains(b, run) {
			program = b
		}
	}
	require.NotEmpty(t, program, "no Go block of docs/LIBRARY.md holds the body of ExampleSession_Run; copy it from election/example_test.go:\n%s", run)
	require.True(t, strings.HasPrefix(program, "package main\n"), "docs/LIBRARY.md's copy of ExampleSession_Run is not a complete program")
	buildProgram(t, program)

	// The stream example, without its declarations, one tab less indented.
	body := exampleBody(t, src, "ExampleSession_Run_exactlyOnce")
	_, core, ok := strings.Cut(body, "\n\t)\n")
	require.True(t, ok, "ExampleSession_Run_exactlyOnce does not start with a var block")
	core = regexp.MustCompile(`(?m)^\t`).ReplaceAllString(core, "")
	found := false
	for _, b := range blocks {
		found = found || strings.Contains(b, core)
	}
	require.True(t, found, "no Go block of docs/LIBRARY.md holds the core of ExampleSession_Run_exactlyOnce; copy it from election/example_test.go:\n%s", core)
}

// exampleBody returns the lines between "func name() {" and its closing
// brace, with their newlines.
// buildProgram builds program, a complete main package of docs/LIBRARY.md.
func buildProgram(t *testing.T, program string) {
	t.Helper()
	require.True(t, strings.HasPrefix(program, "package main\n"), "docs/LIBRARY.md's program is not a complete program:\n%s", program)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(program), 0o644))
	build := exec.Command("go", "build", "-o", filepath.Join(dir, "readme"), filepath.Join(dir, "main.go"))
	out, err := build.CombinedOutput()
	require.NoError(t, err, "docs/LIBRARY.md's program does not build:\n%s", out)
}

func exampleBody(t *testing.T, src, name string) string {
	t.Helper()
	_, rest, ok := strings.Cut(src, "\nfunc "+name+"() {\n")
	require.True(t, ok, "no %s in election/example_test.go", name)
	body, _, ok := strings.Cut(rest, "\n}\n")
	require.True(t, ok, "%s does not end", name)
	return body + "\n"
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}
