package lock_test

import (
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/testenv"
)

// The tests of this file check what the README, the pages of docs/ and the
// module READMEs say against the repository (issues 22 and 32).

// moduleREADMEs are the READMEs that tell a user how to depend on a module
// of this repository, or name its version.
var moduleREADMEs = []string{"README.md", "gocron/README.md", "otel/README.md", "postgres/README.md", "cmd/lockctl/README.md"}

// readDoc returns the text of the file at path, relative to the root module.
func readDoc(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

// docSection returns the text under the heading (a whole line, such as
// "## Install") up to the next heading of the same level or higher.
func docSection(t *testing.T, text, heading string) string {
	t.Helper()
	_, rest, ok := strings.Cut(text, "\n"+heading+"\n")
	require.True(t, ok, "no %q section", heading)
	level := strings.Index(heading, " ") // the number of #
	for i := 0; i < len(rest); {
		j := strings.Index(rest[i:], "\n#")
		if j < 0 {
			break
		}
		line := rest[i+j+1:]
		if n := len(line) - len(strings.TrimLeft(line, "#")); n <= level && strings.HasPrefix(line[n:], " ") {
			return rest[:i+j+1]
		}
		i += j + 1
	}
	return rest
}

// docPages returns README.md and the pages of docs/, the README first.
func docPages(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob("docs/*.md")
	require.NoError(t, err)
	require.NotEmpty(t, pages, "docs/ should hold the pages the README links to")
	return append([]string{"README.md"}, pages...)
}

// goBlocks returns the fenced Go blocks of text (opened by a line "```go",
// indented or not), without their fences.
func goBlocks(text string) []string {
	var blocks []string
	var cur []string
	in := false
	for _, line := range strings.Split(text, "\n") {
		switch trimmed := strings.TrimSpace(line); {
		case !in && strings.HasPrefix(trimmed, "```go"):
			in, cur = true, nil
		case in && trimmed == "```":
			in = false
			blocks = append(blocks, strings.Join(cur, "\n"))
		case in:
			cur = append(cur, line)
		}
	}
	return blocks
}

// codeLines returns the lines of code that are not blank, without their
// indentation, with each run of spaces and tabs inside them as one space (so
// that gofmt's alignment of comments does not matter).
func codeLines(code string) []string {
	var lines []string
	for _, line := range strings.Split(code, "\n") {
		if line = strings.Join(strings.Fields(line), " "); line != "" {
			lines = append(lines, line)
		}
	}
	return lines
}

// codeBlocks returns the fenced code blocks of text, without their fences.
func codeBlocks(text string) []string {
	var blocks []string
	parts := strings.Split(text, "```")
	for i := 1; i < len(parts); i += 2 {
		_, body, _ := strings.Cut(parts[i], "\n") // the fence's info string
		blocks = append(blocks, body)
	}
	return blocks
}

var (
	versionPattern = regexp.MustCompile(`\bv\d+\.\d+\.\d+\b`)
	// otherProject ends the text before a version that is another
	// project's: "pgx v5.13.0", "OpenTelemetry Go v1.47.0".
	otherProject = regexp.MustCompile(`(?i)\b(pgx|opentelemetry go|otel|go-redis|redis|valkey|gocron|robfig/cron|redsync|redislock|miniredis|go)\s+$`)
)

// historyOfVersions are the sentences that may name an earlier version of
// this module, as history; any other mention names the latest.
var historyOfVersions = []string{
	"This test found a bug in v0.1.0", // docs/guarantees.md
}

// TestDocsNameOneVersion checks that the README, the pages of docs/ and the
// module READMEs name one version of this module, the latest section of
// CHANGELOG.md, or none, and that the README's Install section names it
// (issue 22: the README said v0.1.1 while the CHANGELOG's latest was v0.1.2).
func TestDocsNameOneVersion(t *testing.T) {
	changelog := readDoc(t, "CHANGELOG.md")
	m := regexp.MustCompile(`(?m)^## (v\d+\.\d+\.\d+)\b`).FindStringSubmatch(changelog)
	require.NotNil(t, m, "CHANGELOG.md should have a section per version, \"## vX.Y.Z — date\"")
	latest := m[1]

	for _, path := range append(moduleREADMEs, docPages(t)[1:]...) {
		for _, line := range strings.Split(readDoc(t, path), "\n") {
			for _, loc := range versionPattern.FindAllStringIndex(line, -1) {
				v := line[loc[0]:loc[1]]
				pseudo := v == "v0.0.0" && strings.HasPrefix(line[loc[1]:], "-") // v0.0.0-<date>-<commit>
				if pseudo || v == latest || otherProject.MatchString(line[:loc[0]]) {
					continue
				}
				history := slices.ContainsFunc(historyOfVersions, func(s string) bool { return strings.Contains(line, s) })
				assert.True(t, history, "%s names %s, but the latest version in CHANGELOG.md is %s: %q", path, v, latest, line)
			}
		}
	}
	install := docSection(t, readDoc(t, "README.md"), "## Install")
	assert.Contains(t, install, latest, "README.md's Install section should name the latest version")
}

// TestREADMEQuickstartTick checks that each example of the README and of
// docs/ that passes a tick to RunTick defines it first, and computes it and
// calls RunTick as examples/quickstart, which CI runs, does (issue 22: the
// README's quickstart passed an undefined tick).
func TestREADMEQuickstartTick(t *testing.T) {
	quickstart := readDoc(t, "examples/quickstart/main.go")
	for _, page := range docPages(t) {
		var seen int
		for _, block := range goBlocks(readDoc(t, page)) {
			runAt := strings.Index(block, "RunTick(")
			if runAt < 0 || !strings.Contains(block, "tick") {
				continue
			}
			seen++
			tickAt := strings.Index(block, "tick := ")
			require.True(t, tickAt >= 0 && runAt > tickAt, "%s: an example should define tick before it calls RunTick", page)
			tickLine, _, _ := strings.Cut(block[tickAt:], "\n")
			tickLine, _, _ = strings.Cut(tickLine, " //")
			same := slices.ContainsFunc(strings.Split(quickstart, "\n"), func(l string) bool { return strings.TrimSpace(l) == strings.TrimSpace(tickLine) })
			assert.True(t, same, "%s: examples/quickstart should compute the tick as the example does: %s", page, strings.TrimSpace(tickLine))

			call, _, _ := strings.Cut(block[runAt:], "\n")
			call = call[:strings.LastIndex(call, ",")+1] // up to the function
			assert.Contains(t, quickstart, "c."+call, "%s: examples/quickstart should call RunTick as the example does", page)
		}
		if page == "README.md" {
			assert.NotZero(t, seen, "README.md should show RunTick's loop")
		}
	}
}

// TestDocsCodeCompiles checks that every Go block of the README and of
// docs/ is compiled: its lines (those not blank, without indentation) are
// found one after the other in a function of an example file of this
// package, which go test compiles and runs (issue 32: a user's code did not
// compile from a README block). example_readme_test.go holds those the
// other example files do not.
func TestDocsCodeCompiles(t *testing.T) {
	files, err := filepath.Glob("example*_test.go")
	require.NoError(t, err)
	var funcs [][]string // the lines of each function of the example files
	fset := token.NewFileSet()
	for _, path := range files {
		src := []byte(readDoc(t, path))
		f, err := parser.ParseFile(fset, path, src, parser.ParseComments)
		require.NoError(t, err)
		for _, d := range f.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok {
				funcs = append(funcs, codeLines(string(src[fset.Position(fn.Pos()).Offset:fset.Position(fn.End()).Offset])))
			}
		}
	}
	require.NotEmpty(t, funcs)

	var blocks int
	for _, page := range docPages(t) {
		for i, block := range goBlocks(readDoc(t, page)) {
			blocks++
			want := codeLines(block)
			require.NotEmpty(t, want, "%s: Go block %d is empty", page, i+1)
			compiled := slices.ContainsFunc(funcs, func(fn []string) bool {
				for j := 0; j+len(want) <= len(fn); j++ {
					if slices.Equal(fn[j:j+len(want)], want) {
						return true
					}
				}
				return false
			})
			assert.True(t, compiled, "%s: Go block %d, which begins %q, is not compiled: no function of %s holds its lines, one after the other (add it, line for line, to one in example_readme_test.go)",
				page, i+1, want[0], strings.Join(files, ", "))
		}
	}
	assert.NotZero(t, blocks, "the README should show Go code")
}

