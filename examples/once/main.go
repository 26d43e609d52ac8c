// Once runs a job once across replicas: every replica gets the same cron tick,
// one runs the job, and the others, including a replica whose tick comes late,
// skip it.
//
//	go run ./examples/once                                  # replicas share a memory provider
//	go run ./examples/once -redis 127.0.0.1:6379            # replicas share Redis
//	go run ./examples/once -redis 127.0.0.1:6379 -run r1    # a run shared with other processes
//
// With -redis, each run has its own lock (its keys start with
// "example:once:<run>:", the run a random id unless -run names it), so runs
// do not see each other's locks. Start the binary several times (or on several
// machines) at once with the same -run: all their replicas compete for the
// same lock, and a run with that -run within the grace period of the last one
// skips too. A run leaves in Redis only the lock, which expires after the grace
// period, and the fencing counter of its hash slot, which every lock of that
// slot shares.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed05627090/lock"
)

func main() {
	redisAddr := flag.String("redis", "", "Redis address, such as 127.0.0.1:6379 (default: in-memory provider)")
	replicas := flag.Int("replicas", 3, "number of replicas")
	runID := flag.String("run", "", "with -redis, the run to join: processes with the same -run share the lock (default: a new random run)")
	flag.Parse()
	if *replicas < 1 {
		log.Fatal("-replicas must be at least 1")
	}
	if err := run(*redisAddr, *runID, *replicas); err != nil {
		log.Fatal(err)
	}
}

func run(redisAddr, runID string, replicas int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// newProvider returns one replica's connection to the shared lock store.
	memory := lock.NewMemoryProvider()
	newProvider := func() (lock.Provider, func() error, error) {
		if redisAddr == "" {
			return memory, func() error { return nil }, nil
		}
		rc := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
		return lock.NewRedisProvider(rc), rc.Close, nil
	}
	var (
		prefix     string
		clientOpts []lock.ClientOption
	)
	if redisAddr != "" {
		if err := ping(ctx, redisAddr); err != nil {
			return err
		}
		if runID == "" {
			var err error
			if runID, err = newRunID(); err != nil {
				return err
			}
		}
		fmt.Printf("run %s (keys example:once:%s:...)\n", runID, runID)
		// The run's own keys, so that this run does not find a lock left
		// closed by an earlier one, or disturb another program's.
		clientOpts = append(clientOpts, lock.WithPrefix("example:once:"+runID+":"))
		prefix = fmt.Sprintf("pid %d ", os.Getpid()) // tell the processes apart
	}

	// Every replica gets the tick at the same moment except the last, whose
	// clock is late: it ticks after the job has ended.
	var wg sync.WaitGroup
	errs := make([]error, replicas)
	for i := range replicas {
		delay := time.Duration(0)
		if i == replicas-1 && replicas > 1 {
			delay = 500 * time.Millisecond
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(delay)
			errs[i] = replica(ctx, fmt.Sprintf("%sreplica-%d", prefix, i+1), newProvider, clientOpts)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// replica is one instance of the service: its own connection and Client, and
// the job declared on them.
func replica(ctx context.Context, name string, newProvider func() (lock.Provider, func() error, error), opts []lock.ClientOption) (err error) {
	p, closeProvider, err := newProvider()
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, closeProvider()) }()
	c, err := lock.NewClient(p, opts...)
	if err != nil {
		return err
	}
	defer c.Close()

	job, err := lock.New(c, sendReport, lock.PrimitiveOptions[string]{
		Name: "nightly-report",
		Options: lock.Options{
			// Without Wait, a replica that finds the job running skips it.
			// GracePeriod keeps the lock closed for 30s after the job ends, so
			// that a tick that comes late (clock skew, a slow start) skips too.
			GracePeriod: 30 * time.Second,
			// The job is stopped (its context cancelled) if it runs longer.
			MaxDuration: time.Minute,
		},
	})
	if err != nil {
		return err
	}

	err = job.Run(ctx, name)
	switch {
	case err == nil:
		fmt.Printf("%s: ran the job\n", name)
	case errors.Is(err, lock.ErrHeld):
		fmt.Printf("%s: skipped: another replica is running it\n", name)
	case errors.Is(err, lock.ErrGracePeriod):
		fmt.Printf("%s: skipped: it ran less than 30s ago\n", name)
	default:
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// sendReport is the job. Its context is cancelled if the lock is lost while it
// runs (MaxDuration reached, Redis unreachable past the lease), so that it
// stops instead of going on beside another holder.
func sendReport(ctx context.Context, replica string) error {
	fmt.Printf("%s: sending the nightly report...\n", replica)
	select {
	case <-time.After(300 * time.Millisecond):
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// ping fails fast when no Redis answers at addr.
func ping(ctx context.Context, addr string) error {
	rc := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	defer rc.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := rc.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("no Redis at %s: %w", addr, err)
	}
	return nil
}

// newRunID returns a random id that names one run's keys.
func newRunID() (string, error) {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}
