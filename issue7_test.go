package lock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
)

// Tests of issue 7 ("truth under faults and at the edges"), one or more per
// item; each fails on the behaviour the issue describes.

// --- 7.2: Close wakes waiters ---

// keepInboxes passes every call on to a MemoryProvider, but keeps an inbox
// registered after its stop is called (until the test ends): a grant is
// still handed to a waiter whose Client has closed, as on a Redis Cluster,
// where PUBLISH cannot tell that nobody listens. A closed waiter left in the
// wait queue then gets the lock, and holds it for nobody.
type keepInboxes struct {
	*lock.MemoryProvider
	t testing.TB
}

func (p keepInboxes) Listen(ctx context.Context, inbox string, deliver func(lock.Grant)) (func(), error) {
	stop, err := p.MemoryProvider.Listen(ctx, inbox, deliver)
	if err != nil {
		return nil, err
	}
	p.t.Cleanup(stop)
	return func() {}, nil
}

// TestIssue7CloseWakesWaiters: Close wakes every waiter of the Client with an
// error matching ErrClosed, promptly; none of them acquires afterwards; they
// leave the provider's queue, so that the release hands the lock at once to
// a live waiter of another Client (whose poll interval is too long to find
// it otherwise); Acquire after Close fails with ErrClosed.
func TestIssue7CloseWakesWaiters(t *testing.T) {
	run := func(t *testing.T, closing, other func(t testing.TB) lock.Provider) {
		ctx := ctxTimeout(t, 30*time.Second)
		name := uniqueName(t)
		holderC := newClient(t, other(t))
		hl, err := holderC.Acquire(ctx, name, lock.Options{})
		require.NoError(t, err)

		// The Client that closes, with three waiters queued first; a short
		// poll interval so that a waiter that keeps polling after Close
		// would soon acquire.
		rec := newRecorder()
		c, err := lock.NewClient(closing(t), rec.option(), lock.WithPollInterval(20*time.Millisecond))
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		// Ends the waits before the Close above when the test fails early.
		wctx, wcancel := context.WithCancel(ctx)
		t.Cleanup(wcancel)
		const n = 3
		results := make(chan error, n)
		for range n {
			go func() {
				l, err := c.Acquire(wctx, name, lock.Options{Wait: true, MaxDuration: time.Minute})
				if err == nil {
					_ = l.Release(context.Background())
					err = errors.New("acquired through a closed Client")
				}
				results <- err
			}()
		}
		for range n {
			waitEvent(t, rec, lock.EventContended)
		}

		// A live waiter in another Client, queued behind them. Only the
		// handoff at release can wake it within its 10s poll interval.
		liveRec := newRecorder()
		live := newClient(t, other(t), liveRec.option(), lock.WithPollInterval(10*time.Second))
		t.Cleanup(wcancel) // before live's Close, too
		type result struct {
			l   *lock.Lock
			err error
			at  time.Time
		}
		liveGot := make(chan result, 1)
		go func() {
			l, err := live.Acquire(wctx, name, lock.Options{Wait: true, MaxDuration: time.Minute})
			liveGot <- result{l, err, time.Now()}
		}()
		waitEvent(t, liveRec, lock.EventContended)

		closed := make(chan error, 1)
		go func() { closed <- c.Close() }()
		select {
		case err := <-closed:
			require.NoError(t, err)
		case <-time.After(2 * time.Second):
			t.Fatal("Close with waiters did not return within 2s")
		}
		released := time.Now()
		require.NoError(t, hl.Release(ctx), "the holder releases right after Close")

		for i := range n {
			select {
			case err := <-results:
				assert.ErrorIs(t, err, lock.ErrClosed, "waiter %d of the closed Client", i)
				assert.ErrorIs(t, err, lock.ErrNotAcquired, "waiter %d of the closed Client", i)
				var na *lock.NotAcquiredError
				assert.ErrorAs(t, err, &na, "waiter %d of the closed Client", i)
			case <-time.After(2 * time.Second):
				t.Fatalf("waiter %d of the closed Client still blocked 2s after Close", i)
			}
		}

		select {
		case r := <-liveGot:
			require.NoError(t, r.err, "the live waiter of another Client gets the lock")
			wait := r.at.Sub(released)
			assert.Less(t, wait, 3*time.Second,
				"the live waiter got the lock %v after the release: the handoff went to a closed waiter left in the queue", wait)
			assert.Greater(t, r.l.Token(), hl.Token())
			assert.NoError(t, r.l.Release(ctx))
		case <-time.After(5 * time.Second):
			t.Fatal("the live waiter did not get the lock within 5s of the release (poll interval 10s): " +
				"a closed waiter kept its place in the queue")
		}

		_, err = c.Acquire(ctx, uniqueName(t), lock.Options{})
		assert.ErrorIs(t, err, lock.ErrClosed, "Acquire after Close")
		_, err = c.Acquire(ctx, name, lock.Options{Wait: true})
		assert.ErrorIs(t, err, lock.ErrClosed, "Acquire with Wait after Close")

		skipped := 0
		for _, e := range drain(rec) {
			assert.NotEqual(t, lock.EventAcquired, e.Kind, "the closed Client acquired %q", e.Key)
			if e.Kind == lock.EventSkipped {
				skipped++
				assert.ErrorIs(t, e.Err, lock.ErrClosed)
			}
		}
		assert.Equal(t, n, skipped, "each woken waiter reports EventSkipped")
	}

	eachBackend(t, func(t *testing.T, b backend) {
		run(t, b.replica, b.replica)
	})
	t.Run("memory-inbox-kept", func(t *testing.T) {
		mem := lock.NewMemoryProvider()
		run(t,
			func(t testing.TB) lock.Provider { return keepInboxes{mem, t} },
			func(testing.TB) lock.Provider { return mem })
	})
}

