package lock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/seed05627090/lock/check"
	"github.com/seed05627090/lock/redisdriver"
)

var _ Provider = (*RedisProvider)(nil)

// await calls fn, a call to Redis on ctx, and returns nil once it has
// returned; or ctx's error once ctx ends, when that comes first: then fn
// goes on, on a goroutine of its own, until the driver's own timeouts end
// it, the caller must not read what fn writes, and undo, when not nil, is
// called once fn has returned (to close what fn opened). A driver need not
// honour a context (go-redis honours a deadline on the socket only with
// ContextTimeoutEnabled, and not while it dials and sets up a connection;
// see batcher.eval): without await, a caller would wait for a server that
// does not answer until the client's own timeouts, past its deadline.
func await(ctx context.Context, fn, undo func()) error {
	if ctx.Done() == nil {
		fn()
		return nil
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		if undo != nil {
			go func() {
				<-done
				undo()
			}()
		}
		return ctx.Err()
	}
}

// skipArg is what a script is passed at a position of the arguments' layout
// that it does not read (see scripts/record.lua).
const skipArg = ""

// now is the time a script stores as a grant's Since: this process's clock,
// in Unix milliseconds.
func now() any { return time.Now().UnixMilli() }

// queueTTLArg is a script argument boxed once: the queue outlives its last
// look by a minute; a waiter looks again well within that, and a queue
// whose waiters all died goes away.
var queueTTLArg any = time.Minute.Milliseconds()

// RedisProvider is a Provider backed by Redis 6.2 or later, or Valkey: a
// single node, Sentinel (failover) or a Cluster, through go-redis
// ([NewRedisProvider]) or another client's [redisdriver.Driver]
// ([NewRedisProviderWithDriver]). Each operation is one Lua script, one
// round trip; the scripts of concurrent callers share pipelines.
//
// A lock K is a record at K and a wait queue at K+":q", its fencing tokens
// come from a counter of K's hash slot (see [RedisKeys]); a counted name
// keeps its claims and queue beside them. Nothing per name outlives its
// lock and its waiters (a queue expires a minute after their last look);
// the counters, at most 16,384 per key prefix, never expire. A message is published only to hand a
// lock to a waiter or to tell waiters of a grace period; on a Cluster it is
// an SPUBLISH in the lock's own slot where every primary knows it. The
// keys, the messages, what a Cluster costs and what Redis must be
// configured for are in docs/redis.md.
type RedisProvider struct {
	driver  redisdriver.Driver
	cluster bool // the driver's client is a Cluster's (asked once)
	shard   shardState
	batch   *batcher

	waits          bool          // WaitForReplicas was given
	replicas       int           // acknowledgements a grant needs
	replicaTimeout time.Duration // and how long to wait for them
}

// RedisOption configures a [RedisProvider].
type RedisOption func(*RedisProvider)

// ErrNotReplicated reports a grant or renewal that fewer replicas than
// asked for acknowledged in time (see [WaitForReplicas]). The acquisition
// failed and its record is removed; a renewal is tried again.
var ErrNotReplicated = errors.New("lock: not replicated")

// WaitForReplicas makes every grant and renewal count only once n replicas
// have acknowledged it, within timeout (Redis's WAIT, sent in the same
// pipeline as the script, on the same connection): a grant that fewer
// replicas acknowledged fails with an error matching [ErrNotReplicated],
// and a renewal that fewer acknowledged is tried again. It narrows what a
// failover loses; it does not make Redis consistent: a replica that did not
// acknowledge may still be promoted. While fewer than n replicas are
// reachable, every acquisition fails. n must be positive and timeout at
// least a millisecond, and under the client's ReadTimeout; a Provider built
// with other values fails every call with [ErrInvalidArgument].
// docs/redis.md says how a handed-on lock is confirmed, and what it costs.
func WaitForReplicas(n int, timeout time.Duration) RedisOption {
	return func(p *RedisProvider) { p.waits, p.replicas, p.replicaTimeout = true, n, timeout }
}

