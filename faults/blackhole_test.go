package faults_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/faults"
	"github.com/seed05627090/lock/internal/testenv"
)

const (
	// blackholeLease is the holder's lease in TestBlackhole: renewed every
	// 400ms, far shorter than go-redis's default read timeout (3s).
	blackholeLease = 1200 * time.Millisecond
	// blackholeMargin is how late, past the end of its lease, a holder may be
	// told on a busy machine under the race detector.
	blackholeMargin = blackholeLease / 4
	// blackholeWait bounds how long the test waits for the holder to be told
	// and for the other client to take the lock: past go-redis's default read
	// timeout, so that a holder told only by it is measured, not cut short.
	blackholeWait = blackholeLease + 4*time.Second
)

// TestBlackhole blackholes the connection of a lock holder while a call that
// renews its lease is in flight (a TCP proxy that stops forwarding, holding
// the bytes, with no reset), while another client, connected directly, tries
// to take the lock every 5ms. The holder's own clock must declare the loss at
// the end of its lease whatever the go-redis client's options and whatever
// call hangs: its Done must close, with ErrLost, before the other client gets
// the lock (its EventLost's Time at most lateAllowance after the other's
// Acquire returned: a tenth of the lease, plus however long this process was
// held up), and by the lease end measured from the last renewal that got
// through.
//
// The calls in flight:
//   - renewal-request-lost: both directions are held just after a renewal got
//     through; the next renewal is sent a third of a lease later and never
//     reaches Redis.
//   - renewal-reply-lost: the replies are held first; the next renewal reaches
//     Redis (its record is renewed) and its reply never comes back.
//   - extend-in-flight: as renewal-reply-lost, with an explicit Extend on a
//     context without a deadline as the hanging call; the renewal timer finds
//     it under way.
//
// Each runs with go-redis's default options (no ContextTimeoutEnabled: the
// socket waits its 3s read timeout whatever the context says) and with
// ContextTimeoutEnabled.
func TestBlackhole(t *testing.T) {
	srv := faults.StartRedis(t)
	direct := newRedis(t, srv.Addr)

	clients := []struct {
		name string
		opts func(addr string) *redis.Options
	}{
		{"go-redis-defaults", func(addr string) *redis.Options {
			return &redis.Options{Addr: addr}
		}},
		{"context-timeout", func(addr string) *redis.Options {
			return &redis.Options{Addr: addr, ContextTimeoutEnabled: true}
		}},
	}
	for _, call := range []string{"renewal-request-lost", "renewal-reply-lost", "extend-in-flight"} {
		for _, cl := range clients {
			t.Run(call+"/"+cl.name, func(t *testing.T) {
				blackhole(t, srv, direct, call, cl.opts)
			})
		}
	}
}

