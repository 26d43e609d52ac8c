package locktest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seed05627090/lock"
)

// hooked passes every call on to Provider, except the calls of a method
// whose hook is set: that method calls its hook instead, which may call the
// provider behind it (or not). The hooks are set before the provider is
// used and not changed after. With no hook set it is Provider itself. The
// suite's fakes below are all hooked providers.
type hooked struct {
	lock.Provider
	acquire func(ctx context.Context, key, owner string, ttl time.Duration) (lock.Record, error)
	queue   func(ctx context.Context, key string, w lock.Waiter) (lock.Record, error)
	leave   func(ctx context.Context, key string, w lock.Waiter) error
	listen  func(ctx context.Context, inbox string, deliver func(lock.Grant)) (func(), error)
	release func(ctx context.Context, key, owner string) error
	renew   func(ctx context.Context, key, owner string, ttl time.Duration) error
	finish  func(ctx context.Context, key, owner string, ttl time.Duration) error
}

func (p *hooked) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (lock.Record, error) {
	if p.acquire != nil {
		return p.acquire(ctx, key, owner, ttl)
	}
	return p.Provider.Acquire(ctx, key, owner, ttl)
}

func (p *hooked) Queue(ctx context.Context, key string, w lock.Waiter) (lock.Record, error) {
	if p.queue != nil {
		return p.queue(ctx, key, w)
	}
	return p.Provider.Queue(ctx, key, w)
}

func (p *hooked) Leave(ctx context.Context, key string, w lock.Waiter) error {
	if p.leave != nil {
		return p.leave(ctx, key, w)
	}
	return p.Provider.Leave(ctx, key, w)
}

func (p *hooked) Listen(ctx context.Context, inbox string, deliver func(lock.Grant)) (func(), error) {
	if p.listen != nil {
		return p.listen(ctx, inbox, deliver)
	}
	return p.Provider.Listen(ctx, inbox, deliver)
}

func (p *hooked) Release(ctx context.Context, key, owner string) error {
	if p.release != nil {
		return p.release(ctx, key, owner)
	}
	return p.Provider.Release(ctx, key, owner)
}

func (p *hooked) Renew(ctx context.Context, key, owner string, ttl time.Duration) error {
	if p.renew != nil {
		return p.renew(ctx, key, owner, ttl)
	}
	return p.Provider.Renew(ctx, key, owner, ttl)
}

func (p *hooked) Finish(ctx context.Context, key, owner string, ttl time.Duration) error {
	if p.finish != nil {
		return p.finish(ctx, key, owner, ttl)
	}
	return p.Provider.Finish(ctx, key, owner, ttl)
}

// slowRelease returns p with its releases (and grace-period writes) waiting
// d before they reach it, as over a slow network: a watcher of Done has the
// time to read Err before the provider answers.
func slowRelease(p lock.Provider, d time.Duration) *hooked {
	return &hooked{
		Provider: p,
		release: func(ctx context.Context, key, owner string) error {
			time.Sleep(d)
			return p.Release(ctx, key, owner)
		},
		finish: func(ctx context.Context, key, owner string, ttl time.Duration) error {
			time.Sleep(d)
			return p.Finish(ctx, key, owner, ttl)
		},
	}
}

// stalledRenewals returns p with renewals that never come back before their
// context ends: a leader cut off from the backend.
func stalledRenewals(p lock.Provider) *hooked {
	return &hooked{Provider: p, renew: func(ctx context.Context, _, _ string, _ time.Duration) error {
		<-ctx.Done()
		return ctx.Err()
	}}
}

var errDead = errors.New("locktest: the process is dead")

// silenced returns p stopping to answer when its process "dies", once dead
// is set: every call that writes fails, so its holders' records expire on
// the backend.
func silenced(p lock.Provider, dead *atomic.Bool) *hooked {
	return &hooked{
		Provider: p,
		acquire: func(ctx context.Context, key, owner string, ttl time.Duration) (lock.Record, error) {
			if dead.Load() {
				return lock.Record{}, errDead
			}
			return p.Acquire(ctx, key, owner, ttl)
		},
		renew: func(ctx context.Context, key, owner string, ttl time.Duration) error {
			if dead.Load() {
				return errDead
			}
			return p.Renew(ctx, key, owner, ttl)
		},
		queue: func(ctx context.Context, key string, w lock.Waiter) (lock.Record, error) {
			if dead.Load() {
				return lock.Record{}, errDead
			}
			return p.Queue(ctx, key, w)
		},
		leave: func(ctx context.Context, key string, w lock.Waiter) error {
			if dead.Load() {
				return errDead
			}
			return p.Leave(ctx, key, w)
		},
		release: func(ctx context.Context, key, owner string) error {
			if dead.Load() {
				return errDead
			}
			return p.Release(ctx, key, owner)
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
func (s *grantStall) over(p lock.Provider) *hooked {
	return &hooked{Provider: p, listen: func(ctx context.Context, inbox string, deliver func(lock.Grant)) (func(), error) {
		return p.Listen(ctx, inbox, func(g lock.Grant) {
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
