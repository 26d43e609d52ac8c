package lock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/testenv"
)

// TestErrorOutcomes is the table of every way an acquisition, a release
// and an Extend can fail, each produced by a real call on a memory
// provider (behind a fake one where the provider must fail), and what the
// error answers: its message, which of the sentinels (and the context's
// and the provider's own errors) errors.Is finds in it, and whether
// errors.As finds a *NotAcquiredError (and whether its Provider is set), a
// *LostError or a *RecordError. It
// pins what callers can test for (issue 32, item 3): a change to how the
// errors are built must leave every row as it is. LOCK_PRINT_OUTCOMES=1
// prints the rows the code gives, to compare.
func TestErrorOutcomes(t *testing.T) {
	sentinels := []struct {
		name string
		err  error
	}{
		{"NotAcquired", lock.ErrNotAcquired}, {"Held", lock.ErrHeld}, {"GracePeriod", lock.ErrGracePeriod},
		{"Timeout", lock.ErrTimeout}, {"Closed", lock.ErrClosed}, {"Unavailable", lock.ErrUnavailable},
		{"Lost", lock.ErrLost}, {"Released", lock.ErrReleased}, {"InvalidArgument", lock.ErrInvalidArgument},
		{"CorruptRecord", lock.ErrCorruptRecord}, {"Canceled", context.Canceled},
		{"DeadlineExceeded", context.DeadlineExceeded}, {"errDown", errDown}, {"GrantedLate", lock.ErrGrantedLate},
	}
	matches := func(err error) string {
		var is []string
		for _, s := range sentinels {
			if errors.Is(err, s.err) {
				is = append(is, s.name)
			}
		}
		var na *lock.NotAcquiredError
		var le *lock.LostError
		var re *lock.RecordError
		if errors.As(err, &na) {
			is = append(is, "*NotAcquiredError")
			if na.Provider != nil {
				is = append(is, "Provider")
			}
		}
		if errors.As(err, &le) {
			is = append(is, "*LostError")
		}
		if errors.As(err, &re) {
			is = append(is, "*RecordError")
		}
		return strings.Join(is, " ")
	}

	short := func(ctx context.Context, d time.Duration) context.Context {
		ctx, cancel := context.WithTimeout(ctx, d)
		t.Cleanup(cancel)
		return ctx
	}
	held := func(t *testing.T, p lock.Provider, o lock.Options) {
		_, err := newClient(t, p).Acquire(context.Background(), "job", o)
		require.NoError(t, err)
	}
	down := func(mode string) (*lock.Client, *atomic.Value) {
		var m atomic.Value
		m.Store(mode)
		return newClient(t, downProvider(lock.NewMemoryProvider(), &m), lock.WithReleaseTimeout(time.Second)), &m
	}
	cases := []struct {
		name string
		run  func(t *testing.T, ctx context.Context) error
		want [2]string // the message, what it matches
	}{
		{"held", func(t *testing.T, ctx context.Context) error {
			mem := lock.NewMemoryProvider()
			held(t, mem, lock.Options{})
			_, err := newClient(t, mem).Acquire(ctx, "job", lock.Options{})
			return err
		}, [2]string{`lock: could not acquire "lock:{job}": held by another owner`, "NotAcquired Held *NotAcquiredError"}},
		{"grace period", func(t *testing.T, ctx context.Context) error {
			mem := lock.NewMemoryProvider()
			c := newClient(t, mem)
			l, err := c.Acquire(ctx, "job", lock.Options{GracePeriod: time.Minute})
			require.NoError(t, err)
			require.NoError(t, l.Release(ctx))
			_, err = c.Acquire(ctx, "job", lock.Options{})
			return err
		}, [2]string{`lock: could not acquire "lock:{job}": in grace period (holder: this Client)`, "NotAcquired GracePeriod *NotAcquiredError"}},
		{"wait timed out", func(t *testing.T, ctx context.Context) error {
			mem := lock.NewMemoryProvider()
			held(t, mem, lock.Options{})
			_, err := newClient(t, mem).Acquire(ctx, "job", lock.Options{Wait: true, MaxWait: 50 * time.Millisecond})
			return err
		}, [2]string{`lock: could not acquire "lock:{job}": wait timed out`, "NotAcquired Timeout *NotAcquiredError"}},
		{"wait cancelled", func(t *testing.T, ctx context.Context) error {
			mem := lock.NewMemoryProvider()
			held(t, mem, lock.Options{})
			ctx, cancel := context.WithCancel(ctx)
			time.AfterFunc(50*time.Millisecond, cancel)
			_, err := newClient(t, mem).Acquire(ctx, "job", lock.Options{Wait: true})
			return err
		}, [2]string{`lock: could not acquire "lock:{job}": context canceled`, "NotAcquired Canceled *NotAcquiredError"}},
		{"wait deadline", func(t *testing.T, ctx context.Context) error {
			mem := lock.NewMemoryProvider()
			held(t, mem, lock.Options{})
			_, err := newClient(t, mem).Acquire(short(ctx, 50*time.Millisecond), "job", lock.Options{Wait: true})
			return err
		}, [2]string{`lock: could not acquire "lock:{job}": context deadline exceeded`, "NotAcquired DeadlineExceeded *NotAcquiredError"}},
		{"closed during wait", func(t *testing.T, ctx context.Context) error {
			mem := lock.NewMemoryProvider()
			held(t, mem, lock.Options{})
			c, err := lock.NewClient(mem)
			require.NoError(t, err)
			time.AfterFunc(50*time.Millisecond, func() { _ = c.Close() })
			_, err = c.Acquire(ctx, "job", lock.Options{Wait: true})
			return err
		}, [2]string{`lock: could not acquire "lock:{job}": client closed`, "NotAcquired Closed *NotAcquiredError"}},
		{"after close", func(t *testing.T, ctx context.Context) error {
			c, err := lock.NewClient(lock.NewMemoryProvider())
			require.NoError(t, err)
			require.NoError(t, c.Close())
			_, err = c.Acquire(ctx, "job", lock.Options{})
			return err
		}, [2]string{`lock: client closed`, "Closed"}},
		{"provider failed", func(t *testing.T, ctx context.Context) error {
			c, _ := down("fail")
			_, err := c.Acquire(ctx, "job", lock.Options{})
			return err
		}, [2]string{`lock: acquire "lock:{job}": ` + errDown.Error(), "Unavailable errDown"}},
		{"provider failed in a wait", func(t *testing.T, ctx context.Context) error {
			c, _ := down("fail")
			_, err := c.Acquire(ctx, "job", lock.Options{Wait: true, Fair: true})
			return err
		}, [2]string{`lock: wait "lock:{job}": ` + errDown.Error(), "Unavailable errDown"}},
		{"no answer before the deadline", func(t *testing.T, ctx context.Context) error {
			c, _ := down("hang")
			_, err := c.Acquire(short(ctx, 50*time.Millisecond), "job", lock.Options{})
			return err
		}, [2]string{`lock: could not acquire "lock:{job}": context deadline exceeded: acquire: no answer from the provider`, "NotAcquired Unavailable DeadlineExceeded *NotAcquiredError Provider"}},
		{"no answer, the last error kept", func(t *testing.T, ctx context.Context) error {
			c, mode := down("fail")
			_, err := c.Acquire(ctx, "job", lock.Options{})
			require.Error(t, err)
			mode.Store("hang")
			_, err = c.Acquire(short(ctx, 50*time.Millisecond), "job", lock.Options{})
			return err
		}, [2]string{`lock: could not acquire "lock:{job}": context deadline exceeded: acquire: no answer from the provider (its last error: ` + errDown.Error() + `)`, "NotAcquired Unavailable DeadlineExceeded errDown *NotAcquiredError Provider"}},
		{"provider failed as the wait ended", func(t *testing.T, ctx context.Context) error {
			ctx, cancel := context.WithCancel(ctx)
			p := &hookedProvider{Provider: lock.NewMemoryProvider(), OnAcquire: func(context.Context, string, string, time.Duration) (lock.Record, error) {
				cancel()
				return lock.Record{}, errDown
			}}
			_, err := newClient(t, p).Acquire(ctx, "job", lock.Options{})
			return err
		}, [2]string{`lock: could not acquire "lock:{job}": context canceled: acquire: ` + errDown.Error(), "NotAcquired Unavailable Canceled errDown *NotAcquiredError Provider"}},
		{"granted too late", func(t *testing.T, ctx context.Context) error {
			mem := lock.NewMemoryProvider()
			p := &hookedProvider{Provider: mem, OnAcquire: func(ctx context.Context, key, owner string, ttl time.Duration) (lock.Record, error) {
				rec, err := mem.Acquire(ctx, key, owner, ttl)
				time.Sleep(2 * ttl)
				return rec, err
			}}
			_, err := newClient(t, p).Acquire(ctx, "job", lock.Options{Lease: 20 * time.Millisecond})
			return err
		}, [2]string{`lock: could not acquire "lock:{job}": granted after its lease had run out (a slow answer or a paused process); handed back`, "NotAcquired GrantedLate *NotAcquiredError"}},
		{"bad name", func(t *testing.T, ctx context.Context) error {
			_, err := newClient(t, lock.NewMemoryProvider()).Acquire(ctx, "", lock.Options{})
			return err
		}, [2]string{`lock: invalid argument: empty lock name`, "InvalidArgument"}},
		{"a role taken as a lock", func(t *testing.T, ctx context.Context) error {
			mem := lock.NewMemoryProvider()
			_, err := newClient(t, mem).Campaign(ctx, "job", lock.ElectionOptions{})
			require.NoError(t, err)
			_, err = newClient(t, mem).Acquire(ctx, "job", lock.Options{Wait: true})
			return err
		}, [2]string{`lock: invalid argument: "lock:{job}" is in use as an election role (Campaign, Lead), not a lock (Acquire, Do): a name is one kind at a time`, "InvalidArgument"}},
		// One name, one kind (issue 38): a lock, a role, a Semaphore and
		// an RWMutex of one name refuse each other, naming both kinds.
		{"a lock taken as a Semaphore", func(t *testing.T, ctx context.Context) error {
			c := newClient(t, lock.NewMemoryProvider())
			_, err := c.Acquire(ctx, "job", lock.Options{})
			require.NoError(t, err)
			sem, err := c.Semaphore("job", 2)
			require.NoError(t, err)
			_, err = sem.Acquire(ctx, 1, lock.Options{})
			return err
		}, [2]string{`lock: invalid argument: "lock:{job}" is in use as a lock (Acquire, Do), not a Semaphore: a name is one kind at a time`, "InvalidArgument"}},
		{"a Semaphore taken as a lock", func(t *testing.T, ctx context.Context) error {
			c := newClient(t, lock.NewMemoryProvider())
			sem, err := c.Semaphore("job", 2)
			require.NoError(t, err)
			_, err = sem.Acquire(ctx, 1, lock.Options{})
			require.NoError(t, err)
			_, err = c.Acquire(ctx, "job", lock.Options{Wait: true})
			return err
		}, [2]string{`lock: invalid argument: "lock:{job}" is in use as a Semaphore, not a lock (Acquire, Do): a name is one kind at a time`, "InvalidArgument"}},
		{"a Semaphore taken as an RWMutex", func(t *testing.T, ctx context.Context) error {
			c := newClient(t, lock.NewMemoryProvider())
			sem, err := c.Semaphore("job", 2)
			require.NoError(t, err)
			_, err = sem.Acquire(ctx, 1, lock.Options{})
			require.NoError(t, err)
			m, err := c.RWMutex("job", 2)
			require.NoError(t, err)
			_, err = m.RLock(ctx, lock.Options{Wait: true})
			return err
		}, [2]string{`lock: invalid argument: "lock:{job}" is in use as a Semaphore, not an RWMutex: a name is one kind at a time`, "InvalidArgument"}},
		{"an RWMutex taken as a Semaphore", func(t *testing.T, ctx context.Context) error {
			c := newClient(t, lock.NewMemoryProvider())
			m, err := c.RWMutex("job", 2)
			require.NoError(t, err)
			_, err = m.Lock(ctx, lock.Options{})
			require.NoError(t, err)
			sem, err := c.Semaphore("job", 2)
			require.NoError(t, err)
			_, err = sem.Acquire(ctx, 1, lock.Options{})
			return err
		}, [2]string{`lock: invalid argument: "lock:{job}" is in use as an RWMutex, not a Semaphore: a name is one kind at a time`, "InvalidArgument"}},
		{"a role taken as an RWMutex", func(t *testing.T, ctx context.Context) error {
			c := newClient(t, lock.NewMemoryProvider())
			_, err := c.Campaign(ctx, "job", lock.ElectionOptions{})
			require.NoError(t, err)
			m, err := c.RWMutex("job", 2)
			require.NoError(t, err)
			_, err = m.Lock(ctx, lock.Options{})
			return err
		}, [2]string{`lock: invalid argument: "lock:{job}" is in use as an election role (Campaign, Lead), not an RWMutex: a name is one kind at a time`, "InvalidArgument"}},
		{"a Semaphore campaigned for", func(t *testing.T, ctx context.Context) error {
			c := newClient(t, lock.NewMemoryProvider())
			sem, err := c.Semaphore("job", 2)
			require.NoError(t, err)
			_, err = sem.Acquire(ctx, 1, lock.Options{})
			require.NoError(t, err)
			_, err = c.Campaign(ctx, "job", lock.ElectionOptions{})
			return err
		}, [2]string{`lock: invalid argument: "lock:{job}" is in use as a Semaphore, not an election role (Campaign, Lead): a name is one kind at a time`, "InvalidArgument"}},
		{"corrupt record", func(t *testing.T, ctx context.Context) error {
			p := &hookedProvider{Provider: lock.NewMemoryProvider(), OnAcquire: func(_ context.Context, key, _ string, _ time.Duration) (lock.Record, error) {
				return lock.Record{}, &lock.RecordError{Key: key, Value: "xyz"}
			}}
			_, err := newClient(t, p).Acquire(ctx, "job", lock.Options{})
			return err
		}, [2]string{`lock: corrupt record at "lock:{job}": "xyz"`, "CorruptRecord *RecordError"}},
		{"release of a lock taken", func(t *testing.T, ctx context.Context) error {
			mem := lock.NewMemoryProvider()
			c := newClient(t, mem)
			l, err := c.Acquire(ctx, "job", lock.Options{})
			require.NoError(t, err)
			_, err = c.ForceRelease(ctx, "job")
			require.NoError(t, err)
			return l.Release(ctx)
		}, [2]string{`lock: lost "lock:{job}" (token 1): its record was removed before its lease ran out (a forced release, or the server lost it)`, "Lost *LostError"}},
		{"release after release", func(t *testing.T, ctx context.Context) error {
			l, err := newClient(t, lock.NewMemoryProvider()).Acquire(ctx, "job", lock.Options{})
			require.NoError(t, err)
			require.NoError(t, l.Release(ctx))
			return l.Release(ctx)
		}, [2]string{`lock: release "lock:{job}": already released`, "Released"}},
	}
	print := os.Getenv("LOCK_PRINT_OUTCOMES") != ""
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.run(t, ctxTimeout(t, 10*time.Second))
			require.Error(t, err)
			got := [2]string{err.Error(), matches(err)}
			if print {
				fmt.Printf("%s\n\t%q\n\t%q\n", tc.name, got[0], got[1])
			}
			assert.Equal(t, tc.want, got)
		})
	}
}

