package lock_test

// The examples of this file hold the code that README.md and the pages of
// docs/ show, line for line, so that it is compiled and run:
// TestDocsCodeCompiles fails for a Go block of those pages that no function
// of an example file holds. Edit a block here and on its page together.

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/seed05627090/lock"
)

// README.md: the five-line Do.
func ExampleClient_Do_readme() {
	ctx := context.Background()
	sendReport := func(ctx context.Context) error {
		fmt.Println("sending the report")
		return nil
	}

	c, _ := lock.NewClient(lock.NewMemoryProvider())
	defer c.Close()
	err := c.Do(ctx, "nightly-report", lock.Options{}, func(ctx context.Context) error {
		return sendReport(ctx) // runs in one replica at a time
	})
	fmt.Println("err:", err)
	// Output:
	// sending the report
	// err: <nil>
}

// README.md and docs/locks.md: Middleware.
func ExampleMiddleware_readme() {
	ctx := context.Background()
	c, _ := lock.NewClient(lock.NewMemoryProvider())
	defer c.Close()
	type Order struct{ ID string }
	type Receipt struct{ Order string }
	processOrder := func(ctx context.Context, o Order) (Receipt, error) {
		return Receipt{Order: o.ID}, nil
	}
	order := Order{ID: "42"}

	handle := func() error {
		process, err := lock.Middleware(c, processOrder, lock.MiddlewareOptions[Order]{
			NameFunc: func(o Order) string { return "order:" + o.ID },
		})
		if err != nil {
			return err
		}
		// process has processOrder's type: func(context.Context, Order) (Receipt, error)
		receipt, err := process(ctx, order) // errors.Is(err, lock.ErrHeld) if another request holds it
		fmt.Println("receipt for order", receipt.Order)
		return err
	}
	fmt.Println("err:", handle())
	// Output:
	// receipt for order 42
	// err: <nil>
}

// README.md: a Primitive that runs at most once per window.
func ExampleNew_readme() {
	ctx := context.Background()
	provider := lock.NewMemoryProvider()
	sendReport := func(ctx context.Context, region string) error {
		fmt.Println("sending the report of", region)
		return nil
	}

	replica := func(c *lock.Client, region string) error {
		job, err := lock.New(c, sendReport, lock.PrimitiveOptions[string]{
			Name:    "nightly-report",
			Options: lock.Options{GracePeriod: time.Hour}, // closed for an hour after a run
		})
		if err != nil {
			return err
		}
		err = job.Run(ctx, region) // errors.Is(err, lock.ErrGracePeriod) in the replicas that come later
		return err
	}
	for range 3 {
		c, _ := lock.NewClient(provider) // one Client per replica
		defer c.Close()
		err := replica(c, "emea")
		fmt.Println("grace period:", errors.Is(err, lock.ErrGracePeriod))
	}
	// Output:
	// sending the report of emea
	// grace period: false
	// grace period: true
	// grace period: true
}

// README.md and docs/scheduling.md: the loop of a scheduled job. Here the
// period is 50 ms, and the report's second run stops the loop.
func ExampleClient_RunTick_readme() {
	c, _ := lock.NewClient(lock.NewMemoryProvider())
	defer c.Close()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	runs := 0
	sendReport := func(ctx context.Context) error {
		runs++
		fmt.Println("sending the report, run", runs)
		if runs == 2 {
			stop()
		}
		return nil
	}

	loop := func(every time.Duration) error {
		// A nightly job (every is 24 * time.Hour): every replica runs this loop,
		// and each night's run happens in one of them (RunTick's doc says when not).
		for {
			// The tick names the run: the time it was scheduled for (midnight UTC),
			// the same in every replica, never the time this replica's timer fired.
			tick := time.Now().Truncate(every).Add(every)
			select {
			case <-time.After(time.Until(tick)):
			case <-ctx.Done():
				return ctx.Err()
			}
			err := c.RunTick(ctx, "nightly-report", tick, every, lock.Options{}, sendReport)
			switch {
			case errors.Is(err, lock.ErrHeld), errors.Is(err, lock.ErrGracePeriod):
				// another replica runs it, or has run it: nothing to do
			case err != nil:
				return err
			}
		}
	}
	fmt.Println("loop:", loop(50*time.Millisecond))
	// Output:
	// sending the report, run 1
	// sending the report, run 2
	// loop: context canceled
}

// README.md and docs/elections.md: Lead.
func ExampleClient_Lead_readme() {
	provider := lock.NewMemoryProvider()
	ctx, shutdown := context.WithCancel(context.Background())
	runScheduler := func(ctx context.Context, term uint64) error {
		fmt.Println("running the scheduler, term", term)
		shutdown() // here it would run until ctx ends
		<-ctx.Done()
		return context.Cause(ctx)
	}

	replica := func() error {
		c, err := lock.NewClient(provider, lock.WithIdentity("web-1:8080")) // Observe shows where the leader runs
		if err != nil {
			return err
		}
		defer c.Close()

		// In every replica: lead whenever this replica can, until ctx ends.
		err = c.Lead(ctx, "scheduler", func(ctx context.Context) error {
			l, _ := lock.FromContext(ctx)       // the term's lock: l.Token() is the term's number
			return runScheduler(ctx, l.Token()) // until ctx ends: the term was lost, or Lead's ctx ended
		}, lock.LeadOptions{})
		return err
	}
	fmt.Println("Lead:", replica())
	// Output:
	// running the scheduler, term 1
	// Lead: context canceled
}

