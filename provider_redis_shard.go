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
	"time"

	"github.com/seed05627090/lock/redisdriver"
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
// before the entry is queued, and unsubscribes it (SUNSUBSCRIBE)
// shardLinger after the last waiter queued with it was granted the lock or
// left: a Listen has at most one pub/sub connection per primary, carrying
// the channels of the slots its waiters wait in now, and none once they
// are done.

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

// shardState is a [RedisProvider]'s sharded pub/sub: whether it is used, and
// the Listens it subscribes for.
type shardState struct {
	off  bool         // ShardedPubSub(false)
	skip string       // "1": an unheard shard grant may be skipped; "0" when subscriptions may be on replicas (ReadOnly)
	mode atomic.Int32 // shardUnknown until detected
	// detect holds a token while the mode is found out: a caller waits for
	// it as long as its context lets it (a mutex would hold it past its
	// deadline, while another finds out from a server that does not answer).
	detect chan struct{}

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
	if !p.cluster {
		return false, nil
	}
	if m := p.shard.mode.Load(); m != shardUnknown {
		return m == shardOn, nil
	}
	select {
	case p.shard.detect <- struct{}{}:
	case <-ctx.Done():
		return false, fmt.Errorf("lock: find out whether the Cluster has sharded pub/sub: %w", ctx.Err())
	}
	defer func() { <-p.shard.detect }()
	if m := p.shard.mode.Load(); m != shardUnknown {
		return m == shardOn, nil
	}
	if p.shard.off {
		p.shard.mode.Store(shardOff)
		return false, nil
	}
	var n shardCount
	var perr error
	if err := await(ctx, func() { perr = eachPrimary(ctx, p.driver, n.ask) }, nil); err != nil {
		return false, fmt.Errorf("lock: find out whether the Cluster has sharded pub/sub: %w", err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.answered == 0 {
		if n.err == nil {
			n.err = perr
		}
		if n.err == nil {
			n.err = errors.New("no primary answered")
		}
		return false, fmt.Errorf("lock: find out whether the Cluster has sharded pub/sub: %w", n.err)
	}
	if n.without > 0 {
		p.shard.mode.Store(shardOff)
		return false, nil
	}
	p.shard.mode.Store(shardOn)
	return true, nil
}

// shardCount is what the primaries answered sharded: how many answered, how
// many of them without SPUBLISH, and the first error of one that did not.
type shardCount struct {
	mu                sync.Mutex
	answered, without int
	err               error
}

// ask asks node, a primary, whether it knows SPUBLISH (COMMAND INFO), and
// counts its answer.
func (n *shardCount) ask(ctx context.Context, node redisdriver.Node) error {
	cmd := &redisdriver.Command{Args: []any{"command", "info", "spublish"}}
	node.Exec(ctx, []*redisdriver.Command{cmd})
	res, isArray := cmd.Reply.([]any)
	var rerr *redisdriver.Error
	n.mu.Lock()
	defer n.mu.Unlock()
	switch {
	case cmd.Err == nil && isArray:
		n.answered++
		if len(res) == 0 || res[0] == nil {
			n.without++ // before Redis 7.0
		}
	case errors.As(cmd.Err, &rerr):
		n.answered++
		n.without++ // COMMAND refused
	case n.err == nil && cmd.Err != nil:
		n.err = cmd.Err
	case n.err == nil:
		n.err = fmt.Errorf("unexpected reply to COMMAND INFO %v", cmd.Reply)
	}
	return nil
}

// eachPrimary calls fn with each primary of d at once, and returns once
// every call has: the first error of Primaries, or of fn.
func eachPrimary(ctx context.Context, d redisdriver.Driver, fn func(ctx context.Context, node redisdriver.Node) error) error {
	nodes, err := d.Primaries(ctx)
	if err != nil {
		return err
	}
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, node := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = fn(ctx, node)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// publishing returns the scripts' publish argument for the lock whose
// record key is record, and the prefix that makes an inbox that lock's shard
// channel ("" when grants are not sharded).
func (p *RedisProvider) publishing(ctx context.Context, record string) (arg any, prefix string, err error) {
	if !p.cluster {
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

// shardLinger is how long a shard channel stays subscribed once no waiter
// queued with it is left, so that a slot waited in again and again is not
// subscribed anew for each wait.
const shardLinger = 3 * time.Second

// queueShard makes sure that every Listen of this provider on inbox is
// subscribed to ch, a shard channel of the inbox, and that Redis has
// confirmed it, before owner is queued with ch: no grant sent to ch is then
// lost. Each Listen keeps ch while owner may still be granted the lock on
// it (see unqueueShard). A subscription that fails is not an error (the
// waiter, nobody hearing its grant, is skipped, and looks again at its next
// poll, as with a Listen that failed); only ctx ending is.
func (p *RedisProvider) queueShard(ctx context.Context, inbox, ch, owner string) error {
	p.shard.mu.Lock()
	ls := slices.Clone(p.shard.listeners[inbox])
	p.shard.mu.Unlock()
	// ensure may dial a node, and find the slots again, whatever ctx
	// says: await bounds it.
	var err error
	if aerr := await(ctx, func() {
		for _, l := range ls {
			if l.ensure(ctx, ch, owner) != nil && ctx.Err() != nil {
				err = ctx.Err()
				return
			}
		}
	}, nil); aerr != nil {
		return aerr
	}
	return err
}

// unqueueShard tells the Listens on inbox that owner will not be granted a
// lock on the channel it was queued with: it left, or its Queue found the
// lock its own or the key ended. (A grant delivered to owner tells them
// too.) A channel that no owner needs is unsubscribed after shardLinger.
func (p *RedisProvider) unqueueShard(inbox, owner string) {
	p.shard.mu.Lock()
	defer p.shard.mu.Unlock()
	for _, l := range p.shard.listeners[inbox] {
		l.forget(owner)
	}
}

// shardListener is a Listen on a Cluster with sharded pub/sub: the shard
// channels its inbox's waiters are queued with, and at most one pub/sub
// connection per primary, which carries the channels of the slots that
// node serves (one SSUBSCRIBE each: a command may only name channels of
// one slot). Each connection has a goroutine that reads it and one that
// pings it and closes it.
//
// A connection that breaks is not resubscribed (go-redis would send one
// SSUBSCRIBE of all its channels, which Redis refuses for channels of
// several slots: CROSSSLOT): it is closed with its channels instead, and
// the waiters look again, which subscribes them anew.
type shardListener struct {
	p       *RedisProvider
	inbox   string
	deliver func(Notice)
	dmu     sync.Mutex // held while deliver runs: one call at a time

	mu      sync.Mutex
	conns   map[string]*shardConn // open connections, by node address
	chans   map[string]*shardChan // by channel; none in shardGone
	owners  map[string]*shardChan // the channel each owner was last queued with
	stopped bool
	wg      sync.WaitGroup // each connection's reader and pinger
}

// shardConn is one pub/sub connection of a shardListener to a primary.
type shardConn struct {
	addr   string
	ps     redisdriver.PubSub
	chans  int           // channels on it, not in shardGone
	lost   bool          // it broke with a channel that waiters need: they look again
	shut   bool          // closed: no longer in conns
	closed chan struct{} // closed when shut; its pinger then closes ps
	heard  atomic.Bool   // something arrived since the pinger last looked
}

// shardChan is one shard channel of a shardListener, on one connection.
// Its state changes in move only.
type shardChan struct {
	name   string
	conn   *shardConn
	state  shardChanState
	owners int           // owners in listener.owners that were queued with it
	idle   int           // how many times owners fell to 0: the linger timer's generation
	timer  *time.Timer   // the linger, once owners fell to 0
	err    error         // why it failed, once ready is closed in shardGone
	ready  chan struct{} // closed when it leaves shardSubscribing
	gone   chan struct{} // closed when it enters shardGone
}

// shardChanState is where a shard channel's subscription stands:
//
//	subscribing --ssubscribe confirmed-->  subscribed
//	            --MOVED, connection broken, Listen stopped-->  gone (ready closed with err)
//	subscribed  --no owner for shardLinger (SUNSUBSCRIBE sent)-->  unsubscribing
//	            --sunsubscribe from Redis (its slot moved), connection broken-->  gone
//	unsubscribing  --sunsubscribe confirmed, connection broken-->  gone
//
// A Queue for a channel that is unsubscribing waits until it is gone, and
// subscribes it anew: the SUNSUBSCRIBE must not end the new subscription.
type shardChanState int

const (
	shardSubscribing   shardChanState = iota // SSUBSCRIBE sent, not confirmed yet
	shardSubscribed                          // confirmed: grants sent to it are heard
	shardUnsubscribing                       // SUNSUBSCRIBE sent, not confirmed yet
	shardGone                                // no longer subscribed, or never was
)

var errListenStopped = errors.New("listen stopped")

// listenShards registers a Listen on inbox with sharded pub/sub. It
// subscribes to nothing yet: Queue subscribes it to the channels its
// waiters need.
func (p *RedisProvider) listenShards(inbox string, deliver func(Notice)) *shardListener {
	l := &shardListener{p: p, inbox: inbox, deliver: deliver,
		conns: make(map[string]*shardConn), chans: make(map[string]*shardChan), owners: make(map[string]*shardChan)}
	p.shard.mu.Lock()
	if p.shard.listeners == nil {
		p.shard.listeners = make(map[string][]*shardListener)
	}
	p.shard.listeners[inbox] = append(p.shard.listeners[inbox], l)
	p.shard.mu.Unlock()
	return l
}

// ensure subscribes l to ch unless it is, counts owner as queued with it,
// and waits until Redis confirmed the subscription. A subscription that
// Redis refused because the slot moved (MOVED: the cluster state was old)
// is tried again (afterMoved). A stopped listener subscribes to nothing.
func (l *shardListener) ensure(ctx context.Context, ch, owner string) error {
	return afterMoved(ctx, l.p.driver, func() error {
		c, err := l.join(ctx, ch, owner)
		if c == nil || err != nil {
			return err
		}
		select {
		case <-c.ready:
		case <-ctx.Done():
			return ctx.Err()
		}
		return c.err
	})
}

// afterMoved calls try, and calls it again while it fails with MOVED (a
// slot that moved: the driver's map of slots was old), after the map is
// loaded again (Primaries), up to movedTries times in all: the node that
// the map is loaded from may not have heard of the move yet either (nodes
// learn of it one after another), so from the third try on each waits
// twice as long as the one before, from movedPause. It returns try's last
// error, or ctx's.
func afterMoved(ctx context.Context, d redisdriver.Driver, try func() error) error {
	pause := movedPause
	for n := 1; ; n++ {
		err := try()
		if !isMoved(err) || n == movedTries {
			return err
		}
		if n > 1 {
			select {
			case <-time.After(pause):
				pause *= 2
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		_, _ = d.Primaries(ctx) // loads the slots again
	}
}

// movedTries and movedPause bound afterMoved's tries: 7 tries, the last
// five after pauses of 50 ms to 800 ms (1.55 s in all).
const (
	movedTries = 7
	movedPause = 50 * time.Millisecond
)

// join returns ch's subscription with owner counted in it: the one there
// is, or a new one (SSUBSCRIBE sent) when there is none. When the one there
// is being unsubscribed, it waits until that is done, and subscribes anew.
// It returns nil when l stopped.
func (l *shardListener) join(ctx context.Context, ch, owner string) (*shardChan, error) {
	var node redisdriver.Node
	for {
		if node == nil {
			var err error
			if node, err = l.p.driver.PrimaryForKey(ctx, ch); err != nil {
				return nil, err
			}
		}
		l.mu.Lock()
		if l.stopped {
			l.mu.Unlock()
			return nil, nil
		}
		c := l.chans[ch]
		if c != nil && c.state == shardUnsubscribing {
			l.mu.Unlock()
			select {
			case <-c.gone:
				node = nil // its slot may have moved meanwhile
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if c == nil && l.conns[node.Addr()] == nil {
			// A new connection: made without l.mu held (a driver may dial
			// at once), then tried again.
			l.mu.Unlock()
			if err := l.connect(ctx, node); err != nil {
				return nil, err
			}
			continue
		}
		fresh := c == nil
		if fresh {
			c = l.open(ch, node.Addr())
		}
		l.own(owner, c)
		l.mu.Unlock()
		if fresh {
			// Not the caller's ctx: the connection may be dialled now, and
			// it serves other waiters too.
			if err := c.conn.ps.SSubscribe(context.WithoutCancel(ctx), ch); err != nil {
				l.refused(c.conn, err) // a MOVED, or a broken connection
			}
		}
		return c, nil
	}
}

// connect opens a pub/sub connection to node, unless l has one already,
// with a goroutine that reads it and one that pings it and closes it.
func (l *shardListener) connect(ctx context.Context, node redisdriver.Node) error {
	// Not the caller's ctx: the connection serves other waiters too.
	ps, err := node.PubSub(context.WithoutCancel(ctx))
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped || l.conns[node.Addr()] != nil {
		_ = ps.Close()
		return nil
	}
	conn := &shardConn{addr: node.Addr(), ps: ps, closed: make(chan struct{})}
	l.conns[conn.addr] = conn
	l.wg.Add(2)
	go l.read(conn)
	go l.ping(conn)
	return nil
}

// open adds ch, to be subscribed on the connection to addr; l.mu is held.
func (l *shardListener) open(ch, addr string) *shardChan {
	conn := l.conns[addr]
	conn.chans++
	c := &shardChan{name: ch, conn: conn, ready: make(chan struct{}), gone: make(chan struct{})}
	l.chans[ch] = c
	return c
}

// own counts owner as queued with c; l.mu is held.
func (l *shardListener) own(owner string, c *shardChan) {
	old := l.owners[owner]
	if old == c {
		return
	}
	if old != nil {
		l.disown(old)
	}
	l.owners[owner] = c
	c.owners++
}

// forget stops counting owner as queued with its channel.
func (l *shardListener) forget(owner string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c := l.owners[owner]; c != nil {
		delete(l.owners, owner)
		l.disown(c)
	}
}

// disown takes one owner off c, and starts its linger when none is left;
// l.mu is held.
func (l *shardListener) disown(c *shardChan) {
	if c.owners--; c.owners == 0 && c.state == shardSubscribed {
		l.linger(c)
	}
}

// linger unsubscribes c after shardLinger, unless an owner joined it
// meanwhile; l.mu is held.
func (l *shardListener) linger(c *shardChan) {
	if c.timer != nil {
		c.timer.Stop()
	}
	c.idle++
	idle := c.idle
	c.timer = time.AfterFunc(shardLinger, func() { l.expire(c, idle) })
}

// expire sends the SUNSUBSCRIBE of c, if it has had no owner since its
// linger started.
func (l *shardListener) expire(c *shardChan, idle int) {
	l.mu.Lock()
	if l.stopped || c.state != shardSubscribed || c.owners > 0 || c.idle != idle {
		l.mu.Unlock()
		return
	}
	l.move(c, shardUnsubscribing, nil)
	l.mu.Unlock()
	if err := c.conn.ps.SUnsubscribe(context.Background(), c.name); err != nil {
		l.broken(c.conn, err)
	}
}

// move moves c to state to; l.mu is held. It is the one place where a
// channel's state changes: a channel gone leaves chans, and a connection
// without channels is closed.
func (l *shardListener) move(c *shardChan, to shardChanState, err error) {
	from := c.state
	if from == shardGone {
		return
	}
	c.state = to
	switch to {
	case shardSubscribed:
		close(c.ready)
		if c.owners == 0 {
			l.linger(c)
		}
	case shardGone:
		if from == shardSubscribing {
			c.err = err
			close(c.ready)
		}
		close(c.gone)
		if c.timer != nil {
			c.timer.Stop()
		}
		if l.chans[c.name] == c {
			delete(l.chans, c.name)
		}
		if c.conn.chans--; c.conn.chans == 0 {
			l.shut(c.conn)
		}
	}
}

// shut closes conn (its pinger closes the PubSub); l.mu is held.
func (l *shardListener) shut(conn *shardConn) {
	if conn.shut {
		return
	}
	conn.shut = true
	if l.conns[conn.addr] == conn {
		delete(l.conns, conn.addr)
	}
	close(conn.closed)
}

// broken closes conn after an error, and its channels with it; when one of
// them was confirmed and needed, its reader tells the waiters to look
// again.
func (l *shardListener) broken(conn *shardConn, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if conn.shut {
		return
	}
	for _, c := range l.chans {
		if c.conn == conn {
			conn.lost = conn.lost || c.state == shardSubscribed && c.owners > 0
			l.move(c, shardGone, fmt.Errorf("lock: subscribe to %s: %w", c.name, err))
		}
	}
	l.shut(conn)
}

// read passes on the grants that arrive on conn, and Redis's answers to
// the SSUBSCRIBE and SUNSUBSCRIBE sent on it, until it is closed. When
// Redis ends a needed subscription itself (its slot moved to another
// node: Redis unsubscribes the slot's shard channels), and when the
// connection broke with needed subscriptions, every waiter is told to look
// again (a Notice without Key): those queued with the channel subscribe
// anew where the slot lives.
func (l *shardListener) read(conn *shardConn) {
	defer l.wg.Done()
	for {
		m, err := conn.ps.Receive(context.Background(), 0)
		conn.heard.Store(true)
		if err != nil {
			if l.refused(conn, err) {
				continue
			}
			break
		}
		switch m.Kind {
		case "ssubscribe", "sunsubscribe":
			if l.confirmed(conn, m) {
				l.send(Notice{})
			}
		case "message":
			if g, ok := parseGrant(m.Payload); ok {
				if g.Owner != "" {
					l.forget(g.Owner)
				}
				l.send(g)
			}
		}
	}
	l.mu.Lock()
	lost := conn.lost && !l.stopped
	l.mu.Unlock()
	if lost {
		l.send(Notice{})
	}
}

// confirmed applies an ssubscribe or sunsubscribe that arrived on conn, and
// reports whether it ended a subscription that waiters need. A late answer
// for a channel that is no longer on conn, or was subscribed anew since,
// changes nothing: Redis answers a connection's commands in order.
func (l *shardListener) confirmed(conn *shardConn, m redisdriver.Message) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.chans[m.Channel]
	if c == nil || c.conn != conn {
		return false
	}
	switch {
	case m.Kind == "ssubscribe" && c.state == shardSubscribing:
		l.move(c, shardSubscribed, nil)
	case m.Kind == "sunsubscribe" && c.state == shardUnsubscribing:
		l.move(c, shardGone, nil)
	case m.Kind == "sunsubscribe" && c.state == shardSubscribed:
		needed := c.owners > 0
		l.move(c, shardGone, nil)
		return needed
	}
	return false
}

// refused handles an error read on conn, and reports whether reading goes
// on. MOVED answers an SSUBSCRIBE or SUNSUBSCRIBE of a slot that the node
// no longer serves: the channels of that slot being subscribed or
// unsubscribed on conn are gone. Any other error closes conn.
func (l *shardListener) refused(conn *shardConn, err error) bool {
	if slot, ok := movedSlot(err); ok {
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, c := range l.chans {
			if c.conn == conn && c.state != shardSubscribed && slotOf(c.name) == slot {
				l.move(c, shardGone, fmt.Errorf("lock: subscribe to %s: %w", c.name, err))
			}
		}
		return true
	}
	l.broken(conn, err)
	return false
}

// movedSlot returns the slot of a MOVED error.
func movedSlot(err error) (int, bool) {
	var rerr *redisdriver.Error
	if !errors.As(err, &rerr) {
		return 0, false
	}
	f := strings.Fields(rerr.Msg)
	if len(f) != 3 || f[0] != "MOVED" {
		return 0, false
	}
	slot, err := strconv.Atoi(f[1])
	return slot, err == nil && slot >= 0 && slot < clusterSlots
}

// isMoved reports whether err is, or wraps, a MOVED error.
func isMoved(err error) bool {
	_, ok := movedSlot(err)
	return ok
}

// ping sends conn a PING when nothing arrived on it for subPing, and
// closes it when the PING fails or nothing arrived for subPing more; it
// closes the PubSub once conn is shut.
func (l *shardListener) ping(conn *shardConn) {
	defer l.wg.Done()
	defer conn.ps.Close()
	t := time.NewTicker(subPing)
	defer t.Stop()
	asked := false
	for {
		select {
		case <-conn.closed:
			return
		case <-t.C:
		}
		switch {
		case conn.heard.Swap(false):
			asked = false
		case asked:
			l.broken(conn, errors.New("no answer to PING"))
		default:
			if err := conn.ps.Ping(context.Background()); err != nil {
				l.broken(conn, err)
			}
			asked = true
		}
	}
}

func (l *shardListener) send(g Notice) {
	l.dmu.Lock()
	defer l.dmu.Unlock()
	l.deliver(g)
}

// stop unregisters l, closes its subscriptions and waits for their readers:
// deliver is not running when it returns, and is not called again. A Queue
// waiting for a subscription meanwhile goes on without it.
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
	for _, c := range l.chans {
		l.move(c, shardGone, errListenStopped)
	}
	for _, conn := range l.conns {
		l.shut(conn) // one that join made but did not use yet
	}
	clear(l.owners)
	l.mu.Unlock()
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
