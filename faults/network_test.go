package faults_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/faults"
)

const (
	// netReleaseTimeout bounds the library's own writes (the clean-up after a
	// failed attempt, renewals, releases) in these tests.
	netReleaseTimeout = 2 * time.Second
	// slack is what a call may take past the bound it was given, on a busy
	// machine under the race detector.
	slack = time.Second
)

// netEnv is one network fault case: a client whose connections go through a
// proxy that the case breaks, and a direct client that sees the truth.
type netEnv struct {
	t      *testing.T
	proxy  *faults.Proxy
	direct *redis.Client
	client *lock.Client
	name   string
	key    string
}

func newNetEnv(t *testing.T, srv *faults.Redis, direct *redis.Client, redisOpts ...func(*redis.Options)) *netEnv {
	t.Helper()
	p, err := faults.NewProxy(srv.Addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	rc := newRedis(t, p.Addr(), redisOpts...)
	c := newClient(t, rc, lock.WithPollInterval(100*time.Millisecond), lock.WithReleaseTimeout(netReleaseTimeout))
	name := "net:" + t.Name()
	// Warm up: one pooled connection, and the scripts loaded, so that a fault
	// set next hits the lock's own commands, not the connection's handshake.
	ctx := ctxTimeout(t, 5*time.Second)
	l, err := c.Acquire(ctx, name+":warm-up", lock.Options{})
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	return &netEnv{t: t, proxy: p, direct: direct, client: c, name: name, key: keyOf(name)}
}

func noRetries(o *redis.Options) { o.MaxRetries = -1 }

// acquire takes the lock through the proxy, timing the call.
func (e *netEnv) acquire(timeout time.Duration, o lock.Options) (*lock.Lock, time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	l, err := e.client.Acquire(ctx, e.name, o)
	if err == nil {
		stats.grants.Add(1)
	}
	return l, time.Since(start), err
}

// acquireFails acquires the lock (lease 10 s) within timeout through a
// fault that makes it fail, which why names, and checks that it failed, and
// returned within the deadline and the bound of the clean-up after it.
func (e *netEnv) acquireFails(timeout time.Duration, why string) (*lock.Lock, error) {
	e.t.Helper()
	l, took, err := e.acquire(timeout, lock.Options{Lease: 10 * time.Second})
	e.t.Logf("Acquire: %v after %v", err, took.Round(time.Millisecond))
	expect(e.t, err != nil, "Acquire succeeded although %s", why)
	expect(e.t, took < timeout+netReleaseTimeout+slack, "Acquire returned after %v, want < deadline %v + release timeout %v", took, timeout, netReleaseTimeout)
	return l, err
}

// checkOutcome checks an acquisition against what Redis holds: an error
// leaves no record once the Client is closed (Close waits for the clean-up of
// failed attempts), and ends the case; a grant is the record's owner with its
// token.
func (e *netEnv) checkOutcome(l *lock.Lock, err error) {
	e.t.Helper()
	if err != nil {
		// A failed attempt is cleaned up in the background; Close waits for it.
		require.NoError(e.t, e.client.Close())
		v, ttl := record(e.t, e.direct, e.key)
		expect(e.t, v == "", "false acquisition: Acquire failed (%v) but, after Close, the key holds %q (ttl %v)", err, v, ttl)
		return
	}
	v, _ := record(e.t, e.direct, e.key)
	expect(e.t, recordOwner(v) == l.Owner(), "Acquire granted %s but the key holds %q", l.Owner(), v)
	expect(e.t, strings.HasPrefix(v, l.Owner()+","+strconv.FormatUint(l.Token(), 10)+","), "the record %q does not carry the granted token %d", v, l.Token())
}

// waitFor polls cond every 10ms until it holds or d passes.
func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestNetworkFaults delays, holds and cuts the traffic between a lock client
// and Redis during acquisition, renewal and release, through a proxy, and
// checks what Redis holds with a direct client: no false acquisition, no
// false clean release, errors within the caller's bounds, and a holder told
// when a cut outlasts its lease.
func TestNetworkFaults(t *testing.T) {
	srv := faults.StartRedis(t)
	direct := newRedis(t, srv.Addr)

	t.Run("acquire/reply-delayed-past-deadline", func(t *testing.T) {
		// The request runs, its reply comes after the caller gave up: the
		// attempt's clean-up must remove the record.
		e := newNetEnv(t, srv, direct)
		e.proxy.SetDelay(400*time.Millisecond, faults.Replies)
		fault(t, "delay replies 400ms")
		l, err := e.acquireFails(250*time.Millisecond, "no reply could come within its deadline")
		e.checkOutcome(l, err)
	})

	for _, retries := range []bool{true, false} {
		n := "acquire/reply-lost-then-cut/retries"
		var opts []func(*redis.Options)
		if !retries {
			n = "acquire/reply-lost-then-cut/no-retries"
			opts = append(opts, noRetries)
		}
		t.Run(n, func(t *testing.T) {
			// The record is stored and the connection is cut before the reply
			// gets back. With retries go-redis may run the script again, which
			// finds the owner's own record: a real grant. Without, the
			// attempt fails and its clean-up must remove the record.
			e := newNetEnv(t, srv, direct, opts...)
			e.proxy.Pause(faults.Replies)
			fault(t, "hold replies")
			type res struct {
				l   *lock.Lock
				err error
				d   time.Duration
			}
			done := make(chan res, 1)
			go func() {
				l, took, err := e.acquire(5*time.Second, lock.Options{Lease: 10 * time.Second})
				done <- res{l, err, took}
			}()
			require.True(t, waitFor(5*time.Second, func() bool { v, _ := record(t, direct, e.key); return v != "" }),
				"the acquire script never ran")
			e.proxy.Cut()
			e.proxy.Resume()
			fault(t, "cut the connection before the reply")
			r := <-done
			t.Logf("Acquire: lock %v, err %v, after %v", r.l != nil, r.err, r.d.Round(time.Millisecond))
			if !retries {
				expect(t, r.err != nil, "Acquire succeeded although its reply was cut and go-redis does not retry")
			}
			e.checkOutcome(r.l, r.err)
			if r.l != nil {
				require.NoError(t, r.l.Release(context.Background()))
				v, _ := record(t, direct, e.key)
				expect(t, v == "", "record %q left after a clean release", v)
			}
		})
	}

	t.Run("acquire/partition", func(t *testing.T) {
		// Nothing gets through: the caller's error comes within its deadline
		// plus the clean-up's bound, and nothing is stored.
		e := newNetEnv(t, srv, direct)
		e.proxy.Pause()
		fault(t, "partition")
		l, err := e.acquireFails(300*time.Millisecond, "nothing gets through a partition")
		// Bytes sent on the connections the client gave up are dropped, not
		// delivered when the partition heals (a delivered late request would
		// store a record that lives one lease; that is the lease's job).
		e.proxy.Cut()
		e.proxy.Resume()
		e.checkOutcome(l, err)
	})

	t.Run("acquire/slow-network", func(t *testing.T) {
		// A slow but working network within the deadline: no false failure.
		e := newNetEnv(t, srv, direct)
		e.proxy.SetDelay(100 * time.Millisecond)
		fault(t, "delay everything 100ms")
		l, _, err := e.acquire(5*time.Second, lock.Options{Lease: 10 * time.Second})
		expect(t, err == nil, "Acquire on a slow network failed: %v", err)
		e.checkOutcome(l, err)
		if l != nil {
			expect(t, l.Release(context.Background()) == nil, "Release on a slow network failed")
			v, _ := record(t, direct, e.key)
			expect(t, v == "", "record %q left after a clean release", v)
		}
	})

	const lease = 900 * time.Millisecond

	for _, mode := range []string{"paused", "refused"} {
		t.Run("renewal/cut-longer-than-lease/"+mode, func(t *testing.T) {
			// The holder cannot renew for longer than its lease: it must be
			// told (Done, ErrLost) by the time another client can take the
			// lock, and its Release must not report a clean release.
			e := newNetEnv(t, srv, direct)
			other := newClient(t, direct)
			l, _, err := e.acquire(5*time.Second, lock.Options{Lease: lease, MaxDuration: 30 * time.Second})
			require.NoError(t, err)
			if mode == "paused" {
				e.proxy.Pause()
			} else {
				e.proxy.SetRefuse(true)
				e.proxy.Cut()
			}
			cut := time.Now()
			fault(t, "cut renewals ("+mode+")")

			// Another client tries, directly, every 2ms.
			type takeover struct {
				l  *lock.Lock
				at time.Time
			}
			took := make(chan takeover, 1)
			go func() {
				for time.Since(cut) < lease+2*slack {
					l2, err := other.Acquire(context.Background(), e.name, lock.Options{Lease: 10 * time.Second})
					if err == nil {
						took <- takeover{l2, time.Now()}
						return
					}
					time.Sleep(2 * time.Millisecond)
				}
				took <- takeover{}
			}()
			var doneAt time.Time
			select {
			case <-l.Done():
				doneAt = time.Now()
				t.Logf("lost %v after the cut", doneAt.Sub(cut).Round(time.Millisecond))
				expect(t, errors.Is(l.Err(), lock.ErrLost), "Err after the lease ran out is %v, want ErrLost", l.Err())
			case <-time.After(lease + slack):
				expect(t, false, "Done not closed %v after renewals were cut (lease %v)", lease+slack, lease)
			}
			to := <-took
			if expect(t, to.l != nil, "no other client could take the lock %v after its holder was cut off", lease+2*slack) {
				stats.grants.Add(1)
				// The lease bounds how long the holder may go on believing it
				// holds the lock: it is told at about the takeover, at the
				// latest a tenth of a lease after it.
				margin := to.at.Sub(doneAt)
				t.Logf("holder told %v before the takeover", margin)
				expect(t, !doneAt.IsZero() && margin > -lease/10,
					"another client took the lock %v before its holder was told", -margin)
				expect(t, to.l.Token() > l.Token(), "token %d is not greater than the lost holder's %d", to.l.Token(), l.Token())
				require.NoError(t, to.l.Release(context.Background()))
			}
			e.proxy.SetRefuse(false)
			e.proxy.Cut()
			e.proxy.Resume()
			err = l.Release(context.Background())
			expect(t, errors.Is(err, lock.ErrLost), "Release of a lost lock returned %v, want ErrLost", err)
		})
	}

	t.Run("renewal/cut-shorter-than-lease", func(t *testing.T) {
		// Short holds and resets that a renewal can get past: no false loss.
		e := newNetEnv(t, srv, direct)
		l, _, err := e.acquire(5*time.Second, lock.Options{Lease: lease, MaxDuration: 30 * time.Second})
		require.NoError(t, err)
		e.proxy.Pause()
		fault(t, "hold traffic for a quarter lease")
		time.Sleep(lease / 4)
		e.proxy.Resume()
		for range 3 {
			time.Sleep(lease / 3)
			e.proxy.Cut()
			fault(t, "reset every connection")
		}
		time.Sleep(lease)
		expect(t, l.Err() == nil, "the lock was lost after short faults: %v", l.Err())
		v, ttl := record(t, direct, e.key)
		expect(t, recordOwner(v) == l.Owner() && ttl > 0, "the holder's record is %q (ttl %v), want its own", v, ttl)
		expect(t, l.Release(context.Background()) == nil, "Release after short faults failed")
	})

	t.Run("release/reply-lost", func(t *testing.T) {
		// The record is deleted and the reply is cut: Release may say nil
		// (the record really is gone) or ErrLost (a retry found it gone).
		e := newNetEnv(t, srv, direct)
		l, _, err := e.acquire(5*time.Second, lock.Options{Lease: 10 * time.Second})
		require.NoError(t, err)
		e.proxy.Pause(faults.Replies)
		fault(t, "hold replies during release")
		done := make(chan error, 1)
		start := time.Now()
		go func() { done <- l.Release(context.Background()) }()
		require.True(t, waitFor(5*time.Second, func() bool { v, _ := record(t, direct, e.key); return v == "" }),
			"the release script never ran")
		e.proxy.Cut()
		e.proxy.Resume()
		fault(t, "cut the connection before the release's reply")
		err = <-done
		took := time.Since(start)
		t.Logf("Release: %v after %v", err, took.Round(time.Millisecond))
		expect(t, took < netReleaseTimeout+slack, "Release returned after %v, want < release timeout %v", took, netReleaseTimeout)
		v, _ := record(t, direct, e.key)
		expect(t, err != nil || v == "", "false clean release: Release returned nil but the key holds %q", v)
	})

	t.Run("release/request-lost", func(t *testing.T) {
		// The release never reaches Redis: Release must not return nil.
		e := newNetEnv(t, srv, direct)
		l, _, err := e.acquire(5*time.Second, lock.Options{Lease: lease, MaxDuration: 30 * time.Second})
		require.NoError(t, err)
		e.proxy.Pause(faults.Requests)
		fault(t, "hold requests during release")
		start := time.Now()
		err = l.Release(context.Background())
		took := time.Since(start)
		t.Logf("Release: %v after %v", err, took.Round(time.Millisecond))
		expect(t, took < netReleaseTimeout+slack, "Release returned after %v, want < release timeout %v", took, netReleaseTimeout)
		v, ttl := record(t, direct, e.key)
		expect(t, err != nil || v == "", "false clean release: Release returned nil but the key holds %q", v)
		expect(t, v == "" || ttl <= lease, "the unreleased record %q has ttl %v, more than its lease %v", v, ttl, lease)
		e.proxy.Cut()
		e.proxy.Resume()
		// The record it could not delete expires within its lease.
		expect(t, waitFor(lease+slack, func() bool { v, _ := record(t, direct, e.key); return v == "" }),
			"the unreleased record outlived its lease")
	})

	t.Run("acquire/partition-default-release-timeout", func(t *testing.T) {
		// With go-redis's and the library's default timeouts, the clean-up of
		// a failed attempt must not keep the caller past its own deadline.
		p, err := faults.NewProxy(srv.Addr)
		require.NoError(t, err)
		t.Cleanup(func() { _ = p.Close() })
		c := newClient(t, newRedis(t, p.Addr(), func(o *redis.Options) { o.ReadTimeout, o.WriteTimeout = 0, 0 }))
		p.Pause()
		fault(t, "partition")
		const timeout = 300 * time.Millisecond
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		start := time.Now()
		_, err = c.Acquire(ctx, "net:default-release-timeout", lock.Options{Lease: 10 * time.Second})
		took := time.Since(start)
		t.Logf("Acquire: %v after %v", err, took.Round(time.Millisecond))
		expect(t, err != nil, "Acquire succeeded through a partition")
		expect(t, took < timeout+slack, "Acquire returned %v after it started, want within its deadline %v + %v", took, timeout, slack)
		// Let the clean-up give up (release timeout) before the proxy goes.
		p.Cut()
		p.Resume()
		require.NoError(t, c.Close())
	})
}
