package lock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	_ Provider   = (*RedisProvider)(nil)
	_ Topic      = (*RedisProvider)(nil)
	_ Transferer = (*RedisProvider)(nil)
	_ Queuer     = (*RedisProvider)(nil)
)

var (
	//go:embed scripts/record.lua
	recordLua string

	//go:embed scripts/acquire.lua
	acquireLua    string
	acquireScript = redis.NewScript(recordLua + acquireLua)

	//go:embed scripts/transfer.lua
	transferLua    string
	transferScript = redis.NewScript(recordLua + transferLua)

	//go:embed scripts/dequeue.lua
	dequeueLua    string
	dequeueScript = redis.NewScript(recordLua + dequeueLua)

	//go:embed scripts/release.lua
	releaseLua    string
	releaseScript = redis.NewScript(recordLua + releaseLua)

	//go:embed scripts/update.lua
	updateLua    string
	updateScript = redis.NewScript(recordLua + updateLua)
)

// RedisChannel is the pub/sub channel on which the Redis provider announces
// the end of a lock; each message is the lock's key.
const RedisChannel = "lock:end"

// fenceTTL is how long a key's fencing counter lives from its first grant;
// the next counter starts at the server's clock in microseconds, above every
// token the old one gave, so tokens keep increasing across counters.
const fenceTTL = time.Hour

// RedisProvider is a Provider and Topic backed by Redis 6.2 or later, or Valkey.
// It takes any redis.UniversalClient: single node, Sentinel (failover) or
// Cluster. Each operation is one Lua script, one round trip.
//
// For a key K it writes the record at "{K}", the fencing counter at
// "{K}:fence" and, for Options.Fair, the wait queue at "{K}:q" and "{K}:qt":
// one hash slot, so Cluster works. The record lives until it is released or
// its TTL ends, the counter one hour from its first grant, the queue as long as
// its waiters keep looking. Releases and ended updates are published on
// RedisChannel by the same script, as "K\nnext", next being the first owner
// in the wait queue, if any.
type RedisProvider struct {
	client redis.UniversalClient
}

// NewRedisProvider returns a provider that uses client. The client stays the
// caller's to close. go-redis honours context deadlines on the socket only with
// ContextTimeoutEnabled set in its options; without it, a call to an
// unreachable server lasts up to the client's own read and write timeouts.
func NewRedisProvider(client redis.UniversalClient) *RedisProvider {
	return &RedisProvider{client: client}
}

func recordKey(key string) string { return "{" + key + "}" }
func fenceKey(key string) string  { return "{" + key + "}:fence" }

// keys returns every key of one lock, in the order the scripts take them: the
// record, the fencing counter, and the wait queue's order and expiry sets.
func keys(key string) []string {
	k := recordKey(key)
	return []string{k, k + ":fence", k + ":q", k + ":qt"}
}

// Acquire implements Provider.
func (p *RedisProvider) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (Record, error) {
	return p.acquire(ctx, key, owner, ttl, 0)
}

// AcquireQueued implements Queuer.
func (p *RedisProvider) AcquireQueued(ctx context.Context, key, owner string, ttl, wait time.Duration) (Record, error) {
	if wait < 0 {
		return Record{}, invalidf("negative queue wait %v", wait)
	}
	q := int64(-1) // in order, without joining the queue
	if wait > 0 {
		q = max(wait.Milliseconds(), 1)
	}
	return p.acquire(ctx, key, owner, ttl, q)
}

// acquire runs the acquire script; queue is its ARGV[4].
func (p *RedisProvider) acquire(ctx context.Context, key, owner string, ttl time.Duration, queue int64) (Record, error) {
	if err := p.check(); err != nil {
		return Record{}, err
	}
	if err := checkArgs(key, owner, ttl); err != nil {
		return Record{}, err
	}
	res, err := acquireScript.Run(ctx, p.client, keys(key),
		owner, ttl.Milliseconds(), fenceTTL.Milliseconds(), queue).Slice()
	if err != nil {
		return Record{}, p.wrap(ctx, key, err)
	}
	if len(res) != 2 {
		return Record{}, fmt.Errorf("lock: unexpected reply %v from acquire script", res)
	}
	v, ok := res[0].(string)
	if !ok {
		return Record{}, nil // free, but another owner's turn
	}
	pttl, _ := res[1].(int64)
	rec, err := parseRecord(key, v)
	if err != nil {
		return Record{}, err
	}
	if pttl > 0 {
		rec.TTL = time.Duration(pttl) * time.Millisecond
	}
	return rec, nil
}

