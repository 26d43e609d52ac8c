package lock_test

import (
	"context"
	"fmt"

	"github.com/seed05627090/lock"
)

// At most two replicas call a rate-limited API at once: each call takes a
// permit of the semaphore "partner-api" for as long as it runs.
func ExampleSemaphore() {
	ctx := context.Background()
	c, _ := lock.NewClient(lock.NewMemoryProvider()) // or lock.NewRedisProvider(rdb)
	defer c.Close()
	sem, err := c.Semaphore("partner-api", 2)
	if err != nil {
		panic(err)
	}
	a, _ := sem.Acquire(ctx, 1, lock.Options{})
	b, _ := sem.Acquire(ctx, 1, lock.Options{})
	_, err = sem.Acquire(ctx, 1, lock.Options{}) // a third, without waiting
	fmt.Println(err)
	fmt.Println("tokens in grant order:", a.Token() < b.Token())
	_ = a.Release(ctx)
	err = sem.Do(ctx, 1, lock.Options{Wait: true}, func(ctx context.Context) error {
		fmt.Println("calling the API")
		return nil
	})
	fmt.Println(err)
	_ = b.Release(ctx)
	// Output:
	// lock: could not acquire "lock:{partner-api}": held by this Client
	// tokens in grant order: true
	// calling the API
	// <nil>
}

// Readers share the lock; a writer waits for them, and readers that come
// after it wait for it.
func ExampleRWMutex() {
	ctx := context.Background()
	c, _ := lock.NewClient(lock.NewMemoryProvider())
	defer c.Close()
	m, err := c.RWMutex("catalog", 16)
	if err != nil {
		panic(err)
	}
	r1, _ := m.RLock(ctx, lock.Options{})
	r2, _ := m.RLock(ctx, lock.Options{})
	fmt.Println("two readers:", r1.Token() < r2.Token())
	_, err = m.Lock(ctx, lock.Options{}) // without waiting: the readers hold it
	fmt.Println(err != nil)
	_ = r1.Release(ctx)
	_ = r2.Release(ctx)
	w, _ := m.Lock(ctx, lock.Options{Wait: true})
	fmt.Println("writer after the readers:", w.Token() > r2.Token())
	_ = w.Downgrade(ctx) // now a reader, with no writer in between
	st, _ := m.Inspect(ctx)
	fmt.Println("holders:", len(st.Holders), "as:", st.Holders[0].Kind, "weight:", st.Holders[0].Weight)
	_ = w.Release(ctx)
	// Output:
	// two readers: true
	// true
	// writer after the readers: true
	// holders: 1 as: reader weight: 1
}

// Moving stock between two warehouses takes both locks or neither, whatever
// order other callers name them in.
func ExampleClient_DoAll() {
	ctx := context.Background()
	c, _ := lock.NewClient(lock.NewMemoryProvider())
	defer c.Close()
	err := c.DoAll(ctx, []string{"warehouse-7", "warehouse-3"}, lock.Options{Wait: true}, func(ctx context.Context) error {
		fmt.Println("moving stock from 7 to 3")
		return nil
	})
	fmt.Println(err)
	// Output:
	// moving stock from 7 to 3
	// <nil>
}
