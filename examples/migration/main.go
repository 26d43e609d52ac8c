// Migration shows a schema migration that every replica runs at start-up and
// the others wait for: with Wait, the replicas take the lock in turn; the first
// migrates, and the others, once they get the lock, find the schema up to date
// and do nothing.
//
//	go run ./examples/migration                         # replicas share memory
//	go run ./examples/migration -redis 127.0.0.1:6379   # replicas share Redis
//
// With -redis the schema version is kept in Redis too, so several copies of
// the binary started at once behave like the replicas below; a later run finds
// the schema already migrated.
package main

import (
	"context"
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

// target is the schema version this build of the service needs.
const target = 2

func main() {
	redisAddr := flag.String("redis", "", "Redis address, such as 127.0.0.1:6379 (default: in memory)")
	replicas := flag.Int("replicas", 3, "number of replicas")
	flag.Parse()
	if *replicas < 1 {
		log.Fatal("-replicas must be at least 1")
	}
	if err := run(*redisAddr, *replicas); err != nil {
		log.Fatal(err)
	}
}

func run(redisAddr string, replicas int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// The lock store and the "database" whose schema is migrated: in memory, or
	// in Redis. Each replica gets its own Client, as each process would.
	var (
		provider lock.Provider
		db       schema
		prefix   string
	)
	if redisAddr == "" {
		provider, db = lock.NewMemoryProvider(), &memorySchema{}
	} else {
		rc := redis.NewClient(&redis.Options{Addr: redisAddr})
		defer rc.Close()
		if err := rc.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("no Redis at %s: %w", redisAddr, err)
		}
		provider, db = lock.NewRedisProvider(rc), redisSchema{rc}
		prefix = fmt.Sprintf("pid %d ", os.Getpid())
	}

	var wg sync.WaitGroup
	errs := make([]error, replicas)
	for i := range replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = startReplica(ctx, fmt.Sprintf("%sreplica-%d", prefix, i+1), provider, db)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// startReplica is a replica's start-up: it brings the schema to target before
// serving.
func startReplica(ctx context.Context, name string, p lock.Provider, db schema) error {
	c, err := lock.NewClient(p)
	if err != nil {
		return err
	}
	defer c.Close()

	start := time.Now()
	err = c.Do(ctx, "example:migrate-schema", lock.Options{
		// Wait for the replica that holds the lock instead of skipping: no
		// replica may serve before the schema is migrated.
		Wait: true,
		// Bounds the migration and the wait for it.
		MaxDuration: 30 * time.Second,
	}, func(ctx context.Context) error {
		// The idempotent pattern: under the lock, check what is done before
		// doing it. Whoever comes second finds the work done.
		v, err := db.Version(ctx)
		if err != nil {
			return err
		}
		if v >= target {
			fmt.Printf("%s: schema is at version %d, nothing to do (waited %v)\n",
				name, v, time.Since(start).Round(100*time.Millisecond))
			return nil
		}
		fmt.Printf("%s: migrating the schema from version %d to %d...\n", name, v, target)
		select {
		case <-time.After(500 * time.Millisecond): // ALTER TABLE ...
		case <-ctx.Done(): // the lock was lost, or the caller gave up
			return context.Cause(ctx)
		}
		if err := db.SetVersion(ctx, target); err != nil {
			return err
		}
		fmt.Printf("%s: migrated\n", name)
		return nil
	})
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	fmt.Printf("%s: serving\n", name)
	return nil
}

// schema stands for the database whose schema version is migrated.
type schema interface {
	Version(ctx context.Context) (int, error)
	SetVersion(ctx context.Context, v int) error
}

type memorySchema struct {
	mu      sync.Mutex
	version int
}

func (s *memorySchema) Version(context.Context) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.version, nil
}

func (s *memorySchema) SetVersion(_ context.Context, v int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.version = v
	return nil
}

type redisSchema struct{ rc redis.UniversalClient }

const versionKey = "example:schema-version"

func (s redisSchema) Version(ctx context.Context) (int, error) {
	v, err := s.rc.Get(ctx, versionKey).Int()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	return v, err
}

func (s redisSchema) SetVersion(ctx context.Context, v int) error {
	return s.rc.Set(ctx, versionKey, v, 0).Err()
}