// --- 7.6: the context ends during the first attempt; errors name the lock ---

// stallProvider passes every call on, except that, while stall is set,
// Acquire and Queue block until their context ends and return err(ctx).
type stallProvider struct {
	lock.Provider
	stall atomic.Bool
	err   func(ctx context.Context) error
}

func (p *stallProvider) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (lock.Record, error) {
	if p.stall.Load() {
		<-ctx.Done()
		return lock.Record{}, p.err(ctx)
	}
	return p.Provider.Acquire(ctx, key, owner, ttl)
}

func (p *stallProvider) Queue(ctx context.Context, key string, w lock.Waiter) (lock.Record, error) {
	if p.stall.Load() {
		<-ctx.Done()
		return lock.Record{}, p.err(ctx)
	}
	return p.Provider.Queue(ctx, key, w)
}

// TestIssue7FirstAttemptContextEnds: a waiting Acquire whose context is
// cancelled, or reaches its deadline, during its first request (Acquire on
// a free-looking key, Queue on a key seen busy) returns a *NotAcquiredError
// matching the context's error, and emits EventSkipped.
func TestIssue7FirstAttemptContextEnds(t *testing.T) {
	errIO := errors.New("i/o timeout")
	for _, first := range []string{"acquire", "queue"} {
		for _, ending := range []struct {
			name string
			want error
			ctx  func() (context.Context, context.CancelFunc)
		}{
			{"canceled", context.Canceled, func() (context.Context, context.CancelFunc) {
				ctx, cancel := context.WithCancel(context.Background())
				time.AfterFunc(100*time.Millisecond, cancel)
				return ctx, cancel
			}},
			{"deadline", context.DeadlineExceeded, func() (context.Context, context.CancelFunc) {
				return context.WithTimeout(context.Background(), 100*time.Millisecond)
			}},
		} {
			for _, reply := range []struct {
				name string
				err  func(ctx context.Context) error
			}{
				{"ctx-err", func(ctx context.Context) error { return ctx.Err() }},
				{"io-err", func(context.Context) error { return errIO }},
			} {
				t.Run(first+"/"+ending.name+"/"+reply.name, func(t *testing.T) {
					mem := lock.NewMemoryProvider()
					p := &stallProvider{Provider: mem, err: reply.err}
					rec := newRecorder()
					c := newClient(t, p, rec.option())
					name := uniqueName(t)
					if first == "queue" {
						// Hold the lock elsewhere and let c find it held: c's
						// next waiting Acquire starts with Queue.
						other := newClient(t, mem)
						hl, err := other.Acquire(context.Background(), name, lock.Options{})
						require.NoError(t, err)
						defer func() { assert.NoError(t, hl.Release(context.Background())) }()
						_, err = c.Acquire(context.Background(), name, lock.Options{})
						require.ErrorIs(t, err, lock.ErrHeld)
						drain(rec)
					}
					p.stall.Store(true)
					ctx, cancel := ending.ctx()
					defer cancel()
					l, err := c.Acquire(ctx, name, lock.Options{Wait: true, MaxDuration: time.Minute})
					require.Nil(t, l)
					var na *lock.NotAcquiredError
					require.ErrorAs(t, err, &na, "want a *NotAcquiredError, got %T: %v", err, err)
					assert.ErrorIs(t, err, lock.ErrNotAcquired)
					assert.ErrorIs(t, err, ending.want)
					assert.Equal(t, c.Key(name), na.Key)
					assert.Contains(t, err.Error(), c.Key(name))

					var skipped *lock.Event
					for _, e := range drain(rec) {
						assert.NotEqual(t, lock.EventAcquired, e.Kind)
						if e.Kind == lock.EventSkipped {
							skipped = &e
						}
					}
					if assert.NotNil(t, skipped, "no EventSkipped for an acquisition that gave up") {
						assert.ErrorIs(t, skipped.Err, ending.want)
						assert.Equal(t, c.Key(name), skipped.Key)
					}
				})
			}
		}
	}
}

