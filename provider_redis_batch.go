package lock

import (
	"context"
	"runtime"
	"slices"
	"sync"

	"github.com/redis/go-redis/v9"
)

// batcher sends the provider's scripts: each at once on a connection of its
// own while few round trips are under way, and otherwise, those that
// callers ask for while the server is busy, together in one pipeline as
// soon as a round trip ends. Under load, Redis then reads many scripts at a
// time instead of one per read and write (about a quarter less CPU per
// acquisition and release at 32 goroutines: see the README),
// and no caller waits for more than the round trip under way before its
// own is sent. Without concurrent callers nothing changes: each script is
// its own round trip, as go-redis would send it.
type batcher struct {
	client redis.UniversalClient
	max    int // round trips under way at most: GOMAXPROCS, at least 2

	mu       sync.Mutex
	inFlight int        // round trips under way
	queue    []*batched // scripts waiting for the next one
}

// batched is a script call waiting in a batcher's queue.
type batched struct {
	ctx   context.Context
	s     *script
	nkeys int
	args  []any
	cmd   *redis.Cmd    // its command, once sent
	done  chan struct{} // closed when cmd has its reply, or was not sent
}

func newBatcher(client redis.UniversalClient) *batcher {
	return &batcher{client: client, max: max(2, runtime.GOMAXPROCS(0))}
}

// eval runs s with nkeys keys, the first of args, and the rest of args as
// its arguments, and returns its reply.
func (b *batcher) eval(ctx context.Context, s *script, nkeys int, args ...any) (any, error) {
	b.mu.Lock()
	if b.inFlight < b.max && len(b.queue) == 0 {
		b.inFlight++
		b.mu.Unlock()
		cmd := evalOn(ctx, b.client, s, nkeys, args)
		b.next()
		return cmd.Result()
	}
	// A copy of args: the caller's stays on its stack in the common case.
	c := &batched{ctx: ctx, s: s, nkeys: nkeys, args: slices.Clone(args), done: make(chan struct{})}
	b.queue = append(b.queue, c)
	b.mu.Unlock()
	select {
	case <-c.done:
		if c.cmd == nil {
			return nil, ctx.Err()
		}
		return c.cmd.Result()
	case <-ctx.Done():
		// Sent or not, its reply is not awaited: the caller treats it as
		// any call whose reply was lost.
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

// send runs the scripts of q in one pipeline (go-redis splits it by node on
// a Cluster), except those whose caller gave up meanwhile, then starts the
// next round trip.
func (b *batcher) send(q []*batched) {
	defer b.next()
	var ctx context.Context
	pipe := b.client.Pipeline()
	for _, c := range q {
		if c.ctx.Err() != nil {
			continue
		}
		if ctx == nil {
			// Not cancelled with its caller: the other calls wait on it.
			// Its values (a trace) are the first caller's.
			ctx = context.WithoutCancel(c.ctx)
		}
		c.cmd = c.s.cmd(ctx, false, c.nkeys, c.args)
		_ = pipe.Process(ctx, c.cmd)
	}
	var err error
	if ctx != nil {
		_, err = pipe.Exec(ctx) // each command's error is its caller's
	}
	for _, c := range q {
		if c.cmd != nil && c.cmd.Err() == nil && c.cmd.Val() == nil {
			// The pipeline failed before this reply was read; go-redis
			// does not always say so on the command.
			c.cmd.SetErr(err)
		}
		if c.cmd != nil {
			c.cmd = orFull(ctx, b.client, c.s, c.nkeys, c.args, c.cmd)
		}
		close(c.done)
	}
}

// evalOn runs s on client: EVALSHA, and EVAL when the server does not know
// s.
func evalOn(ctx context.Context, client redis.UniversalClient, s *script, nkeys int, args []any) *redis.Cmd {
	cmd := s.cmd(ctx, false, nkeys, args)
	_ = client.Process(ctx, cmd)
	return orFull(ctx, client, s, nkeys, args, cmd)
}

// orFull returns cmd, the EVALSHA of s, or when the server did not know s
// (restarted, or SCRIPT FLUSH), s sent again in full with EVAL.
func orFull(ctx context.Context, client redis.UniversalClient, s *script, nkeys int, args []any, cmd *redis.Cmd) *redis.Cmd {
	if !noScript(cmd.Err()) {
		return cmd
	}
	cmd = s.cmd(ctx, true, nkeys, args)
	_ = client.Process(ctx, cmd)
	return cmd
}
