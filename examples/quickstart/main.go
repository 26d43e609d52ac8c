// Quickstart shows the library's main job with no server: a nightly job that
// runs once per tick across several replicas, and an order that two concurrent
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

	// 1. A nightly job that must run once per night, however many replicas
	// get the tick. A day is long to wait for: here the period is a second,
	// and the replicas run two ticks.
	fmt.Println("== a nightly job, sped up to one tick a second, on 4 replicas, one of them late ==")
	var clients []*lock.Client
	for range 4 {
		c, err := lock.NewClient(provider) // one Client per replica (per process)
		if err != nil {
			return err
		}
		defer c.Close()
		clients = append(clients, c)
	}
	var ran tickCounter
	errs := make([]error, len(clients))
	var wg sync.WaitGroup
	for i, c := range clients {
		replica, late := fmt.Sprintf("replica-%d", i+1), time.Duration(0)
		if i == len(clients)-1 {
			// This replica's timer fires 300ms late (a busy process, a slow
			// clock): by then the tick has run, and it skips it.
			replica, late = replica+" (late)", 300*time.Millisecond
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = schedule(ctx, c, replica, time.Second, late, 2, &ran)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := ran.once(2); err != nil {
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
		case errors.Is(errs[i], lock.ErrHeld):
			// The other request holds the order's lock: the caller answers
			// "busy, retry later". (ErrNotAcquired alone would also match an
			// outage that ended the call's context: see lock.ErrUnavailable.)
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

// schedule is one replica's scheduler of the nightly report, with a period
// of every: it waits for each of the next n ticks (late by late, as a busy
// replica's timer fires) and runs the report under the tick's lock, as the
// README's quickstart does with a period of a day. It counts its runs in ran.
func schedule(ctx context.Context, c *lock.Client, replica string, every, late time.Duration, n int, ran *tickCounter) error {
	for range n {
		// The tick names the run: the time it was scheduled for, the same in
		// every replica, never the time this replica's timer fired.
		tick := time.Now().Truncate(every).Add(every)
		select {
		case <-time.After(time.Until(tick) + late):
		case <-ctx.Done():
			return ctx.Err()
		}
		at := tick.Format("15:04:05")
		err := c.RunTick(ctx, "nightly-report", tick, every, lock.Options{}, func(ctx context.Context) error {
			fmt.Printf("tick %s, %s: sending the nightly report\n", at, replica)
			ran.add(tick)
			time.Sleep(200 * time.Millisecond) // the work
			return nil
		})
		switch {
		case errors.Is(err, lock.ErrHeld):
			fmt.Printf("tick %s, %s: skipped, another replica is running this tick\n", at, replica)
		case errors.Is(err, lock.ErrGracePeriod):
			fmt.Printf("tick %s, %s: skipped, this tick has run already\n", at, replica)
		case err != nil:
			return err // the job failed, or the provider did
		}
	}
	return nil
}

// tickCounter counts the runs of each tick.
type tickCounter struct {
	mu   sync.Mutex
	runs map[time.Time]int
}

func (tc *tickCounter) add(tick time.Time) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if tc.runs == nil {
		tc.runs = map[time.Time]int{}
	}
	tc.runs[tick]++
}

// once returns an error unless each tick that ran ran once, and at least n
// ticks ran (more when a replica's timer was held up past a whole tick).
func (tc *tickCounter) once(n int) error {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	for tick, runs := range tc.runs {
		if runs != 1 {
			return fmt.Errorf("tick %s ran %d times", tick.Format(time.RFC3339), runs)
		}
	}
	if len(tc.runs) < n {
		return fmt.Errorf("%d ticks ran, not %d", len(tc.runs), n)
	}
	return nil
}