// NewRedisProviderWithDriver returns a provider that sends its commands
// through d, a driver of another Redis client library than go-redis (see
// [redisdriver.Driver]); it works as [NewRedisProvider]'s does. A nil d makes a
// provider whose every call fails with [ErrInvalidArgument].
func NewRedisProviderWithDriver(d redisdriver.Driver, opts ...RedisOption) *RedisProvider {
	p := &RedisProvider{driver: d}
	p.shard.detect = make(chan struct{}, 1)
	if d != nil {
		p.batch = newBatcher(d)
		if p.cluster = d.Cluster(); p.cluster {
			// With ReadOnly, a subscription may be on a replica, which an
			// SPUBLISH on the primary does not count.
			p.shard.skip = "1"
			if d.ReadOnly() {
				p.shard.skip = "0"
			}
		}
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

// RedisKeys returns the Redis keys of the lock under key: the record, the
// fencing counter and the wait queue. The record is key itself when key has
// a Redis Cluster hash tag ("lock:{name}", as [Client.Key] makes them);
// otherwise a tag made from key's checksum is appended; the queue is the
// record followed by ":q". The fencing counter is shared by every lock of
// the record's hash slot whose key starts with the same prefix (the text
// before the hash tag; [DefaultPrefix] for a key without one): P{t}:fence, t a
// tag of the slot. All three share the record's hash slot. A key whose first
// "{" is followed by "}" (an empty hash tag) cannot share a slot with another
// key, and is refused with [ErrInvalidArgument].
func RedisKeys(key string) (record, fence, queue string, err error) {
	if record, err = recordKey(key); err != nil {
		return "", "", "", err
	}
	return record, fenceKey(key, record), record + ":q", nil
}

// recordKey returns the Redis key of key's record (see [RedisKeys]).
func recordKey(key string) (string, error) {
	if hasHashTag(key) {
		return key, nil
	}
	record := key + "{" + strconv.FormatUint(uint64(crcName(key)), 36) + "}"
	if !hasHashTag(record) {
		return "", invalidf("key %q has an empty Redis hash tag (\"{}\")", key)
	}
	return record, nil
}

// Acquire implements Provider.
func (p *RedisProvider) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (Record, error) {
	if err := p.ready(check.Args(key, owner, ttl)); err != nil {
		return Record{}, err
	}
	rk, err := recordKey(key) // acquire.lua needs no queue
	if err != nil {
		return Record{}, err
	}
	ms := time.Now().UnixMilli() // the record's since
	r, acked, err := p.run(ctx, "acquire", key, acquireScript, true, 2, rk, fenceKey(key, rk), owner, ttl.Milliseconds(), skipArg, skipArg, ms)
	if err != nil {
		return Record{}, err
	}
	rec := r.rec
	switch r.code {
	case replyGranted:
		// Stored: the reply is the token alone.
		rec = Record{Owner: owner, Token: uint64(r.n), TTL: ttl.Truncate(time.Millisecond), Since: time.UnixMilli(ms)}
	case replyValue:
		if err := checkVersion(key, rec); err != nil {
			return rec, err
		}
	default:
		return Record{}, r.unexpected("acquire", key)
	}
	if rec.Owner == owner && !rec.GracePeriod {
		err = p.replicated(key, acked)
	}
	return rec, err
}

// Queue implements Provider.
func (p *RedisProvider) Queue(ctx context.Context, key string, w Wait) (Record, error) {
	k, err := p.publishingKeys(ctx, key, w.Check(key))
	if err != nil {
		return Record{}, err
	}
	ch := channel(w.Inbox, k.prefix)
	if k.prefix != "" {
		if err := p.queueShard(ctx, w.Inbox, ch, w.Owner); err != nil {
			return Record{}, err
		}
	}
	mode := lookModes[w.Look]
	r, acked, err := p.run(ctx, "queue", key, queueScript, true, 3, k.record, k.fence, k.queue, w.Owner, w.TTL.Milliseconds(),
		key, k.pub, now(), entry(w, ch), mode, queueTTLArg)
	rec := r.rec
	switch {
	case err != nil:
	case r.code == replyQueued:
		rec.Queued, rec.Position = true, int(r.n)
	case r.code != replyValue:
		rec, err = Record{}, r.unexpected("queue", key)
	}
	if k.prefix != "" && err == nil && !rec.Queued {
		p.unqueueShard(w.Inbox, w.Owner) // no grant will come on ch
	}
	if err == nil {
		err = checkVersion(key, rec)
	}
	if err == nil && rec.Owner == w.Owner && !rec.GracePeriod && !rec.Queued {
		err = p.replicated(key, acked)
	}
	return rec, err
}

// lookModes are queue.lua's names of the Looks, boxed once.
var lookModes = map[Look]any{LookFirst: "", LookFair: "f", LookJoin: "c", LookAgain: "a"}

// entry is w's element of a wait queue, whose grant is sent on ch (w's
// inbox, or its shard channel; see publishing).
func entry(w Wait, ch string) string {
	return w.Owner + " " + strconv.FormatInt(w.TTL.Milliseconds(), 10) + " " + ch
}

// Leave implements Provider.
func (p *RedisProvider) Leave(ctx context.Context, key string, w Wait) error {
	k, err := p.publishingKeys(ctx, key, w.Check(key))
	if err != nil {
		return err
	}
	if k.prefix != "" {
		p.unqueueShard(w.Inbox, w.Owner)
	}
	r, _, err := p.run(ctx, "leave", key, leaveScript, false, 3, k.record, k.fence, k.queue, w.Owner, skipArg, key, k.pub, now(),
		entry(w, channel(w.Inbox, k.prefix)))
	if err == nil && r.code != replyDone {
		err = r.unexpected("leave", key)
	}
	return err
}

// Release implements Provider.
func (p *RedisProvider) Release(ctx context.Context, key, owner string) error {
	k, err := p.publishingKeys(ctx, key, check.KeyOwner(key, owner))
	if err != nil {
		return err
	}
	rarg := any(k.record) // key itself, when it has a hash tag: one argument boxed for both
	karg := rarg
	if k.record != key {
		karg = key
	}
	r, _, err := p.run(ctx, "release", key, releaseScript, false, 3, rarg, k.fence, k.queue, owner, skipArg, karg, k.pub, now())
	if err != nil {
		return err
	}
	return r.done("release", key)
}

// Renew implements Provider.
func (p *RedisProvider) Renew(ctx context.Context, key, owner string, ttl time.Duration) error {
	k, err := p.keys(key, check.Args(key, owner, ttl))
	if err != nil {
		return err
	}
	r, acked, err := p.run(ctx, "renew", key, renewScript, true, 3, k.record, k.fence, k.queue, owner, ttl.Milliseconds())
	if err != nil {
		return err
	}
	if err = r.done("renew", key); err != nil {
		return err
	}
	return p.replicated(key, acked)
}

// Finish implements Provider.
func (p *RedisProvider) Finish(ctx context.Context, key, owner string, ttl time.Duration) error {
	k, err := p.publishingKeys(ctx, key, check.Args(key, owner, ttl))
	if err != nil {
		return err
	}
	r, acked, err := p.run(ctx, "finish", key, finishScript, true, 3, k.record, k.fence, k.queue, owner, ttl.Milliseconds(), key, k.pub)
	if err != nil {
		return err
	}
	if err = r.done("finish", key); err != nil {
		return err
	}
	return p.replicated(key, acked)
}

// evalWait runs s and a WAIT for [WaitForReplicas]'s replicas after it, in
// one pipeline on the primary of its first key (a keyless WAIT in a Cluster
// pipeline could go to another node), and returns the script's reply and
// the WAIT's.
func (p *RedisProvider) evalWait(ctx context.Context, s *script, nkeys int, args []any) (any, int64, error) {
	cl := s.newCall(nkeys, args)
	key, _ := args[0].(string) // not args itself in the closure: the callers' arguments stay on their stack
	wait := &redisdriver.Command{Args: []any{"wait", p.replicas, p.replicaTimeout.Milliseconds()}}
	var err error
	if aerr := await(ctx, func() {
		var node redisdriver.Node
		if node, err = p.driver.PrimaryForKey(ctx, key); err == nil {
			sendScripts(ctx, p.driver, node, []*call{cl}, wait)
		}
	}, nil); aerr != nil {
		return nil, 0, aerr
	}
	if err != nil {
		return nil, 0, err
	}
	if cl.cmd.Err != nil {
		return nil, 0, cl.cmd.Err
	}
	n, ok := wait.Reply.(int64)
	if !ok {
		err := wait.Err
		if err == nil {
			err = fmt.Errorf("unexpected reply %v", wait.Reply)
		}
		return nil, 0, fmt.Errorf("wait for replicas: %w", err)
	}
	return cl.cmd.Reply, n, nil
}

// replicated checks that a grant or renewal of key was acknowledged by as
// many replicas as [WaitForReplicas] asks for (acked is -1 without it).
func (p *RedisProvider) replicated(key string, acked int64) error {
	if acked < 0 || acked >= int64(p.replicas) {
		return nil
	}
	return fmt.Errorf("%w: %d of %d replicas acknowledged %q within %v", ErrNotReplicated, acked, p.replicas, key, p.replicaTimeout)
}

// Inspect implements Provider, in one script that writes nothing.
func (p *RedisProvider) Inspect(ctx context.Context, key string) (Record, error) {
	k, err := p.keys(key, check.Key(key))
	if err != nil {
		return Record{}, err
	}
	r, _, err := p.run(ctx, "inspect", key, inspectScript, false, 3, k.record, k.fence, k.queue)
	return r.inspected(key, err)
}

// listBatch is how many keys List asks SCAN for at a time, and inspects in
// one pipeline.
const listBatch = 256

// List implements Provider with SCAN, on every primary of a Cluster in
// turn, and inspects each batch of keys in one pipeline. Keys that end with
// ":fence" or ":q" are taken for the companions of records (see [RedisKeys]),
// one that ends with ":cq" for a counted name's queue, one that ends
// with ":c" for a counted name's claims (see provider_redis_claims.go), and
// a key of the form K{crc} for the record of key K without a hash tag.
func (p *RedisProvider) List(ctx context.Context, prefix string, fn func(key string, r Record, err error) bool) error {
	if err := p.check(); err != nil {
		return err
	}
	if fn == nil {
		return invalidf("nil list function")
	}
	// One primary after the other: fn is called by one goroutine at a
	// time, and not again once it returned false.
	var nodes []redisdriver.Node
	var perr error // the call's own: read once await returned nil
	err := await(ctx, func() { nodes, perr = p.driver.Primaries(ctx) }, nil)
	if err == nil {
		err = perr
	}
	if err != nil {
		return fmt.Errorf("lock: list %q: %w", prefix, err)
	}
	for _, node := range nodes {
		if err = p.scan(ctx, node, prefix, fn); err != nil {
			break
		}
	}
	if errors.Is(err, errStopList) {
		return nil
	}
	return err
}

// scan is List on one node.
func (p *RedisProvider) scan(ctx context.Context, node redisdriver.Node, prefix string, fn func(key string, r Record, err error) bool) error {
	cursor := "0"
	for {
		cmd := &redisdriver.Command{Args: []any{"scan", cursor, "match", globEscape(prefix) + "*", "count", listBatch}}
		if err := await(ctx, func() { node.Exec(ctx, []*redisdriver.Command{cmd}) }, nil); err != nil {
			return fmt.Errorf("lock: list %q: %w", prefix, err)
		}
		next, found, err := scanReply(cmd)
		if err != nil {
			return fmt.Errorf("lock: list %q: %w", prefix, err)
		}
		if err := p.inspectAll(ctx, node, found, fn); err != nil {
			return err
		}
		if cursor = next; cursor == "0" {
			return nil
		}
	}
}

// scanReply decodes the reply of a SCAN: the next cursor and the keys found.
func scanReply(cmd *redisdriver.Command) (string, []string, error) {
	if cmd.Err != nil {
		return "", nil, cmd.Err
	}
	a, _ := cmd.Reply.([]any)
	var next string
	var keys []any
	if len(a) == 2 {
		next, _ = a[0].(string)
		keys, _ = a[1].([]any)
	}
	if next == "" {
		return "", nil, fmt.Errorf("unexpected reply to SCAN %v", cmd.Reply)
	}
	found := make([]string, 0, len(keys))
	for _, k := range keys {
		if k, ok := k.(string); ok {
			found = append(found, k)
		}
	}
	return next, found, nil
}

// errStopList ends a List whose function returned false.
var errStopList = errors.New("lock: list stopped")

// inspectAll inspects the records and counted names among found in one
// pipeline and calls fn with each; it returns errStopList when fn asked for
// no more, and ctx's error when ctx ended before Redis answered.
func (p *RedisProvider) inspectAll(ctx context.Context, node redisdriver.Node, found []string, fn func(string, Record, error) bool) error {
	var items []listed
	for _, k := range found {
		switch {
		case strings.HasSuffix(k, ":fence"), strings.HasSuffix(k, ":q"),
			strings.HasSuffix(k, claimQueueSuffix):
			continue
		case strings.HasSuffix(k, claimsSuffix):
			if key, ok := countedName(k); ok {
				items = appendListed(items, key, true)
				continue
			}
		}
		items = appendListed(items, keyOfRecord(k), false)
	}
	return p.inspectListed(ctx, node, items, fn)
}

// listed is a key that List inspects: a lock, or a counted name.
type listed struct {
	key     string
	counted bool
	call    *call
}

// appendListed appends the inspection of key, a counted name or a lock, to
// items; a key that has no Redis keys is left out.
func appendListed(items []listed, key string, counted bool) []listed {
	if counted {
		rk, _ := recordKey(key)
		cl := claimInspectScript.newCall(3, []any{rk + claimsSuffix, fenceKey(key, rk), rk + claimQueueSuffix, "n"})
		return append(items, listed{key: key, counted: true, call: cl})
	}
	r, f, q, err := RedisKeys(key)
	if err != nil {
		return items
	}
	return append(items, listed{key: key, call: inspectScript.newCall(3, []any{r, f, q})})
}

// inspectListed runs the inspections of items in one pipeline and calls fn
// with each key that holds a record or claims; it returns as inspectAll
// does. A key that ends with ":c" but holds no hash is a lock's record
// after all: it is inspected as one, in one more pipeline.
func (p *RedisProvider) inspectListed(ctx context.Context, node redisdriver.Node, items []listed, fn func(string, Record, error) bool) error {
	if len(items) == 0 {
		return nil
	}
	calls := make([]*call, len(items))
	for i := range items {
		calls[i] = items[i].call
	}
	if err := await(ctx, func() { sendScripts(ctx, p.driver, node, calls, nil) }, nil); err != nil {
		return fmt.Errorf("lock: list: %w", err)
	}
	var locks []listed
	for _, it := range items {
		var rec Record
		var err error
		if it.counted {
			var ok, lock bool
			if err = it.call.cmd.Err; err != nil {
				err = wrap(it.key, err)
			} else {
				rec, ok, lock, err = listedClaims(it.key, it.call.cmd.Reply)
			}
			if lock {
				rk, _ := recordKey(it.key)
				locks = appendListed(locks, keyOfRecord(rk+claimsSuffix), false)
				continue
			}
			if err == nil && !ok {
				continue // freed since the scan
			}
		} else {
			var r reply
			if err = it.call.cmd.Err; err != nil {
				err = wrap(it.key, err)
			} else {
				r, err = decode("inspect", it.key, it.call.cmd.Reply)
			}
			if rec, err = r.inspected(it.key, err); err == nil && rec.Owner == "" {
				continue // freed since the scan
			}
		}
		if !fn(it.key, rec, err) {
			return errStopList
		}
	}
	return p.inspectListed(ctx, node, locks, fn)
}

// keyOfRecord returns the key whose record Redis stores under k: k itself,
// or K for a k of the form K{crc} that [RedisKeys] made for a K without a hash
// tag.
func keyOfRecord(k string) string {
	i := strings.LastIndexByte(k, '{')
	if i < 0 || !strings.HasSuffix(k, "}") {
		return k
	}
	key := k[:i]
	if !hasHashTag(key) && k[i+1:len(k)-1] == strconv.FormatUint(uint64(crcName(key)), 36) {
		return key
	}
	return k
}

// globEscape quotes the characters that SCAN MATCH reads as a pattern.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// ForceRelease implements Provider.
func (p *RedisProvider) ForceRelease(ctx context.Context, key string) (Record, error) {
	k, err := p.publishingKeys(ctx, key, check.Key(key))
	if err != nil {
		return Record{}, err
	}
	r, _, err := p.run(ctx, "force release", key, forceReleaseScript, false, 3, k.record, k.fence, k.queue, skipArg, skipArg, key, k.pub, now())
	if err != nil {
		return Record{}, err
	}
	switch {
	case r.code == replyEmpty, r.code == replyValue && r.rec.Kind != "": // free, or a counted name's, left as it is
		return Record{}, nil
	case r.code == replyValue:
		return r.rec, nil // removed, or handed to a waiter
	}
	return Record{}, r.unexpected("force release", key)
}

func (p *RedisProvider) check() error {
	switch {
	case p == nil || p.driver == nil:
		return invalidf("nil redis client")
	case p.waits && p.replicas <= 0:
		return invalidf("WaitForReplicas needs a positive number of replicas, not %d", p.replicas)
	case p.waits && p.replicaTimeout < time.Millisecond:
		return invalidf("WaitForReplicas timeout %v is less than 1ms", p.replicaTimeout)
	}
	return nil
}

// ready begins every method: it checks the provider, then the method's
// arguments (args is the result of their check), and returns the first
// error.
func (p *RedisProvider) ready(args error) error {
	if err := p.check(); err != nil {
		return err
	}
	return args
}

// scriptKeys are what the scripts of a method on one lock take: the lock's
// Redis keys (see [RedisKeys]) and, from publishingKeys, how a script that
// may hand the lock on or tell its waiters publishes (see publishing).
type scriptKeys struct {
	record, fence, queue string
	pub                  any    // the scripts' publish argument
	prefix               string // of the lock's shard channels; "" when grants are not sharded
}

// keys begins a method on key, as ready does, and returns key's Redis keys.
func (p *RedisProvider) keys(key string, args error) (scriptKeys, error) {
	if err := p.ready(args); err != nil {
		return scriptKeys{}, err
	}
	r, f, q, err := RedisKeys(key)
	return scriptKeys{record: r, fence: f, queue: q}, err
}

// publishingKeys is keys for a method whose script publishes: it adds the
// publish argument and the shard channel prefix of key's record.
func (p *RedisProvider) publishingKeys(ctx context.Context, key string, args error) (scriptKeys, error) {
	k, err := p.keys(key, args)
	if err == nil {
		k.pub, k.prefix, err = p.publishing(ctx, k.record)
	}
	return k, err
}

// wrap reports a value of another Redis type as a *RecordError, and a
// fencing counter that is not an integer as one at the counter's key that
// names key, the lock ([RecordError.Lock]); every other error (the server's:
// OOM, READONLY, CLUSTERDOWN...; the network's; the context's) is returned
// as it is. The Client names the operation and the key.
func wrap(key string, err error) error {
	var rerr *redisdriver.Error
	if errors.As(err, &rerr) {
		switch msg := rerr.Msg; {
		case strings.Contains(msg, "WRONGTYPE"):
			return &RecordError{Key: key, Value: "(a value of another Redis type)"}
		case strings.Contains(msg, counterCorrupt):
			_, value, _ := strings.Cut(msg, counterCorrupt)
			_, fence, _, _ := RedisKeys(key)
			return &RecordError{Key: fence, Lock: key, Value: value}
		}
	}
	return err
}

const (
	endedSuffix  = ",ended"
	queuedSuffix = ",q" // Redis: the record's key has a wait queue
)

// parseRecord decodes a stored value, or reports it as corrupt. A record is
// "owner,token,since" while held ("owner,token,since,q" when a queue waits
// for it) and "owner,token,since,ended" during a grace period, since in Unix
// milliseconds; the parse function of scripts/record.lua is the same parser
// in Lua.
func parseRecord(key, v string) (Record, error) {
	ended := strings.HasSuffix(v, endedSuffix)
	body := strings.TrimSuffix(strings.TrimSuffix(v, endedSuffix), queuedSuffix)
	if ended && len(body) != len(v)-len(endedSuffix) {
		return Record{}, &RecordError{Key: key, Value: v} // both suffixes
	}
	owner, rest, ok := strings.Cut(body, ",")
	tok, since, ok2 := strings.Cut(rest, ",")
	if !ok || !ok2 || check.Owner(owner) != nil {
		return Record{}, &RecordError{Key: key, Value: v}
	}
	// 1 to 19 digits without a leading zero, and 1 to 15 digits, as the Lua
	// parser takes them.
	token, err := strconv.ParseUint(tok, 10, 64)
	if err != nil || token == 0 || len(tok) > 19 || tok[0] == '0' {
		return Record{}, &RecordError{Key: key, Value: v}
	}
	ms, err := strconv.ParseUint(since, 10, 64)
	if err != nil || len(since) > 15 {
		return Record{}, &RecordError{Key: key, Value: v}
	}
	return Record{Owner: owner, Token: token, GracePeriod: ended, Since: time.UnixMilli(int64(ms))}, nil
}