// docs/elections.md: Observe. The log goes to out here, and the watch ends
// when its context does.
func ExampleClient_Observe_readme() {
	var out bytes.Buffer
	w, flags := log.Writer(), log.Flags()
	defer func() { log.SetOutput(w); log.SetFlags(flags) }()
	log.SetOutput(&out)
	log.SetFlags(0)
	c, _ := lock.NewClient(lock.NewMemoryProvider())
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()

	watch := func() error {
		leaders, err := c.Observe(ctx, "scheduler")
		if err != nil {
			return err // ErrInvalidArgument: a bad role
		}
		for l := range leaders { // until ctx ends or the Client closes
			switch {
			case l.Err != nil:
				log.Printf("who leads is unknown: %v", l.Err) // read again at the next notice or poll
			case l.Vacant():
				log.Printf("nobody leads")
			default:
				log.Printf("%s leads, term %d", l.Identity, l.Term)
			}
		}
		return nil
	}
	fmt.Println("watch:", watch())
	fmt.Print(out.String())
	// Output:
	// watch: <nil>
	// nobody leads
}

// README.md and docs/holds.md: Semaphore, RWMutex, DoAll.
func Example_holds() {
	ctx := context.Background()
	c, _ := lock.NewClient(lock.NewMemoryProvider())
	defer c.Close()
	say := func(what string) func(context.Context) error {
		return func(context.Context) error { fmt.Println(what); return nil }
	}
	callPartner := say("calling the partner's API")
	readCatalog, rebuildCatalog := say("reading the catalog"), say("rebuilding the catalog")
	moveStock := say("moving stock from 7 to 3")

	holds := func() error {
		sem, err := c.Semaphore("partner-api", 4) // every caller of the name gives the same N
		if err != nil {
			return err
		}
		err = sem.Do(ctx, 1, lock.Options{Wait: true, MaxWait: 10 * time.Second}, func(ctx context.Context) error {
			return callPartner(ctx) // at most 4 of these run at once, across every replica
		})
		if err != nil {
			return err
		}

		m, err := c.RWMutex("catalog", 16) // at most 16 readers at once
		if err != nil {
			return err
		}
		if err := m.RDo(ctx, lock.Options{Wait: true}, readCatalog); err != nil {
			return err
		}
		err = m.Do(ctx, lock.Options{Wait: true}, rebuildCatalog) // alone
		if err != nil {
			return err
		}

		err = c.DoAll(ctx, []string{"warehouse-7", "warehouse-3"}, lock.Options{Wait: true}, moveStock)
		return err
	}
	fmt.Println("err:", holds())
	// Output:
	// calling the partner's API
	// reading the catalog
	// rebuilding the catalog
	// moving stock from 7 to 3
	// err: <nil>
}

// README.md and docs/guarantees.md: a fenced write to Redis (here the lock
// is on the memory provider and the data in miniredis).
func ExampleRedisFence_readme() {
	ctx := context.Background()
	srv := startMiniredis()
	defer srv.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	c, _ := lock.NewClient(lock.NewMemoryProvider())
	defer c.Close()
	total := 120

	var saveInvoice = lock.NewRedisFence(`redis.call('SET', KEYS[1], ARGV[1])`)

	err := c.Do(ctx, "invoice:7", lock.Options{}, func(ctx context.Context) error {
		l, _ := lock.FromContext(ctx)
		// lock.ErrStaleToken once a later holder has written: this one was paused past its lease
		return saveInvoice.Run(ctx, rdb, "invoice:{7}:fence", l.Token(), []string{"invoice:{7}"}, total).Err()
	})
	fmt.Println("err:", err, "invoice:", rdb.Get(ctx, "invoice:{7}").Val())
	// Output:
	// err: <nil> invoice: 120
}

// startMiniredis starts an in-process Redis for the examples that need one.
func startMiniredis() *miniredis.Miniredis {
	srv, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	return srv
}

// README.md and docs/redis.md: a Client on Redis. Nothing is sent to the
// server until a lock is asked for.
func ExampleNewRedisProvider() {
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{
		Addrs:                 []string{"127.0.0.1:6379"},
		ContextTimeoutEnabled: true, // end a socket read or write when the context ends
	})
	c, err := lock.NewClient(lock.NewRedisProvider(rdb), lock.WithPrefix("myapp:lock:"))
	if err != nil {
		panic(err)
	}
	defer rdb.Close()
	defer c.Close()
	fmt.Println(c.Key("nightly-report"))
	// Output:
	// myapp:lock:{nightly-report}
}

