package lock

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/seed05627090/lock/check"
)

// The counted names on Redis: each method is one script (scripts/claim*.lua,
// with scripts/claim.lua prepended to all but claiminspect.lua), on four
// keys of the hash slot of the name's record key R (see RedisKeys): R+":c",
// a hash of the live claims (owner -> "weight,token,since,deadline", the
// deadline by the server's clock) and the waiters' queue entries, with the
// name's limit, the weight used, the queue's length, when the keys expire
// and a bound of the first deadline with a live claim; R+":cq", the queue,
// a list of entries "owner weight ttl channel"; the locks' fencing
// counter of the slot, from which a name takes its tokens in blocks (see
// provider_redis_token.go); and R itself, which holds the name's mark,
// "counted <kind>", while the name holds claims or waiters, so that a
// lock's scripts find the key taken (one name, one kind: see countedMark).
// Every script reads the server's clock (TIME)
// and the name's fields (HMGET) first, and reaps the claims whose deadline passed
// (HGETALL) when that clock reached the earliest deadline. What the scripts
// take and reply is written once, at the top of scripts/claim.lua.
//
// An uncontended AcquireClaim and its ReleaseClaim are two calls of 6 and
// 3 Redis commands (TIME, HMGET, INCRBY for a block of tokens, the mark's
// SET NX, HSET, PEXPIREAT; TIME, HMGET, DEL of the three keys), or 3 and 4
// when others hold claims of the name (TIME, HMGET, HSET; TIME, HMGET,
// HDEL, HSET), whatever the limit: at most 11 with the two EVALSHA. A
// renewal that moves the keys' expiry moves the mark's too (a PEXPIREAT
// each). A hold served from the queue is 12: the
// join (TIME, HMGET, RPUSH, HSET) and the granting release (TIME, HMGET,
// LPOP, PUBLISH, HDEL, HSET) with their EVALSHA. A waiter's look again is
// 6 (TIME, HMGET, LPOS, and the LSET and HSET of its entry with its new
// deadline, with its EVALSHA): the deadline is in the queue's entry, so
// that a release reads it with its LPOP, and passes over a head whose
// deadline is past.

var (
	claimLua = lua("claim.lua")

	claimAcquireScript = newScript(claimLua+lua("claimacquire.lua"), decodeClaim)
	claimQueueScript   = newScript(claimLua+lua("claimqueue.lua"), decodeClaim)
	claimLeaveScript   = newScript(claimLua+lua("claimleave.lua"), decodeClaim)
	claimRenewScript   = newScript(claimLua+lua("claimrenew.lua"), decodeClaim)
	claimReleaseScript = newScript(claimLua+lua("claimrelease.lua"), decodeClaim)
	claimLowerScript   = newScript(claimLua+lua("claimlower.lua"), decodeClaim)
	claimInspectScript = newScript(lua("claiminspect.lua"), nil) // decoded by decodeClaims
)

// The suffixes of a counted name's keys, after its record key.
const (
	claimsSuffix     = ":c"
	claimQueueSuffix = ":cq"
)

// claimKeys are the keys of a counted name's scripts, in the order of
// scripts/claim.lua's KEYS, and how they publish (see scriptKeys).
type claimKeys struct {
	keys   [4]any // claims, fence, queue, record (the mark)
	pub    any
	prefix string
}

// countedKeys begins a claim method on key, as ready does, and returns its
// keys; with publishes, how its script publishes too.
func (p *RedisProvider) countedKeys(ctx context.Context, key string, args error, publishes bool) (claimKeys, error) {
	if err := p.ready(args); err != nil {
		return claimKeys{}, err
	}
	rk, err := recordKey(key)
	if err != nil {
		return claimKeys{}, err
	}
	k := claimKeys{keys: [4]any{rk + claimsSuffix, fenceKey(key, rk), rk + claimQueueSuffix, rk}}
	if publishes {
		k.pub, k.prefix, err = p.publishing(ctx, rk)
	}
	return k, err
}

// args returns the keys followed by the scripts' arguments.
func (k claimKeys) args(argv ...any) []any {
	return append(k.keys[:], argv...)
}

// markPrefix starts the value of a counted name's record key while the
// name is in use: "counted semaphore", "counted rwmutex" (see
// scripts/claim.lua). It has a space, which no owner has, so that no
// script reads it as a lock's record: a lock's Acquire finds the key
// taken, and its Record says the name's kind (see decode).
const markPrefix = "counted "

// countedMark returns the kind of the counted name whose mark is v, and
// whether v is one.
func countedMark(v string) (Kind, bool) {
	k, ok := strings.CutPrefix(v, markPrefix)
	return Kind(k), ok && Kind(k).counted()
}