// TestDocsLockctlPrefix checks that the pages of docs/ run lockctl under the
// prefix that the README's Redis example gives to lock.WithPrefix, as
// cmd/lockctl's TestDocsUseOnePrefix checks of the READMEs (issue 22).
func TestDocsLockctlPrefix(t *testing.T) {
	m := regexp.MustCompile(`lock\.WithPrefix\("([^"]+)"\)`).FindStringSubmatch(readDoc(t, "README.md"))
	require.NotNil(t, m, "README.md should give lock.WithPrefix a prefix in its Redis example")
	var runs int
	for _, page := range docPages(t)[1:] {
		for _, line := range strings.Split(readDoc(t, page), "\n") {
			if line = strings.TrimSpace(line); strings.HasPrefix(line, "$ lockctl") {
				runs++
				assert.Contains(t, line, "-prefix "+m[1]+" ", "%s: %q should look under the services' prefix", page, line)
			}
		}
	}
	assert.NotZero(t, runs, "docs/operations.md should show lockctl being run")
}

// TestDocsLinks checks that the relative links of the README and of docs/
// name files that exist.
func TestDocsLinks(t *testing.T) {
	link := regexp.MustCompile(`\]\(([^)#\s]+)(#[^)]*)?\)`)
	for _, page := range docPages(t) {
		for _, m := range link.FindAllStringSubmatch(readDoc(t, page), -1) {
			if strings.Contains(m[1], "://") {
				continue
			}
			_, err := os.Stat(filepath.Join(filepath.Dir(page), m[1]))
			assert.NoError(t, err, "%s links to %s", page, m[1])
		}
	}
}

