// Quickstart shows the library's main job with no server: a nightly job that
// runs in exactly one of several replicas, and an order that two concurrent
// requests must not process at once.
//
//	go run ./examples/quickstart
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync"
	"time"

	"github.com/seed05627090/lock"
)

func main() {
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

func run() error {
	ctx := context.Background()

	// The provider stores the locks. Here it is in memory and the "replicas"
	// are goroutines sharing it; with lock.NewRedisProvider each replica would
	// be its own process, and the code below would not change.
	provider := lock.NewMemoryProvider()

	// 1. A nightly job that must run once, however many replicas get the tick.
	fmt.Println("== nightly job on 4 replicas, one of them late ==")
	var clients []*lock.Client
	for range 4 {
		c, err := lock.NewClient(provider) // one Client per replica (per process)
		if err != nil {
			return err
		}
		defer c.Close()
		clients = append(clients, c)
	}

	report := func(ctx context.Context, replica string) error {
		fmt.Printf("%s: sending the nightly report\n", replica)
		time.Sleep(200 * time.Millisecond) // the work
		return nil
	}
	// Every replica's scheduler fires for the same scheduled instant, today's
	// tick. The lock is per tick: a replica whose clock is late cannot run
	// this tick again after it has run, and tomorrow's tick is a lock of its
	// own, so no run is skipped either.
	tick := time.Now().UTC().Truncate(24 * time.Hour)
	runJob := func(c *lock.Client, replica string) error {
		err := c.RunTick(ctx, "nightly-report", tick, 24*time.Hour, lock.Options{}, func(ctx context.Context) error {
			return report(ctx, replica)
		})
		switch {
		case errors.Is(err, lock.ErrHeld):
			fmt.Printf("%s: skipped, another replica is running this tick\n", replica)
		case errors.Is(err, lock.ErrGracePeriod):
			fmt.Printf("%s: skipped, this tick has run already\n", replica)
		case err != nil:
			return err // the job failed, or the provider did
		}
		return nil
	}

	// Three replicas get the tick at the same moment: one runs the job, two
	// find it held.
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = runJob(clients[i], fmt.Sprintf("replica-%d", i+1))
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	// A fourth replica, whose clock is late, ticks after the job has ended.
	if err := runJob(clients[3], "replica-4 (late)"); err != nil {
		return err
	}

	// 2. An order that two concurrent requests must not process at once: one
	// lock per order, named from the handler's argument.
	fmt.Println("== two requests for order 42 ==")
	c := clients[0]
	type order struct{ ID string }
	process := func(ctx context.Context, o order) (string, error) {
		// FromContext returns the lock the middleware holds for this call; its
		// fencing token increases with every grant, so that the database can
		// refuse a write from a holder that has since lost the lock.
		l, _ := lock.FromContext(ctx)
		time.Sleep(200 * time.Millisecond) // charge the card, ship the goods
		return fmt.Sprintf("order %s processed (fencing token %d)", o.ID, l.Token()), nil
	}
	handle, err := lock.Middleware(c, process, lock.MiddlewareOptions[order]{
		NameFunc: func(o order) string { return "order:" + o.ID },
	})
	if err != nil {
		return err
	}

	results := make([]string, 2)
	errs = make([]error, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = handle(ctx, order{ID: "42"})
		}()
	}
	wg.Wait()
	for i := range 2 {
		switch {
		case errs[i] == nil:
			fmt.Printf("request %d: %s\n", i+1, results[i])
		case errors.Is(errs[i], lock.ErrNotAcquired):
			// A *NotAcquiredError: the caller answers "busy, retry later".
			fmt.Printf("request %d: refused: %v\n", i+1, errs[i])
		default:
			return errs[i]
		}
	}

	// 3. The same order, later: the lock is free again, with a higher token.
	res, err := handle(ctx, order{ID: "42"})
	if err != nil {
		return err
	}
	fmt.Println("retry:", res)
	return nil
}