// errIssue7Backend is the failing provider's own error.
var errIssue7Backend = errors.New("backend exploded")

// failingProvider passes every call on to a MemoryProvider, except those
// named in fail, which return errIssue7Backend.
type failingProvider struct {
	*lock.MemoryProvider
	fail map[string]bool
}

func (p *failingProvider) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (lock.Record, error) {
	if p.fail["acquire"] {
		return lock.Record{}, errIssue7Backend
	}
	return p.MemoryProvider.Acquire(ctx, key, owner, ttl)
}

func (p *failingProvider) Queue(ctx context.Context, key string, w lock.Waiter) (lock.Record, error) {
	if p.fail["queue"] {
		return lock.Record{}, errIssue7Backend
	}
	return p.MemoryProvider.Queue(ctx, key, w)
}

func (p *failingProvider) Release(ctx context.Context, key, owner string) error {
	if p.fail["release"] {
		return errIssue7Backend
	}
	return p.MemoryProvider.Release(ctx, key, owner)
}

func (p *failingProvider) Renew(ctx context.Context, key, owner string, ttl time.Duration) error {
	if p.fail["update"] {
		return errIssue7Backend
	}
	return p.MemoryProvider.Renew(ctx, key, owner, ttl)
}

func (p *failingProvider) Finish(ctx context.Context, key, owner string, ttl time.Duration) error {
	if p.fail["update"] {
		return errIssue7Backend
	}
	return p.MemoryProvider.Finish(ctx, key, owner, ttl)
}