// TestREADMEHTTPQueue runs the README's HTTP queueing example: requests for
// one order wait in its queue and are served one at a time, in the order
// they came; one that waits MaxWait is answered 423 with Retry-After: 1.
func TestREADMEHTTPQueue(t *testing.T) {
	ctx := context.Background()
	c, err := lock.NewClient(lock.NewMemoryProvider())
	require.NoError(t, err)
	defer c.Close()

	var (
		mu      sync.Mutex
		served  []string                     // the requests' ids, in the order they were served
		proceed = map[string]chan struct{}{} // closed to let a request's handler return
		active  atomic.Int32
		overlap atomic.Bool
	)
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		proceed[id] = make(chan struct{})
	}
	processOrder := func(w http.ResponseWriter, r *http.Request) {
		if active.Add(1) > 1 {
			overlap.Store(true)
		}
		defer active.Add(-1)
		id := r.URL.Query().Get("req")
		mu.Lock()
		served = append(served, id)
		mu.Unlock()
		<-proceed[id]
		fmt.Fprintf(w, "order %s processed\n", r.PathValue("id"))
	}
	server := func(maxWait time.Duration) *httptest.Server {
		withOrderLock, err := lock.HTTPMiddleware(c, lock.HTTPOptions{
			NameFunc: func(r *http.Request) string { return "order:" + r.PathValue("id") },
			Options:  lock.Options{Wait: true, MaxWait: maxWait},
		})
		require.NoError(t, err)
		mux := http.NewServeMux()
		mux.Handle("POST /orders/{id}", withOrderLock(http.HandlerFunc(processOrder)))
		srv := httptest.NewServer(mux)
		t.Cleanup(srv.Close)
		return srv
	}
	type response struct {
		code       int
		retryAfter string
		body       string
	}
	post := func(srv *httptest.Server, id string) <-chan response {
		out := make(chan response, 1)
		go func() {
			resp, err := http.Post(srv.URL+"/orders/42?req="+id, "text/plain", nil)
			if err != nil {
				out <- response{body: err.Error()}
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			out <- response{resp.StatusCode, resp.Header.Get("Retry-After"), string(b)}
		}()
		return out
	}
	waiters := func(n int) func() bool {
		return func() bool {
			s, err := c.Inspect(ctx, "order:42")
			return err == nil && s.Waiters == n
		}
	}

	srv := server(5 * time.Second)
	a := post(srv, "a")
	require.Eventually(t, func() bool { return active.Load() == 1 }, 10*time.Second, time.Millisecond, "a is served")
	b := post(srv, "b")
	require.Eventually(t, waiters(1), 10*time.Second, time.Millisecond, "b waits")
	cc := post(srv, "c")
	require.Eventually(t, waiters(2), 10*time.Second, time.Millisecond, "c waits behind b")
	for _, r := range []struct {
		id  string
		out <-chan response
	}{{"a", a}, {"b", b}, {"c", cc}} {
		close(proceed[r.id])
		got := <-r.out
		assert.Equal(t, http.StatusOK, got.code, "request %s: %s", r.id, got.body)
	}
	assert.Equal(t, []string{"a", "b", "c"}, served, "served one at a time, in the order they came")
	assert.False(t, overlap.Load(), "two requests for one order were served at once")

	// A wait bounded by MaxWait.
	srv = server(100 * time.Millisecond)
	d := post(srv, "d")
	require.Eventually(t, func() bool { return active.Load() == 1 }, 10*time.Second, time.Millisecond, "d is served")
	start := time.Now()
	got := <-post(srv, "e")
	assert.Equal(t, http.StatusLocked, got.code, "a request that waited MaxWait")
	assert.Equal(t, "1", got.retryAfter)
	assert.GreaterOrEqual(t, time.Since(start), 100*time.Millisecond, "it waited MaxWait")
	close(proceed["d"])
	assert.Equal(t, http.StatusOK, (<-d).code)
}

