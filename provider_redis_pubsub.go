package lock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/seed05627090/lock/check"
	"github.com/seed05627090/lock/redisdriver"
)

// The Redis provider's pub/sub: Listen (a Client's inbox, where grants
// arrive), Watch and Notify (an election's watch channel), and the reader
// of one subscription, which follows its channel when the connection
// breaks or the Cluster moves the channel's slot. A Listen on a Cluster
// with sharded pub/sub subscribes per slot instead (see
// provider_redis_shard.go).

// Listen implements Provider, on a pub/sub connection of its own with one
// channel, inbox. It returns once Redis has confirmed the subscription, so
// that every grant published afterwards reaches deliver. A connection that
// breaks (an error, or no answer to a PING after 3 s of silence) is closed
// and the inbox subscribed anew on a new one (see subscription.follow);
// grants published meanwhile are lost: once Redis has confirmed the new
// subscription, a Notice without Key is delivered, so that the waiters look
// again.
//
// On a Cluster with sharded pub/sub, Listen subscribes to the inbox's
// shard channel of a slot when a waiter queues there, and unsubscribes it
// 3 s after that slot's last waiter (docs/redis.md).
func (p *RedisProvider) Listen(ctx context.Context, inbox string, deliver func(Notice)) (func(), error) {
	// On a Cluster with sharded pub/sub (see ShardedPubSub), Listen subscribes
	// to nothing itself, and nothing is published on the inbox channel: each
	// Queue of a waiter with this inbox, through this provider, first
	// subscribes the Listen to the inbox's shard channel in the slot of the
	// waiter's lock (SSUBSCRIBE on that slot's primary, over the Listen's one
	// connection to that node), and waits for Redis's confirmation, so that no
	// grant sent to it is lost. The channel is unsubscribed 3 seconds after the
	// last waiter queued with it through this provider was delivered its
	// grant, left (Leave), or was found not queued by its Queue (the lock was
	// its own, or ended); a connection that carries no channel is closed. A
	// Queue that meets its channel being unsubscribed waits for that, and
	// subscribes anew. (A waiter queued through another provider value with
	// this inbox is not heard, and is skipped: the lock Client queues and
	// listens through one.) deliver is called by one connection at a time. A
	// connection that breaks is closed with its channels, and a subscription
	// that Redis ended because its slot moved to another node is forgotten:
	// when a waiter needed one, a Notice without Key is delivered, and the
	// waiters' looks subscribe again where the slot lives (after a MOVED, once
	// the Cluster's slots are loaded again). stop closes every subscription of
	// the Listen.
	if err := p.ready(check.Inbox(inbox)); err != nil {
		return nil, err
	}
	if deliver == nil {
		return nil, invalidf("nil deliver function")
	}
	sharded, err := p.sharded(ctx)
	if err != nil {
		return nil, fmt.Errorf("lock: listen on %s: %w", inbox, err)
	}
	var confirm *confirmer
	if p.waits {
		confirm = p.newConfirmer(ctx, deliver)
		deliver = confirm.grant
	}
	var stop func()
	if sharded {
		stop = p.listenShards(inbox, deliver).stop
	} else if stop, err = p.subscribe(ctx, inbox, false, parseGrant, deliver); err != nil {
		if confirm != nil {
			confirm.stop()
		}
		return nil, fmt.Errorf("lock: listen on %s: %w", inbox, err)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			stop()
			if confirm != nil {
				confirm.stop()
			}
		})
	}, nil
}

// parseGrant decodes a message of serve or tellall in scripts/record.lua:
// "value ttl\nkey", or "\nkey" for a grace period; or of serve in
// scripts/claim.lua, a claim granted: "owner,token,since ttl weight\nkey".
func parseGrant(s string) (Notice, bool) {
	head, key, ok := strings.Cut(s, "\n")
	if !ok || key == "" {
		return Notice{}, false
	}
	if head == "" {
		return Notice{Key: key}, true
	}
	v, ttl, _ := strings.Cut(head, " ")
	ttl, weight, claim := strings.Cut(ttl, " ")
	rec, err := parseRecord(key, v)
	ms, terr := strconv.ParseInt(ttl, 10, 64)
	if err != nil || terr != nil || rec.GracePeriod {
		return Notice{}, false
	}
	g := Notice{Key: key, Owner: rec.Owner, Token: rec.Token, TTL: time.Duration(ms) * time.Millisecond}
	if claim {
		w, err := strconv.Atoi(weight)
		if err != nil || w < 1 {
			return Notice{}, false
		}
		g.Weight = w
		return g, true
	}
	if checkVersion(key, rec) != nil {
		// Handed on by a process of an earlier version: the waiter's next
		// look finds the lock its own and reports ErrIncompatible.
		return Notice{Key: key}, true
	}
	return g, true
}

