// Migration shows a schema migration that every replica runs at start-up and
// the others wait for: with Wait, the replicas take the lock in turn; the first
// migrates, and the others, once they get the lock, find the schema up to date
// and do nothing.
//
//	go run ./examples/migration                                 # replicas share memory
//	go run ./examples/migration -redis 127.0.0.1:6379           # replicas share Redis
//	go run ./examples/migration -redis 127.0.0.1:6379 -run r1   # a run shared with other processes
//
// With -redis the schema version is kept in Redis too, and each run has its
// own keys (they start with "example:migration:<run>:", the run a random id
// unless -run names it). Several copies of the binary started at once with the
// same -run behave like the replicas below, and a later run with that -run,
// within ten minutes, finds the schema already migrated. A run with a random id
// deletes its schema version at the end and leaves in Redis only the fencing
// counter of the lock's hash slot, which every lock of that slot shares; with
// -run, the version stays too, and expires ten minutes after the migration.
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

// target is the schema version this build of the service needs.
const target = 2

func main() {
	redisAddr := flag.String("redis", "", "Redis address, such as 127.0.0.1:6379 (default: in memory)")
	replicas := flag.Int("replicas", 3, "number of replicas")
	runID := flag.String("run", "", "with -redis, the run to join: processes with the same -run share the lock and the schema (default: a new random run)")
	flag.Parse()
	if *replicas < 1 {
		log.Fatal("-replicas must be at least 1")
	}
	if err := run(*redisAddr, *runID, *replicas); err != nil {
		log.Fatal(err)
	}
}

func run(redisAddr, runID string, replicas int) (err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// The lock store and the "database" whose schema is migrated: in memory, or
	// in Redis. Each replica gets its own Client, as each process would.
	var (
		provider   lock.Provider
		db         schema
		prefix     string
		clientOpts []lock.ClientOption
	)
	if redisAddr == "" {
		provider, db = lock.NewMemoryProvider(), &memorySchema{}
	} else {
		rc := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
		defer rc.Close()
		if err := rc.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("no Redis at %s: %w", redisAddr, err)
		}
		shared := runID != ""
		if !shared {
			if runID, err = newRunID(); err != nil {
				return err
			}
		}
		keys := "example:migration:" + runID + ":"
		fmt.Printf("run %s (keys %s...)\n", runID, keys)
		rdb := redisSchema{rc: rc, key: keys + "schema-version"}
		if !shared {
			// No other process knows this run: its schema goes with it.
			defer func() { err = errors.Join(err, rdb.Drop(context.WithoutCancel(ctx))) }()
		}
		provider, db = lock.NewRedisProvider(rc), rdb
		clientOpts = append(clientOpts, lock.WithPrefix(keys))
		prefix = fmt.Sprintf("pid %d ", os.Getpid())
	}

	var wg sync.WaitGroup
	errs := make([]error, replicas)
	for i := range replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = startReplica(ctx, fmt.Sprintf("%sreplica-%d", prefix, i+1), provider, clientOpts, db)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// startReplica is a replica's start-up: it brings the schema to target before
// serving.
func startReplica(ctx context.Context, name string, p lock.Provider, opts []lock.ClientOption, db schema) error {
	c, err := lock.NewClient(p, opts...)
	if err != nil {
		return err
	}
	defer c.Close()

	start := time.Now()
	err = c.Do(ctx, "migrate-schema", lock.Options{
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

// redisSchema keeps the version at key. The key expires: this is an example,
// and leaves nothing behind for long.
type redisSchema struct {
	rc  redis.UniversalClient
	key string
}

const versionTTL = 10 * time.Minute

func (s redisSchema) Version(ctx context.Context) (int, error) {
	v, err := s.rc.Get(ctx, s.key).Int()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	return v, err
}

func (s redisSchema) SetVersion(ctx context.Context, v int) error {
	return s.rc.Set(ctx, s.key, v, versionTTL).Err()
}

// Drop deletes the version.
func (s redisSchema) Drop(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return s.rc.Del(ctx, s.key).Err()
}

// newRunID returns a random id that names one run's keys.
func newRunID() (string, error) {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}