// TestREADMEInstall runs the commands of the README's Install section, and
// the install commands of the module READMEs, each block in a module of its
// own, and builds (or lists) a program that imports what they got. The
// repository is reached through git's url.insteadOf, pointed at this
// checkout, whose HEAD stands for main: what a user gets is the commit, not
// the working tree. It also checks that no tag exists, as the README says.
// It needs git and the modules' dependencies (from the module cache, else
// GOPROXY): CI runs it; elsewhere set LOCK_TEST_INSTALL.
func TestREADMEInstall(t *testing.T) {
	if os.Getenv("CI") == "" && os.Getenv("LOCK_TEST_INSTALL") == "" {
		t.Skip("runs go and git, which may download modules: set LOCK_TEST_INSTALL=1 (CI runs it)")
	}
	gobin, err := exec.LookPath("go")
	require.NoError(t, err)
	git, err := exec.LookPath("git")
	require.NoError(t, err)
	root, err := filepath.Abs(".")
	require.NoError(t, err)
	out, err := exec.Command(git, "-C", root, "rev-parse", "HEAD").Output()
	require.NoError(t, err, "the checkout should be a git repository")
	head := strings.TrimSpace(string(out))
	out, err = exec.Command(git, "-C", root, "tag", "--list").Output()
	require.NoError(t, err)
	require.Empty(t, strings.TrimSpace(string(out)),
		"the README's Install section says that no version is tagged: now that one is, say how to get it")
	out, err = exec.Command(gobin, "env", "GOMODCACHE", "GOPROXY").Output()
	require.NoError(t, err)
	goenv := strings.Split(strings.TrimSpace(string(out)), "\n")
	require.Len(t, goenv, 2)

	tmp := t.TempDir()
	gitconfig := filepath.Join(tmp, "gitconfig")
	require.NoError(t, os.WriteFile(gitconfig, []byte(fmt.Sprintf(
		"[url \"file://%s\"]\n\tinsteadOf = https://github.com/seed05627090/lock\n[safe]\n\tdirectory = *\n", root)), 0o644))
	env := append(os.Environ(),
		"GIT_CONFIG_GLOBAL="+gitconfig, "GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0",
		"GOPRIVATE=github.com/seed05627090", "GOFLAGS=-modcacherw", "GOWORK=off", "GOTOOLCHAIN=local",
		"GOMODCACHE="+filepath.Join(tmp, "modcache"),
		"GOPROXY=file://"+filepath.ToSlash(filepath.Join(goenv[0], "cache", "download"))+","+goenv[1])
	run := func(dir string, args ...string) {
		t.Helper()
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "in %s: %s\n%s", dir, strings.Join(args, " "), out)
	}

	blocks := codeBlocks(docSection(t, readDoc(t, "README.md"), "## Install")) // then the module READMEs'
	for _, path := range []string{"gocron/README.md", "otel/README.md", "postgres/README.md"} {
		n := len(blocks)
		for _, b := range codeBlocks(readDoc(t, path)) {
			if strings.Contains(b, "go get ") {
				blocks = append(blocks, b)
			}
		}
		require.Greater(t, len(blocks), n, "%s should say how to get the module", path)
	}
	modulePath := regexp.MustCompile(`github\.com/seed05627090/lock(/[a-z]+)?\b`)
	cloned := false
	for i, block := range blocks {
		dir := filepath.Join(tmp, fmt.Sprintf("app%d", i))
		require.NoError(t, os.Mkdir(dir, 0o755))
		run(dir, gobin, "mod", "init", "example.com/app")
		// The commands, and a program that imports the modules they name.
		var cmds [][]string
		imports := map[string]bool{}
		for _, line := range strings.Split(block, "\n") {
			line, _, _ = strings.Cut(line, "#")
			args := strings.Fields(line)
			switch {
			case len(args) == 0:
				continue
			case args[0] == "git" && args[1] == "clone":
				require.Equal(t, "../lock", args[len(args)-1], "the README clones into ../lock")
				if !cloned {
					run(tmp, git, "clone", "-q", root, "lock")
					cloned = true
				}
				continue
			}
			require.Equal(t, "go", args[0], "the install commands are go and git clone: %q", line)
			for j, a := range args {
				args[j] = strings.ReplaceAll(a, "@main", "@"+head)
			}
			for _, m := range modulePath.FindAllString(line, -1) {
				imports[m] = true
			}
			cmds = append(cmds, args)
		}
		require.NotEmpty(t, imports, "block %d gets no module of this repository:\n%s", i, block)
		var src strings.Builder
		src.WriteString("package main\n\nimport (\n")
		for m := range imports {
			fmt.Fprintf(&src, "\t_ %q\n", m)
		}
		src.WriteString(")\n\nfunc main() {}\n")
		require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(src.String()), 0o644))
		for _, args := range cmds {
			run(dir, append([]string{gobin}, args[1:]...)...)
		}
		if i == 0 {
			run(dir, gobin, "build", "-o", os.DevNull, ".")
		} else {
			run(dir, gobin, "list", "-deps", ".") // what a build loads, without compiling otel or pgx
		}
	}
}

