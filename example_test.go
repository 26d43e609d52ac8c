package lock_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	"github.com/seed05627090/lock"
)

// Do runs a function under a lock and releases it afterwards, even when the
// function fails.
func ExampleClient_Do() {
	c, err := lock.NewClient(lock.NewMemoryProvider())
	if err != nil {
		panic(err)
	}
	defer c.Close()

	err = c.Do(context.Background(), "nightly-report", lock.Options{}, func(ctx context.Context) error {
		fmt.Println("sending the report") // in one replica at a time
		return nil
	})
	fmt.Println("err:", err)
	// Output:
	// sending the report
	// err: <nil>
}

// Acquire returns the held lock; the caller releases it. A second acquisition
// while it is held fails at once with ErrHeld.
func ExampleClient_Acquire() {
	ctx := context.Background()
	c, err := lock.NewClient(lock.NewMemoryProvider())
	if err != nil {
		panic(err)
	}
	defer c.Close()

	l, err := c.Acquire(ctx, "report", lock.Options{})
	if err != nil {
		panic(err)
	}
	fmt.Println("held, with a token:", l.Token() > 0)

	_, err = c.Acquire(ctx, "report", lock.Options{})
	fmt.Println("again:", err)
	fmt.Println("not acquired:", errors.Is(err, lock.ErrNotAcquired), "held:", errors.Is(err, lock.ErrHeld))

	if err := l.Release(ctx); err != nil {
		panic(err)
	}
	<-l.Done() // closed on release (or loss)

	l2, err := c.Acquire(ctx, "report", lock.Options{})
	if err != nil {
		panic(err)
	}
	fmt.Println("after release, a greater token:", l2.Token() > l.Token())
	if err := l2.Release(ctx); err != nil {
		panic(err)
	}
	// Output:
	// held, with a token: true
	// again: lock: could not acquire "lock:{report}": held by another owner
	// not acquired: true held: true
	// after release, a greater token: true
}

// A Primitive with a GracePeriod runs a job at most once per window across
// replicas: here three replicas get the same tick, one after the other, and
// only the first runs the job.
func ExampleNew() {
	ctx := context.Background()
	provider := lock.NewMemoryProvider() // with Redis, one process per replica

	sendReport := func(ctx context.Context, replica string) error {
		fmt.Println(replica + ": sending the report")
		return nil
	}
	for _, replica := range []string{"replica-1", "replica-2", "replica-3"} {
		c, err := lock.NewClient(provider)
		if err != nil {
			panic(err)
		}
		defer c.Close()
		job, err := lock.New(c, sendReport, lock.PrimitiveOptions[string]{
			Name:    "nightly-report",
			Options: lock.Options{GracePeriod: time.Hour},
		})
		if err != nil {
			panic(err)
		}
		err = job.Run(ctx, replica)
		switch {
		case errors.Is(err, lock.ErrGracePeriod):
			fmt.Println(replica + ": skipped, it has run within the hour")
		case err != nil:
			panic(err)
		}
	}
	// Output:
	// replica-1: sending the report
	// replica-2: skipped, it has run within the hour
	// replica-3: skipped, it has run within the hour
}

// Middleware wraps a handler so that it runs under a lock named from its
// argument: here one lock per order. A call for an order that is being
// processed is refused with ErrNotAcquired; another order is not blocked.
func ExampleMiddleware() {
	ctx := context.Background()
	c, err := lock.NewClient(lock.NewMemoryProvider())
	if err != nil {
		panic(err)
	}
	defer c.Close()

	type order struct{ ID string }
	started, finish := make(chan struct{}), make(chan struct{})
	process := func(ctx context.Context, o order) (string, error) {
		if o.ID == "42" {
			close(started)
			<-finish // still processing when the second request comes
		}
		return "processed order " + o.ID, nil
	}
	handle, err := lock.Middleware(c, process, lock.MiddlewareOptions[order]{
		NameFunc: func(o order) string { return "order:" + o.ID },
	})
	if err != nil {
		panic(err)
	}

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		res, err := handle(ctx, order{ID: "42"})
		fmt.Println("first request:", res, err)
	}()
	<-started

	_, err = handle(ctx, order{ID: "42"})
	fmt.Println("second request:", err)
	fmt.Println("not acquired:", errors.Is(err, lock.ErrNotAcquired))
	res, err := handle(ctx, order{ID: "7"})
	fmt.Println("other order:", res, err)

	close(finish)
	wg.Wait()
	// Output:
	// second request: lock: could not acquire "lock:{order:42}": held by another owner
	// not acquired: true
	// other order: processed order 7 <nil>
	// first request: processed order 42 <nil>
}

