package faults

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/testenv"
)

// The deadline of every call in Deadlines, and how long past it a call may
// return there: the library aims at a tenth of a second; the margin allows
// for a loaded machine and the race detector. (Before the deadline bounded
// the clean-ups, calls returned a release timeout, seconds, past it.)
const (
	deadline       = 600 * time.Millisecond
	deadlineMargin = 400 * time.Millisecond
)

// StoreFault is what the store behind a Proxy does in a case of Deadlines.
type StoreFault struct {
	Name string
	// Set makes the fault on p, once every Client of the case is made.
	Set func(p *Proxy)
}

// StoreFaults are the faults Deadlines plays: connections refused (the open
// ones cut), a store that never answers (requests held), one that answers
// after the deadline, and connections dropped in the middle of a call
// (held, then cut, then held again).
var StoreFaults = []StoreFault{
	{"refused", func(p *Proxy) { p.SetRefuse(true); p.Cut() }},
	{"silent", func(p *Proxy) { p.Pause() }},
	{"slow", func(p *Proxy) { p.SetDelay(3 * deadline) }},
	{"dropped", func(p *Proxy) {
		p.Pause()
		time.AfterFunc(deadline/3, func() { p.Cut() })
	}},
}

// heal undoes every fault of p.
func heal(p *Proxy) {
	p.SetRefuse(false)
	p.SetDelay(0)
	p.Resume()
}

// deadlineCall is one call of a Client that Deadlines times: prepare runs
// while the store answers (it may acquire what the call releases), run
// under the fault.
type deadlineCall struct {
	name    string
	prepare func(ctx context.Context, t *testing.T, c *lock.Client, name string) any
	run     func(ctx context.Context, c *lock.Client, name string, prepared any) error
}

// Deadlines checks that each call of the library (Acquire in every mode, a
// held lock's Release, Do, Middleware, a Primitive's Run, RunTick,
// Semaphore and RWMutex holds, AcquireAll and DoAll, Campaign, Lead,
// Observe's first read, Inspect, List, ForceRelease) returns by its
// context's deadline, or by MaxWait when that comes first, plus a margin,
// whatever the store behind p does (see StoreFaults), and with an error
// (Observe: its channel closed, or a value with Err). newClient returns a
// Client whose provider reaches its store through p, with a connection
// pool of its own: a new one for each call, so that no case shares a
// connection with another. After each fault, with the store healed, the
// names are free again once the Clients are closed (their clean-ups ran)
// or their leases (a second) ran out.
func Deadlines(t *testing.T, p *Proxy, newClient func(t *testing.T) *lock.Client) {
	for _, f := range StoreFaults {
		t.Run(f.Name, func(t *testing.T) {
			heal(p)
			defer heal(p)
			type prepared struct {
				call   deadlineCall
				c      *lock.Client
				name   string
				before any
			}
			var cases []prepared
			for i, call := range deadlineCalls {
				c := newClient(t)
				name := fmt.Sprintf("%s-%d", testenv.Name(t), i)
				ctx := testenv.Context(t, 10*time.Second)
				var before any
				if call.prepare != nil {
					before = call.prepare(ctx, t, c, name)
				}
				cases = append(cases, prepared{call, c, name, before})
			}
			f.Set(p)
			var wg sync.WaitGroup
			took := make([]time.Duration, len(cases))
			errs := make([]error, len(cases))
			for i, pc := range cases {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ctx, cancel := context.WithTimeout(context.Background(), deadline)
					defer cancel()
					start := time.Now()
					errs[i] = pc.call.run(ctx, pc.c, pc.name, pc.before)
					took[i] = time.Since(start)
				}()
			}
			wg.Wait()
			var longest time.Duration
			for i, pc := range cases {
				longest = max(longest, took[i])
				assert.LessOrEqual(t, took[i], deadline+deadlineMargin, "%s returned %v past its deadline (%v)", pc.call.name, took[i]-deadline, deadline)
				assert.Error(t, errs[i], "%s under the fault", pc.call.name)
			}
			t.Logf("%s: the slowest call returned %v after its deadline of %v", f.Name, longest-deadline, deadline)
			heal(p)
			for _, pc := range cases {
				if l, ok := pc.before.(*lock.Lock); ok {
					_ = l.Release(context.Background())
				}
				require.NoError(t, pc.c.Close())
			}
			check := newClient(t)
			for _, pc := range cases {
				assert.Eventually(t, func() bool {
					s, err := check.Inspect(context.Background(), pc.name)
					return err == nil && s.Free()
				}, 10*time.Second, 20*time.Millisecond, "%s left %q held", pc.call.name, pc.name)
			}
		})
	}
}

// deadlineOptions are the options of every lock Deadlines takes: a short
// lease, so that what a fault left stored expires soon.
var deadlineOptions = lock.Options{Lease: time.Second}

// mustHold returns a Lock on name, taken while the store answers.
func mustHold(ctx context.Context, t *testing.T, c *lock.Client, name string) any {
	l, err := c.Acquire(ctx, name, deadlineOptions)
	require.NoError(t, err)
	return l
}

// errNoValue is Observe's error when its channel closed without a value.
var errNoValue = errors.New("observe: channel closed without a value")