var (
	// testsNotAcquired and testsUnavailable find errors.Is tests of the two
	// sentinels in code.
	testsNotAcquired = regexp.MustCompile(`errors\.Is\([^()]*,\s*lock\.ErrNotAcquired\)`)
	testsUnavailable = regexp.MustCompile(`errors\.Is\([^()]*,\s*lock\.ErrUnavailable\)`)
)

// skipsOnNotAcquired returns the lines of code that branch on ErrNotAcquired
// (an if, a case) or tell the reader to test it (in a comment) with no test
// of ErrUnavailable before them in code.
func skipsOnNotAcquired(code string) []string {
	var bad []string
	unavailable := false
	for _, line := range strings.Split(code, "\n") {
		trimmed := strings.TrimSpace(line)
		for _, loc := range testsNotAcquired.FindAllStringIndex(line, -1) {
			comment := strings.Contains(line[:loc[0]], "//")
			branch := strings.HasPrefix(trimmed, "if ") || strings.HasPrefix(trimmed, "case ") || strings.HasPrefix(trimmed, "} else if ")
			if (comment || branch) && !unavailable {
				bad = append(bad, trimmed)
			}
		}
		if code, _, _ := strings.Cut(line, "//"); testsUnavailable.MatchString(code) {
			unavailable = true
		}
	}
	return bad
}

// TestDocsDoNotSkipAnOutage checks that no code shown to a user (the Go
// blocks of the README, of docs/ and of MIGRATING.md, the example
// functions, the programs of examples/, and the code in the package's doc
// comments) reads ErrNotAcquired as "someone else has it" without testing
// ErrUnavailable first: an acquisition that the context ended while the
// provider was unreachable matches ErrNotAcquired too (issue 38: MIGRATING's
// "if errors.Is(err, lock.ErrNotAcquired) { return nil }" swallowed an
// outage).
func TestDocsDoNotSkipAnOutage(t *testing.T) {
	var snippets, checked int
	check := func(where, code string) {
		t.Helper()
		snippets++
		if testsNotAcquired.MatchString(code) {
			checked++
		}
		for _, line := range skipsOnNotAcquired(code) {
			assert.Fail(t, "a test of ErrNotAcquired reads an outage as a refusal",
				"%s: %q: test lock.ErrHeld (or ErrGracePeriod, ErrTimeout), or lock.ErrUnavailable before it", where, line)
		}
	}
	for _, page := range append(docPages(t), "MIGRATING.md") {
		for i, block := range goBlocks(readDoc(t, page)) {
			check(fmt.Sprintf("%s, Go block %d", page, i+1), block)
		}
	}
	programs, err := filepath.Glob("examples/*/*.go")
	require.NoError(t, err)
	require.NotEmpty(t, programs)
	files, err := filepath.Glob("example*_test.go")
	require.NoError(t, err)
	fset := token.NewFileSet()
	for _, path := range append(files, programs...) {
		src := readDoc(t, path)
		f, err := parser.ParseFile(fset, path, src, 0)
		require.NoError(t, err)
		for _, d := range f.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok {
				check(path+": "+fn.Name.Name, src[fset.Position(fn.Pos()).Offset:fset.Position(fn.End()).Offset])
			}
		}
	}
	sources, err := filepath.Glob("*.go")
	require.NoError(t, err)
	for _, path := range sources {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, readDoc(t, path), parser.ParseComments)
		require.NoError(t, err)
		for _, g := range f.Comments {
			check(path+": a comment at line "+fmt.Sprint(fset.Position(g.Pos()).Line), "//"+strings.ReplaceAll(g.Text(), "\n", "\n//"))
		}
	}
	assert.Greater(t, snippets, 100, "the pages, examples and comments were read")
	assert.NotZero(t, checked, "some code shown tests ErrNotAcquired, as it may after ErrUnavailable")
}

