package lock

import (
	"context"
	"fmt"
	"time"
)

// TickName returns the name of the lock of one scheduled run: the job's name
// and the tick's scheduled time in UTC, as "job@2006-01-02T15:04:05.999999999Z".
// Two replicas that name the same instant (in any time zone, with or without a
// monotonic reading) get the same name; two ticks of a job never share one.
func TickName(job string, tick time.Time) string {
	return job + "@" + tick.UTC().Format(time.RFC3339Nano)
}

// RunTick runs fn for one scheduled run of job, the one scheduled at tick, in
// one replica: call it in every replica when the scheduler fires, with the
// scheduled time (not the time it fired), and the first to ask runs fn
// while the others skip the tick, as long as they ask within a period of
// the first (see below). A replica that asks after the tick's record has
// expired runs fn again, and a tick whose runner crashed runs again only
// where a replica asks after the runner's lease ended.
// A scheduler that does not tell its job the scheduled time (gocron,
// robfig/cron) can pass time.Now().Round(every) when its times are multiples
// of every and it fires less than every/2 late: see the module
// github.com/seed05627090/lock/gocron and examples/robfig.
//
// The lock is named TickName(job, tick), so each tick has its own record. With
// GracePeriod raised to at least every (the job's period), the record stays
// closed from the first replica's attempt until at least one period after the
// run ends, so:
//
//   - a replica whose clock or tick is late finds the tick held ([ErrHeld]) or
//     already run (ErrGracePeriod) and skips it, as long as it tries within one
//     period of the first replica's attempt: the spread of the replicas'
//     clocks plus their scheduling delays must stay under every (raise
//     o.GracePeriod for more). The grace period is counted from the end of the
//     run and the run started at the first attempt, so one period covers
//     attempts up to one period apart, however short the run.
//   - a replica whose clock is early takes the next tick's run under the next
//     tick's name: a record of one tick never closes another, so no tick is
//     refused because the one before ran (or was late).
//
// o is used as Do uses it (Wait, MaxDuration, Lease), except that GracePeriod
// is at least every. Runs of different ticks may overlap when a run lasts
// longer than a period. Every tick is a new lock name, whose record stays
// for its grace period and then expires: nothing else of it is kept (on
// Redis, tokens come from the counter of the name's hash slot, so the tokens
// of successive ticks increase).
//
// On success, fn ran in this replica and RunTick returns fn's error joined with
// the release's, as Do does; the tick then stays closed even when fn failed
// (it is not run again elsewhere). When another replica runs or ran the tick it
// returns an error matching [ErrNotAcquired] and ErrHeld (running) or
// [ErrGracePeriod] (ran), and fn is not run. It returns [ErrInvalidArgument] for an
// empty job, a zero tick, a period that is not positive, or bad options.
// What it does not cover: a replica that tries after the record has expired
// (more than the grace period after the run ended) runs the tick again, and a
// holder that crashes leaves the tick to whoever tries after its lease ends.
func (c *Client) RunTick(ctx context.Context, job string, tick time.Time, every time.Duration, o Options, fn func(ctx context.Context) error) error {
	o, err := tickOptions(job, tick, every, o)
	if err != nil {
		return err
	}
	return c.Do(ctx, TickName(job, tick), o, fn)
}

// AcquireTick is RunTick for a caller that releases the lock itself (a
// scheduler's lock hook): it acquires the lock of job's run scheduled at tick,
// with GracePeriod at least every, and returns it held. Release it when the
// run ends. It fails as RunTick does, with nothing held.
func (c *Client) AcquireTick(ctx context.Context, job string, tick time.Time, every time.Duration, o Options) (*Lock, error) {
	o, err := tickOptions(job, tick, every, o)
	if err != nil {
		return nil, err
	}
	return c.Acquire(ctx, TickName(job, tick), o)
}

// tickOptions checks the arguments of a tick's run and returns o with its
// grace period raised to at least every.
func tickOptions(job string, tick time.Time, every time.Duration, o Options) (Options, error) {
	switch {
	case job == "":
		return o, fmt.Errorf("%w: empty job name", ErrInvalidArgument)
	case tick.IsZero():
		return o, fmt.Errorf("%w: zero tick for job %q", ErrInvalidArgument, job)
	case every <= 0:
		return o, fmt.Errorf("%w: period %v of job %q is not positive", ErrInvalidArgument, every, job)
	}
	o.GracePeriod = max(o.GracePeriod, every)
	return o, nil
}