// Watch implements Provider, on a pub/sub connection of its own with one
// channel in the slot of key's record (see [RedisKeys]): the record key
// followed by ":w", subscribed with SSUBSCRIBE on a Cluster with sharded
// pub/sub, with SUBSCRIBE otherwise. It returns once Redis has confirmed
// the subscription. Its connection is watched as a Listen's is (a PING
// after 3 s of silence); when it breaks, or Redis ends the subscription
// because the Cluster moved the slot to another node, the Watch subscribes
// the channel anew where the slot lives now, on a new connection (after a
// MOVED, once the Cluster's slots are loaded again, as a Listen does: a few
// tries within about 1.5 s), and delivers a Notice without Key once Redis
// has confirmed it (what was published meanwhile is lost). While the tries
// fail (the node unreachable), it tries again after a pause, up to 30 s,
// until stopped; [Client.Observe] reads at its poll interval meanwhile.
func (p *RedisProvider) Watch(ctx context.Context, key string, deliver func(Notice)) (func(), error) {
	if err := p.ready(check.Key(key)); err != nil {
		return nil, err
	}
	if deliver == nil {
		return nil, invalidf("nil deliver function")
	}
	ch, sharded, err := p.watchChannel(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("lock: watch %s: %w", key, err)
	}
	stop, err := p.subscribe(ctx, ch, sharded, func(s string) (Notice, bool) { return parseWatch(key, s) }, deliver)
	if err != nil {
		return nil, fmt.Errorf("lock: watch %s: %w", key, err)
	}
	return stop, nil
}

// Notify implements Provider: one PUBLISH (SPUBLISH on a Cluster with
// sharded pub/sub) on key's watch channel (see Watch), of "" for a Notice
// without Owner, or "<token> <ttl ms> <owner>".
func (p *RedisProvider) Notify(ctx context.Context, key string, n Notice) error {
	if err := p.ready(check.Key(key)); err != nil {
		return err
	}
	ch, sharded, err := p.watchChannel(ctx, key)
	if err != nil {
		return err
	}
	msg := ""
	if n.Owner != "" {
		msg = strconv.FormatUint(n.Token, 10) + " " + strconv.FormatInt(n.TTL.Milliseconds(), 10) + " " + n.Owner
	}
	cmd := &redisdriver.Command{Args: []any{"publish", ch, msg}, Key: 1, Keys: 1}
	if sharded {
		cmd.Args[0] = "spublish"
	}
	if err := await(ctx, func() { p.driver.Exec(ctx, []*redisdriver.Command{cmd}) }, nil); err != nil {
		return err
	}
	return cmd.Err
}

// watchChannel returns the channel of key's Watches, and whether it is a
// shard channel.
func (p *RedisProvider) watchChannel(ctx context.Context, key string) (string, bool, error) {
	rk, err := recordKey(key)
	if err != nil {
		return "", false, err
	}
	sharded, err := p.sharded(ctx)
	return rk + ":w", sharded, err
}

// parseWatch reads a message of key's watch channel (see Notify).
func parseWatch(key, s string) (Notice, bool) {
	if s == "" {
		return Notice{Key: key}, true
	}
	token, rest, _ := strings.Cut(s, " ")
	ms, owner, _ := strings.Cut(rest, " ")
	t, err := strconv.ParseUint(token, 10, 64)
	d, derr := strconv.ParseInt(ms, 10, 64)
	if err != nil || derr != nil || owner == "" {
		return Notice{}, false
	}
	return Notice{Key: key, Owner: owner, Token: t, TTL: time.Duration(d) * time.Millisecond}, true
}

// subscribe subscribes to ch, with SSUBSCRIBE when sharded (a shard
// channel) and SUBSCRIBE otherwise, on a pub/sub connection of its own to
// the primary of ch's slot (the one server of a client that is not a
// Cluster's), and waits for Redis to confirm it, as long as ctx lets it
// (see await: a subscription confirmed after that is closed). It then
// calls deliver, on a goroutine of its own, with each message that parse
// reads (see subscription). stop closes the subscription and waits for the
// goroutine.
func (p *RedisProvider) subscribe(ctx context.Context, ch string, sharded bool, parse func(string) (Notice, bool), deliver func(Notice)) (func(), error) {
	s := &subscription{driver: p.driver, channel: ch, sharded: sharded, parse: parse, deliver: deliver, done: make(chan struct{})}
	s.ctx, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	var oerr error // the open's own: read once await returned nil
	if aerr := await(ctx, func() { oerr = s.open(ctx) }, s.abandon); aerr != nil {
		return nil, aerr
	}
	if err := oerr; err != nil {
		s.cancel()
		return nil, err
	}
	go s.run()
	return s.stop, nil
}