// kindArgs are the kinds of claims as the scripts' argument, boxed once.
var kindArgs = map[Kind]any{KindSemaphore: string(KindSemaphore), KindRWMutex: string(KindRWMutex)}

// decodeClaim decodes a claim script's reply, {code, limit, used, n, owner,
// value, pttl, head, kind}.
func decodeClaim(op, key string, res any) (reply, error) {
	r := reply{raw: res}
	a, _ := res.([]any)
	if len(a) != 9 {
		return r, r.unexpected(op, key)
	}
	code, ok1 := a[0].(int64)
	limit, ok2 := a[1].(int64)
	used, ok3 := a[2].(int64)
	n, ok4 := a[3].(int64)
	pttl, ok5 := a[6].(int64)
	head, ok6 := a[7].(int64)
	kind, _ := a[8].(string)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || !ok6 || code < replyDone || code > replyLocked {
		return r, r.unexpected(op, key)
	}
	r.code, r.n = code, n
	v, _ := a[5].(string)
	switch code {
	case replyCorrupt:
		return r, &RecordError{Key: key, Value: v}
	case replyLocked:
		rec, err := parseRecord(key, v)
		if err != nil {
			return r, err
		}
		rec.TTL = max(time.Duration(pttl)*time.Millisecond, time.Millisecond)
		rec.Kind = KindLock
		r.rec = rec
		return r, nil
	}
	if o, ok := a[4].(string); ok {
		_, token, since, err := parseClaim(key, v)
		if err != nil {
			return r, err
		}
		r.rec = Record{Owner: o, Token: token, TTL: max(time.Duration(pttl)*time.Millisecond, time.Millisecond)}
		if code == replyGranted {
			r.rec.Since = since
		}
	}
	r.rec.Limit, r.rec.Used, r.rec.Kind = int(limit), int(used), Kind(kind)
	if code == replyQueued && head > 0 {
		r.rec.HeadTTL = time.Duration(head) * time.Millisecond
	}
	return r, nil
}

// parseClaim decodes a stored claim, "weight,token,since" (see
// scripts/claim.lua), or reports it as corrupt.
func parseClaim(key, v string) (weight int, token uint64, since time.Time, err error) {
	bad := &RecordError{Key: key, Value: v}
	w, rest, ok := strings.Cut(v, ",")
	tok, ms, ok2 := strings.Cut(rest, ",")
	if !ok || !ok2 || len(w) > 4 || len(tok) > 19 || len(ms) > 15 || w == "" || tok == "" || w[0] == '0' || tok[0] == '0' {
		return 0, 0, time.Time{}, bad
	}
	weight, err = strconv.Atoi(w)
	if err != nil || weight < 1 {
		return 0, 0, time.Time{}, bad
	}
	if token, err = strconv.ParseUint(tok, 10, 64); err != nil {
		return 0, 0, time.Time{}, bad
	}
	sinceMS, err := strconv.ParseUint(ms, 10, 64)
	if err != nil {
		return 0, 0, time.Time{}, bad
	}
	return weight, token, time.UnixMilli(int64(sinceMS)), nil
}

// claimEntry is c's element of a queue of claims, whose grant is sent on
// ch (c's inbox, or its shard channel; see publishing), but for the
// deadline the script adds.
func claimEntry(c Claim, ch string) string {
	return c.Owner + " " + strconv.Itoa(c.Weight) + " " + strconv.FormatInt(c.TTL.Milliseconds(), 10) + " " + ch
}

// AcquireClaim implements Provider.
func (p *RedisProvider) AcquireClaim(ctx context.Context, key string, c Claim) (Record, error) {
	k, err := p.countedKeys(ctx, key, c.Check(key), true)
	if err != nil {
		return Record{}, err
	}
	r, acked, err := p.run(ctx, "acquire claim", key, claimAcquireScript, true, len(k.keys),
		k.args(c.Owner, c.TTL.Milliseconds(), key, k.pub, c.Weight, c.Limit, skipArg, skipArg, kindArgs[c.Kind])...)
	if err != nil {
		return Record{}, err
	}
	switch r.code {
	case replyGranted:
		err = p.replicated(key, acked)
	case replyValue, replyLocked:
	default:
		return Record{}, r.unexpected("acquire claim", key)
	}
	return r.rec, err
}

