// Robfig runs a robfig/cron/v3 job once per tick across replicas: a
// cron.JobWrapper takes the tick's lock with lock.Client.RunTick, so that one
// replica runs each tick and the others skip it, including a replica whose
// ticks come late.
//
//	go run .                          # three replicas share a memory provider
//	go run . -redis 127.0.0.1:6379    # they share Redis (run it in several terminals too)
//
// It is a module of its own, so that the lock module does not require robfig.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"sort"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/robfig/cron/v3"

	"github.com/seed05627090/lock"
)

func main() {
	redisAddr := flag.String("redis", "", "Redis address, such as 127.0.0.1:6379 (default: in-memory provider)")
	replicas := flag.Int("replicas", 3, "number of replicas")
	runFor := flag.Duration("for", 3200*time.Millisecond, "how long the replicas run")
	flag.Parse()
	if *replicas < 1 {
		log.Fatal("-replicas must be at least 1")
	}
	if err := run(*redisAddr, *replicas, *runFor); err != nil {
		log.Fatal(err)
	}
}

// every is the job's period: the spec below fires every second.
const every = time.Second

func run(redisAddr string, replicas int, runFor time.Duration) error {
	memory := lock.NewMemoryProvider()
	var ranMu sync.Mutex
	ran := map[time.Time][]string{} // tick -> replicas that ran it

	var crons []*cron.Cron
	for i := range replicas {
		name := fmt.Sprintf("replica-%d", i+1)
		// Each replica has its own Client (and, with Redis, its own
		// connection) on the shared store.
		var p lock.Provider = memory
		if redisAddr != "" {
			rc := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
			defer rc.Close()
			if err := rc.Ping(context.Background()).Err(); err != nil {
				return fmt.Errorf("no Redis at %s: %w", redisAddr, err)
			}
			p = lock.NewRedisProvider(rc)
		}
		c, err := lock.NewClient(p)
		if err != nil {
			return err
		}
		defer c.Close()

		wrappers := []cron.JobWrapper{oncePerTick(c, "report", every, lock.Options{MaxDuration: time.Minute},
			func(tick time.Time, err error) {
				switch {
				case err == nil:
					ranMu.Lock()
					ran[tick] = append(ran[tick], name)
					ranMu.Unlock()
				case errors.Is(err, lock.ErrHeld):
					fmt.Printf("%s %s: skipped, another replica is running it\n", tick.Format("15:04:05"), name)
				case errors.Is(err, lock.ErrGracePeriod):
					fmt.Printf("%s %s: skipped, another replica ran it\n", tick.Format("15:04:05"), name)
				default:
					fmt.Printf("%s %s: failed: %v\n", tick.Format("15:04:05"), name, err)
				}
			})}
		if i == replicas-1 && replicas > 1 {
			// The last replica's ticks come 300ms late (a slow clock, a busy
			// process): by then the tick has run, and it skips it.
			wrappers = append([]cron.JobWrapper{delay(300 * time.Millisecond)}, wrappers...)
		}
		cr := cron.New(cron.WithSeconds())
		if _, err := cr.AddJob("* * * * * *", cron.NewChain(wrappers...).Then(reportJob{replica: name})); err != nil {
			return err
		}
		crons = append(crons, cr)
	}

	for _, cr := range crons {
		cr.Start()
	}
	time.Sleep(runFor)
	for _, cr := range crons {
		<-cr.Stop().Done() // waits for running jobs
	}

	ticks := make([]time.Time, 0, len(ran))
	for tick := range ran {
		ticks = append(ticks, tick)
	}
	sort.Slice(ticks, func(i, j int) bool { return ticks[i].Before(ticks[j]) })
	var twice []time.Time
	for _, tick := range ticks {
		fmt.Printf("tick %s ran %d time(s): %v\n", tick.Format("15:04:05"), len(ran[tick]), ran[tick])
		if len(ran[tick]) > 1 {
			twice = append(twice, tick)
		}
	}
	if len(twice) > 0 {
		return fmt.Errorf("ticks that ran more than once: %v", twice)
	}
	if len(ticks) == 0 {
		return errors.New("no tick ran")
	}
	return nil
}

// ContextJob is a cron.Job that also takes its run's context: oncePerTick
// calls RunContext instead of Run, with a context that carries the held lock
// (lock.FromContext) and is cancelled if the lock is lost.
type ContextJob interface {
	cron.Job
	RunContext(ctx context.Context) error
}

// oncePerTick returns a cron.JobWrapper that runs the wrapped job in one
// replica per tick of a schedule with period every, and reports each tick's
// outcome: nil when this replica ran it (the job's error otherwise), an error
// matching lock.ErrHeld or lock.ErrGracePeriod when another replica runs or
// ran it.
//
// robfig/cron does not tell a job the time it was scheduled for, so the
// wrapper keys the run by the multiple of every nearest to this replica's
// clock: cron fires just after the scheduled time, and any replica that fires
// less than every/2 late names the same tick. The schedule's times must be
// multiples of every (a spec with seconds and every = time.Second; without
// seconds, time.Minute). RunTick keeps each tick closed for at least every
// after its run, so replicas that fire up to a period apart run it once.
func oncePerTick(c *lock.Client, job string, every time.Duration, o lock.Options, report func(tick time.Time, err error)) cron.JobWrapper {
	return func(j cron.Job) cron.Job {
		return cron.FuncJob(func() {
			tick := time.Now().Round(every)
			err := c.RunTick(context.Background(), job, tick, every, o, func(ctx context.Context) error {
				if cj, ok := j.(ContextJob); ok {
					return cj.RunContext(ctx)
				}
				j.Run()
				return nil
			})
			report(tick, err)
		})
	}
}

// delay returns a cron.JobWrapper that starts the job d late.
func delay(d time.Duration) cron.JobWrapper {
	return func(j cron.Job) cron.Job {
		return cron.FuncJob(func() {
			time.Sleep(d)
			j.Run()
		})
	}
}

// reportJob is the job: it sends a report with the run's fencing token.
type reportJob struct{ replica string }

// Run is what cron calls without the wrapper.
func (r reportJob) Run() { _ = r.RunContext(context.Background()) }

// RunContext sends the report under the lock held in ctx.
func (r reportJob) RunContext(ctx context.Context) error {
	l, ok := lock.FromContext(ctx)
	if !ok {
		return errors.New("not under a lock")
	}
	fmt.Printf("%s %s: sending the report (fencing token %d)\n", time.Now().Format("15:04:05"), r.replica, l.Token())
	select {
	case <-time.After(50 * time.Millisecond):
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