// docs/redis.md: CheckServer, here on miniredis.
func ExampleRedisProvider_CheckServer() {
	ctx := context.Background()
	srv := startMiniredis()
	defer srv.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	var out bytes.Buffer
	w := log.Writer()
	defer log.SetOutput(w)
	log.SetOutput(&out)

	check := func() error {
		rep, err := lock.NewRedisProvider(rdb).CheckServer(ctx)
		if err != nil {
			return err
		}
		for _, w := range rep.Warnings {
			log.Printf("%s %s at %s (%s): %s", rep.Server, rep.Version, rep.Addr, rep.Mode, w)
		}
		return nil
	}
	fmt.Println("err:", check(), "warned:", out.Len() > 0)
	// Output:
	// err: <nil> warned: true
}

// docs/locks.md: Acquire.
func ExampleClient_Acquire_readme() {
	ctx := context.Background()
	c, _ := lock.NewClient(lock.NewMemoryProvider())
	defer c.Close()
	useToken := func(token uint64) { fmt.Println("token:", token) }

	migrate := func() error {
		l, err := c.Acquire(ctx, "migration", lock.Options{Wait: true, MaxWait: 10 * time.Second, MaxDuration: time.Hour})
		if err != nil {
			return err // *NotAcquiredError: ErrTimeout, ctx.Err()...; or ErrClosed
		}
		defer l.Release(ctx)
		select {
		case <-l.Done(): // lost: l.Err() matches lock.ErrLost
		default:
		}
		useToken(l.Token())
		return nil
	}
	fmt.Println("err:", migrate())
	// Output:
	// token: 1
	// err: <nil>
}

// docs/locks.md: requests for one order queue for its lock.
func ExampleHTTPMiddleware_queue() {
	c, _ := lock.NewClient(lock.NewMemoryProvider())
	defer c.Close()
	mux := http.NewServeMux()
	processOrder := func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "order %s processed\n", r.PathValue("id"))
	}

	serve := func() error {
		withOrderLock, err := lock.HTTPMiddleware(c, lock.HTTPOptions{
			NameFunc: func(r *http.Request) string { return "order:" + r.PathValue("id") },
			Options:  lock.Options{Wait: true, MaxWait: 5 * time.Second},
		})
		if err != nil {
			return err
		}
		mux.Handle("POST /orders/{id}", withOrderLock(http.HandlerFunc(processOrder)))
		return nil
	}
	if err := serve(); err != nil {
		panic(err)
	}
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/orders/42", nil))
	fmt.Print(w.Code, " ", w.Body)
	// Output:
	// 200 order 42 processed
}

// docs/operations.md: Inspect, List, ForceRelease.
func ExampleClient_Inspect_readme() {
	ctx := context.Background()
	p := lock.NewMemoryProvider()
	worker, _ := lock.NewClient(p, lock.WithIdentity("worker-1"))
	defer worker.Close()
	held, err := worker.Acquire(ctx, "nightly-report", lock.Options{Lease: 300 * time.Millisecond})
	if err != nil {
		panic(err)
	}

	operator := func() error {
		c, _ := lock.NewClient(p, lock.WithIdentity("web-1:4242")) // in each replica: owners become web-1:4242/<id>
		defer c.Close()

		s, err := c.Inspect(ctx, "nightly-report")
		if err != nil {
			return err
		}
		// s.Owner, s.Identity ("web-1:4242"), s.Token, s.Since, s.Until, s.GracePeriod, s.Waiters; s.Free()

		locks, more, err := c.List(ctx, 100) // the locks under the Client's prefix, held or in a window, by name
		if err != nil {
			return err
		}

		freed, err := c.ForceRelease(ctx, "nightly-report") // frees it whoever holds it; the first waiter gets it
		fmt.Println(s.Identity, s.Free(), len(locks), more, strings.HasPrefix(freed.Owner, "worker-1/"))
		return err
	}
	fmt.Println("err:", operator())
	<-held.Done() // the holder learns at its next renewal
	fmt.Println("holder:", errors.Is(held.Err(), lock.ErrLost))
	// Output:
	// worker-1 false 1 false true
	// err: <nil>
	// holder: true
}

// docs/fencing.md: a write through an SQLFence. (Not run: it needs
// PostgreSQL; ExampleSQLFence says more.)
func ExampleSQLFence_readme() {
	var db *sql.DB // sql.Open("pgx", "postgres://...")
	ctx := context.Background()
	c, _ := lock.NewClient(lock.NewMemoryProvider())
	defer c.Close()
	total := 120

	err := c.Do(ctx, "invoice:7", lock.Options{}, func(ctx context.Context) error {
		l, _ := lock.FromContext(ctx)
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if err := (lock.SQLFence{}).Advance(ctx, tx, "invoice:7", l.Token()); err != nil {
			return err // errors.Is(err, lock.ErrStaleToken): a later holder has written
		}
		if _, err := tx.ExecContext(ctx, `UPDATE invoices SET total = $1 WHERE id = 7`, total); err != nil {
			return err
		}
		return tx.Commit()
	})
	fmt.Println(err)
}