// HTTPMiddleware serves each request under a lock named from it. A request
// that does not get the lock is answered 423 Locked with a Retry-After header
// and a body that does not name the lock.
func ExampleHTTPMiddleware() {
	c, err := lock.NewClient(lock.NewMemoryProvider())
	if err != nil {
		panic(err)
	}
	defer c.Close()

	withOrderLock, err := lock.HTTPMiddleware(c, lock.HTTPOptions{
		NameFunc: func(r *http.Request) string { return "order:" + r.PathValue("id") },
	})
	if err != nil {
		panic(err)
	}
	started, finish := make(chan struct{}), make(chan struct{})
	mux := http.NewServeMux()
	mux.Handle("POST /orders/{id}", withOrderLock(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-finish // still processing when the second request comes
		fmt.Fprintln(w, "processed order", r.PathValue("id"))
	})))

	first := httptest.NewRecorder()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		mux.ServeHTTP(first, httptest.NewRequest(http.MethodPost, "/orders/42", nil))
	}()
	<-started

	second := httptest.NewRecorder()
	mux.ServeHTTP(second, httptest.NewRequest(http.MethodPost, "/orders/42", nil))
	fmt.Print("second: ", second.Code, " Retry-After: ", second.Header().Get("Retry-After"), " ", second.Body)

	close(finish)
	wg.Wait()
	fmt.Print("first: ", first.Code, " ", first.Body)
	// Output:
	// second: 423 Retry-After: 1 Locked
	// first: 200 processed order 42
}

// With Wait, an acquisition that finds the lock held waits for it instead of
// failing: here replica 2 waits while replica 1 migrates, then finds the work
// done.
func Example_waiting() {
	ctx := context.Background()
	provider := lock.NewMemoryProvider()
	version := 1 // the schema version, guarded by the lock

	c1, err := lock.NewClient(provider)
	if err != nil {
		panic(err)
	}
	defer c1.Close()
	waiting := make(chan struct{})
	c2, err := lock.NewClient(provider, lock.WithEvents(func(e lock.Event) {
		if e.Kind == lock.EventContended { // replica 2 found the lock held
			close(waiting)
		}
	}))
	if err != nil {
		panic(err)
	}
	defer c2.Close()

	migrate := func(replica string) func(context.Context) error {
		return func(ctx context.Context) error {
			if version >= 2 { // check under the lock: the work may be done
				fmt.Println(replica+": schema at version", version, "- nothing to do")
				return nil
			}
			fmt.Println(replica + ": migrating")
			version = 2
			return nil
		}
	}
	opts := lock.Options{Wait: true, MaxDuration: time.Minute}

	l, err := c1.Acquire(ctx, "migrate", opts)
	if err != nil {
		panic(err)
	}
	done := make(chan error)
	go func() { done <- c2.Do(ctx, "migrate", opts, migrate("replica 2")) }()
	<-waiting
	fmt.Println("replica 2: waiting")

	if err := migrate("replica 1")(ctx); err != nil {
		panic(err)
	}
	if err := l.Release(ctx); err != nil {
		panic(err)
	}
	if err := <-done; err != nil {
		panic(err)
	}
	// Output:
	// replica 2: waiting
	// replica 1: migrating
	// replica 2: schema at version 2 - nothing to do
}

// Every grant carries a fencing token greater than those of earlier grants.
// The protected resource remembers the highest token it has seen and rejects
// a write with a lower one: a holder that was paused past the end of its lock
// cannot overwrite the work of the next holder.
func ExampleLock_Token() {
	ctx := context.Background()
	c, err := lock.NewClient(lock.NewMemoryProvider())
	if err != nil {
		panic(err)
	}
	defer c.Close()

	var highest uint64 // kept by the storage, next to the data
	write := func(token uint64) string {
		if token < highest {
			return "rejected (stale token)"
		}
		highest = token
		return "accepted"
	}

	old, err := c.Acquire(ctx, "invoice-7", lock.Options{})
	if err != nil {
		panic(err)
	}
	if err := old.Release(ctx); err != nil { // stands for a lock that expired
		panic(err)
	}
	cur, err := c.Acquire(ctx, "invoice-7", lock.Options{})
	if err != nil {
		panic(err)
	}
	fmt.Println("current holder writes:", write(cur.Token()))
	fmt.Println("former holder writes: ", write(old.Token()))
	if err := cur.Release(ctx); err != nil {
		panic(err)
	}
	// Output:
	// current holder writes: accepted
	// former holder writes:  rejected (stale token)
}

// Inspect shows who holds a lock: with WithIdentity, the process is part
// of every owner the Client makes. List shows every lock under the prefix,
// and ForceRelease frees one whoever holds it.
func ExampleClient_Inspect() {
	ctx := context.Background()
	provider := lock.NewMemoryProvider()
	worker, err := lock.NewClient(provider, lock.WithIdentity("worker-1:4242"))
	if err != nil {
		panic(err)
	}
	defer worker.Close()
	operator, err := lock.NewClient(provider)
	if err != nil {
		panic(err)
	}
	defer operator.Close()

	l, err := worker.Acquire(ctx, "nightly-report", lock.Options{})
	if err != nil {
		panic(err)
	}
	s, err := operator.Inspect(ctx, "nightly-report")
	if err != nil {
		panic(err)
	}
	fmt.Println("held:", s.Held(), "by", s.Identity, "token", s.Token == l.Token())

	locks, more, err := operator.List(ctx, 100)
	if err != nil {
		panic(err)
	}
	for _, s := range locks {
		fmt.Println("listed:", s.Name, s.Key, "more:", more)
	}

	if _, err := operator.ForceRelease(ctx, "nightly-report"); err != nil {
		panic(err)
	}
	s, _ = operator.Inspect(ctx, "nightly-report")
	fmt.Println("held after ForceRelease:", s.Held())
	fmt.Println("holder's release:", l.Release(ctx) != nil) // it finds the lock lost
	// Output:
	// held: true by worker-1:4242 token true
	// listed: nightly-report lock:{nightly-report} more: false
	// held after ForceRelease: false
	// holder's release: true
}
