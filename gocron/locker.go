// Package gocronlock runs the jobs of gocron v2 schedulers
// (github.com/go-co-op/gocron/v2) in several replicas once per scheduled run:
// its Locker, given to every replica's scheduler, lets one replica run each
// run of a job (within the bounds that Locker states), through locks of
// github.com/seed05627090/lock.
//
//	c, _ := lock.NewClient(lock.NewRedisProvider(rdb)) // one per replica, sharing the Redis
//	locker := &gocronlock.Locker{Client: c, Every: time.Minute}
//	s, _ := gocron.NewScheduler(gocron.WithDistributedLocker(locker))
//	s.NewJob(gocron.CronJob("0 * * * *", false), gocron.NewTask(func(ctx context.Context) error {
//		l, _ := locker.Held(ctx) // the held lock: pass l.Token() to what the job writes
//		return sendReport(ctx, l.Token())
//	}), gocron.WithName("hourly-report"))
//
// gocron tells a Locker the job's name but not the run's scheduled time, so
// the Locker keys a run by the scheduled time it stands for: the multiple of
// Every nearest to the replica's clock when gocron asks for the lock (see
// Locker). Each run then has its own lock (lock.TickName), held while the job
// runs and kept closed for at least Every after it, as lock.Client.RunTick
// does: a replica whose clock or tick is late skips a run that another has
// done, and one that is early takes the next run, never this one again.
//
// There is no Elector. gocron's Elector answers "is this replica the leader"
// with neither the job nor the run, and gocron ignores the Locker when an
// Elector is set: it can only make one replica run everything, loses the runs
// of up to a lease when the leader dies, and has no lock to hand to the job.
// The Locker gives each run exactly once whichever replicas are up.
package gocronlock

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/seed05627090/lock"
)

// Locker is a gocron.Locker that lets one replica run each scheduled run of a
// job. Give the same configuration to the scheduler of every replica
// (gocron.WithDistributedLocker, or gocron.WithDistributedJobLocker for one
// job), each with its own lock.Client on the shared provider. Set Client and
// Every before the first run and do not change them after; a Locker is safe
// for concurrent use.
//
// A run is keyed by the multiple of Every (counted from the zero time, as
// time.Time.Round counts it: for an Every that divides a day, from each UTC
// midnight) nearest to the replica's clock when gocron asks for the lock, so
// the replicas agree on it when:
//
//   - the job's scheduled times are multiples of Every, at least Every apart:
//     Every is the schedule's granularity (time.Minute for a cron spec,
//     time.Second for one with seconds) or its interval (a DurationJob whose
//     start, gocron.WithStartAt, is a multiple of it);
//   - each replica's scheduler asks for the lock less than Every/2 after its
//     own clock reached the scheduled time (the skew between clocks does not
//     matter here: each replica keys by the clock that fired the run); and
//   - the first and the last replica to ask for one run do so less than the
//     grace period (at least Every) apart in real time: clock skew plus
//     scheduling delay. A replica that asks later runs the job again.
//
// A run that another replica holds is refused with an error matching
// lock.ErrHeld, one that already ran with lock.ErrGracePeriod (both match
// lock.ErrNotAcquired): gocron then skips the run, counts it as skipped and
// calls the job's gocron.AfterLockError listener.
type Locker struct {
	// Client takes the locks; required. Its prefix is put before every key.
	Client *lock.Client

	// Every is the spacing of the grid the job's scheduled times fall on (see
	// above); required. The zero value fails every Lock with
	// lock.ErrInvalidArgument.
	Every time.Duration

	// Options of every run's lock: MaxDuration and Lease as in lock.Options
	// (the zero value uses their defaults). Wait should stay false: a run
	// that another replica holds is that replica's. GracePeriod is raised to
	// at least Every.
	Options lock.Options

	// Clock is the replica's clock, which keys a run; nil means the system
	// clock. Give it the scheduler's clock when the scheduler has one of its
	// own (gocron.WithClock).
	Clock lock.Clock

	mu   sync.Mutex
	runs map[context.Context][]*lock.Lock // held locks, by the job's context
}

