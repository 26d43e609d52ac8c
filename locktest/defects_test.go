package locktest_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/testenv"
	"github.com/seed05627090/lock/locktest"
)

// The checker must be able to fail: each test below plants one defect in a
// backend (a wrapper over the memory provider) or in the fenced resource,
// runs the Workload that locktest.Run runs on every backend, and checks
// that the defect was played and that the checker finds the history not
// linearizable, in a partition of the kind the defect breaks (issue 40).

// checkCaught runs w, checks that the defect fired, and that the checker
// found a partition of kind ("lock ", "claims ", "fence ") illegal.
func checkCaught(t *testing.T, w locktest.Workload, fired *atomic.Int64, kind string) {
	t.Helper()
	h := w.Run(t)
	require.Positive(t, fired.Load(), "the planted defect was never played: the run shows nothing")
	r := h.Check(t.TempDir(), t.Name())
	t.Logf("defect played %d times; %s", fired.Load(), r)
	require.NotEmpty(t, r.Illegal, "the checker missed the planted defect")
	found := false
	for _, p := range r.Illegal {
		found = found || strings.HasPrefix(p, kind)
	}
	assert.True(t, found, "a partition of kind %q is illegal: %v", kind, r.Illegal)
	assert.FileExists(t, r.File, "the visualization of the violation is written")
}

// doubled returns p with every lock token doubled (grants, inbox notices,
// Inspect): the room a planted grant needs for a token of its own, above
// the grant it overlaps and below every later one.
func doubled(p lock.Provider) *testenv.Hooked {
	double := func(rec lock.Record, err error) (lock.Record, error) {
		rec.Token *= 2
		return rec, err
	}
	return &testenv.Hooked{
		Provider: p,
		OnAcquire: func(ctx context.Context, key, owner string, ttl time.Duration) (lock.Record, error) {
			return double(p.Acquire(ctx, key, owner, ttl))
		},
		OnQueue: func(ctx context.Context, key string, w lock.Wait) (lock.Record, error) {
			return double(p.Queue(ctx, key, w))
		},
		OnInspect: func(ctx context.Context, key string) (lock.Record, error) {
			return double(p.Inspect(ctx, key))
		},
		OnListen: func(ctx context.Context, inbox string, deliver func(lock.Notice)) (func(), error) {
			return p.Listen(ctx, inbox, func(n lock.Notice) {
				if n.Weight == 0 {
					n.Token *= 2
				}
				deliver(n)
			})
		},
	}
}

// TestCatchesGrantOfHeldLock: a backend whose Acquire, finding the lock
// held, grants it anyway (with a token between the holder's and the next).
// The holder's later renewal or clean release shows two holders.
func TestCatchesGrantOfHeldLock(t *testing.T) {
	var fired atomic.Int64
	mem := doubled(lock.NewMemoryProvider())
	bad := &testenv.Hooked{Provider: mem, OnAcquire: func(ctx context.Context, key, owner string, ttl time.Duration) (lock.Record, error) {
		rec, err := mem.Acquire(ctx, key, owner, ttl)
		if err == nil && rec.Owner != owner && rec.Owner != "" && !rec.GracePeriod {
			fired.Add(1)
			return lock.Record{Owner: owner, Token: rec.Token + 1, TTL: ttl, Since: time.Now()}, nil
		}
		return rec, err
	}}
	checkCaught(t, locktest.Workload{New: func(testing.TB) lock.Provider { return bad }, Rounds: 8}, &fired, "lock ")
}

// TestCatchesReusedToken: a backend whose Acquire and Queue grant with the
// token of the key's previous grant (when they grant at once).
func TestCatchesReusedToken(t *testing.T) {
	var fired atomic.Int64
	mem := lock.NewMemoryProvider()
	var mu sync.Mutex
	last := make(map[string]uint64)
	reuse := func(key, owner string, rec lock.Record, err error) (lock.Record, error) {
		if err == nil && rec.Owner == owner && !rec.GracePeriod {
			mu.Lock()
			if prev := last[key]; prev != 0 && prev != rec.Token {
				fired.Add(1)
				rec.Token = prev
			} else {
				last[key] = rec.Token
			}
			mu.Unlock()
		}
		return rec, err
	}
	bad := &testenv.Hooked{
		Provider: mem,
		OnAcquire: func(ctx context.Context, key, owner string, ttl time.Duration) (lock.Record, error) {
			rec, err := mem.Acquire(ctx, key, owner, ttl)
			return reuse(key, owner, rec, err)
		},
		OnQueue: func(ctx context.Context, key string, w lock.Wait) (lock.Record, error) {
			rec, err := mem.Queue(ctx, key, w)
			return reuse(key, w.Owner, rec, err)
		},
	}
	checkCaught(t, locktest.Workload{New: func(testing.TB) lock.Provider { return bad }, Rounds: 8}, &fired, "lock ")
}

