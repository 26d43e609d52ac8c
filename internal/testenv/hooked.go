package testenv

import (
	"context"
	"time"

	"github.com/seed05627090/lock"
)

// Hooked is the tests' one fake provider: it passes every call on to
// Provider, except the calls of a method whose hook is set (OnAcquire for
// Acquire, and so on), which call the hook instead; the hook may call the
// provider behind it, or not. The hooks are set before the provider is used
// and not changed after; what they do may depend on state of the test's own
// (an atomic flag, a counter). With no hook set it is Provider itself; with
// a nil Provider, only the hooked methods can be called. The methods with no
// hook (Watch, Notify, ForceRelease, LowerClaim, InspectClaims) always reach
// Provider. A network or a server that fails, stalls or answers late is a
// Hooked provider.
type Hooked struct {
	lock.Provider
	OnAcquire func(ctx context.Context, key, owner string, ttl time.Duration) (lock.Record, error)
	OnQueue   func(ctx context.Context, key string, w lock.Wait) (lock.Record, error)
	OnLeave   func(ctx context.Context, key string, w lock.Wait) error
	OnListen  func(ctx context.Context, inbox string, deliver func(lock.Notice)) (func(), error)
	OnRelease func(ctx context.Context, key, owner string) error
	OnRenew   func(ctx context.Context, key, owner string, ttl time.Duration) error
	OnFinish  func(ctx context.Context, key, owner string, ttl time.Duration) error
	OnInspect func(ctx context.Context, key string) (lock.Record, error)
	OnList    func(ctx context.Context, prefix string, fn func(key string, r lock.Record, err error) bool) error

	OnAcquireClaim func(ctx context.Context, key string, c lock.Claim) (lock.Record, error)
	OnQueueClaim   func(ctx context.Context, key string, c lock.Claim) (lock.Record, error)
	OnLeaveClaim   func(ctx context.Context, key string, c lock.Claim) error
	OnRenewClaim   func(ctx context.Context, key, owner string, ttl time.Duration) error
	OnReleaseClaim func(ctx context.Context, key, owner string) error
}

func (p *Hooked) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (lock.Record, error) {
	if p.OnAcquire != nil {
		return p.OnAcquire(ctx, key, owner, ttl)
	}
	return p.Provider.Acquire(ctx, key, owner, ttl)
}

func (p *Hooked) Queue(ctx context.Context, key string, w lock.Wait) (lock.Record, error) {
	if p.OnQueue != nil {
		return p.OnQueue(ctx, key, w)
	}
	return p.Provider.Queue(ctx, key, w)
}

func (p *Hooked) Leave(ctx context.Context, key string, w lock.Wait) error {
	if p.OnLeave != nil {
		return p.OnLeave(ctx, key, w)
	}
	return p.Provider.Leave(ctx, key, w)
}

func (p *Hooked) Listen(ctx context.Context, inbox string, deliver func(lock.Notice)) (func(), error) {
	if p.OnListen != nil {
		return p.OnListen(ctx, inbox, deliver)
	}
	return p.Provider.Listen(ctx, inbox, deliver)
}

func (p *Hooked) Release(ctx context.Context, key, owner string) error {
	if p.OnRelease != nil {
		return p.OnRelease(ctx, key, owner)
	}
	return p.Provider.Release(ctx, key, owner)
}

func (p *Hooked) Renew(ctx context.Context, key, owner string, ttl time.Duration) error {
	if p.OnRenew != nil {
		return p.OnRenew(ctx, key, owner, ttl)
	}
	return p.Provider.Renew(ctx, key, owner, ttl)
}

func (p *Hooked) Finish(ctx context.Context, key, owner string, ttl time.Duration) error {
	if p.OnFinish != nil {
		return p.OnFinish(ctx, key, owner, ttl)
	}
	return p.Provider.Finish(ctx, key, owner, ttl)
}

func (p *Hooked) Inspect(ctx context.Context, key string) (lock.Record, error) {
	if p.OnInspect != nil {
		return p.OnInspect(ctx, key)
	}
	return p.Provider.Inspect(ctx, key)
}

func (p *Hooked) List(ctx context.Context, prefix string, fn func(key string, r lock.Record, err error) bool) error {
	if p.OnList != nil {
		return p.OnList(ctx, prefix, fn)
	}
	return p.Provider.List(ctx, prefix, fn)
}

func (p *Hooked) AcquireClaim(ctx context.Context, key string, c lock.Claim) (lock.Record, error) {
	if p.OnAcquireClaim != nil {
		return p.OnAcquireClaim(ctx, key, c)
	}
	return p.Provider.AcquireClaim(ctx, key, c)
}

func (p *Hooked) QueueClaim(ctx context.Context, key string, c lock.Claim) (lock.Record, error) {
	if p.OnQueueClaim != nil {
		return p.OnQueueClaim(ctx, key, c)
	}
	return p.Provider.QueueClaim(ctx, key, c)
}

func (p *Hooked) LeaveClaim(ctx context.Context, key string, c lock.Claim) error {
	if p.OnLeaveClaim != nil {
		return p.OnLeaveClaim(ctx, key, c)
	}
	return p.Provider.LeaveClaim(ctx, key, c)
}

func (p *Hooked) RenewClaim(ctx context.Context, key, owner string, ttl time.Duration) error {
	if p.OnRenewClaim != nil {
		return p.OnRenewClaim(ctx, key, owner, ttl)
	}
	return p.Provider.RenewClaim(ctx, key, owner, ttl)
}

func (p *Hooked) ReleaseClaim(ctx context.Context, key, owner string) error {
	if p.OnReleaseClaim != nil {
		return p.OnReleaseClaim(ctx, key, owner)
	}
	return p.Provider.ReleaseClaim(ctx, key, owner)
}

// SlowRelease returns p with its releases (and grace-period writes, Finish)
// taking d before they reach it, as over a slow network.
func SlowRelease(p lock.Provider, d time.Duration) *Hooked {
	return &Hooked{
		Provider: p,
		OnRelease: func(ctx context.Context, key, owner string) error {
			time.Sleep(d)
			return p.Release(ctx, key, owner)
		},
		OnFinish: func(ctx context.Context, key, owner string, ttl time.Duration) error {
			time.Sleep(d)
			return p.Finish(ctx, key, owner, ttl)
		},
	}
}