// TestIssue7ProviderErrorsNameTheLock: an error of the provider reaches the
// caller naming the operation and the lock's key, and still matches the
// provider's own error with errors.Is.
func TestIssue7ProviderErrorsNameTheLock(t *testing.T) {
	check := func(t *testing.T, err error, key string, ops ...string) {
		t.Helper()
		require.Error(t, err)
		t.Logf("error: %v", err)
		assert.ErrorIs(t, err, errIssue7Backend, "the provider's error is kept for errors.Is")
		assert.NotErrorIs(t, err, lock.ErrNotAcquired, "a provider failure is not a held lock")
		assert.Equal(t, 1, strings.Count(err.Error(), key), "the error names the lock's key, once: %q", err)
		named := false
		for _, op := range ops {
			named = named || strings.Contains(strings.ToLower(err.Error()), op)
		}
		assert.True(t, named, "the error %q names the operation (one of %v)", err, ops)
	}
	ctx := ctxTimeout(t, 10*time.Second)

	t.Run("acquire", func(t *testing.T) {
		p := &failingProvider{MemoryProvider: lock.NewMemoryProvider(), fail: map[string]bool{"acquire": true, "queue": true}}
		c := newClient(t, p)
		name := uniqueName(t)
		_, err := c.Acquire(ctx, name, lock.Options{})
		check(t, err, c.Key(name), "acquire")
		_, err = c.Acquire(ctx, name, lock.Options{Wait: true})
		check(t, err, c.Key(name), "acquire", "queue", "wait")
		err = c.Do(ctx, name, lock.Options{}, func(context.Context) error {
			t.Error("fn ran without the lock")
			return nil
		})
		check(t, err, c.Key(name), "acquire")
	})
	t.Run("queue", func(t *testing.T) {
		mem := lock.NewMemoryProvider()
		p := &failingProvider{MemoryProvider: mem, fail: map[string]bool{}}
		c := newClient(t, p)
		name := uniqueName(t)
		hl, err := newClient(t, mem).Acquire(ctx, name, lock.Options{})
		require.NoError(t, err)
		defer func() { assert.NoError(t, hl.Release(ctx)) }()
		p.fail["queue"] = true
		_, err = c.Acquire(ctx, name, lock.Options{Wait: true})
		check(t, err, c.Key(name), "queue", "wait")
	})
	t.Run("release", func(t *testing.T) {
		p := &failingProvider{MemoryProvider: lock.NewMemoryProvider(), fail: map[string]bool{}}
		c := newClient(t, p)
		name := uniqueName(t)
		l, err := c.Acquire(ctx, name, lock.Options{})
		require.NoError(t, err)
		p.fail["release"] = true
		check(t, l.Release(ctx), c.Key(name), "release")
	})
	t.Run("extend", func(t *testing.T) {
		p := &failingProvider{MemoryProvider: lock.NewMemoryProvider(), fail: map[string]bool{}}
		c := newClient(t, p)
		name := uniqueName(t)
		l, err := c.Acquire(ctx, name, lock.Options{})
		require.NoError(t, err)
		p.fail["update"] = true
		check(t, l.Extend(ctx, time.Minute), c.Key(name), "extend", "renew", "update")
		p.fail["update"] = false
		assert.NoError(t, l.Release(ctx))
	})
}

// --- 7.7: Do reports a loss once ---

// TestIssue7DoLostOnce: when the lock is lost while fn runs, Do returns an
// error matching ErrLost whose message says so once, whatever fn returns.
func TestIssue7DoLostOnce(t *testing.T) {
	for _, tc := range []struct {
		name string
		// waitLoss makes fn wait until its context reports the loss.
		waitLoss bool
		ret      func(ctx context.Context) error
	}{
		{"returns-cause", true, func(ctx context.Context) error { return context.Cause(ctx) }},
		{"returns-wrapped-cause", true, func(ctx context.Context) error { return fmt.Errorf("work: %w", context.Cause(ctx)) }},
		{"returns-ctx-err", true, func(ctx context.Context) error { return ctx.Err() }},
		{"returns-nil-after-loss", true, func(context.Context) error { return nil }},
		{"returns-own-error", true, func(context.Context) error { return errors.New("work failed") }},
		{"returns-before-noticed", false, func(context.Context) error { return nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxTimeout(t, 10*time.Second)
			mem := lock.NewMemoryProvider()
			c := newClient(t, mem)
			name := uniqueName(t)
			err := c.Do(ctx, name, lock.Options{Lease: 300 * time.Millisecond}, func(ctx context.Context) error {
				l, ok := lock.FromContext(ctx)
				require.True(t, ok)
				// Delete the record behind the holder's back.
				require.NoError(t, mem.Release(context.Background(), l.Key(), l.Owner()))
				if tc.waitLoss {
					select {
					case <-ctx.Done():
					case <-time.After(5 * time.Second):
						return errors.New("the loss was not noticed within 5s of a 300ms lease")
					}
					require.ErrorIs(t, context.Cause(ctx), lock.ErrLost)
				}
				return tc.ret(ctx)
			})
			require.Error(t, err)
			t.Logf("Do: %v", err)
			assert.ErrorIs(t, err, lock.ErrLost)
			var lost *lock.LostError
			assert.ErrorAs(t, err, &lost)
			assert.Equal(t, 1, strings.Count(err.Error(), `lost "`), "the loss is said once: %q", err)
		})
	}
}