// blackhole runs one case of TestBlackhole.
func blackhole(t *testing.T, srv *faults.Redis, direct *redis.Client, call string, opts func(addr string) *redis.Options) {
	p, err := faults.NewProxy(srv.Addr)
	require.NoError(t, err)
	rc := redis.NewClient(opts(p.Addr()))
	t.Cleanup(func() { _ = rc.Close() })
	name := "blackhole:" + t.Name()
	key := keyOf(name)
	losses, lostAt := lossTimes(key)
	holder := newClient(t, rc, lock.WithReleaseTimeout(netReleaseTimeout), losses)
	other := newClient(t, direct)
	stalls := testenv.WatchStalls(t)
	// Registered last, so run first: the proxy lets go of every hung call
	// before the clients are closed.
	t.Cleanup(func() { _ = p.Close() })

	// Warm up: a pooled connection and the acquire and release scripts loaded.
	ctx := ctxTimeout(t, 5*time.Second)
	warm, err := holder.Acquire(ctx, name+":warm-up", lock.Options{})
	require.NoError(t, err)
	require.NoError(t, warm.Release(ctx))

	l, err := holder.Acquire(ctx, name, lock.Options{Lease: blackholeLease, MaxDuration: 30 * time.Second})
	require.NoError(t, err)
	stats.grants.Add(1)
	// The first renewal loads the update script and shows the lease is
	// renewed; the fault comes after it.
	renewed, ok := renewedAt(t, direct, key, blackholeLease)
	require.True(t, ok, "the holder did not renew its lease within %v", blackholeLease)

	var cut time.Time // from then on no reply reaches the holder
	var extended chan error
	switch call {
	case "renewal-request-lost":
		p.Pause()
		cut = time.Now()
		fault(t, "blackhole both directions just after a renewal")
	case "renewal-reply-lost", "extend-in-flight":
		// Let the renewal's reply reach the holder. An Extend comes half-way
		// to the next renewal, so that the TTL it sets shows as a jump.
		if call == "extend-in-flight" {
			time.Sleep(blackholeLease / 6)
		} else {
			time.Sleep(20 * time.Millisecond)
		}
		p.Pause(faults.Replies)
		cut = time.Now()
		// The TTL before the call: on a busy machine the Extend can reach
		// Redis before renewedAt reads the TTL a first time.
		before, err := direct.PTTL(ctxTimeout(t, 5*time.Second), recordKey(key)).Result()
		require.NoError(t, err)
		if call == "extend-in-flight" {
			extended = make(chan error, 1)
			go func() { extended <- l.Extend(context.Background(), blackholeLease) }()
		}
		// Its request reaches Redis; then nothing gets through.
		sent, ok := renewedAfter(t, direct, key, blackholeLease, before)
		p.Pause(faults.Requests)
		require.True(t, ok, "no %s reached Redis within %v of holding the replies", call, blackholeLease)
		what := "a renewal"
		if extended != nil {
			what = "an Extend"
		}
		fault(t, "blackhole both directions while "+what+" waits for its reply")
		t.Logf("replies held %v after the previous renewal; the call reached Redis %v after that",
			cut.Sub(renewed).Round(time.Millisecond), sent.Sub(cut).Round(time.Millisecond))
	}
	stalls.Reset()

	// The other client tries, directly, every 5ms, without waiting.
	type takeover struct {
		l        *lock.Lock
		sent, at time.Time
	}
	took := make(chan takeover, 1)
	go func() {
		for time.Since(cut) < blackholeWait {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			sent := time.Now()
			l2, err := other.Acquire(ctx, name, lock.Options{Lease: 10 * time.Second})
			at := time.Now()
			cancel()
			if err == nil {
				took <- takeover{l2, sent, at}
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		took <- takeover{}
	}()

	told := toldAt(l.Done(), lostAt, time.Until(cut.Add(blackholeWait)))
	to := <-took
	held := stalls.Longest()
	if to.l != nil {
		stats.grants.Add(1)
	}

	since := func(at time.Time) string {
		if at.IsZero() {
			return "never (within " + blackholeWait.String() + ")"
		}
		return at.Sub(cut).Round(time.Millisecond).String()
	}
	t.Logf("after the blackhole: holder told %s, other client acquired %s (its attempt sent %s); lease %v; the longest this process was held up: %v",
		since(told), since(to.at), since(to.sent), blackholeLease, held.Round(time.Millisecond))

	if expect(t, !told.IsZero(), "the holder was not told %v after its connection was blackholed (lease %v)", blackholeWait, blackholeLease) {
		expect(t, errors.Is(l.Err(), lock.ErrLost), "Err after the lease ran out is %v, want ErrLost", l.Err())
		// The last renewal that got through was sent before the cut, so the
		// lease ended at most a lease after it.
		expect(t, told.Sub(cut) <= blackholeLease+blackholeMargin,
			"the holder was told %v after the blackhole, want by the end of its lease: within %v (lease) + %v, the last renewal that got through having been sent before it",
			told.Sub(cut).Round(time.Millisecond), blackholeLease, blackholeMargin)
	}
	if expect(t, to.l != nil, "the other client could not take the lock within %v of the blackhole (lease %v)", blackholeWait, blackholeLease) {
		if !told.IsZero() {
			// Told before the other got the lock, or at most lateAllowance
			// after it (the lease timer's margin is 26 ms: a process held
			// up longer runs the two in either order). A holder told only
			// when its hung call fails (the 3 s read timeout) is ~1.8 s
			// late, far past it.
			allow := lateAllowance(blackholeLease, held)
			expect(t, told.Sub(to.at) < allow,
				"two holders: the other client acquired the lock %v after the blackhole, and the holder was told only %v after it, %v later (allowed %v: a tenth of the lease and %v held up), believing it held the lock all that time",
				to.at.Sub(cut).Round(time.Millisecond), told.Sub(cut).Round(time.Millisecond), told.Sub(to.at).Round(time.Millisecond),
				allow.Round(time.Millisecond), held.Round(time.Millisecond))
		} else {
			expect(t, false, "two holders: the other client acquired the lock %v after the blackhole, and the holder was still not told %v after it",
				to.at.Sub(cut).Round(time.Millisecond), blackholeWait)
		}
		expect(t, to.l.Token() > l.Token(), "token %d is not greater than the lost holder's %d", to.l.Token(), l.Token())
		require.NoError(t, to.l.Release(context.Background()))
	}

	// Drop the held bytes (a late renewal must not be delivered) and let the
	// hung call fail.
	p.Cut()
	p.Resume()
	if extended != nil {
		select {
		case err := <-extended:
			expect(t, errors.Is(err, lock.ErrLost), "Extend hung through the blackhole returned %v, want ErrLost", err)
		case <-time.After(netReleaseTimeout + slack):
			expect(t, false, "Extend did not return %v after the connection was cut", netReleaseTimeout+slack)
		}
	}
	err = l.Release(context.Background())
	expect(t, errors.Is(err, lock.ErrLost), "Release of a lost lock returned %v, want ErrLost", err)
}

// renewedAt polls the TTL of key's record every 2ms and returns when it
// jumps up: when Redis has run a renewal (or an Extend) of the holder. It
// returns false when none comes within d.
func renewedAt(t testing.TB, direct *redis.Client, key string, d time.Duration) (time.Time, bool) {
	t.Helper()
	return renewedAfter(t, direct, key, d, -1)
}

// renewedAfter is renewedAt with the TTL read before, prev (-1 for none).
func renewedAfter(t testing.TB, direct *redis.Client, key string, d, prev time.Duration) (time.Time, bool) {
	t.Helper()
	ctx := ctxTimeout(t, d+5*time.Second)
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		ttl, err := direct.PTTL(ctx, recordKey(key)).Result()
		require.NoError(t, err, "read the TTL of %q", key)
		if prev >= 0 && ttl > prev+50*time.Millisecond {
			return time.Now(), true
		}
		prev = ttl
	}
	return time.Time{}, false
}
