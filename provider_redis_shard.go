package lock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Sharded pub/sub on a Redis Cluster (Redis 7.0 or later).
//
// PUBLISH on a Cluster is sent to every node over the cluster bus, so a
// grant costs each node a message. SPUBLISH is handled by the shard that
// serves the channel's slot only. So, on a Cluster whose primaries all know
// SPUBLISH, a waiter's queue entry names a shard channel in the slot of its
// lock: "{t}" + inbox, t the slot's tag (slotTag), and the scripts SPUBLISH
// its grant there (the publish function of scripts/record.lua; a script may
// only publish to shard channels of its own slot). The provider subscribes
// the inbox's Listen to that channel (SSUBSCRIBE, on the slot's primary)
// before the entry is queued: one pub/sub connection per slot that the
// inbox's waiters have waited in, kept until the Listen stops.

// ShardedPubSub turns sharded pub/sub on (the default) or off for a
// provider over a *redis.ClusterClient. On, and when every primary of the
// Cluster knows SPUBLISH (Redis 7.0 or later, Valkey), a grant is sent with
// SPUBLISH on a shard channel in the slot of its lock, and only that slot's
// shard handles it; off, or on older servers, it is sent with PUBLISH, which
// Redis Cluster forwards to every node. Off is for setups that do not pass
// SSUBSCRIBE (some proxies), and to compare the two. It changes nothing on
// other clients, which always PUBLISH.
func ShardedPubSub(on bool) RedisOption {
	return func(p *RedisProvider) { p.shard.off = !on }
}

// shardState is a RedisProvider's sharded pub/sub: whether it is used, and
// the Listens it subscribes for.
type shardState struct {
	off  bool         // ShardedPubSub(false)
	skip string       // "1": an unheard shard grant may be skipped; "0" when subscriptions may be on replicas (ReadOnly)
	mode atomic.Int32 // shardUnknown until detected
	// detect is held while the mode is found out.
	detect sync.Mutex

	mu        sync.Mutex
	listeners map[string][]*shardListener // by inbox
}

const (
	shardUnknown int32 = iota
	shardOff           // PUBLISH: not a Cluster, turned off, or a primary without SPUBLISH
	shardOn            // SPUBLISH on shard channels
)

// Script arguments that say how serve and tellall publish (see publish in
// scripts/record.lua), boxed once.
var (
	publishExact     any = "1" // one server: PUBLISH, and its count of receivers is exact
	publishBroadcast any = "0" // a Cluster without sharded pub/sub: PUBLISH, never skip
)

// sharded reports whether grants are sent with SPUBLISH: on a Cluster
// client, unless turned off, when every primary knows SPUBLISH. It asks
// each primary (COMMAND INFO SPUBLISH) the first time, and keeps the answer.
// A primary that does not answer (unreachable) is left out when others
// answer; an error is returned, and nothing kept, when none answers. A
// primary that refuses COMMAND counts as one without SPUBLISH.
func (p *RedisProvider) sharded(ctx context.Context) (bool, error) {
	cc, ok := p.client.(*redis.ClusterClient)
	if !ok {
		return false, nil
	}
	if m := p.shard.mode.Load(); m != shardUnknown {
		return m == shardOn, nil
	}
	p.shard.detect.Lock()
	defer p.shard.detect.Unlock()
	if m := p.shard.mode.Load(); m != shardUnknown {
		return m == shardOn, nil
	}
	if p.shard.off {
		p.shard.mode.Store(shardOff)
		return false, nil
	}
	var answered, without atomic.Int32
	var mu sync.Mutex
	var firstErr error
	_ = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		res, err := c.Do(ctx, "command", "info", "spublish").Slice()
		var rerr redis.Error
		switch {
		case err == nil:
			answered.Add(1)
			if len(res) == 0 || res[0] == nil {
				without.Add(1) // before Redis 7.0
			}
		case errors.As(err, &rerr):
			answered.Add(1)
			without.Add(1) // COMMAND refused
		default:
			mu.Lock()
			if firstErr == nil {
				firstErr = err
			}
			mu.Unlock()
		}
		return nil
	})
	if answered.Load() == 0 {
		if firstErr == nil {
			firstErr = errors.New("no primary answered")
		}
		return false, fmt.Errorf("lock: find out whether the Cluster has sharded pub/sub: %w", firstErr)
	}
	if without.Load() > 0 {
		p.shard.mode.Store(shardOff)
		return false, nil
	}
	p.shard.mode.Store(shardOn)
	return true, nil
}