// QueueClaim implements Provider. c.Look is not read: a caller already in
// the queue keeps its place (the script knows it is queued, and finds its
// entry by LPOS: a later look costs the length of the queue ahead of it),
// and none is granted past a waiter.
func (p *RedisProvider) QueueClaim(ctx context.Context, key string, c Claim) (Record, error) {
	err := c.Check(key)
	if err == nil {
		err = check.Inbox(c.Inbox)
	}
	k, err := p.countedKeys(ctx, key, err, true)
	if err != nil {
		return Record{}, err
	}
	ch := channel(c.Inbox, k.prefix)
	if k.prefix != "" {
		if err := p.queueShard(ctx, c.Inbox, ch, c.Owner); err != nil {
			return Record{}, err
		}
	}
	r, acked, err := p.run(ctx, "queue claim", key, claimQueueScript, true, len(k.keys),
		k.args(c.Owner, c.TTL.Milliseconds(), key, k.pub, c.Weight, c.Limit, claimEntry(c, ch),
			max(cmp.Or(c.QueueTTL, DefaultQueueTTL).Milliseconds(), 1), kindArgs[c.Kind])...)
	rec := r.rec
	switch {
	case err != nil:
	case r.code == replyQueued:
		rec.Queued, rec.Position = true, int(r.n)
	case r.code == replyGranted:
		err = p.replicated(key, acked)
	case r.code != replyValue && r.code != replyLocked:
		rec, err = Record{}, r.unexpected("queue claim", key)
	}
	if k.prefix != "" && err == nil && !rec.Queued {
		p.unqueueShard(c.Inbox, c.Owner) // no grant will come on ch
	}
	return rec, err
}

// LeaveClaim implements Provider.
func (p *RedisProvider) LeaveClaim(ctx context.Context, key string, c Claim) error {
	err := c.Check(key)
	if err == nil {
		err = check.Inbox(c.Inbox)
	}
	k, err := p.countedKeys(ctx, key, err, true)
	if err != nil {
		return err
	}
	if k.prefix != "" {
		p.unqueueShard(c.Inbox, c.Owner)
	}
	r, _, err := p.run(ctx, "leave claim", key, claimLeaveScript, false, len(k.keys), k.args(c.Owner, skipArg, key, k.pub)...)
	if err == nil && r.code != replyDone {
		err = r.unexpected("leave claim", key)
	}
	return err
}

// RenewClaim implements Provider.
func (p *RedisProvider) RenewClaim(ctx context.Context, key, owner string, ttl time.Duration) error {
	k, err := p.countedKeys(ctx, key, check.Args(key, owner, ttl), true)
	if err != nil {
		return err
	}
	r, acked, err := p.run(ctx, "renew claim", key, claimRenewScript, true, len(k.keys), k.args(owner, ttl.Milliseconds(), key, k.pub)...)
	if err != nil {
		return err
	}
	if err := r.done("renew claim", key); err != nil {
		return err
	}
	return p.replicated(key, acked)
}

// ReleaseClaim implements Provider.
func (p *RedisProvider) ReleaseClaim(ctx context.Context, key, owner string) error {
	k, err := p.countedKeys(ctx, key, check.KeyOwner(key, owner), true)
	if err != nil {
		return err
	}
	r, _, err := p.run(ctx, "release claim", key, claimReleaseScript, false, len(k.keys), k.args(owner, skipArg, key, k.pub)...)
	if err != nil {
		return err
	}
	return r.done("release claim", key)
}

// LowerClaim implements Provider.
func (p *RedisProvider) LowerClaim(ctx context.Context, key, owner string, weight int) error {
	err := check.KeyOwner(key, owner)
	if err == nil {
		err = check.Weight(weight)
	}
	k, err := p.countedKeys(ctx, key, err, true)
	if err != nil {
		return err
	}
	r, _, err := p.run(ctx, "lower claim", key, claimLowerScript, false, len(k.keys), k.args(owner, skipArg, key, k.pub, weight)...)
	if err != nil {
		return err
	}
	return r.done("lower claim", key)
}

// InspectClaims implements Provider, in one script that writes nothing.
func (p *RedisProvider) InspectClaims(ctx context.Context, key string) (Claims, error) {
	k, err := p.countedKeys(ctx, key, check.Key(key), false)
	if err != nil {
		return Claims{}, err
	}
	res, err := p.batch.eval(ctx, claimInspectScript, 3, k.keys[0], k.keys[1], k.keys[2], skipArg)
	if err != nil {
		return Claims{}, wrap(key, err)
	}
	cs, _, err := decodeClaims(key, res)
	if err != nil || cs.Limit == 0 {
		return Claims{}, err
	}
	if p.cluster {
		// A waiter's channel may be its inbox's shard channel in this slot.
		k.prefix = "{" + slotTag(slotOf(k.keys[0].(string))) + "}"
	}
	for i := range cs.Queue {
		cs.Queue[i].Inbox = strings.TrimPrefix(cs.Queue[i].Inbox, k.prefix)
	}
	return cs, nil
}

