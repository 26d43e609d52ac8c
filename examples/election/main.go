// Election runs a role, "invoice-writer", in one of three replicas at a
// time, with lock.Client.Lead, and protects what the leader writes with a
// fence: each write carries the term's number through lock.RedisFence, so a
// former leader that was paused past its lease cannot overwrite its
// successor's data.
//
// What happens: replica-1 leads term 1 and writes; it stalls (a GC pause,
// a frozen VM) for longer than its lease; its lease timer ends its term's
// context, the next replica in the queue is elected when the record
// expires, and writes; replica-1 resumes and writes without looking at its
// context, and the fence refuses it (lock.ErrStaleToken). Lead campaigns
// again for replica-1, without a restart. Then the leader is shut down,
// twice: its Lead resigns, which hands the role at once to the replica that
// has waited longest, replica-1 last. An observer (lock.Client.Observe)
// prints each change of leader. The run ends by itself in about 3 seconds.
//
//	go run ./examples/election                         # locks in memory, the data in an embedded Redis (miniredis)
//	go run ./examples/election -redis 127.0.0.1:6379   # locks and data in Redis
//
// With -redis, the run's keys start with "example:election:<run>:" (a
// random run), and the run deletes its data and fence at the end (the
// fencing counter of the locks' hash slot stays, as every lock's does).
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/seed05627090/lock"
)

func main() {
	redisAddr := flag.String("redis", "", "Redis address, such as 127.0.0.1:6379 (default: memory provider and an embedded Redis for the data)")
	flag.Parse()
	if err := run(*redisAddr); err != nil {
		log.Fatal(err)
	}
}

const (
	role  = "invoice-writer"
	lease = 300 * time.Millisecond // short, for the demo: a stalled leader loses the role fast
	stall = 800 * time.Millisecond // longer than the lease
)

// saveTotal is the leader's write: the invoice's total and who wrote it,
// run only if the writer's term number passes the fence.
var saveTotal = lock.NewRedisFence(`redis.call('SET', KEYS[1], ARGV[1]) return redis.call('INCR', KEYS[2])`)

var start = time.Now()

// say prints a line with the time since the start.
func say(format string, args ...any) {
	fmt.Printf("%5.2fs  "+format+"\n", append([]any{time.Since(start).Seconds()}, args...)...)
}

