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

// RunTick runs fn for the run of job scheduled at tick, in one replica:
// every replica calls it when its scheduler fires, with the scheduled time
// (not the time it fired), and the first to ask runs fn under the lock
// [TickName](job, tick), kept closed until at least every (the job's
// period) after the run ends; the others skip the tick, as long as they
// ask within a period of the first. o is used as [Client.Do] uses it, but
// for GracePeriod, at least every.
//
// On success fn ran in this replica, and RunTick returns fn's error joined
// with the release's; the tick stays closed even when fn failed. When
// another replica runs or ran the tick, it returns an error matching
// [ErrNotAcquired] and [ErrHeld] (running) or [ErrGracePeriod] (ran), and
// fn is not run. It returns [ErrInvalidArgument] for an empty job, a zero
// tick, a period that is not positive, or bad options. A replica that
// asks after the tick's record has expired runs fn again, and so does one
// that asks after a crashed runner's lease ended: docs/scheduling.md
// ("RunTick in detail") says when, and how to call it from gocron or
// robfig/cron.
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
