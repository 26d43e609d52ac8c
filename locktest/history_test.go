package locktest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/testenv"
)

// TestQueueTellsAHandOff: a Queue call of a waiter can return a grant made
// before it, by the Release that handed the lock on while the waiter was
// queued, when the waiter's inbox was not told (a LISTEN connection cut,
// in postgres/ TestHistoryDroppedConnections, which failed 3 runs of 40 on
// this, and faults/ TestHistoryRedisRestart once: Observe read the
// hand-off, then the waiter's next Queue returned it). The recorder takes
// such a grant as made at any point after the waiter first queued, as it
// does a grant told to the inbox; not before.
func TestQueueTellsAHandOff(t *testing.T) {
	ctx := testenv.Context(t, 10*time.Second)
	const ttl = time.Minute

	t.Run("observed before the waiter's Queue returned it", func(t *testing.T) {
		mem := lock.NewMemoryProvider()
		h := NewHistory()
		a, b := h.Provider(mem), h.Provider(mem)
		c, err := lock.NewClient(h.Provider(mem), lock.WithPollInterval(5*time.Millisecond))
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		key := c.Key("role")
		_, err = a.Acquire(ctx, key, "owner-a", ttl)
		require.NoError(t, err)
		// b's inbox is listened to past the recorder: the notice of the
		// hand-off never reaches b's Client.
		stop, err := mem.Listen(ctx, "inbox-b", func(lock.Notice) {})
		require.NoError(t, err)
		defer stop()
		w := lock.Wait{Owner: "owner-b", TTL: ttl, Inbox: "inbox-b", Look: lock.LookFirst}
		rec, err := b.Queue(ctx, key, w)
		require.NoError(t, err)
		require.True(t, rec.Queued, "b queues behind a")

		octx, cancel := context.WithCancel(ctx)
		defer cancel()
		ch, err := c.Observe(octx, "role")
		require.NoError(t, err)
		done := h.Observe(c, "role", ch)
		require.NoError(t, a.Release(ctx, key, "owner-a")) // hands the lock to b
		require.Eventually(t, func() bool { return observedOwner(h, "owner-b") },
			5*time.Second, time.Millisecond, "Observe sends b's term")

		w.Look = lock.LookAgain
		rec, err = b.Queue(ctx, key, w)
		require.NoError(t, err)
		require.Equal(t, "owner-b", rec.Owner, "b's next Queue finds the lock its own")
		cancel()
		<-done

		r := h.Check(t.TempDir(), t.Name())
		assert.Empty(t, r.Illegal, "a hand-off observed before the waiter's Queue told it: %s", r)
	})

	t.Run("a claim handed off, then another granted, then the Queue that tells it", func(t *testing.T) {
		mem := lock.NewMemoryProvider()
		h := NewHistory()
		a, b, c := h.Provider(mem), h.Provider(mem), h.Provider(mem)
		const key = "lock:{sem}"
		claim := func(owner string, weight int) lock.Claim {
			return lock.Claim{Owner: owner, Weight: weight, Limit: 2, Kind: lock.KindSemaphore, TTL: ttl, Inbox: "inbox-" + owner}
		}
		_, err := a.AcquireClaim(ctx, key, claim("a", 2))
		require.NoError(t, err)
		stop, err := mem.Listen(ctx, "inbox-b", func(lock.Notice) {})
		require.NoError(t, err)
		defer stop()
		rec, err := b.QueueClaim(ctx, key, claim("b", 1))
		require.NoError(t, err)
		require.True(t, rec.Queued, "b queues behind a")
		require.NoError(t, a.ReleaseClaim(ctx, key, "a")) // hands a claim to b
		rec, err = c.AcquireClaim(ctx, key, claim("c", 1))
		require.NoError(t, err)
		require.Equal(t, "c", rec.Owner, "c's claim fits beside b's")
		cTok := rec.Token
		cb := claim("b", 1)
		cb.Look = lock.LookAgain
		rec, err = b.QueueClaim(ctx, key, cb)
		require.NoError(t, err)
		require.Equal(t, "b", rec.Owner, "b's next QueueClaim finds its claim")
		require.Less(t, rec.Token, cTok, "b's claim was granted before c's")

		r := h.Check(t.TempDir(), t.Name())
		assert.Empty(t, r.Illegal, "a claim handed off before another was granted, told later: %s", r)
	})

	t.Run("observed before the owner queued", func(t *testing.T) {
		// A store that says b leads before b asked: the grant its Queue
		// returns cannot be placed before that Queue's call.
		mem := lock.NewMemoryProvider()
		h := NewHistory()
		key := "lock:{role}"
		b := h.Provider(&testenv.Hooked{Provider: mem,
			OnQueue: func(context.Context, string, lock.Wait) (lock.Record, error) {
				return lock.Record{Owner: "owner-b", Token: 9, TTL: ttl}, nil
			}})
		call := h.Now()
		h.add(h.Process(), input{kind: opObserved, part: partObserve + key + " #0", via: key}, call,
			output{res: resOK, token: 9, owner: "owner-b"}, h.Now())
		_, err := b.Queue(ctx, key, lock.Wait{Owner: "owner-b", TTL: ttl, Inbox: "inbox-b"})
		require.NoError(t, err)

		r := h.Check(t.TempDir(), t.Name())
		assert.Equal(t, []string{partObserve + key + " #0"}, r.Illegal, "a term observed before its owner queued: %s", r)
	})
}

// TestObserveReadsAGrantWhoseReplyWasLost: an Acquire whose reply was lost
// (a connection cut after the store granted it) is of unknown outcome, and
// its Client releases the record in the background; until then Observe may
// read the term, which no recorded grant has and whose owner never queued.
// The Observe's model takes a grant of unknown outcome as one of any token,
// after its call.
func TestObserveReadsAGrantWhoseReplyWasLost(t *testing.T) {
	ctx := testenv.Context(t, 10*time.Second)
	mem := lock.NewMemoryProvider()
	h := NewHistory()
	x := h.Provider(&testenv.Hooked{Provider: mem,
		OnAcquire: func(ctx context.Context, key, owner string, ttl time.Duration) (lock.Record, error) {
			if _, err := mem.Acquire(ctx, key, owner, ttl); err != nil {
				return lock.Record{}, err
			}
			return lock.Record{}, errors.New("connection reset: the reply was lost")
		}})
	c, err := lock.NewClient(h.Provider(mem), lock.WithPollInterval(5*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	key := c.Key("role")
	octx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, err := c.Observe(octx, "role")
	require.NoError(t, err)
	done := h.Observe(c, "role", ch)

	_, err = x.Acquire(ctx, key, "owner-x", time.Minute)
	require.Error(t, err)
	require.Eventually(t, func() bool { return observedOwner(h, "owner-x") },
		5*time.Second, time.Millisecond, "Observe sends x's term")
	require.NoError(t, x.Release(ctx, key, "owner-x"))
	cancel()
	<-done

	r := h.Check(t.TempDir(), t.Name())
	assert.Empty(t, r.Illegal, "a term whose grant's reply was lost, observed: %s", r)
	assert.Equal(t, 2, r.Open, "the Acquire is of unknown outcome (and its copy in the Observe's partition)")
}

// observedOwner reports whether h holds a Leader sent by Observe that names
// owner.
func observedOwner(h *History, owner string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, op := range h.ops {
		if op.Input.(input).kind == opObserved && op.Output.(output).owner == owner {
			return true
		}
	}
	return false
}
