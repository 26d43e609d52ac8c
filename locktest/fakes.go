package locktest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/testenv"
)

// The suite's fakes below are all hooked providers (testenv.Hooked).

// stalledRenewals returns p with renewals that never come back: each fails
// with errStalled once the TTL it asked for has passed (a request lost on
// the network times out), or with ctx's error when ctx ends first. It is a
// leader cut off from the backend. (A renewal that waits for ctx alone
// hung a test whose grant came late, confirmed by a renewal on the test's
// context, for minutes.)
func stalledRenewals(p lock.Provider) *testenv.Hooked {
	return &testenv.Hooked{Provider: p, OnRenew: func(ctx context.Context, _, _ string, ttl time.Duration) error {
		t := time.NewTimer(ttl)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			return errStalled
		}
	}}
}

var errStalled = errors.New("locktest: the renewal never came back")

var errDead = errors.New("locktest: the process is dead")

// silenced returns p stopping to answer when its process "dies", once dead
// is set: every call that writes fails, so its holders' records expire on
// the backend.
func silenced(p lock.Provider, dead *atomic.Bool) *testenv.Hooked {
	return &testenv.Hooked{
		Provider: p,
		OnAcquire: func(ctx context.Context, key, owner string, ttl time.Duration) (lock.Record, error) {
			if dead.Load() {
				return lock.Record{}, errDead
			}
			return p.Acquire(ctx, key, owner, ttl)
		},
		OnRenew: func(ctx context.Context, key, owner string, ttl time.Duration) error {
			if dead.Load() {
				return errDead
			}
			return p.Renew(ctx, key, owner, ttl)
		},
		OnQueue: func(ctx context.Context, key string, w lock.Wait) (lock.Record, error) {
			if dead.Load() {
				return lock.Record{}, errDead
			}
			return p.Queue(ctx, key, w)
		},
		OnLeave: func(ctx context.Context, key string, w lock.Wait) error {
			if dead.Load() {
				return errDead
			}
			return p.Leave(ctx, key, w)
		},
		OnRelease: func(ctx context.Context, key, owner string) error {
			if dead.Load() {
				return errDead
			}
			return p.Release(ctx, key, owner)
		},
		OnAcquireClaim: func(ctx context.Context, key string, c lock.Claim) (lock.Record, error) {
			if dead.Load() {
				return lock.Record{}, errDead
			}
			return p.AcquireClaim(ctx, key, c)
		},
		OnQueueClaim: func(ctx context.Context, key string, c lock.Claim) (lock.Record, error) {
			if dead.Load() {
				return lock.Record{}, errDead
			}
			return p.QueueClaim(ctx, key, c)
		},
		OnLeaveClaim: func(ctx context.Context, key string, c lock.Claim) error {
			if dead.Load() {
				return errDead
			}
			return p.LeaveClaim(ctx, key, c)
		},
		OnRenewClaim: func(ctx context.Context, key, owner string, ttl time.Duration) error {
			if dead.Load() {
				return errDead
			}
			return p.RenewClaim(ctx, key, owner, ttl)
		},
		OnReleaseClaim: func(ctx context.Context, key, owner string) error {
			if dead.Load() {
				return errDead
			}
			return p.ReleaseClaim(ctx, key, owner)
		},
	}
}

// grantStall holds back the grants delivered by the Listen of a provider it
// is over, once stall is called, until resume: the grants of a process that
// is stalled (a long GC pause, SIGSTOP) while its connection stays open.
type grantStall struct {
	mu      sync.Mutex
	stalled bool
	held    []func()
}

// over returns p with its Listen's grants going through s.
func (s *grantStall) over(p lock.Provider) *testenv.Hooked {
	return &testenv.Hooked{Provider: p, OnListen: func(ctx context.Context, inbox string, deliver func(lock.Notice)) (func(), error) {
		return p.Listen(ctx, inbox, func(g lock.Notice) {
			s.mu.Lock()
			if s.stalled && g.Owner != "" {
				s.held = append(s.held, func() { deliver(g) })
				s.mu.Unlock()
				return
			}
			s.mu.Unlock()
			deliver(g)
		})
	}}
}

func (s *grantStall) stall() {
	s.mu.Lock()
	s.stalled = true
	s.mu.Unlock()
}

// resume delivers the grants held back, holds no more, and returns how
// many there were.
func (s *grantStall) resume() int {
	s.mu.Lock()
	held := s.held
	s.held, s.stalled = nil, false
	s.mu.Unlock()
	for _, d := range held {
		d()
	}
	return len(held)
}
