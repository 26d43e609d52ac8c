package faults

import (
	"errors"
	"maps"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/seed05627090/lock"
)

// WriteBoard collects the reports of the fenced writers of an election
// fault test: child processes that Lead one role and, while they lead,
// write through a fence with their term's number, without looking at their
// context in between, as a leader that does not know it was paused would.
// Each child reports, in lines that Fields parses:
//
//	elected term=T
//	write term=T result=ok|stale|error start=<Unix ns>
//	ended term=T
//
// (result: the write passed the fence, the fence refused it as stale, or it
// failed otherwise: see WriteResult). The zero WriteBoard is empty and
// ready; it is safe for concurrent use.
type WriteBoard struct {
	mu       sync.Mutex
	accepted map[uint64]int // writes that passed the fence, by term
	writes   []writeReport
	elected  map[int]int // terms led, by child
	ended    map[uint64]bool
}

type writeReport struct {
	term   uint64
	result string // "ok", "stale" or "error"
	start  time.Time
}

// Follow reads child i's report lines until lines is closed.
func (b *WriteBoard) Follow(i int, lines <-chan string) {
	for line := range lines {
		b.Read(i, line)
	}
}

// Read takes one report line of child i; it ignores other lines.
func (b *WriteBoard) Read(i int, line string) {
	word, f := Fields(line)
	term, _ := strconv.ParseUint(f["term"], 10, 64)
	b.mu.Lock()
	defer b.mu.Unlock()
	switch word {
	case "elected":
		if b.elected == nil {
			b.elected = map[int]int{}
		}
		b.elected[i]++
	case "ended":
		if b.ended == nil {
			b.ended = map[uint64]bool{}
		}
		b.ended[term] = true
	case "write":
		ns, _ := strconv.ParseInt(f["start"], 10, 64)
		w := writeReport{term: term, result: f["result"], start: time.Unix(0, ns)}
		b.writes = append(b.writes, w)
		if w.result == "ok" {
			if b.accepted == nil {
				b.accepted = map[uint64]int{}
			}
			b.accepted[term]++
		}
	}
}

// Wrote reports whether a write with term passed the fence.
func (b *WriteBoard) Wrote(term uint64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.accepted[term] > 0
}

// Ended reports whether the term's Lead has ended it.
func (b *WriteBoard) Ended(term uint64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ended[term]
}

// ResumedWrites counts the writes with term that started after at (when
// the term's stopped leader was continued): those that passed the fence,
// which a correct fence never lets through once a later term has written;
// those it refused as stale; and those that failed otherwise (the
// connection).
func (b *WriteBoard) ResumedWrites(term uint64, at time.Time) (passed, refused, failed int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, w := range b.writes {
		if w.term != term || !w.start.After(at) {
			continue
		}
		switch w.result {
		case "ok":
			passed++
		case "stale":
			refused++
		default:
			failed++
		}
	}
	return passed, refused, failed
}

// ElectedBy returns how many terms each child led, by child.
func (b *WriteBoard) ElectedBy() map[int]int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return maps.Clone(b.elected)
}

// WriteResult is the result a writer reports for a write that returned err:
// "ok" for none, "stale" for one that matches lock.ErrStaleToken (the
// fence refused it), "error" for another.
func WriteResult(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, lock.ErrStaleToken):
		return "stale"
	}
	return "error"
}

// WriterName is the identity with which child i of an election fault test
// Leads: "writer-i".
func WriterName(i int) string { return "writer-" + strconv.Itoa(i) }

// WriterIndex returns which of n children identity names (see
// WriterName), or -1 for none of them.
func WriterIndex(identity string, n int) int {
	for i := range n {
		if identity == WriterName(i) {
			return i
		}
	}
	return -1
}

// AwaitLeader waits up to 10 s until leader (which returns the child that
// leads, -1 for none, and its term) names a child whose term has passed
// the fence, and returns the child and the term. It fails the test
// otherwise; round names the round in the message.
func (b *WriteBoard) AwaitLeader(t testing.TB, round int, leader func() (int, uint64)) (int, uint64) {
	t.Helper()
	var i int
	var term uint64
	eventually(t, func() bool {
		i, term = leader()
		return i >= 0 && b.Wrote(term)
	}, "round %d: a process leads and has written", round)
	return i, term
}

// StopLeader stops (SIGSTOP) child c, WriterName(i), the leader of term;
// waits up to 10 s until leader names another child, with a later term
// that has passed the fence; keeps c stopped for stop in all; continues it
// (SIGCONT); and waits up to 10 s until its term has ended. It returns the
// later term and when c was continued, and fails the test when a wait
// runs out; round names the round in the messages.
func (b *WriteBoard) StopLeader(t testing.TB, round int, c *Child, i int, term uint64, stop time.Duration, leader func() (int, uint64)) (next uint64, resumed time.Time) {
	t.Helper()
	if err := c.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("round %d: SIGSTOP %s: %v", round, WriterName(i), err)
	}
	stopped := time.Now()
	eventually(t, func() bool {
		j, tn := leader()
		next = tn
		return j >= 0 && j != i && tn > term && b.Wrote(tn)
	}, "round %d: another process leads and writes while %s is stopped", round, WriterName(i))
	time.Sleep(time.Until(stopped.Add(stop)))
	resumed = time.Now()
	if err := c.Cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatalf("round %d: SIGCONT %s: %v", round, WriterName(i), err)
	}
	// The stopped leader's term ends (its function returns) after its next
	// write: one started after it continued (see ResumedWrites), or one in
	// flight when it was stopped.
	eventually(t, func() bool { return b.Ended(term) },
		"round %d: %s's term %d ends after it continued", round, WriterName(i), term)
	return next, resumed
}

// eventually fails the test with the message unless cond is true within
// 10 s; it asks every millisecond.
func eventually(t testing.TB, cond func() bool, format string, args ...any) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf(format, args...)
		}
	}
}