// --- 7.8: self-deadlock ---

// TestIssue7NestedWaitSelfDeadlock: a nested Acquire or Do with Wait on a
// lock its own call chain holds fails at once with ErrInvalidArgument; a
// nested try without Wait fails with ErrHeld; a nested wait on another name
// works; and the same name from another Client, or from a context that does
// not carry the lock, waits as usual.
func TestIssue7NestedWaitSelfDeadlock(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := ctxTimeout(t, 60*time.Second)
		c := newClient(t, b.replica(t))
		other := newClient(t, b.replica(t))
		x, y, z := uniqueName(t)+":x", uniqueName(t)+":y", uniqueName(t)+":z"
		wait := lock.Options{Wait: true, MaxDuration: time.Minute}
		short := lock.Options{Wait: true, MaxDuration: 200 * time.Millisecond}

		// refused wants a call with Wait on a lock the chain holds to fail
		// at once. The call's own deadline keeps a wait from hanging the
		// test when it is not refused.
		refused := func(t *testing.T, ctx context.Context, what string, call func(ctx context.Context) error) {
			t.Helper()
			ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			start := time.Now()
			err := call(ctx)
			took := time.Since(start)
			assert.ErrorIs(t, err, lock.ErrInvalidArgument, "%s: want a refusal, got %v after %v", what, err, took)
			assert.Less(t, took, time.Second, "%s: the refusal must come at once", what)
		}

		require.NoError(t, c.Do(ctx, x, lock.Options{MaxDuration: time.Minute}, func(ctx context.Context) error {
			refused(t, ctx, "nested Acquire with Wait", func(ctx context.Context) error {
				l, err := c.Acquire(ctx, x, wait)
				if l != nil {
					_ = l.Release(ctx)
				}
				return err
			})
			refused(t, ctx, "nested Do with Wait", func(ctx context.Context) error {
				return c.Do(ctx, x, wait, func(context.Context) error {
					t.Error("nested Do ran its function while the outer Do holds the lock")
					return nil
				})
			})

			// Two levels: Do X -> Do Y -> Acquire X (and Y) with Wait.
			assert.NoError(t, c.Do(ctx, y, wait, func(ctx context.Context) error {
				for _, n := range []string{x, y} {
					refused(t, ctx, "Acquire "+n+" with Wait two levels down", func(ctx context.Context) error {
						l, err := c.Acquire(ctx, n, wait)
						if l != nil {
							_ = l.Release(ctx)
						}
						return err
					})
				}
				return nil
			}), "Do on another name inside Do")

			// Without Wait: held, not a deadlock.
			start := time.Now()
			l, err := c.Acquire(ctx, x, lock.Options{MaxDuration: time.Minute})
			assert.Nil(t, l)
			assert.ErrorIs(t, err, lock.ErrHeld, "a nested try without Wait finds the lock held")
			assert.NotErrorIs(t, err, lock.ErrInvalidArgument)
			assert.Less(t, time.Since(start), time.Second)

			// A wait on another name works.
			lz, err := c.Acquire(ctx, z, wait)
			if assert.NoError(t, err, "a nested wait on another name") {
				assert.NoError(t, lz.Release(ctx))
			}

			// The same name on another Client (another process): it waits.
			_, err = other.Acquire(ctx, x, short)
			assert.ErrorIs(t, err, lock.ErrTimeout, "another Client waits for the lock as usual")
			assert.NotErrorIs(t, err, lock.ErrInvalidArgument)
			// The same Client from a context that does not carry the lock
			// (another goroutine's call chain): it waits.
			_, err = c.Acquire(context.Background(), x, short)
			assert.ErrorIs(t, err, lock.ErrTimeout, "a call chain that does not hold the lock waits as usual")
			assert.NotErrorIs(t, err, lock.ErrInvalidArgument)

			// Once the chain released the lock, waiting for it is fine.
			held, ok := lock.FromContext(ctx)
			require.True(t, ok)
			require.NoError(t, held.Release(ctx))
			lx, err := c.Acquire(ctx, x, wait)
			if assert.NoError(t, err, "a nested wait after the chain released the lock") {
				assert.NoError(t, lx.Release(ctx))
			}
			return nil
		}))
	})
}