var _ gocron.Locker = (*Locker)(nil)

// Lock acquires the lock of job's run that the Locker's clock stands at (see
// Locker), without waiting; gocron calls it before each run, with the job's
// context and name. On success the run holds the lock, renewed while the job
// runs, until gocron calls Unlock on the returned Lock, which releases it
// (keeping the run closed for the grace period). On failure nothing is held:
// it returns an error matching lock.ErrHeld when another replica holds the
// run, lock.ErrGracePeriod when one ran it (both match lock.ErrNotAcquired,
// which an outage matches too: test ErrUnavailable first),
// lock.ErrInvalidArgument for a Locker without Client or Every, and the
// provider's error otherwise.
func (lk *Locker) Lock(ctx context.Context, job string) (gocron.Lock, error) {
	if lk.Client == nil || lk.Every <= 0 {
		return nil, fmt.Errorf("%w: gocronlock.Locker needs a Client and a positive Every (have %v)", lock.ErrInvalidArgument, lk.Every)
	}
	tick := lk.now().Round(lk.Every)
	l, err := lk.Client.AcquireTick(ctx, job, tick, lk.Every, lk.Options)
	if err != nil {
		return nil, err
	}
	lk.add(ctx, l)
	return &run{lk: lk, ctx: ctx, l: l}, nil
}

// Held returns the lock held by the run of the job whose context is ctx, and
// whether there is exactly one. Call it in the job with the context gocron
// passed to it (gocron passes one to a task whose first parameter is a
// context.Context), not with one derived from it: gocron gives a job the
// same context in every run, and Held finds the run by it. It reports false
// outside a run, and when several runs of the job hold locks in this process
// at once (a run longer than the job's interval without
// gocron.WithSingletonMode): which of them is asking cannot be told.
//
// The held lock carries the run's fencing token (Token) and reports a loss
// (Done, Err); gocron does not cancel the job's context on a loss.
func (lk *Locker) Held(ctx context.Context) (*lock.Lock, bool) {
	if !usableKey(ctx) {
		return nil, false
	}
	lk.mu.Lock()
	defer lk.mu.Unlock()
	if ls := lk.runs[ctx]; len(ls) == 1 {
		return ls[0], true
	}
	return nil, false
}

func (lk *Locker) now() time.Time {
	if lk.Clock != nil {
		return lk.Clock.Now()
	}
	return time.Now()
}

func (lk *Locker) add(ctx context.Context, l *lock.Lock) {
	if !usableKey(ctx) {
		return
	}
	lk.mu.Lock()
	defer lk.mu.Unlock()
	if lk.runs == nil {
		lk.runs = make(map[context.Context][]*lock.Lock)
	}
	lk.runs[ctx] = append(lk.runs[ctx], l)
}

func (lk *Locker) remove(ctx context.Context, l *lock.Lock) {
	if !usableKey(ctx) {
		return
	}
	lk.mu.Lock()
	defer lk.mu.Unlock()
	ls := lk.runs[ctx]
	for i, h := range ls {
		if h == l {
			ls = append(ls[:i:i], ls[i+1:]...)
			break
		}
	}
	if len(ls) == 0 {
		delete(lk.runs, ctx)
	} else {
		lk.runs[ctx] = ls
	}
}

// usableKey reports whether ctx can key a map: gocron's job contexts are
// pointers, but a caller's own could be of an incomparable type.
func usableKey(ctx context.Context) bool {
	return ctx != nil && reflect.TypeOf(ctx).Comparable()
}

// run is one held run: the gocron.Lock that Lock returns.
type run struct {
	lk  *Locker
	ctx context.Context // the job's context, which keys lk.runs
	l   *lock.Lock
}

// Unlock releases the run's lock, keeping the run closed for the grace
// period. It returns nil after a clean release and a *lock.LostError when the
// lock was lost during the run (gocron ignores it). The release runs on a
// context of its own, so a cancelled ctx cannot leave the lock held.
func (r *run) Unlock(ctx context.Context) error {
	r.lk.remove(r.ctx, r.l)
	return r.l.Release(ctx)
}