// TestDeadlineErrorBeforeTheTimer: a provider call that its client ends at
// the caller's deadline (go-redis with ContextTimeoutEnabled sets the
// socket's deadline to the context's) returns the context's error a moment
// before the context's own timer marks it ended. The wait that ends then is
// a *NotAcquiredError whose Reason is the deadline, with the call
// unanswered (ErrUnavailable), as when the timer came first; it was the
// provider's error alone, not ErrNotAcquired (issue 38, seen in the
// benchmark module: "lock: wait ...: context deadline exceeded").
func TestDeadlineErrorBeforeTheTimer(t *testing.T) {
	mem := lock.NewMemoryProvider()
	p := &testenv.Hooked{Provider: mem, OnQueue: func(ctx context.Context, key string, w lock.Wait) (lock.Record, error) {
		d, _ := ctx.Deadline()
		time.Sleep(time.Until(d)) // the socket's deadline: the context's timer may not have run yet
		return lock.Record{}, fmt.Errorf("read: %w", context.DeadlineExceeded)
	}}
	c := testenv.NewClient(t, p)
	name := testenv.Name(t)
	holder := testenv.MustAcquire(t, mem, c.Key(name), testenv.NewOwner(), time.Minute)
	require.NotEmpty(t, holder.Owner)
	for _, fair := range []bool{false, true} {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		_, err := c.Acquire(ctx, name, lock.Options{Wait: true, Fair: fair})
		cancel()
		require.Error(t, err)
		assert.ErrorIs(t, err, lock.ErrNotAcquired, "fair %v: %v", fair, err)
		assert.ErrorIs(t, err, context.DeadlineExceeded, "fair %v: %v", fair, err)
		assert.ErrorIs(t, err, lock.ErrUnavailable, "fair %v: %v", fair, err)
	}
}
