package lock

import (
	"context"
	"runtime"
	"sync"
	"time"

	"github.com/seed05627090/lock/redisdriver"
)

// batcher sends the provider's scripts: each at once on a connection of its
// own while few round trips are under way, and otherwise, those that
// callers ask for while the server is busy, together in one pipeline as
// soon as a round trip ends. Under load, Redis then reads many scripts at a
// time instead of one per read and write (about a quarter less CPU per
// acquisition and release at 32 goroutines: see docs/performance.md),
// and no caller waits for more than the round trip under way before its
// own is sent. Without concurrent callers nothing changes: each script is
// its own round trip.
type batcher struct {
	driver redisdriver.Driver
	max    int // round trips under way at most: GOMAXPROCS, at least 2

	mu       sync.Mutex
	inFlight int        // round trips under way
	queue    []*batched // scripts waiting for the next one
}

// batched is a script call, sent alone or waiting in a batcher's queue.
// Once its caller has read its reply, it is used again (batchedPool): a
// call costs no allocation of its own.
type batched struct {
	ctx  context.Context
	call call
	sent bool          // set once its call was sent
	done chan struct{} // receives once its call has its reply, or was not sent
	one  [1]*batched   // the round trip of a call sent alone: itself
}

var batchedPool = sync.Pool{New: func() any { return &batched{done: make(chan struct{}, 1)} }}

// newBatched returns a call of s with nkeys keys, the first of args, and
// the rest of args as its arguments, on ctx.
func newBatched(ctx context.Context, s *script, nkeys int, args []any) *batched {
	c := batchedPool.Get().(*batched)
	c.ctx, c.call.s, c.one[0] = ctx, s, c
	c.call.init(nkeys, args)
	return c
}

// reply returns c's reply, and puts c back for another call: neither its
// caller nor a round trip uses it afterwards.
func (c *batched) reply() (any, error) {
	res, err := c.call.cmd.Reply, c.call.cmd.Err
	*c = batched{done: c.done}
	batchedPool.Put(c)
	return res, err
}

func newBatcher(d redisdriver.Driver) *batcher {
	return &batcher{driver: d, max: max(2, runtime.GOMAXPROCS(0))}
}

// eval runs s with nkeys keys, the first of args, and the rest of args as
// its arguments, and returns its reply; or ctx's error once ctx ends, sent
// or not, replied or not: a driver may read the socket until its own read
// timeout, whatever the context says (go-redis does, unless
// ContextTimeoutEnabled is set), and a caller must not wait past its
// deadline for a server that does not answer. So a call whose context can
// end is sent by a goroutine (the one of its round trip, see send), and
// only a call whose context never ends is sent on the caller's own.
func (b *batcher) eval(ctx context.Context, s *script, nkeys int, args ...any) (any, error) {
	c := newBatched(ctx, s, nkeys, args)
	b.mu.Lock()
	start := b.inFlight < b.max && len(b.queue) == 0
	if start {
		b.inFlight++
	} else {
		b.queue = append(b.queue, c)
	}
	b.mu.Unlock()
	switch {
	case start && ctx.Done() == nil:
		b.send(c.one[:]) // done is ready below
	case start:
		go b.send(c.one[:])
	}
	select {
	case <-c.done:
		if !c.sent {
			return nil, ctx.Err()
		}
		return c.reply()
	case <-ctx.Done():
		// Sent or not, its reply is not awaited: the caller treats it as
		// any call whose reply was lost (and c is left to the round trip).
		return nil, ctx.Err()
	}
}

// next ends a round trip: the scripts queued meanwhile go in the next one,
// sent by a goroutine of its own.
func (b *batcher) next() {
	b.mu.Lock()
	q := b.queue
	b.queue = nil
	if len(q) == 0 {
		b.inFlight--
	}
	b.mu.Unlock()
	if len(q) > 0 {
		go b.send(q)
	}
}

// send runs the scripts of q in one round trip (see sendScripts), except those
// whose caller gave up meanwhile, then starts the next round trip. A round
// trip of one call runs on its caller's context; one of several on a
// context with the values of its first caller's and the latest deadline of
// its callers' (none when one of them has none): no caller waits for it
// longer, and a client that honours deadlines (ContextTimeoutEnabled) gives
// up on a server that does not answer once every caller has.
func (b *batcher) send(q []*batched) {
	defer b.next()
	var one [1]*call
	calls := one[:0]
	if len(q) > 1 {
		calls = make([]*call, 0, len(q))
	}
	var first context.Context
	var last time.Time
	endless := false
	for _, c := range q {
		if c.ctx.Err() != nil {
			continue
		}
		if first == nil {
			first = c.ctx
		}
		if d, ok := c.ctx.Deadline(); !ok {
			endless = true
		} else if d.After(last) {
			last = d
		}
		c.sent = true
		calls = append(calls, &c.call)
	}
	switch {
	case len(calls) == 1:
		sendScripts(first, b.driver, b.driver, calls, nil)
	case len(calls) > 1:
		ctx := context.WithoutCancel(first)
		if !endless {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, last)
			defer cancel()
		}
		sendScripts(ctx, b.driver, b.driver, calls, nil)
	}
	for _, c := range q {
		c.done <- struct{}{} // its caller may take c back at once: c is not read again
	}
}