// --- 7.4: every key of a lock in one Cluster slot ---

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0), the checksum
// of the Redis Cluster key distribution model.
func crc16(b []byte) uint16 {
	var crc uint16
	for _, c := range b {
		crc ^= uint16(c) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// clusterSlot is the Redis Cluster hash slot of key: the CRC16 of its hash
// tag (what lies between its first "{" and the first "}" after it, when
// that is not empty), or of the whole key, modulo 16384.
func clusterSlot(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return crc16([]byte(key)) % 16384
}

// TestIssue7KeySlotReference checks clusterSlot against CLUSTER KEYSLOT
// answers of a Redis 7 Cluster node.
func TestIssue7KeySlotReference(t *testing.T) {
	assert.Equal(t, uint16(0x31C3), crc16([]byte("123456789")), "the check value of CRC-16/XMODEM")
	for key, slot := range map[string]uint16{
		"foo":                  12182,
		"somekey":              11058,
		"123456789":            12739,
		"{user1000}.following": 3443,
		"foo{}{bar}":           8363,
		"foo{{bar}}zap":        4015,
		"foo{bar}{zap}":        5061,
		"}":                    12090,
		"}x":                   410,
		"{}x":                  10595,
		"a{b":                  13340,
	} {
		assert.Equal(t, slot, clusterSlot(key), "slot of %q", key)
	}
}

// FuzzKeySlots: for every prefix NewClient accepts and every name, the
// stored keys of the lock (RedisKeys of Client.Key) share one Cluster hash
// slot, the record and the queue start with the prefix and the fencing
// counter with its text before any "{", and the record is Client.Key itself; a
// prefix is refused, with ErrInvalidArgument, only when its first "{" opens
// an empty hash tag.
func FuzzKeySlots(f *testing.F) {
	prefixes := []string{"lock:", "", "{app}:", "x{", "}", "{", "{}", "a{b", "a}b{c}", "{}x:", "a{}"}
	names := []string{"x", "", "}", "}x", "}{", "{", "{}", "a{b", "a}b{c}", "{x}", "}}{{", "a{}b", "{}}", "x}"}
	for _, p := range prefixes {
		for _, n := range names {
			f.Add(p, n)
		}
	}
	f.Fuzz(func(t *testing.T, prefix, name string) {
		emptyTag := false
		if i := strings.IndexByte(prefix, '{'); i >= 0 {
			emptyTag = strings.HasPrefix(prefix[i+1:], "}")
		}
		c, err := lock.NewClient(lock.NewMemoryProvider(), lock.WithPrefix(prefix))
		if err != nil {
			require.ErrorIs(t, err, lock.ErrInvalidArgument, "prefix %q", prefix)
			require.True(t, emptyTag, "prefix %q refused, but its first \"{\" opens no empty hash tag: %v", prefix, err)
			return
		}
		defer c.Close()
		require.False(t, emptyTag, "prefix %q opens an empty hash tag, and was accepted", prefix)
		if name == "" {
			return // Acquire refuses an empty name before it makes a key.
		}
		key := c.Key(name)
		r, fence, q, err := lock.RedisKeys(key)
		require.NoError(t, err, "RedisKeys(%q) (prefix %q, name %q)", key, prefix, name)
		assert.Equal(t, key, r, "the record is stored under Client.Key")
		slot := clusterSlot(r)
		// The fencing counter is shared by the locks of a slot: it starts
		// with the text of the prefix before any hash tag in it.
		head, _, _ := strings.Cut(prefix, "{")
		assert.True(t, strings.HasPrefix(fence, head), "fencing counter %q does not start with %q (prefix %q)", fence, head, prefix)
		assert.True(t, strings.HasSuffix(fence, "}:fence"), "fencing counter %q", fence)
		for _, k := range []string{r, fence, q} {
			assert.True(t, k == fence || strings.HasPrefix(k, prefix), "stored key %q does not start with prefix %q", k, prefix)
			assert.Equal(t, slot, clusterSlot(k), "key %q is in slot %d, the record %q in %d (prefix %q, name %q)",
				k, clusterSlot(k), r, slot, prefix, name)
		}
		assert.NotEqual(t, r, fence)
		assert.NotEqual(t, r, q)
		assert.NotEqual(t, fence, q)
	})
}

// TestKeysOfDistinctNamesDiffer: a name whose braces break the hash tag gets
// a key made from its checksum; that key must not be another name's key
// (it was: "}" and "1y4akgc}" both made "lock:{1y4akgc}}").
func TestKeysOfDistinctNamesDiffer(t *testing.T) {
	c := newClient(t, lock.NewMemoryProvider())
	names := []string{"}", "}x", "}{", "{}", "a}", "}}", "x}y", "{", "a{b}", "{a}"}
	seen := map[string]string{}
	check := func(name string) {
		key := c.Key(name)
		if other, dup := seen[key]; dup && other != name {
			t.Errorf("names %q and %q share the key %q", other, name, key)
		}
		seen[key] = name
	}
	for _, n := range names {
		check(n)
		// The plain key of a name that spells out another name's checksum
		// key ("<crc>}" + rest) must differ from that key.
		k := c.Key(n)
		inner := strings.TrimPrefix(k, lock.DefaultPrefix+"{")
		check(strings.TrimSuffix(inner, "}"))
		check(inner)
	}
	ctx := ctxTimeout(t, 5*time.Second)
	l, err := c.Acquire(ctx, "}", lock.Options{})
	require.NoError(t, err)
	defer l.Release(ctx)
	for _, other := range []string{"1y4akgc}", "1y4akgc}}"} {
		l2, err := c.Acquire(ctx, other, lock.Options{})
		require.NoError(t, err, "%q is another lock than %q", other, "}")
		require.NoError(t, l2.Release(ctx))
	}
}

// slowFailing is a provider whose Acquire fails with its own error once the
// caller's context has ended, as a network call that times out does.
type slowFailing struct{ lock.Provider }

func (slowFailing) Acquire(ctx context.Context, _, _ string, _ time.Duration) (lock.Record, error) {
	<-ctx.Done()
	return lock.Record{}, errors.New("read tcp: i/o timeout")
}

// When the context ends while the provider fails, the error keeps both (the
// context's, for errors.Is, and the provider's text) and names the key once.
func TestContextEndAndProviderErrorNameTheKeyOnce(t *testing.T) {
	c := newClient(t, slowFailing{lock.NewMemoryProvider()})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	name := uniqueName(t)
	_, err := c.Acquire(ctx, name, lock.Options{})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, lock.ErrNotAcquired)
	assert.Contains(t, err.Error(), "i/o timeout", "the provider's error is kept")
	assert.Equal(t, 1, strings.Count(err.Error(), c.Key(name)), "the key is named once: %v", err)
}
