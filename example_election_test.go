package lock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/seed05627090/lock"
)

// Two replicas campaign for one role: the first leads, the second waits in
// the role's queue; the leader's Resign hands the role over in the release,
// and the next term's number is greater.
func ExampleClient_Campaign() {
	ctx := context.Background()
	provider := lock.NewMemoryProvider() // or lock.NewRedisProvider(rdb)
	web1, _ := lock.NewClient(provider, lock.WithIdentity("web-1"))
	defer web1.Close()
	web2, _ := lock.NewClient(provider, lock.WithIdentity("web-2"))
	defer web2.Close()

	first, err := web1.Campaign(ctx, "scheduler", lock.ElectionOptions{})
	if err != nil {
		panic(err)
	}
	fmt.Println("web-1 leads term", first.Token())

	won := make(chan *lock.Term)
	go func() {
		term, err := web2.Campaign(ctx, "scheduler", lock.ElectionOptions{})
		if err != nil {
			panic(err)
		}
		won <- term
	}()
	for s, _ := web1.Inspect(ctx, "scheduler"); s.Waiters == 0; s, _ = web1.Inspect(ctx, "scheduler") {
		time.Sleep(time.Millisecond) // until web-2 waits
	}

	if err := first.Resign(ctx); err != nil {
		panic(err)
	}
	fmt.Println("web-1's term context:", context.Cause(first.Context()))
	second := <-won
	s, _ := web2.Inspect(ctx, "scheduler")
	fmt.Println(s.Identity, "leads term", second.Token())
	_ = second.Resign(ctx)
	// Output:
	// web-1 leads term 1
	// web-1's term context: context canceled
	// web-2 leads term 2
}

// Lead runs the leader's function whenever this replica leads, under a
// context that ends with the term, until its own context ends. The term's
// lock, and its number, are in the function's context, for fenced writes.
func ExampleClient_Lead() {
	c, _ := lock.NewClient(lock.NewMemoryProvider(), lock.WithIdentity("worker-1"))
	defer c.Close()
	ctx, shutdown := context.WithCancel(context.Background())

	err := c.Lead(ctx, "queue-consumer", func(ctx context.Context) error {
		l, _ := lock.FromContext(ctx)
		fmt.Println("consuming, term", l.Token())
		shutdown() // here the work would run until ctx ends
		<-ctx.Done()
		return context.Cause(ctx)
	}, lock.LeadOptions{
		OnElected: func(t *lock.Term) { fmt.Println("elected:", t.Role()) },
		OnStopped: func(t *lock.Term, err error) { fmt.Println("stopped:", err) },
	})
	fmt.Println("Lead returned:", err, errors.Is(err, context.Canceled))
	// Output:
	// elected: queue-consumer
	// consuming, term 1
	// stopped: context canceled
	// Lead returned: context canceled true
}

// Observe reports who leads a role, first the state now, then each change,
// with "nobody" as a Leader of its own (Vacant).
func ExampleClient_Observe() {
	provider := lock.NewMemoryProvider()
	watcher, _ := lock.NewClient(provider, lock.WithPollInterval(10*time.Millisecond))
	defer watcher.Close()
	web1, _ := lock.NewClient(provider, lock.WithIdentity("web-1:8080")) // where it serves
	defer web1.Close()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	leaders, err := watcher.Observe(ctx, "scheduler")
	if err != nil {
		panic(err)
	}
	show := func(l lock.Leader) {
		if l.Vacant() {
			fmt.Println("nobody leads")
			return
		}
		fmt.Printf("%s leads, term %d\n", l.Identity, l.Term)
	}
	show(<-leaders)
	term, _ := web1.Campaign(ctx, "scheduler", lock.ElectionOptions{})
	show(<-leaders)
	_ = term.Resign(ctx)
	show(<-leaders)
	// Output:
	// nobody leads
	// web-1:8080 leads, term 1
	// nobody leads
}