// subscription reads one channel's subscription on a goroutine of its own
// (run). A connection that breaks (an error; no answer to a PING after
// subPing of silence) and a subscription that Redis ends (an unsubscribe
// from the server: the slot of a shard channel moved; stop sends none) are
// closed, and the channel subscribed anew where its slot lives now, on a
// new connection (follow).
type subscription struct {
	driver  redisdriver.Driver
	channel string
	sharded bool // SSUBSCRIBE, not SUBSCRIBE
	parse   func(string) (Notice, bool)
	deliver func(Notice)
	ctx     context.Context // ends with stop
	cancel  context.CancelFunc
	done    chan struct{} // closed when run returns
	once    sync.Once

	mu sync.Mutex
	ps redisdriver.PubSub // the one read now, or being subscribed
}

// subPing is how long a subscription's connection may be silent before it
// is sent a PING; one that has answered nothing after as long again is
// taken for broken.
const subPing = 3 * time.Second

// run reads s.ps until stop closes it, and the one follow subscribes each
// time the one read is closed.
func (s *subscription) run() {
	defer close(s.done)
	s.mu.Lock()
	ps := s.ps
	s.mu.Unlock()
	for ps != nil && s.read(ps) {
		ps = s.follow()
	}
}

// read delivers what arrives on ps. A break (an error; no answer to a PING
// after subPing of silence, or to one that has failed) and an unsubscribe
// from Redis both close ps and return true, for follow to subscribe anew;
// stop returns false.
func (s *subscription) read(ps redisdriver.PubSub) bool {
	asked := false
	for {
		m, err := ps.Receive(s.ctx, subPing)
		switch {
		case s.ctx.Err() != nil:
			return false
		case err != nil && isTimeout(err) && !asked:
			asked = true
			if ps.Ping(s.ctx) == nil {
				continue
			}
			fallthrough
		case err != nil:
			_ = ps.Close()
			return true
		}
		asked = false
		switch m.Kind {
		case "sunsubscribe", "unsubscribe":
			_ = ps.Close()
			return true
		case "message":
			if g, ok := s.parse(m.Payload); ok {
				s.deliver(g)
			}
		}
	}
}

// isTimeout reports whether err says that nothing arrived in time (see
// [redisdriver.PubSub.Receive]).
func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// follow subscribes s.channel anew (open), on a new connection, where its
// slot lives now. Once Redis has confirmed the subscription, it delivers a
// Notice without Key (what was published meanwhile is lost) and returns
// the new connection. When the tries fail (the node unreachable for a
// while), it tries again after a pause, from followPause doubling up to
// followMaxPause, until stop; it returns nil when stop was called.
func (s *subscription) follow() redisdriver.PubSub {
	pause := followPause
	for {
		if s.open(s.ctx) == nil {
			s.deliver(Notice{})
			s.mu.Lock()
			defer s.mu.Unlock()
			return s.ps
		}
		select {
		case <-s.ctx.Done():
			return nil
		case <-time.After(pause):
		}
		pause = min(2*pause, followMaxPause)
	}
}

// The pauses between follow's rounds of tries, and how long a try waits
// for Redis to confirm its subscription (a node that stalls after the
// connection is made fails the try, rather than hold follow).
const (
	followPause    = 100 * time.Millisecond
	followMaxPause = 30 * time.Second
	followConfirm  = 5 * time.Second
)

// open is one round of tries to subscribe s.channel on a new connection to
// the primary of its slot, tried again after a MOVED (afterMoved), on ctx.
// Each new connection becomes s.ps unless stop has begun (s.ctx ended: stop
// ends it before it reads s.ps), so that stop closes whatever a try may be
// waiting on; one that fails is closed.
func (s *subscription) open(ctx context.Context) error {
	return afterMoved(ctx, s.driver, func() error {
		node, err := s.driver.PrimaryForKey(ctx, s.channel)
		if err != nil {
			return err
		}
		ps, err := node.PubSub(ctx)
		if err != nil {
			return err
		}
		s.mu.Lock()
		err = s.ctx.Err()
		if err == nil {
			s.ps = ps
		}
		s.mu.Unlock()
		if err == nil && s.sharded {
			err = ps.SSubscribe(ctx, s.channel)
		} else if err == nil {
			err = ps.Subscribe(ctx, s.channel)
		}
		if err == nil {
			_, err = ps.Receive(ctx, followConfirm)
		}
		if err != nil {
			_ = ps.Close()
		}
		return err
	})
}

// abandon ends a subscription whose first open its caller gave up waiting
// for, once that open has returned: it closes what the open left.
func (s *subscription) abandon() {
	s.cancel()
	s.mu.Lock()
	ps := s.ps
	s.mu.Unlock()
	if ps != nil {
		_ = ps.Close()
	}
}

// stop ends s.ctx, closes the connection that s reads, and waits for its
// goroutine.
func (s *subscription) stop() {
	s.once.Do(func() {
		s.abandon()
		<-s.done
	})
}