// publishing returns the scripts' publish argument for the lock whose
// record key is record, and the prefix that makes an inbox that lock's shard
// channel ("" when grants are not sharded).
func (p *RedisProvider) publishing(ctx context.Context, record string) (arg any, prefix string, err error) {
	if p.cluster == nil {
		return publishExact, "", nil
	}
	on, err := p.sharded(ctx)
	if err != nil || !on {
		return publishBroadcast, "", err
	}
	prefix = "{" + slotTag(slotOf(record)) + "}"
	return p.shard.skip + prefix, prefix, nil
}

// channel returns the channel of inbox in a queue entry: the inbox itself,
// or with prefix, its shard channel in one slot.
func channel(inbox, prefix string) string { return prefix + inbox }

// subscribeShard makes sure that every Listen of this provider on inbox is
// subscribed to ch, a shard channel of the inbox, and that Redis has
// confirmed it, before a waiter is queued with ch: no grant sent to ch is
// then lost. A subscription that fails is not an error (the waiter, nobody
// hearing its grant, is skipped, and looks again at its next poll, as with
// a Listen that failed); only ctx ending is.
func (p *RedisProvider) subscribeShard(ctx context.Context, inbox, ch string) error {
	p.shard.mu.Lock()
	ls := slices.Clone(p.shard.listeners[inbox])
	p.shard.mu.Unlock()
	for _, l := range ls {
		if err := l.ensure(ctx, ch); err != nil && ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return nil
}

// shardListener is a Listen on a Cluster with sharded pub/sub: the shard
// channels its inbox's waiters are queued with, one subscription (a
// redis.PubSub on the slot's primary) each, and the goroutines that read
// them.
type shardListener struct {
	p       *RedisProvider
	inbox   string
	deliver func(Grant)
	dmu     sync.Mutex // held while deliver runs: one call at a time

	mu      sync.Mutex
	subs    map[string]*shardSub // by channel
	stopped bool
	wg      sync.WaitGroup // the readers
}

// shardSub is one shard subscription: ready is closed once it is confirmed
// (ps set) or has failed (err set).
type shardSub struct {
	ready chan struct{}
	ps    *redis.PubSub
	err   error
}

var errListenStopped = errors.New("listen stopped")

// listenShards registers a Listen on inbox with sharded pub/sub. It
// subscribes to nothing yet: Queue subscribes it to the channels its
// waiters need.
func (p *RedisProvider) listenShards(inbox string, deliver func(Grant)) *shardListener {
	l := &shardListener{p: p, inbox: inbox, deliver: deliver, subs: make(map[string]*shardSub)}
	p.shard.mu.Lock()
	if p.shard.listeners == nil {
		p.shard.listeners = make(map[string][]*shardListener)
	}
	p.shard.listeners[inbox] = append(p.shard.listeners[inbox], l)
	p.shard.mu.Unlock()
	return l
}

// ensure subscribes l to ch unless it is, and waits until Redis confirmed
// it. A stopped listener subscribes to nothing.
func (l *shardListener) ensure(ctx context.Context, ch string) error {
	l.mu.Lock()
	if l.stopped {
		l.mu.Unlock()
		return nil
	}
	s := l.subs[ch]
	if s == nil {
		s = &shardSub{ready: make(chan struct{})}
		l.subs[ch] = s
		l.mu.Unlock()
		l.open(ctx, ch, s)
	} else {
		l.mu.Unlock()
	}
	select {
	case <-s.ready:
		return s.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// open subscribes s to ch (SSUBSCRIBE on the primary of ch's slot), waits
// for Redis's confirmation and starts its reader; a failed subscription is
// forgotten, so that the next waiter tries again.
func (l *shardListener) open(ctx context.Context, ch string, s *shardSub) {
	defer close(s.ready)
	ps := l.p.cluster.SSubscribe(ctx, ch)
	_, err := ps.Receive(ctx)
	l.mu.Lock()
	if err == nil && l.stopped {
		err = errListenStopped
	}
	if err != nil {
		if l.subs[ch] == s {
			delete(l.subs, ch)
		}
		l.mu.Unlock()
		_ = ps.Close()
		s.err = fmt.Errorf("lock: subscribe to %s: %w", ch, err)
		return
	}
	s.ps = ps
	l.wg.Add(1)
	l.mu.Unlock()
	go l.read(ch, s)
}

// read passes on the grants of one subscription until it is closed. A
// confirmation after the first (the one open read) is a resubscription
// after a broken connection: grants may have been lost, and every waiter of
// the inbox looks again. A subscription the server ended (its slot moved
// to another node: Redis unsubscribes the slot's shard channels) is
// forgotten, so that the waiters' next looks subscribe again where the slot
// now lives, and every waiter looks again.
func (l *shardListener) read(ch string, s *shardSub) {
	defer l.wg.Done()
	for m := range s.ps.ChannelWithSubscriptions() {
		switch m := m.(type) {
		case *redis.Subscription:
			if m.Kind == "sunsubscribe" {
				l.mu.Lock()
				if l.subs[ch] == s {
					delete(l.subs, ch)
				}
				l.mu.Unlock()
				_ = s.ps.Close() // ends the loop
			}
			l.send(Grant{})
		case *redis.Message:
			if g, ok := parseGrant(m.Payload); ok {
				l.send(g)
			}
		}
	}
}

func (l *shardListener) send(g Grant) {
	l.dmu.Lock()
	defer l.dmu.Unlock()
	l.deliver(g)
}

// stop unregisters l, closes its subscriptions and waits for their readers:
// deliver is not running when it returns, and is not called again. A
// subscription being opened meanwhile is closed by its opener.
func (l *shardListener) stop() {
	p := l.p
	p.shard.mu.Lock()
	ls := p.shard.listeners[l.inbox]
	if i := slices.Index(ls, l); i >= 0 {
		ls = slices.Delete(ls, i, i+1)
	}
	if len(ls) == 0 {
		delete(p.shard.listeners, l.inbox)
	} else {
		p.shard.listeners[l.inbox] = ls
	}
	p.shard.mu.Unlock()

	l.mu.Lock()
	l.stopped = true
	var open []*redis.PubSub
	for _, s := range l.subs {
		if s.ps != nil {
			open = append(open, s.ps)
		}
	}
	l.subs = nil
	l.mu.Unlock()
	for _, ps := range open {
		_ = ps.Close()
	}
	l.wg.Wait()
}

// slotOf returns the Redis Cluster hash slot of key.
func slotOf(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return int(crc16(key) & (clusterSlots - 1))
}

const clusterSlots = 16384

// slotTag returns the tag of slot: the smallest decimal number that Redis
// Cluster hashes to it. "{" + slotTag(s) + "}" starts a name in slot s, and
// has no white space, whatever the lock's key holds.
func slotTag(slot int) string {
	var buf [10]byte
	return string(appendSlotTag(buf[:0], slot))
}

// appendSlotTag appends slotTag(slot) to b.
func appendSlotTag(b []byte, slot int) []byte {
	slotTagsOnce.Do(func() {
		slotTags = new([clusterSlots]uint32)
		var found [clusterSlots]bool
		var buf []byte
		for n, left := uint32(0), clusterSlots; left > 0; n++ {
			buf = strconv.AppendUint(buf[:0], uint64(n), 10)
			if s := crc16(string(buf)) & (clusterSlots - 1); !found[s] {
				found[s], slotTags[s] = true, n
				left--
			}
		}
	})
	return strconv.AppendUint(b, uint64(slotTags[slot]), 10)
}

var (
	slotTagsOnce sync.Once
	slotTags     *[clusterSlots]uint32
)

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0), the checksum
// of Redis Cluster's key slots.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc = crc<<8 ^ crc16Table[byte(crc>>8)^s[i]]
	}
	return crc
}

var crc16Table = func() (t [256]uint16) {
	for i := range t {
		crc := uint16(i) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
		t[i] = crc
	}
	return t
}()