// Dequeue implements Queuer.
func (p *RedisProvider) Dequeue(ctx context.Context, key, owner string) error {
	if err := p.check(); err != nil {
		return err
	}
	if err := checkKeyOwner(key, owner); err != nil {
		return err
	}
	err := dequeueScript.Run(ctx, p.client, keys(key), owner, RedisChannel, key).Err()
	if err != nil {
		return p.wrap(ctx, key, err)
	}
	return nil
}

// Release implements Provider.
func (p *RedisProvider) Release(ctx context.Context, key, owner string) error {
	if err := p.check(); err != nil {
		return err
	}
	if err := checkKeyOwner(key, owner); err != nil {
		return err
	}
	res, err := releaseScript.Run(ctx, p.client, keys(key), owner, RedisChannel, key).Slice()
	return p.result(ctx, key, res, err)
}

// Update implements Provider.
func (p *RedisProvider) Update(ctx context.Context, key, owner string, ttl time.Duration, ended bool) error {
	if err := p.check(); err != nil {
		return err
	}
	if err := checkArgs(key, owner, ttl); err != nil {
		return err
	}
	flag := "0"
	if ended {
		flag = "1"
	}
	res, err := updateScript.Run(ctx, p.client, keys(key),
		owner, ttl.Milliseconds(), flag, RedisChannel, key).Slice()
	return p.result(ctx, key, res, err)
}

// Transfer implements Transferer.
func (p *RedisProvider) Transfer(ctx context.Context, key, from, to string, ttl time.Duration) (Record, error) {
	if err := p.check(); err != nil {
		return Record{}, err
	}
	if err := checkOwner(from); err != nil {
		return Record{}, err
	}
	if err := checkArgs(key, to, ttl); err != nil {
		return Record{}, err
	}
	res, err := transferScript.Run(ctx, p.client, keys(key),
		from, to, ttl.Milliseconds(), fenceTTL.Milliseconds(), RedisChannel, key).Slice()
	if err == nil && len(res) == 1 && res[0] == int64(2) {
		return Record{}, nil // released for the first owner of the queue
	}
	if err := p.result(ctx, key, res, err); err != nil {
		return Record{}, err
	}
	v, _ := res[1].(string)
	rec, err := parseRecord(key, v)
	rec.TTL = ttl
	return rec, err
}

// Subscribe implements Topic. It returns once Redis has confirmed the
// subscription; a connection that breaks is reconnected and resubscribed by
// go-redis, and messages published meanwhile are lost (waiters fall back to
// polling). stop closes the subscription and waits for its goroutine.
func (p *RedisProvider) Subscribe(ctx context.Context, notify func(key, next string)) (func(), error) {
	if err := p.check(); err != nil {
		return nil, err
	}
	if notify == nil {
		return nil, invalidf("nil notify function")
	}
	ps := p.client.Subscribe(ctx, RedisChannel)
	if _, err := ps.Receive(ctx); err != nil {
		_ = ps.Close()
		return nil, fmt.Errorf("lock: subscribe to %s: %w", RedisChannel, err)
	}
	ch := ps.Channel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for msg := range ch {
			// "key\nnext": the owner has no white space, the key may have any.
			i := strings.LastIndexByte(msg.Payload, '\n')
			if i < 0 {
				continue // not ours
			}
			notify(msg.Payload[:i], msg.Payload[i+1:])
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			_ = ps.Close()
			wg.Wait()
		})
	}, nil
}

func (p *RedisProvider) check() error {
	if p == nil || p.client == nil {
		return invalidf("nil redis client")
	}
	return nil
}

// result turns a release or update script's reply into an error.
func (p *RedisProvider) result(ctx context.Context, key string, res []any, err error) error {
	if err != nil {
		return p.wrap(ctx, key, err)
	}
	if len(res) == 0 {
		return fmt.Errorf("lock: empty reply from script for %q", key)
	}
	code, _ := res[0].(int64)
	switch code {
	case 1:
		return nil
	case 0, -1:
		return &LostError{Key: key}
	case -2:
		v, _ := res[1].(string)
		return &RecordError{Key: key, Value: v}
	}
	return fmt.Errorf("lock: unexpected reply %v from script for %q", res, key)
}

// wrap turns a Redis error about a value of another type into a RecordError,
// and passes the caller's own context error through as it is.
func (p *RedisProvider) wrap(ctx context.Context, key string, err error) error {
	switch msg := err.Error(); {
	case strings.Contains(msg, "WRONGTYPE"):
		return &RecordError{Key: key, Value: "(a value of another Redis type)"}
	case strings.Contains(msg, "LOCKCORRUPT"):
		return &RecordError{Key: fenceKey(key), Value: "(a fencing counter that is not an integer)"}
	}
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return err
	}
	return fmt.Errorf("lock: redis: %w", err)
}
