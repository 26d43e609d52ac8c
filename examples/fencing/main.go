// Fencing shows why a lock alone cannot protect a resource from a holder that
// was paused, and how fencing tokens do: writer A takes the lock, stalls past
// the end of its hold, and writes after writer B has taken the lock and
// written. The storage remembers the highest token it has seen and rejects A's
// stale write; A's context tells it that the lock was lost.
//
//	go run ./examples/fencing
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
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	// Two replicas, A and B, sharing one lock store.
	provider := lock.NewMemoryProvider()
	a, err := lock.NewClient(provider)
	if err != nil {
		return err
	}
	defer a.Close()
	b, err := lock.NewClient(provider)
	if err != nil {
		return err
	}
	defer b.Close()

	db := newStorage()
	const name = "invoice-7"

	// Writer A holds the lock for at most 200ms. The short MaxDuration stands
	// in for what a pause of the whole process (a long GC, a frozen VM) does:
	// the lock ends while its holder is unable to notice.
	errA := make(chan error, 1)
	go func() {
		errA <- a.Do(ctx, name, lock.Options{MaxDuration: 200 * time.Millisecond}, func(ctx context.Context) error {
			l, _ := lock.FromContext(ctx)
			fmt.Printf("A: holds the lock with token %d, then stalls for 500ms\n", l.Token())
			time.Sleep(500 * time.Millisecond) // the pause: A does not look at ctx

			// A resumes and writes as if it still held the lock. The storage
			// refuses: it has seen a newer token.
			err := db.Write(name, l.Token(), "written by A")
			fmt.Println("A: write", result(err))

			// A's context was cancelled when the lock was lost; its cause, a
			// *lock.LostError, says why. A careful writer checks ctx before each
			// write, but only the token check closes the gap after that check.
			cause := context.Cause(ctx)
			fmt.Printf("A: lock lost: %t: %v\n", errors.Is(cause, lock.ErrLost), cause)
			return err
		})
	}()

	// Writer B comes a little later and waits for the lock. It gets it when A's
	// hold ends, with a greater token, and writes.
	time.Sleep(50 * time.Millisecond)
	fmt.Println("B: waiting for the lock")
	err = b.Do(ctx, name, lock.Options{Wait: true}, func(ctx context.Context) error {
		l, _ := lock.FromContext(ctx)
		fmt.Printf("B: holds the lock with token %d\n", l.Token())
		err := db.Write(name, l.Token(), "written by B")
		fmt.Println("B: write", result(err))
		return err
	})
	if err != nil {
		return err
	}

	// A's Do returns its handler's error joined with the loss of the lock.
	err = <-errA
	fmt.Printf("A: Do returned stale token: %t, lock lost: %t\n",
		errors.Is(err, errStaleToken), errors.Is(err, lock.ErrLost))
	if !errors.Is(err, errStaleToken) {
		return fmt.Errorf("expected A's write to be rejected, got %v", err)
	}

	v, token := db.Read(name)
	fmt.Printf("storage: %s = %q (token %d)\n", name, v, token)
	return nil
}

func result(err error) string {
	if err != nil {
		return err.Error()
	}
	return "accepted"
}

var errStaleToken = errors.New("rejected: stale fencing token")

// storage is the protected resource: it keeps, for each key, the highest
// fencing token it has seen and rejects writes that carry a lower one. For
// Redis and PostgreSQL the library does this: lock.RedisFence runs a write
// behind such a check in one script, lock.SQLFence (and postgres.Fence, on
// pgx) in the writer's transaction; both refuse with lock.ErrStaleToken.
type storage struct {
	mu     sync.Mutex
	values map[string]string
	tokens map[string]uint64
}

func newStorage() *storage {
	return &storage{values: map[string]string{}, tokens: map[string]uint64{}}
}

func (s *storage) Write(key string, token uint64, value string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if token < s.tokens[key] {
		return fmt.Errorf("%w %d (seen %d)", errStaleToken, token, s.tokens[key])
	}
	s.tokens[key] = token
	s.values[key] = value
	return nil
}

func (s *storage) Read(key string) (string, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.values[key], s.tokens[key]
}