// TestModulesRequireTheLatest checks that every module of the repository
// that requires another of its modules requires the latest version, the
// one CHANGELOG.md's latest section names and the README calls the latest:
// their replace directives point at this checkout, so the require is what a
// user's build outside it gets (issue 38: postgres, otel, gocron, etcd and
// examples/robfig required v0.1.1 while v0.1.2 was the latest). bench, which
// no user depends on, requires the placeholder version of its replaces,
// except for the root module, which it requires at the version that the
// driver modules it requires (rueidis, valkey) require.
func TestModulesRequireTheLatest(t *testing.T) {
	m := regexp.MustCompile(`(?m)^## (v\d+\.\d+\.\d+)\b`).FindStringSubmatch(readDoc(t, "CHANGELOG.md"))
	require.NotNil(t, m)
	latest := m[1]
	assert.Contains(t, docSection(t, readDoc(t, "README.md"), "## Install"), "The latest version is "+latest)

	var mods []string
	for _, pattern := range []string{"*/go.mod", "*/*/go.mod"} {
		found, err := filepath.Glob(pattern)
		require.NoError(t, err)
		mods = append(mods, found...)
	}
	require.GreaterOrEqual(t, len(mods), 6, "the nested modules: postgres, otel, gocron, etcd, cmd/lockctl, examples/robfig, bench")
	ours := regexp.MustCompile(`(?m)^\s*(?:require\s+)?(github\.com/seed05627090/lock(?:/[a-z/]+)?) (v\S+)`)
	var requires int
	for _, mod := range mods {
		for _, r := range ours.FindAllStringSubmatch(readDoc(t, mod), -1) {
			requires++
			want := latest
			if mod == filepath.Join("bench", "go.mod") && r[1] != "github.com/seed05627090/lock" {
				want = "v0.0.0-00010101000000-000000000000"
			}
			assert.Equal(t, want, r[2], "%s requires %s %s", mod, r[1], r[2])
		}
	}
	assert.GreaterOrEqual(t, requires, len(mods), "each nested module requires the root module")
}

// zeroMeans finds what a field's doc says its zero value means.
var zeroMeans = regexp.MustCompile(`(?i)\bzero(?: value)? means ([^.;:]+)`)

// TestOptionFieldsOneZero checks that the exported fields of one name, in
// the package's exported structs, say the same of their zero value: a
// reader who learned what MaxDuration 0 means in Options reads it so
// everywhere (issue 38: ElectionOptions.MaxDuration 0 meant no limit and
// Options.MaxDuration 0 an hour).
func TestOptionFieldsOneZero(t *testing.T) {
	sources, err := filepath.Glob("*.go")
	require.NoError(t, err)
	type field struct{ in, means string }
	fields := map[string][]field{}
	fset := token.NewFileSet()
	for _, path := range sources {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, readDoc(t, path), parser.ParseComments)
		require.NoError(t, err)
		ast.Inspect(f, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok || !ts.Name.IsExported() {
				return true
			}
			st, ok := ts.Type.(*ast.StructType)
			if !ok {
				return true
			}
			for _, fl := range st.Fields.List {
				m := zeroMeans.FindStringSubmatch(strings.Join(strings.Fields(fl.Doc.Text()), " "))
				for _, name := range fl.Names {
					if name.IsExported() && m != nil {
						fields[name.Name] = append(fields[name.Name], field{ts.Name.Name, m[1]})
					}
				}
			}
			return true
		})
	}
	require.NotEmpty(t, fields["MaxDuration"], "Options.MaxDuration says what its zero means")
	for name, fs := range fields {
		for _, f := range fs[1:] {
			assert.Equal(t, fs[0].means, f.means, "%s.%s and %s.%s: zero means one thing for one name", fs[0].in, name, f.in, name)
		}
	}
}

