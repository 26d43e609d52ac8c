package main

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"
	"github.com/valkey-io/valkey-go"
	"github.com/valkey-io/valkey-go/valkeylock"

	"github.com/seed05627090/lock"
	lockrueidis "github.com/seed05627090/lock/rueidis"
	lockvalkey "github.com/seed05627090/lock/valkey"
)

// locker takes the lock called key, waiting for it the way the library waits,
// and returns the function that releases it.
type locker func(ctx context.Context, key string) (release func(context.Context) error, err error)

// library is a column of the table: a lock library on a client of its own.
type library struct {
	name   string // column heading
	detail string // what the column runs, for the notes under the table
	// open connects a client of the column's own to the server at addr and
	// returns n lockers on it, one per goroutine.
	open func(addr string, n int) (*opened, error)
}

// opened is a library opened on a server: its lockers and its client.
type opened struct {
	lockers []locker
	sent    *atomic.Int64 // commands the client has sent, counted as it sends them
	close   func()        // frees what the lockers hold, then closes the client
}

// onGoRedis opens a library that runs on go-redis: lockers gets the client
// every go-redis column gets (newRedisClient) and returns n lockers and a
// function that frees what they hold (subscriptions); it does not close the
// client.
func onGoRedis(lockers func(rc *redis.Client, n int) ([]locker, func(), error)) func(addr string, n int) (*opened, error) {
	return func(addr string, n int) (*opened, error) {
		sent := new(atomic.Int64)
		rc := newRedisClient(addr, sent)
		ls, free, err := lockers(rc, n)
		if err != nil {
			_ = rc.Close()
			return nil, err
		}
		return &opened{lockers: ls, sent: sent, close: func() { free(); _ = rc.Close() }}, nil
	}
}

// peerTTL is the lease the peers' locks get: redsync's default expiry.
const peerTTL = 8 * time.Second

// This library's columns. "lock (rueidis)" and "lock (valkey-go)" are
// libLock on the drivers of the modules rueidis/ and valkey/ at the
// repository root, each on a client made with newRueidisClient or
// newValkeyClient (clients.go), so that its commands are counted as the
// peers' are.
var (
	libLock = library{
		name:   "lock",
		detail: "this library: one lock.Client on lock.NewRedisProvider, Acquire with Options{Wait: true}, Lock.Release",
		open:   onGoRedis(ourLockers(false, false)),
	}
	libLockRueidis = library{
		name:   "lock (rueidis)",
		detail: "as lock, with lockrueidis.NewProvider on a rueidis client of its own with rueidis's defaults (concurrent commands auto-pipelined on one connection)",
		open:   rueidisLockOpen,
	}
	libLockValkey = library{
		name:   "lock (valkey-go)",
		detail: "as lock (rueidis), with lockvalkey.NewProvider on a valkey-go client",
		open:   valkeyLockOpen,
	}
	libLockMulti = library{
		name:   "lock multi",
		detail: "this library with one lock.Client per goroutine (as separate processes would have), on the same go-redis client",
		open:   onGoRedis(ourLockers(true, false)),
	}
	libLockFair = library{
		name:   "lock fair",
		detail: "as lock multi with Options{Wait: true, Fair: true}: one wait queue in Redis, arrival order across clients",
		open:   onGoRedis(ourLockers(true, true)),
	}
	// libLock8 spreads the goroutines over 8 Clients, as 8 processes with
	// many waiters each would have.
	libLock8 = library{
		name:   "lock 8 clients",
		detail: "this library with 8 lock.Clients (8 processes), goroutine i on Client i%8, Acquire with Options{Wait: true}",
		open:   onGoRedis(ourLockersSpread(8)),
	}
)