var deadlineCalls = []deadlineCall{
	{name: "Acquire", run: func(ctx context.Context, c *lock.Client, name string, _ any) error {
		_, err := c.Acquire(ctx, name, deadlineOptions)
		return err
	}},
	{name: "Acquire/Wait", run: func(ctx context.Context, c *lock.Client, name string, _ any) error {
		o := deadlineOptions
		o.Wait = true
		_, err := c.Acquire(ctx, name, o)
		return err
	}},
	{name: "Acquire/Wait/Fair", run: func(ctx context.Context, c *lock.Client, name string, _ any) error {
		o := deadlineOptions
		o.Wait, o.Fair = true, true
		_, err := c.Acquire(ctx, name, o)
		return err
	}},
	{name: "Acquire/MaxWait", run: func(_ context.Context, c *lock.Client, name string, _ any) error {
		// MaxWait alone bounds this one: no deadline on its context.
		o := deadlineOptions
		o.Wait, o.MaxWait = true, deadline
		_, err := c.Acquire(context.Background(), name, o)
		return err
	}},
	{name: "Lock.Release", prepare: mustHold, run: func(ctx context.Context, _ *lock.Client, _ string, l any) error {
		return l.(*lock.Lock).Release(ctx)
	}},
	{name: "Do", run: func(ctx context.Context, c *lock.Client, name string, _ any) error {
		return c.Do(ctx, name, deadlineOptions, func(context.Context) error { return nil })
	}},
	{name: "Middleware", run: func(ctx context.Context, c *lock.Client, name string, _ any) error {
		h, err := lock.Middleware(c, func(context.Context, int) (int, error) { return 0, nil },
			lock.MiddlewareOptions[int]{Name: name, Options: deadlineOptions})
		if err != nil {
			return err
		}
		_, err = h(ctx, 1)
		return err
	}},
	{name: "Primitive.Run", run: func(ctx context.Context, c *lock.Client, name string, _ any) error {
		p, err := lock.New(c, func(context.Context, int) error { return nil },
			lock.PrimitiveOptions[int]{Name: name, Options: deadlineOptions})
		if err != nil {
			return err
		}
		return p.Run(ctx, 1)
	}},
	{name: "RunTick", run: func(ctx context.Context, c *lock.Client, name string, _ any) error {
		return c.RunTick(ctx, name, time.Now().Truncate(time.Minute), time.Minute, deadlineOptions, func(context.Context) error { return nil })
	}},
	{name: "Semaphore.Acquire", run: func(ctx context.Context, c *lock.Client, name string, _ any) error {
		s, err := c.Semaphore(name, 3)
		if err != nil {
			return err
		}
		o := deadlineOptions
		o.Wait = true
		_, err = s.Acquire(ctx, 1, o)
		return err
	}},
	{name: "RWMutex.Lock", run: func(ctx context.Context, c *lock.Client, name string, _ any) error {
		m, err := c.RWMutex(name, 4)
		if err != nil {
			return err
		}
		o := deadlineOptions
		o.Wait = true
		_, err = m.Lock(ctx, o)
		return err
	}},
	{name: "RWMutex.RDo", run: func(ctx context.Context, c *lock.Client, name string, _ any) error {
		m, err := c.RWMutex(name, 4)
		if err != nil {
			return err
		}
		return m.RDo(ctx, deadlineOptions, func(context.Context) error { return nil })
	}},
	{name: "AcquireAll", run: func(ctx context.Context, c *lock.Client, name string, _ any) error {
		o := deadlineOptions
		o.Wait = true
		_, err := c.AcquireAll(ctx, []string{name + "-a", name + "-b"}, o)
		return err
	}},
	{name: "DoAll", run: func(ctx context.Context, c *lock.Client, name string, _ any) error {
		return c.DoAll(ctx, []string{name + "-a", name + "-b"}, deadlineOptions, func(context.Context) error { return nil })
	}},
	{name: "Campaign", run: func(ctx context.Context, c *lock.Client, name string, _ any) error {
		_, err := c.Campaign(ctx, name, lock.ElectionOptions{Lease: time.Second})
		return err
	}},
	{name: "Lead", run: func(ctx context.Context, c *lock.Client, name string, _ any) error {
		return c.Lead(ctx, name, func(ctx context.Context) error { <-ctx.Done(); return nil },
			lock.LeadOptions{ElectionOptions: lock.ElectionOptions{Lease: time.Second}})
	}},
	{name: "Observe", run: func(ctx context.Context, c *lock.Client, name string, _ any) error {
		ch, err := c.Observe(ctx, name)
		if err != nil {
			return err
		}
		l, ok := <-ch
		for range ch { // closed when ctx ends
		}
		switch {
		case !ok:
			return errNoValue
		case l.Err == nil:
			return nil // read before the fault took hold: the assertion says so
		}
		return l.Err
	}},
	{name: "Inspect", run: func(ctx context.Context, c *lock.Client, name string, _ any) error {
		_, err := c.Inspect(ctx, name)
		return err
	}},
	{name: "List", run: func(ctx context.Context, c *lock.Client, _ string, _ any) error {
		_, _, err := c.List(ctx, 10)
		return err
	}},
	{name: "ForceRelease", prepare: mustHold, run: func(ctx context.Context, c *lock.Client, name string, _ any) error {
		_, err := c.ForceRelease(ctx, name)
		return err
	}},
}