// declDoc returns the doc comment of the top-level function, method or
// type called name in the file at path, its white space as single spaces,
// and the declaration.
func declDoc(t *testing.T, path, name string) (string, ast.Node) {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, readDoc(t, path), parser.ParseComments)
	require.NoError(t, err)
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Name.Name == name {
				return strings.Join(strings.Fields(d.Doc.Text()), " "), d
			}
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				if ts, ok := spec.(*ast.TypeSpec); ok && ts.Name.Name == name {
					doc := d.Doc
					if ts.Doc != nil {
						doc = ts.Doc
					}
					return strings.Join(strings.Fields(doc.Text()), " "), ts
				}
			}
		}
	}
	t.Fatalf("%s declares no %s", path, name)
	return "", nil
}

// TestProviderDocNamesItsMethods checks that the Provider's doc, which says
// which of the Client's features rest on which methods, names each method
// it means (the claim methods as a group): a count ("the first seven
// methods") went wrong when Watch and Notify came fifth and sixth (issue
// 38).
func TestProviderDocNamesItsMethods(t *testing.T) {
	doc, decl := declDoc(t, "provider.go", "Provider")
	iface, ok := decl.(*ast.TypeSpec).Type.(*ast.InterfaceType)
	require.True(t, ok, "Provider is an interface")
	var methods int
	for _, m := range iface.Methods.List {
		for _, n := range m.Names {
			methods++
			if strings.Contains(n.Name, "Claim") {
				continue // "the claim methods"
			}
			assert.Regexp(t, `\b`+n.Name+`\b`, doc, "the Provider's doc says what rests on %s", n.Name)
		}
	}
	assert.Greater(t, methods, 12)
	assert.Contains(t, doc, "claim methods")
}

// TestRunTickDocSaysWhenATickRunsTwice runs a tick in one replica and again,
// in another, once the tick's record has expired (a memory provider on a
// fake clock): fn runs twice, so RunTick's doc must not say that exactly
// one replica runs it, and says when it runs again (issue 38).
func TestRunTickDocSaysWhenATickRunsTwice(t *testing.T) {
	ctx := testenv.Context(t, 10*time.Second)
	clock := testenv.NewClock(time.Now())
	mem := lock.NewMemoryProvider(lock.MemoryClock(clock))
	a, b := testenv.NewClient(t, mem), testenv.NewClient(t, mem)
	tick := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	var runs atomic.Int32
	run := func(context.Context) error { runs.Add(1); return nil }

	require.NoError(t, a.RunTick(ctx, "report", tick, time.Minute, lock.Options{}, run))
	err := b.RunTick(ctx, "report", tick, time.Minute, lock.Options{}, run)
	assert.ErrorIs(t, err, lock.ErrGracePeriod, "within a period of the run, another replica skips the tick")
	clock.Advance(time.Minute + time.Second)
	require.NoError(t, b.RunTick(ctx, "report", tick, time.Minute, lock.Options{}, run), "after the record expired, the tick runs again")
	require.EqualValues(t, 2, runs.Load(), "one tick ran twice")

	doc, _ := declDoc(t, "schedule.go", "RunTick")
	assert.NotRegexp(t, `(?i)exactly one`, doc, "RunTick's doc promises what a late replica breaks")
	assert.Contains(t, doc, "asks after the tick's record has expired runs fn again", "RunTick's doc says when a tick runs twice")
}

