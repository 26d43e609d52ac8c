package lock_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
)

// TestInspectAndForceRelease: an operator sees who holds a lock, from which
// process, since when and until when, and with how many waiters; a forced
// release hands the lock to the waiter, is logged and emitted, and the
// holder is told its lock is lost at its next renewal.
func TestInspectAndForceRelease(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxTimeout(t, time.Minute)
		var logs bytes.Buffer
		rec := newRecorder()
		holder := newClient(t, b.replica(t), lock.WithIdentity("host-a:42"))
		waiter := newClient(t, b.replica(t), lock.WithIdentity("host-b:7"))
		operator := newClient(t, b.replica(t), rec.option(),
			lock.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))))
		name := uniqueName(t)

		s, err := operator.Inspect(ctx, name)
		require.NoError(t, err)
		assert.Equal(t, lock.Status{Name: name, Key: operator.Key(name)}, s, "a free lock")
		assert.True(t, s.Free())

		before := time.Now()
		l, err := holder.Acquire(ctx, name, lock.Options{Lease: 900 * time.Millisecond})
		require.NoError(t, err)
		s, err = operator.Inspect(ctx, name)
		require.NoError(t, err)
		assert.False(t, s.Free())
		assert.Equal(t, l.Owner(), s.Owner)
		assert.True(t, strings.HasPrefix(l.Owner(), "host-a:42/"), "the owner starts with the holder's identity: %q", l.Owner())
		assert.Equal(t, "host-a:42", s.Identity)
		assert.Equal(t, l.Token(), s.Token)
		assert.WithinDuration(t, before, s.Since, 2*time.Second, "Since is the grant's time")
		assert.True(t, s.Until.After(time.Now()), "Until is ahead")
		assert.WithinDuration(t, time.Now().Add(900*time.Millisecond), s.Until, 2*time.Second, "Until is about a lease ahead")
		assert.False(t, s.GracePeriod)

		got := make(chan *lock.Lock, 1)
		go func() {
			wl, err := waiter.Acquire(ctx, name, lock.Options{Wait: true, MaxWait: 30 * time.Second})
			assert.NoError(t, err, "the waiter is handed the lock")
			got <- wl
		}()
		awaitWaiters(t, operator, name, 1, "Inspect counts the waiter")

		s, err = operator.ForceRelease(ctx, name)
		require.NoError(t, err)
		assert.Equal(t, l.Owner(), s.Owner, "ForceRelease returns what it removed")
		assert.Equal(t, l.Token(), s.Token)
		e := waitEvent(t, rec, lock.EventForceReleased)
		assert.Equal(t, l.Owner(), e.Owner)
		assert.Equal(t, l.Token(), e.Token)
		assert.Equal(t, operator.Key(name), e.Key)
		assert.Contains(t, logs.String(), "lock: forced release", "a forced release is logged at warning level")
		assert.Contains(t, logs.String(), l.Owner())

		var wl *lock.Lock
		select {
		case wl = <-got:
		case <-time.After(10 * time.Second):
			t.Fatal("the waiter was not handed the lock within 10s of the forced release")
		}
		require.NotNil(t, wl)
		assert.Greater(t, wl.Token(), l.Token())
		select {
		case <-l.Done():
			assert.ErrorIs(t, l.Err(), lock.ErrLost, "the holder is told its lock is lost")
		case <-time.After(10 * time.Second):
			t.Fatal("the holder was not told within 10s (its lease is 900ms, renewed every 300ms)")
		}
		assert.ErrorIs(t, l.Release(ctx), lock.ErrLost)
		s, err = operator.Inspect(ctx, name)
		require.NoError(t, err)
		assert.Equal(t, wl.Owner(), s.Owner, "the waiter holds it now")
		assert.Equal(t, "host-b:7", s.Identity)
		require.NoError(t, wl.Release(ctx))

		s, err = operator.ForceRelease(ctx, name)
		require.NoError(t, err)
		assert.True(t, s.Free(), "a forced release of a free lock finds nothing")
		assert.Empty(t, drainKind(rec, lock.EventForceReleased), "nothing forced, nothing emitted")
	})
}

// TestInspectGracePeriod: a lock in its grace period shows as such, and a
// forced release ends the window.
func TestInspectGracePeriod(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxTimeout(t, time.Minute)
		c := newClient(t, b.replica(t))
		name := uniqueName(t)
		require.NoError(t, c.Do(ctx, name, lock.Options{GracePeriod: time.Hour}, func(context.Context) error { return nil }))
		s, err := c.Inspect(ctx, name)
		require.NoError(t, err)
		assert.True(t, s.GracePeriod)
		assert.WithinDuration(t, time.Now().Add(time.Hour), s.Until, 10*time.Second, "the window ends in an hour")
		_, err = c.Acquire(ctx, name, lock.Options{})
		require.ErrorIs(t, err, lock.ErrGracePeriod)
		_, err = c.ForceRelease(ctx, name)
		require.NoError(t, err)
		l, err := c.Acquire(ctx, name, lock.Options{})
		require.NoError(t, err, "a forced release ends the grace period")
		require.NoError(t, l.Release(ctx))
	})
}

