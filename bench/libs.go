package main

import (
	"context"
	"errors"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/seed05627090/lock"
)

// locker takes the lock called key, waiting for it the way the library waits,
// and returns the function that releases it.
type locker func(ctx context.Context, key string) (release func(context.Context) error, err error)

// library makes lockers over one go-redis client.
type library struct {
	name   string // column heading
	detail string // what the column runs, for the notes under the table
	// lockers returns n lockers, one per goroutine, and a function that frees
	// what they hold (subscriptions); it does not close rc.
	lockers func(rc *redis.Client, n int) ([]locker, func(), error)
}

// peerTTL is the lease the peers' locks get: redsync's default expiry.
const peerTTL = 8 * time.Second

var (
	libLock = library{
		name:    "lock",
		detail:  "this library: one lock.Client on lock.NewRedisProvider, Acquire with Options{Wait: true}, Lock.Release",
		lockers: ourLockers(false, false),
	}
	libLockMulti = library{
		name:    "lock multi",
		detail:  "this library with one lock.Client per goroutine (as separate processes would have), on the same go-redis client",
		lockers: ourLockers(true, false),
	}
	libLockFair = library{
		name:    "lock fair",
		detail:  "as lock multi with Options{Wait: true, Fair: true}: one wait queue in Redis, arrival order across clients",
		lockers: ourLockers(true, true),
	}
	libRedsync = library{
		name:    "redsync",
		detail:  "redsync.New(goredis.NewPool(rc)).NewMutex(key) with defaults (8 s expiry, 32 tries 50-250 ms apart), LockContext, UnlockContext",
		lockers: redsyncLockers,
	}
	libRedislockLinear = library{
		name:    "redislock lin",
		detail:  "redislock.New(rc).Obtain(ctx, key, 8s, RetryStrategy: LinearBackoff(100ms)), retrying until the run ends, Release",
		lockers: redislockLockers(func() redislock.RetryStrategy { return redislock.LinearBackoff(100 * time.Millisecond) }),
	}
	libRedislockExp = library{
		name:   "redislock exp",
		detail: "as redislock lin with a new ExponentialBackoff(16ms, 256ms) for each Obtain",
		lockers: redislockLockers(func() redislock.RetryStrategy {
			return redislock.ExponentialBackoff(16*time.Millisecond, 256*time.Millisecond)
		}),
	}
)

// libLock8 spreads the goroutines over 8 Clients, as 8 processes with many
// waiters each would have.
var libLock8 = library{
	name:    "lock 8 clients",
	detail:  "this library with 8 lock.Clients (8 processes), goroutine i on Client i%8, Acquire with Options{Wait: true}",
	lockers: ourLockersSpread(8),
}

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
		p := lock.NewRedisProvider(rc)
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