// TestWithEventsDocSaysTheOrder: a renewal whose reply is late (here held
// until the release is done) is not reported after the lock's Released (it
// was, after it, until the renewal checked the lock's state before
// reporting). WithEvents' doc said "in order" (issue 38); it says which
// orders hold.
func TestWithEventsDocSaysTheOrder(t *testing.T) {
	ctx := testenv.Context(t, 10*time.Second)
	renewing, proceed := make(chan struct{}), make(chan struct{})
	var started, done sync.Once
	t.Cleanup(func() { done.Do(func() { close(proceed) }) })
	p := &testenv.Hooked{Provider: lock.NewMemoryProvider(), OnRenew: func(context.Context, string, string, time.Duration) error {
		started.Do(func() { close(renewing) })
		<-proceed
		return nil // renewed at the server; the reply comes late
	}}
	var mu sync.Mutex
	var kinds []lock.EventKind
	c := testenv.NewClient(t, p, lock.WithEvents(func(e lock.Event) {
		mu.Lock()
		kinds = append(kinds, e.Kind)
		mu.Unlock()
	}))
	l, err := c.Acquire(ctx, testenv.Name(t), lock.Options{Lease: 300 * time.Millisecond})
	require.NoError(t, err)
	select {
	case <-renewing:
	case <-ctx.Done():
		t.Fatal("no renewal began")
	}
	require.NoError(t, l.Release(ctx))
	done.Do(func() { close(proceed) })
	got := func() []lock.EventKind {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(kinds)
	}
	require.Eventually(t, func() bool { return len(got()) == 2 }, 5*time.Second, time.Millisecond, "two events: %v", got())
	time.Sleep(100 * time.Millisecond) // the renewal's event would follow its reply at once
	assert.Equal(t, []lock.EventKind{lock.EventAcquired, lock.EventReleased}, got(), "the late renewal is not reported after the release")

	doc, _ := declDoc(t, "options.go", "WithEvents")
	assert.Contains(t, doc, "A renewal whose reply comes after the lock was released or lost is not reported", "WithEvents' doc says so")
}

// TestObserveDocSaysEachTerm runs 30 back-to-back Campaign and Resign rounds
// under an observer that polls once an hour, on each backend: every term
// reaches the channel, in order, once, and nobody leads at the end; a
// vacancy of about a millisecond between two terms mostly does not (the
// test logs how many did). So the docs of Observe promise each term, not
// each change (issue 38: docs/elections.md said "the state now, then each
// change"; on the memory provider, some terms were not sent either).
func TestObserveDocSaysEachTerm(t *testing.T) {
	const rounds = 30
	var missed bool
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxTimeout(t, 30*time.Second)
		cand := newClient(t, b.replica(t))
		watcher := newClient(t, b.replica(t), lock.WithPollInterval(time.Hour))
		role := uniqueName(t)
		seen, err := watcher.Observe(ctx, role)
		require.NoError(t, err)
		first, ok := <-seen
		require.True(t, ok)
		got := make(chan []lock.Leader, 1)
		go func() {
			ls := []lock.Leader{first}
			defer func() { got <- ls }()
			var terms int
			for l := range seen { // until ctx ends, if a term is missed
				ls = append(ls, l)
				if !l.Vacant() {
					terms++
				} else if terms == rounds {
					return // nobody, after the last term
				}
			}
		}()
		var terms []uint64
		for range rounds {
			term, err := cand.Campaign(ctx, role, lock.ElectionOptions{})
			require.NoError(t, err)
			terms = append(terms, term.Token())
			require.NoError(t, term.Resign(ctx))
		}
		ls := <-got
		var sent []uint64
		vacancies := 0
		for _, l := range ls {
			require.NoError(t, l.Err)
			if l.Vacant() {
				vacancies++
			} else {
				sent = append(sent, l.Term)
			}
		}
		require.NotEmpty(t, ls)
		assert.True(t, ls[0].Vacant(), "the state now: nobody")
		assert.True(t, ls[len(ls)-1].Vacant(), "nobody, after the last Resign")
		assert.Equal(t, terms, sent, "each term, in order, once")
		t.Logf("%d terms of %d and %d vacancies of %d sent", len(sent), rounds, vacancies, rounds+1)
		missed = missed || vacancies < rounds+1
	})
	if !missed {
		return // every vacancy was sent: the docs may say so
	}
	docs := map[string]string{"docs/elections.md": readDoc(t, "docs/elections.md")}
	docs["Observe's doc"], _ = declDoc(t, "observe.go", "Observe")
	for where, text := range docs {
		assert.False(t, strings.Contains(strings.Join(strings.Fields(text), " "), "then each change"),
			"%s says Observe sends \"the state now, then each change\": not every vacancy is sent", where)
	}
}
