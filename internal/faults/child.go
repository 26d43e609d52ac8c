package faults

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/seed05627090/lock/internal/testenv/servers"
)

// Child is the test binary run again as a child process of a fault test,
// so that it can be stopped (SIGSTOP) or killed: it runs the test that run
// matches, with more environment, and that test, seeing its environment,
// plays a part instead of testing. It reports to the parent in lines on its
// stdout that begin with the report prefix, and reads commands on its
// stdin. It is killed at the end of the test if it still runs.
type Child struct {
	// Cmd is the child's command, started.
	Cmd *exec.Cmd
	// Lines are its report lines, without their prefix, in order; closed
	// when its stdout ends.
	Lines chan string

	t      testing.TB
	stdin  io.WriteCloser
	out    *servers.BoundedBuffer // everything it printed
	exited chan struct{}
	err    error // of Wait, once exited is closed
}

// StartChild starts the test binary with -test.run=run and env added to
// this process's environment. The lines of its stdout that begin with
// prefix and a space are its reports. It fails the test if the child cannot
// start.
func StartChild(t testing.TB, run, prefix string, env ...string) *Child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run="+run, "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	out := &servers.BoundedBuffer{Max: 256 << 10}
	cmd.Stderr = out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start child %s: %v", run, err)
	}
	c := &Child{Cmd: cmd, Lines: make(chan string, 4096), t: t, stdin: stdin, out: out, exited: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			_, _ = out.Write([]byte(line + "\n"))
			if rest, ok := strings.CutPrefix(line, prefix+" "); ok {
				c.Lines <- rest
			}
		}
		close(c.Lines)
		c.err = cmd.Wait()
		close(c.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-c.exited:
		default:
			_ = cmd.Process.Signal(syscall.SIGCONT)
			_ = cmd.Process.Kill()
			<-c.exited
		}
	})
	return c
}

// Next returns the child's next report line, failing the test when none
// comes before ctx ends or the child exits first.
func (c *Child) Next(ctx context.Context) string {
	c.t.Helper()
	select {
	case line, ok := <-c.Lines:
		if !ok {
			<-c.exited
			c.t.Fatalf("child exited (%v) before reporting; its output:\n%s", c.err, c.Out())
		}
		return line
	case <-ctx.Done():
		c.t.Fatalf("no report from the child: %v; its output:\n%s", ctx.Err(), c.Out())
	}
	return ""
}

// Send writes one command line to the child's stdin.
func (c *Child) Send(line string) {
	c.t.Helper()
	if _, err := io.WriteString(c.stdin, line+"\n"); err != nil {
		c.t.Fatalf("write to child: %v; its output:\n%s", err, c.Out())
	}
}

// Wait waits for the child to exit and returns Wait's error, failing the
// test if it has not exited when ctx ends.
func (c *Child) Wait(ctx context.Context) error {
	c.t.Helper()
	select {
	case <-c.exited:
		return c.err
	case <-ctx.Done():
		c.t.Fatalf("child did not exit: %v; its output:\n%s", ctx.Err(), c.Out())
	}
	return nil
}

// Exited returns a channel that is closed once the child has exited.
func (c *Child) Exited() <-chan struct{} { return c.exited }

// Out returns what the child printed (its first 256 KiB).
func (c *Child) Out() string { return c.out.String() }

// Fields parses a report line "word k1=v1 k2=v2 ..." into its word and
// fields. A value may be a Go quoted string (written with %q), spaces
// included.
func Fields(line string) (string, map[string]string) {
	m := make(map[string]string)
	word, rest, _ := strings.Cut(strings.TrimSpace(line), " ")
	for rest = strings.TrimSpace(rest); rest != ""; rest = strings.TrimSpace(rest) {
		k, v, _ := strings.Cut(rest, "=")
		rest = ""
		if strings.HasPrefix(v, `"`) {
			if q, err := strconv.QuotedPrefix(v); err == nil {
				m[k], _ = strconv.Unquote(q)
				rest = v[len(q):]
				continue
			}
		}
		v, rest, _ = strings.Cut(v, " ")
		m[k] = v
	}
	return word, m
}