// TestList: List finds the Client's locks, held or in a grace period, by
// name (names with braces included), sorted, bounded by its limit.
func TestList(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxTimeout(t, time.Minute)
		c := newClient(t, b.replica(t), lock.WithPrefix("lock:"+uniqueName(t)+":"), lock.WithIdentity("lister"))
		other := newClient(t, b.replica(t), lock.WithPrefix("other:"+uniqueName(t)+":"))
		names := []string{"a", "b{x}", "c}", "d", "{e}", "}x"}
		var held []*lock.Lock
		for _, n := range names {
			l, err := c.Acquire(ctx, n, lock.Options{})
			require.NoError(t, err)
			held = append(held, l)
		}
		require.NoError(t, c.Do(ctx, "f-window", lock.Options{GracePeriod: time.Minute}, func(context.Context) error { return nil }))
		ol, err := other.Acquire(ctx, "a", lock.Options{})
		require.NoError(t, err)
		t.Cleanup(func() {
			for _, l := range append(held, ol) {
				_ = l.Release(context.Background())
			}
			_, _ = c.ForceRelease(context.Background(), "f-window")
		})

		locks, more, err := c.List(ctx, 100)
		require.NoError(t, err)
		assert.False(t, more)
		var got []string
		for _, s := range locks {
			require.NoError(t, s.Err)
			got = append(got, s.Name)
			assert.Equal(t, c.Key(s.Name), s.Key)
			assert.Equal(t, "lister", s.Identity)
			assert.Equal(t, s.Name == "f-window", s.GracePeriod, "%s", s.Name)
		}
		assert.Equal(t, []string{"a", "b{x}", "c}", "d", "f-window", "{e}", "}x"}, got, "every lock of the prefix, by name, and none of another prefix")
		for i, l := range held {
			assert.Equal(t, l.Owner(), locks[indexOf(got, names[i])].Owner)
		}

		locks, more, err = c.List(ctx, 2)
		require.NoError(t, err)
		assert.Len(t, locks, 2)
		assert.True(t, more, "more locks than the limit")

		_, _, err = c.List(ctx, 0)
		assert.ErrorIs(t, err, lock.ErrInvalidArgument)

		if b.raw == nil {
			return
		}
		// A key under the prefix that holds something else than a record is
		// listed with its error, and left alone.
		bad := c.Key("garbage")
		require.NoError(t, b.raw.Set(ctx, bad, "not a record", time.Minute).Err())
		locks, _, err = c.List(ctx, 100)
		require.NoError(t, err)
		i := indexOf(statusNames(locks), "garbage")
		require.GreaterOrEqual(t, i, 0, "the corrupt key is listed")
		assert.ErrorIs(t, locks[i].Err, lock.ErrCorruptRecord)
		_, err = c.Inspect(ctx, "garbage")
		assert.ErrorIs(t, err, lock.ErrCorruptRecord)
		_, err = c.ForceRelease(ctx, "garbage")
		assert.ErrorIs(t, err, lock.ErrCorruptRecord)
		v, err := b.raw.Get(ctx, bad).Result()
		require.NoError(t, err)
		assert.Equal(t, "not a record", v, "a corrupt value is left as it is")
	})
}

func statusNames(locks []lock.Status) []string {
	var ns []string
	for _, s := range locks {
		ns = append(ns, s.Name)
	}
	return ns
}

func indexOf(ss []string, s string) int {
	for i := range ss {
		if ss[i] == s {
			return i
		}
	}
	return -1
}

// drainKind returns the recorded events of kind, and drops the others.
func drainKind(r *recorder, kind lock.EventKind) []lock.Event {
	var es []lock.Event
	for _, e := range drain(r) {
		if e.Kind == kind {
			es = append(es, e)
		}
	}
	return es
}

// TestInspectShowsTheStoredKind: Inspect and List show a counted name with
// the kind its store keeps (issue 38), not one guessed from its holders'
// owners: a name claimed through the provider by owners that carry no
// Semaphore's or RWMutex's tag is still shown as the RWMutex it is, and a
// lock of its name is refused.
func TestInspectShowsTheStoredKind(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxTimeout(t, 30*time.Second)
		p := b.replica(t)
		c := newClient(t, p)
		name := uniqueName(t)
		key := c.Key(name)
		for _, owner := range []string{"plain-1", "plain-2"} {
			rec, err := p.AcquireClaim(ctx, key, lock.Claim{Owner: owner, Weight: 1, Limit: 4, Kind: lock.KindRWMutex, TTL: time.Minute})
			require.NoError(t, err)
			require.Equal(t, owner, rec.Owner)
		}
		st, err := c.Inspect(ctx, name)
		require.NoError(t, err)
		assert.Equal(t, "rwmutex", st.Kind, "Inspect: %+v", st)
		assert.Equal(t, []int{4, 2}, []int{st.Limit, st.Used})
		assert.False(t, st.Free())
		all, _, err := c.List(ctx, 100)
		require.NoError(t, err)
		var listed []lock.Status
		for _, s := range all {
			if s.Name == name {
				listed = append(listed, s)
			}
		}
		if assert.Len(t, listed, 1, "one entry: the name is one kind") {
			assert.Equal(t, "rwmutex", listed[0].Kind, "List: %+v", listed[0])
		}
		_, err = c.Acquire(ctx, name, lock.Options{})
		assert.ErrorIs(t, err, lock.ErrInvalidArgument)
		assert.ErrorContains(t, err, "is in use as an RWMutex, not a lock")
		for _, owner := range []string{"plain-1", "plain-2"} {
			require.NoError(t, p.ReleaseClaim(ctx, key, owner))
		}
		st, err = c.Inspect(ctx, name)
		require.NoError(t, err)
		assert.Equal(t, lock.Status{Name: name, Key: key}, st, "free once it holds nothing")
	})
}