// The peers' columns.
var (
	libRedsync = library{
		name:   "redsync",
		detail: "redsync.New(goredis.NewPool(rc)).NewMutex(key) with defaults (8 s expiry, 32 tries 50-250 ms apart), LockContext, UnlockContext",
		open:   onGoRedis(redsyncLockers),
	}
	libRedislockLinear = library{
		name:   "redislock lin",
		detail: "redislock.New(rc).Obtain(ctx, key, 8s, RetryStrategy: LinearBackoff(100ms)), retrying until the run ends, Release",
		open:   onGoRedis(redislockLockers(func() redislock.RetryStrategy { return redislock.LinearBackoff(100 * time.Millisecond) })),
	}
	libRedislockExp = library{
		name:   "redislock exp",
		detail: "as redislock lin with a new ExponentialBackoff(16ms, 256ms) for each Obtain",
		open: onGoRedis(redislockLockers(func() redislock.RetryStrategy {
			return redislock.ExponentialBackoff(16*time.Millisecond, 256*time.Millisecond)
		})),
	}
	libRueidislock = library{
		name:   "rueidislock",
		detail: "rueidislock.NewLocker with its README's options for one Redis >= 7.0.5 (KeyMajority 1, NoLoopTracking), the rest default (5 s validity, extended every 2.5 s); WithContext(ctx, key), its cancel to release; a rueidis client of its own",
		open:   rueidislockOpen,
	}
	libValkeylock = library{
		name:   "valkeylock",
		detail: "valkeylock (rueidislock's code on valkey-go) with the same options, on a valkey-go client of its own",
		open:   valkeylockOpen,
	}
)

// ourLockersSpread returns lockers over the given number of Clients.
func ourLockersSpread(clients int) func(rc *redis.Client, n int) ([]locker, func(), error) {
	return func(rc *redis.Client, n int) ([]locker, func(), error) {
		p := lock.NewRedisProvider(rc)
		cs := make([]*lock.Client, clients)
		free := func() {
			for _, c := range cs {
				if c != nil {
					_ = c.Close()
				}
			}
		}
		for i := range cs {
			c, err := lock.NewClient(p)
			if err != nil {
				free()
				return nil, nil, err
			}
			cs[i] = c
		}
		ls := make([]locker, n)
		for i := range ls {
			c := cs[i%clients]
			ls[i] = func(ctx context.Context, key string) (func(context.Context) error, error) {
				l, err := c.Acquire(ctx, key, lock.Options{Wait: true})
				if err != nil {
					return nil, err
				}
				return l.Release, nil
			}
		}
		return ls, free, nil
	}
}

func ourLockers(clientPerGoroutine, fair bool) func(rc *redis.Client, n int) ([]locker, func(), error) {
	return func(rc *redis.Client, n int) ([]locker, func(), error) {
		return providerLockers(lock.NewRedisProvider(rc), n, clientPerGoroutine, fair)
	}
}

// providerLockers returns n lockers on p: on one lock.Client, or on one
// Client each with clientPerGoroutine; and the function that closes the
// Clients.
func providerLockers(p lock.Provider, n int, clientPerGoroutine, fair bool) ([]locker, func(), error) {
	var clients []*lock.Client
	free := func() {
		for _, c := range clients {
			_ = c.Close()
		}
	}
	ls := make([]locker, n)
	for i := range ls {
		if i > 0 && !clientPerGoroutine {
			ls[i] = ls[0]
			continue
		}
		c, err := lock.NewClient(p)
		if err != nil {
			free()
			return nil, nil, err
		}
		clients = append(clients, c)
		ls[i] = func(ctx context.Context, key string) (func(context.Context) error, error) {
			l, err := c.Acquire(ctx, key, lock.Options{Wait: true, Fair: fair})
			if err != nil {
				return nil, err
			}
			return l.Release, nil
		}
	}
	return ls, free, nil
}

// rueidisLockOpen opens libLock on the rueidis driver, on a rueidis client
// of its own with rueidis's defaults.
func rueidisLockOpen(addr string, n int) (*opened, error) {
	sent := new(atomic.Int64)
	c, err := newRueidisClient(rueidis.ClientOption{InitAddress: []string{addr}}, sent)
	if err != nil {
		return nil, err
	}
	ls, free, err := providerLockers(lockrueidis.NewProvider(c), n, false, false)
	if err != nil {
		c.Close()
		return nil, err
	}
	return &opened{lockers: ls, sent: sent, close: func() { free(); c.Close() }}, nil
}

// valkeyLockOpen is rueidisLockOpen on the valkey-go driver.
func valkeyLockOpen(addr string, n int) (*opened, error) {
	sent := new(atomic.Int64)
	c, err := newValkeyClient(valkey.ClientOption{InitAddress: []string{addr}}, sent)
	if err != nil {
		return nil, err
	}
	ls, free, err := providerLockers(lockvalkey.NewProvider(c), n, false, false)
	if err != nil {
		c.Close()
		return nil, err
	}
	return &opened{lockers: ls, sent: sent, close: func() { free(); c.Close() }}, nil
}