// decodeClaims decodes the reply of claiminspect.lua: the claims (with the
// waiters' channels as their Inbox) and the queue's length.
func decodeClaims(key string, res any) (Claims, int, error) {
	bad := fmt.Errorf("lock: inspect claims %q: unexpected reply %v", key, res)
	a, _ := res.([]any)
	if len(a) != 5 {
		return Claims{}, 0, bad
	}
	var cs Claims
	kind, _ := a[4].(string)
	cs.Kind = Kind(kind)
	switch l := a[0].(type) {
	case int64:
		if l != 0 {
			return Claims{}, 0, bad
		}
		return Claims{}, 0, nil // and no kind
	case string:
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > MaxLimit {
			return Claims{}, 0, &RecordError{Key: key, Value: l}
		}
		cs.Limit = n
	default:
		return Claims{}, 0, bad
	}
	hs, _ := a[1].([]any)
	qlen, ok := a[3].(int64)
	if len(hs)%3 != 0 || !ok {
		return Claims{}, 0, bad
	}
	for i := 0; i < len(hs); i += 3 {
		o, _ := hs[i].(string)
		v, _ := hs[i+1].(string)
		pttl, _ := hs[i+2].(int64)
		w, token, since, err := parseClaim(key, v)
		if err != nil {
			return Claims{}, 0, err
		}
		cs.Holders = append(cs.Holders, Record{Owner: o, Token: token, Since: since, TTL: max(time.Duration(pttl)*time.Millisecond, time.Millisecond)})
		cs.Weights = append(cs.Weights, w)
	}
	// In the order they were granted: tokens increase with every grant.
	order := make([]int, len(cs.Holders))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(i, j int) int { return compareTokens(cs.Holders[i].Token, cs.Holders[j].Token) })
	holders, weights := make([]Record, len(order)), make([]int, len(order))
	for i, j := range order {
		holders[i], weights[i] = cs.Holders[j], cs.Weights[j]
	}
	cs.Holders, cs.Weights = holders, weights
	q, _ := a[2].([]any)
	for _, e := range q {
		s, _ := e.(string)
		c, ok := parseClaimEntry(s)
		if !ok {
			return Claims{}, 0, &RecordError{Key: key, Value: s}
		}
		c.Limit, c.Kind = cs.Limit, cs.Kind
		cs.Queue = append(cs.Queue, c)
	}
	return cs, int(qlen), nil
}

func compareTokens(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// parseClaimEntry decodes a queue entry "owner weight ttl channel
// deadline" (claimEntry, with the deadline the script adds), the channel
// as the Claim's Inbox.
func parseClaimEntry(e string) (Claim, bool) {
	f := strings.Split(e, " ")
	if len(f) != 5 {
		return Claim{}, false
	}
	w, err := strconv.Atoi(f[1])
	ms, err2 := strconv.ParseInt(f[2], 10, 64)
	if err != nil || err2 != nil || f[0] == "" || f[3] == "" {
		return Claim{}, false
	}
	return Claim{Owner: f[0], Weight: w, TTL: time.Duration(ms) * time.Millisecond, Inbox: f[3]}, true
}

// listedClaims turns the reply of claiminspect.lua, run by List with 'n',
// into List's Record of a counted name: ok is false when the name holds
// nothing, and lock true when its key held no hash (a lock's record whose
// key ends with ":c", which List inspects as a lock).
func listedClaims(key string, res any) (rec Record, ok, lock bool, err error) {
	if a, _ := res.([]any); len(a) == 1 {
		return Record{}, false, true, nil
	}
	cs, qlen, err := decodeClaims(key, res)
	if err != nil || cs.Limit == 0 {
		return Record{}, false, false, err
	}
	rec = Record{Limit: cs.Limit, Waiters: qlen, Kind: cs.Kind}
	for i, h := range cs.Holders {
		rec.Used += cs.Weights[i]
		rec.TTL = max(rec.TTL, h.TTL)
	}
	return rec, true, false, nil
}

// countedName returns the counted name whose claims Redis stores under k,
// a key that ends with claimsSuffix, when k is one that countedKeys makes.
func countedName(k string) (string, bool) {
	rk, ok := strings.CutSuffix(k, claimsSuffix)
	if !ok {
		return "", false
	}
	key := keyOfRecord(rk)
	r, err := recordKey(key)
	return key, err == nil && r == rk
}