// TestCatchesCleanReleaseAfterLoss: a backend whose Release reports clean
// the release of a record it no longer holds for the caller. The stalled
// Client of the Workload releases after its lock expired and was granted
// to another.
func TestCatchesCleanReleaseAfterLoss(t *testing.T) {
	var fired atomic.Int64
	mem := lock.NewMemoryProvider()
	bad := &testenv.Hooked{Provider: mem, OnRelease: func(ctx context.Context, key, owner string) error {
		err := mem.Release(ctx, key, owner)
		if errors.Is(err, lock.ErrLost) {
			fired.Add(1)
			return nil
		}
		return err
	}}
	checkCaught(t, locktest.Workload{New: func(testing.TB) lock.Provider { return bad }, Faults: true, Rounds: 8}, &fired, "lock ")
}

// staleFence is a fenced resource that accepts every write, a stale one
// too (its mark is kept, and not checked).
type staleFence struct {
	fired *atomic.Int64
	mu    sync.Mutex
	vals  map[string]string
	marks map[string]uint64
}

func (f *staleFence) Write(_ context.Context, name string, token uint64, value string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if token < f.marks[name] {
		f.fired.Add(1)
	} else {
		f.marks[name] = token
	}
	f.vals[name] = value
	return nil
}

func (f *staleFence) Read(_ context.Context, name string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.vals[name], nil
}

// TestCatchesStaleFencedWrite: a fenced resource that accepts the write
// of the stalled holder, whose token a later holder's write has passed.
func TestCatchesStaleFencedWrite(t *testing.T) {
	var fired atomic.Int64
	mem := lock.NewMemoryProvider()
	fence := &staleFence{fired: &fired, vals: make(map[string]string), marks: make(map[string]uint64)}
	checkCaught(t, locktest.Workload{New: func(testing.TB) lock.Provider { return mem }, Faults: true, Rounds: 8, Fence: fence}, &fired, "fence ")
}

// TestCatchesGrantPastLimit: a backend whose QueueClaim grants a claim
// that does not fit (with a token between the last granted and the next),
// taking the caller out of the queue.
func TestCatchesGrantPastLimit(t *testing.T) {
	var fired atomic.Int64
	mem := lock.NewMemoryProvider()
	var mu sync.Mutex
	most := make(map[string]uint64) // the greatest claim token told, halved
	seen := func(key string, token uint64) {
		mu.Lock()
		most[key] = max(most[key], token)
		mu.Unlock()
	}
	double := func(key string, rec lock.Record, err error) (lock.Record, error) {
		seen(key, rec.Token)
		rec.Token *= 2
		return rec, err
	}
	bad := &testenv.Hooked{
		Provider: mem,
		OnAcquireClaim: func(ctx context.Context, key string, c lock.Claim) (lock.Record, error) {
			rec, err := mem.AcquireClaim(ctx, key, c)
			return double(key, rec, err)
		},
		OnQueueClaim: func(ctx context.Context, key string, c lock.Claim) (lock.Record, error) {
			rec, err := mem.QueueClaim(ctx, key, c)
			if err == nil && rec.Queued && rec.Used+c.Weight > rec.Limit {
				if err := mem.LeaveClaim(ctx, key, c); err != nil {
					return rec, err
				}
				fired.Add(1)
				mu.Lock()
				token := 2*most[key] + 1
				mu.Unlock()
				return lock.Record{Owner: c.Owner, Token: token, TTL: c.TTL, Since: time.Now(), Limit: rec.Limit, Used: rec.Used + c.Weight}, nil
			}
			return double(key, rec, err)
		},
		OnListen: func(ctx context.Context, inbox string, deliver func(lock.Notice)) (func(), error) {
			return mem.Listen(ctx, inbox, func(n lock.Notice) {
				if n.Weight > 0 {
					seen(n.Key, n.Token)
					n.Token *= 2
				}
				deliver(n)
			})
		},
	}
	checkCaught(t, locktest.Workload{New: func(testing.TB) lock.Provider { return bad }, Rounds: 8}, &fired, "claims ")
}
