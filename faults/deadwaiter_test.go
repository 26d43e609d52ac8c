package faults_test

import (
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/faults"
)

func init() { roles["rwwriter"] = roleRWWriter }

const (
	deadReaders = 12 // the RWMutex's readers
	// deadEntry is how long the killed writer's queue entry lasts after
	// its last look: its poll interval and handoff window (the defaults).
	deadEntry = 2 * time.Second
	// deadHold is how long the long reader holds at most: the reader
	// behind the dead writer is granted long before, or it was held up
	// until the long reader left.
	deadHold = 12 * time.Second
)

// TestKilledWriterHoldsUpReadersOnlyItsEntry: a reader holds an RWMutex
// (a lease of 5 s, renewed); a writer in a child process queues behind it,
// with the Client's defaults (a poll of 1 s, a handoff window of 1 s), and is
// killed (SIGKILL). A reader that asks 0.2 s after the kill is granted
// beside the long reader once the dead writer's queue entry has run out
// (its poll interval and handoff window after its last look), not when the
// long reader leaves (issue 38: 4.78 s later, when it released; the reader
// holds 12 s here).
func TestKilledWriterHoldsUpReadersOnlyItsEntry(t *testing.T) {
	srv := faults.StartRedis(t)
	ctx := ctxTimeout(t, 60*time.Second)
	const name = "dead-writer"
	long, err := newClient(t, newRedis(t, srv.Addr)).RWMutex(name, deadReaders)
	require.NoError(t, err)
	held, err := long.RLock(ctx, lock.Options{Lease: 5 * time.Second})
	require.NoError(t, err)

	ch := startChild(t, "rwwriter", "FAULTS_REDIS="+srv.Addr, "FAULTS_LOCK="+name)
	require.Eventually(t, func() bool {
		st, err := long.Inspect(ctx)
		return err == nil && len(st.Queue) == 1
	}, 10*time.Second, 5*time.Millisecond, "the writer queues")
	time.Sleep(1500 * time.Millisecond) // it looks again, as a live waiter does
	require.NoError(t, ch.Cmd.Process.Signal(syscall.SIGKILL))
	killed := time.Now()
	fault(t, "SIGKILL the queued writer")
	_ = ch.Wait(ctx)
	time.Sleep(200 * time.Millisecond)

	reader, err := newClient(t, newRedis(t, srv.Addr)).RWMutex(name, deadReaders)
	require.NoError(t, err)
	got := make(chan *lock.Hold, 1)
	go func() {
		h, err := reader.RLock(ctx, lock.Options{Wait: true, MaxWait: 30 * time.Second, Lease: 5 * time.Second})
		expect(t, err == nil, "the reader behind the dead writer: %v", err)
		got <- h
	}()
	var h *lock.Hold
	longHeld := true
	select {
	case h = <-got:
	case <-time.After(deadHold):
		require.NoError(t, held.Release(ctx))
		longHeld = false
		h = <-got
	}
	took := time.Since(killed)
	stats.grants.Add(1)
	t.Logf("the reader behind the killed writer was granted %v after the kill (its entry lasts %v after its last look)", took.Round(time.Millisecond), deadEntry)
	expect(t, longHeld, "the reader was granted only when the long reader left, %v after the kill", took)
	expect(t, took < deadEntry+2*time.Second, "the reader was granted %v after the kill, want < %v (the dead writer's entry and a margin)", took, deadEntry+2*time.Second)
	if h != nil {
		st, err := reader.Inspect(ctx)
		require.NoError(t, err)
		expect(t, len(st.Holders) == 2 && len(st.Queue) == 0, "the two readers hold, nobody waits: %+v", st)
		require.NoError(t, h.Release(ctx))
	}
	if longHeld {
		require.NoError(t, held.Release(ctx))
	}
}

// roleRWWriter is the child of TestKilledWriterHoldsUpReadersOnlyItsEntry:
// it waits for the write lock of an RWMutex with the Client's defaults, and
// is killed while it waits.
func roleRWWriter(t *testing.T) {
	rc, name := childRedis(t)
	m, err := newClient(t, rc).RWMutex(name, deadReaders)
	require.NoError(t, err)
	_, err = m.Lock(ctxTimeout(t, 50*time.Second), lock.Options{Wait: true, MaxWait: 45 * time.Second})
	t.Fatalf("the writer should have been killed while it waited; its wait ended: %v", err)
}