func run(redisAddr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// The data store, and the lock store every replica shares.
	var (
		rdb        *redis.Client
		prefix     = "example:election:"
		newLocks   func() lock.Provider
		memoryLock = lock.NewMemoryProvider()
	)
	if redisAddr == "" {
		srv, err := miniredis.Run()
		if err != nil {
			return err
		}
		defer srv.Close()
		rdb = redis.NewClient(&redis.Options{Addr: srv.Addr()})
		newLocks = func() lock.Provider { return memoryLock }
	} else {
		rdb = redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
		if err := rdb.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("no Redis at %s: %w", redisAddr, err)
		}
		b := make([]byte, 6)
		_, _ = rand.Read(b)
		prefix += hex.EncodeToString(b) + ":"
		say("run keys %s...", prefix)
		// One Redis client per replica, as separate processes would have.
		newLocks = func() lock.Provider {
			rc := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
			go func() { <-ctx.Done(); _ = rc.Close() }()
			return lock.NewRedisProvider(rc)
		}
	}
	defer rdb.Close()
	// The fence and the data share a hash tag: one Cluster slot.
	fence, total, writes := prefix+"{invoice:7}:fence", prefix+"{invoice:7}:total", prefix+"{invoice:7}:writes"
	defer rdb.Del(context.Background(), fence, total, writes)

	// The observer: who leads, as it changes.
	watcher, err := lock.NewClient(newLocks(), lock.WithPrefix(prefix), lock.WithPollInterval(20*time.Millisecond))
	if err != nil {
		return err
	}
	defer watcher.Close()
	wctx, stopWatching := context.WithCancel(ctx)
	defer stopWatching()
	leaders, err := watcher.Observe(wctx, role)
	if err != nil {
		return err
	}
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for l := range leaders {
			switch {
			case l.Err != nil:
				say("observer: cannot read the role: %v", l.Err)
			case l.Vacant():
				say("observer: nobody leads")
			default:
				say("observer: %s leads, term %d", l.Identity, l.Term)
			}
		}
	}()

	// The replicas, each with its own Client and its own Lead.
	var (
		stalled  atomic.Bool // replica-1 stalls once
		wg       sync.WaitGroup
		shutdown = make([]context.CancelFunc, 3)
		leading  = make(chan int, 16) // which replica was elected
	)
	for i := range 3 {
		name := fmt.Sprintf("replica-%d", i+1)
		locks := &stoppable{Provider: newLocks()}
		c, err := lock.NewClient(locks, lock.WithPrefix(prefix), lock.WithIdentity(name), lock.WithPollInterval(50*time.Millisecond))
		if err != nil {
			return err
		}
		defer c.Close()
		rctx, stop := context.WithCancel(ctx)
		shutdown[i] = stop
		work := func(ctx context.Context) error {
			l, _ := lock.FromContext(ctx) // the term's lock: its token is the term's number
			for n := 1; ; n++ {
				if i == 0 && n == 3 && stalled.CompareAndSwap(false, true) {
					say("%s: stalls for %v (its lease is %v)", name, stall, lease)
					locks.stopped.Store(true)
					time.Sleep(stall) // the pause: it does not look at ctx
					locks.stopped.Store(false)
					// It resumes and writes as if it still led: the fence refuses.
					err := saveTotal.Run(context.WithoutCancel(ctx), rdb, fence, l.Token(), []string{total, writes}, name+" (stale)").Err()
					var stale *lock.StaleTokenError
					if errors.As(err, &stale) {
						say("%s: resumes and writes with term %d: refused, term %d has written (lock.ErrStaleToken)", name, stale.Token, stale.Mark)
					} else {
						say("%s: resumes and writes with term %d: %v", name, l.Token(), err)
					}
					say("%s: its term's context had ended: %v", name, context.Cause(ctx))
					return err
				}
				err := saveTotal.Run(ctx, rdb, fence, l.Token(), []string{total, writes}, name).Err()
				if err != nil {
					return err
				}
				say("%s: wrote with term %d", name, l.Token())
				select {
				case <-time.After(100 * time.Millisecond):
				case <-ctx.Done():
					return context.Cause(ctx)
				}
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := c.Lead(rctx, role, work, lock.LeadOptions{
				ElectionOptions: lock.ElectionOptions{Lease: lease},
				Pause:           100 * time.Millisecond,
				OnElected: func(t *lock.Term) {
					say("%s: elected, term %d", name, t.Token())
					leading <- i
				},
				OnStopped: func(t *lock.Term, err error) {
					switch {
					case errors.Is(err, lock.ErrLost):
						say("%s: term %d ended: lost; campaigns again", name, t.Token())
					case errors.Is(err, context.Canceled):
						say("%s: term %d ended: shut down, resigned", name, t.Token())
					default:
						say("%s: term %d ended: %v", name, t.Token(), err)
					}
				},
			})
			if !errors.Is(err, context.Canceled) {
				say("%s: Lead returned: %v", name, err)
			}
		}()
		if i == 0 {
			<-leading // replica-1 campaigns first
		}
	}

	// Wait for the stall to play out: a successor of replica-1 is elected.
	for <-leading == 0 {
	}
	time.Sleep(1200 * time.Millisecond)

	// Shut the leader down, twice: its Lead resigns, and the role passes at
	// once to the replica that has waited longest; replica-1, which
	// campaigned again after its loss, leads last.
	for range 2 {
		leader, err := watcher.Inspect(ctx, role)
		if err != nil {
			return err
		}
		for i := range 3 {
			if leader.Identity == fmt.Sprintf("replica-%d", i+1) {
				say("shutting %s down", leader.Identity)
				shutdown[i]()
			}
		}
		<-leading
		time.Sleep(400 * time.Millisecond)
	}

	// The end: every replica stops; the last leader resigns.
	for _, stop := range shutdown {
		stop()
	}
	wg.Wait()
	time.Sleep(50 * time.Millisecond) // the observer's last read
	stopWatching()
	<-watched
	v, err := rdb.Get(ctx, total).Result()
	if err != nil {
		return err
	}
	n, _ := rdb.Get(ctx, writes).Int()
	mark, _ := rdb.Get(ctx, fence).Result()
	say("invoice 7: total written by %s; %d writes passed the fence, its mark is term %s", v, n, mark)
	return nil
}

// stoppable stands in for the lock store as a stopped process sees it: while
// stopped, its renewals do not get through (they wait until the lease ends).
// In a process that is really stopped, its lease timer would not run either,
// and would end the term's context only when the process resumes, maybe
// after its next write: the fence is what refuses that write.
type stoppable struct {
	lock.Provider
	stopped atomic.Bool
}

func (p *stoppable) Renew(ctx context.Context, key, owner string, ttl time.Duration) error {
	if p.stopped.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	return p.Provider.Renew(ctx, key, owner, ttl)
}
