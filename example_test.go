package lock_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

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
// while it is held, here by the same Client (a lock is not re-entrant), fails
// at once with ErrHeld, whose message says whose it is.
func ExampleClient_Acquire() {
	ctx := context.Background()
	c, _ := lock.NewClient(lock.NewMemoryProvider())
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
	// again: lock: could not acquire "lock:{report}": held by this Client
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
		c, _ := lock.NewClient(provider)
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
// processed is refused with ErrHeld (an ErrNotAcquired); another order is
// not blocked.
func ExampleMiddleware() {
	ctx := context.Background()
	c, _ := lock.NewClient(lock.NewMemoryProvider())
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
	// second request: lock: could not acquire "lock:{order:42}": held by this Client
	// not acquired: true
	// other order: processed order 7 <nil>
	// first request: processed order 42 <nil>
}

// HTTPMiddleware serves each request under a lock named from it. A request
// that does not get the lock is answered 423 Locked with a Retry-After header
// and a body that does not name the lock.
func ExampleHTTPMiddleware() {
	c, _ := lock.NewClient(lock.NewMemoryProvider())
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

	c1, _ := lock.NewClient(provider)
	defer c1.Close()
	waiting := make(chan struct{})
	c2, _ := lock.NewClient(provider, lock.WithEvents(func(e lock.Event) {
		if e.Kind == lock.EventContended { // replica 2 found the lock held
			close(waiting)
		}
	}))
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
	c, _ := lock.NewClient(lock.NewMemoryProvider())
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
	worker, _ := lock.NewClient(provider, lock.WithIdentity("worker-1:4242"))
	defer worker.Close()
	operator, _ := lock.NewClient(provider)
	defer operator.Close()

	l, err := worker.Acquire(ctx, "nightly-report", lock.Options{})
	if err != nil {
		panic(err)
	}
	s, err := operator.Inspect(ctx, "nightly-report")
	if err != nil {
		panic(err)
	}
	fmt.Println("free:", s.Free(), "by", s.Identity, "token", s.Token == l.Token())

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
	fmt.Println("free after ForceRelease:", s.Free())
	fmt.Println("holder's release:", l.Release(ctx) != nil) // it finds the lock lost
	// Output:
	// free: false by worker-1:4242 token true
	// listed: nightly-report lock:{nightly-report} more: false
	// free after ForceRelease: true
	// holder's release: true
}

// With Redis down, an acquisition fails with an error that names the
// operation, the key and what the server's client said, and matches
// ErrUnavailable: an outage, not a refusal (ErrNotAcquired). When the
// context ends before the server's client gives up, the error matches the
// context's error and ErrUnavailable both, and carries the last error the
// provider returned.
func Example_redisDown() {
	rdb := redis.NewClient(&redis.Options{
		Addr:          "127.0.0.1:1", // nothing listens there
		MaxRetries:    -1,            // for the example: give up at the first refused dial
		DialerRetries: 1,
	})
	defer rdb.Close()
	c, _ := lock.NewClient(lock.NewRedisProvider(rdb))
	defer c.Close()

	_, err := c.Acquire(context.Background(), "job", lock.Options{})
	fmt.Println(err)
	fmt.Println("unavailable:", errors.Is(err, lock.ErrUnavailable), "not acquired:", errors.Is(err, lock.ErrNotAcquired))
	// Output:
	// lock: acquire "lock:{job}": dial tcp 127.0.0.1:1: connect: connection refused
	// unavailable: true not acquired: false
}

// A lock needs a name: an empty one is refused before anything is sent.
func Example_emptyName() {
	c, _ := lock.NewClient(lock.NewMemoryProvider())
	defer c.Close()

	_, err := c.Acquire(context.Background(), "", lock.Options{})
	fmt.Println(err)
	fmt.Println("invalid argument:", errors.Is(err, lock.ErrInvalidArgument))
	// Output:
	// lock: invalid argument: empty lock name
	// invalid argument: true
}

// A key (the prefix and the name in braces) is at most MaxKeyLen bytes.
func Example_nameTooLong() {
	c, _ := lock.NewClient(lock.NewMemoryProvider())
	defer c.Close()

	_, err := c.Acquire(context.Background(), strings.Repeat("x", 1100), lock.Options{})
	fmt.Println(err)
	fmt.Println("invalid argument:", errors.Is(err, lock.ErrInvalidArgument))
	// Output:
	// lock: invalid argument: lock key is 1107 bytes, more than 1024
	// invalid argument: true
}

// A second Release says the lock was released already: a mistake of the
// caller, not a loss.
func ExampleLock_Release_twice() {
	ctx := context.Background()
	c, _ := lock.NewClient(lock.NewMemoryProvider())
	defer c.Close()

	l, err := c.Acquire(ctx, "report", lock.Options{})
	if err != nil {
		panic(err)
	}
	fmt.Println("first:", l.Release(ctx))
	err = l.Release(ctx)
	fmt.Println("second:", err)
	fmt.Println("released:", errors.Is(err, lock.ErrReleased), "lost:", errors.Is(err, lock.ErrLost))
	// Output:
	// first: <nil>
	// second: lock: release "lock:{report}": already released
	// released: true lost: false
}

// Extend after Release says the lock was released, not lost.
func ExampleLock_Extend_afterRelease() {
	ctx := context.Background()
	c, _ := lock.NewClient(lock.NewMemoryProvider())
	defer c.Close()

	l, err := c.Acquire(ctx, "report", lock.Options{})
	if err != nil {
		panic(err)
	}
	if err := l.Release(ctx); err != nil {
		panic(err)
	}
	err = l.Extend(ctx, time.Minute)
	fmt.Println(err)
	fmt.Println("released:", errors.Is(err, lock.ErrReleased), "lost:", errors.Is(err, lock.ErrLost))
	// Output:
	// lock: extend "lock:{report}": already released
	// released: true lost: false
}

// A holder whose lock an operator freed finds out at its next renewal (or
// its release) and is told why: its record was removed before its lease ran
// out, and another owner holds it now.
func ExampleLostError() {
	ctx := context.Background()
	provider := lock.NewMemoryProvider()
	worker, _ := lock.NewClient(provider)
	defer worker.Close()
	other, _ := lock.NewClient(provider, lock.WithIdentity("worker-2"))
	defer other.Close()

	l, err := worker.Acquire(ctx, "report", lock.Options{})
	if err != nil {
		panic(err)
	}
	if _, err := other.ForceRelease(ctx, "report"); err != nil { // lockctl rm, say
		panic(err)
	}
	l2, err := other.Acquire(ctx, "report", lock.Options{})
	if err != nil {
		panic(err)
	}
	defer l2.Release(ctx)

	err = l.Release(ctx)
	fmt.Println(err)
	var lost *lock.LostError
	if errors.As(err, &lost) {
		fmt.Println("reason:", lost.Reason)
	}
	// Output:
	// lock: lost "lock:{report}" (token 1): another owner holds it (worker-2): its record was removed before its lease ran out (a forced release, or the server lost it)
	// reason: taken by another owner
}