func redsyncLockers(rc *redis.Client, n int) ([]locker, func(), error) {
	rs := redsync.New(goredis.NewPool(rc))
	lk := func(ctx context.Context, key string) (func(context.Context) error, error) {
		m := rs.NewMutex(key)
		if err := m.LockContext(ctx); err != nil {
			return nil, err
		}
		return func(ctx context.Context) error {
			ok, err := m.UnlockContext(ctx)
			if err == nil && !ok {
				err = errors.New("redsync: unlock failed")
			}
			return err
		}, nil
	}
	return repeat(lk, n), func() {}, nil
}

func redislockLockers(strategy func() redislock.RetryStrategy) func(rc *redis.Client, n int) ([]locker, func(), error) {
	return func(rc *redis.Client, n int) ([]locker, func(), error) {
		rl := redislock.New(rc)
		lk := func(ctx context.Context, key string) (func(context.Context) error, error) {
			l, err := rl.Obtain(ctx, key, peerTTL, &redislock.Options{RetryStrategy: strategy()})
			if err != nil {
				return nil, err
			}
			return l.Release, nil
		}
		return repeat(lk, n), func() {}, nil
	}
}

// rueidislockOpen opens one rueidislock Locker for all goroutines, as its
// README shows for a single Redis of version 7.0.5 or later. The Locker
// makes its rueidis client itself (from ClientOption, with client-side
// caching's tracking and one connection); ClientBuilder only counts the
// commands it sends.
func rueidislockOpen(addr string, n int) (*opened, error) {
	sent := new(atomic.Int64)
	lk, err := rueidislock.NewLocker(rueidislock.LockerOption{
		ClientOption:   rueidis.ClientOption{InitAddress: []string{addr}},
		KeyMajority:    1,
		NoLoopTracking: true,
		ClientBuilder: func(o rueidis.ClientOption) (rueidis.Client, error) {
			return newRueidisClient(o, sent)
		},
	})
	if err != nil {
		return nil, err
	}
	return &opened{lockers: repeat(contextLocker(lk.WithContext), n), sent: sent, close: lk.Close}, nil
}

// valkeylockOpen is rueidislockOpen for valkeylock on valkey-go.
func valkeylockOpen(addr string, n int) (*opened, error) {
	sent := new(atomic.Int64)
	lk, err := valkeylock.NewLocker(valkeylock.LockerOption{
		ClientOption:   valkey.ClientOption{InitAddress: []string{addr}},
		KeyMajority:    1,
		NoLoopTracking: true,
		ClientBuilder: func(o valkey.ClientOption) (valkey.Client, error) {
			return newValkeyClient(o, sent)
		},
	})
	if err != nil {
		return nil, err
	}
	return &opened{lockers: repeat(contextLocker(lk.WithContext), n), sent: sent, close: lk.Close}, nil
}

// contextLocker makes a locker of rueidislock's (or valkeylock's)
// WithContext, which waits for the lock and returns a context that is
// cancelled when the lock is lost, and the function that releases it. The
// harness does not watch that context. The release waits until the key is
// deleted, or the attempt fails, and cannot report a failure: it returns
// nil.
func contextLocker(withContext func(context.Context, string) (context.Context, context.CancelFunc, error)) locker {
	return func(ctx context.Context, key string) (func(context.Context) error, error) {
		_, cancel, err := withContext(ctx, key)
		if err != nil {
			return nil, err
		}
		return func(context.Context) error {
			cancel()
			return nil
		}, nil
	}
}

func repeat(lk locker, n int) []locker {
	ls := make([]locker, n)
	for i := range ls {
		ls[i] = lk
	}
	return ls
}

// gaveUp reports whether err is a library's "not acquired" answer, after
// which the harness simply tries again: redsync gives up after its 32 tries.
func gaveUp(err error) bool {
	var taken *redsync.ErrTaken
	return errors.Is(err, lock.ErrNotAcquired) ||
		errors.Is(err, redsync.ErrFailed) ||
		errors.As(err, &taken) ||
		errors.Is(err, redislock.ErrNotObtained)
}
