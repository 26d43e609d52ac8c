package rueidis

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/seed05627090/lock/redisdriver"
)

// pubsub is a redisdriver.PubSub: a dedicated rueidis connection whose pub/sub
// hooks queue what arrives, for Receive to return in order. The hooks run
// on rueidis's reading goroutine and never wait: the queue has no bound
// (it holds what the provider has not read yet: a few grants, at most a
// confirmation per channel).
type pubsub struct {
	conn   rueidis.DedicatedClient
	broken <-chan error // the hooks' end: an error, or closed, when the connection ends

	mu     sync.Mutex
	queue  []redisdriver.Message
	err    error         // once the connection ended or was closed: what Receive returns
	ready  chan struct{} // holds a token while the queue is not empty
	closed chan struct{}
	once   sync.Once
}

// errClosed is what Receive returns once the connection was closed, or
// ended without an error of its own.
var errClosed = errors.New("lock: pub/sub connection closed")

// newPubSub opens a dedicated connection of c and sets its hooks.
func newPubSub(c rueidis.Client) (*pubsub, error) {
	conn, _ := c.Dedicate() // the release function is conn.Close's too
	p := &pubsub{conn: conn, ready: make(chan struct{}, 1), closed: make(chan struct{})}
	p.broken = conn.SetPubSubHooks(rueidis.PubSubHooks{
		OnMessage: func(m rueidis.PubSubMessage) {
			p.push(redisdriver.Message{Kind: "message", Channel: m.Channel, Payload: m.Message})
		},
		OnSubscription: func(s rueidis.PubSubSubscription) {
			p.push(redisdriver.Message{Kind: s.Kind, Channel: s.Channel, Count: int(s.Count)})
		},
	})
	select {
	case err := <-p.broken: // the connection could not be made
		conn.Close()
		if err == nil {
			err = errClosed
		}
		return nil, err
	default:
		return p, nil
	}
}

// push queues m, and wakes Receive.
func (p *pubsub) push(m redisdriver.Message) {
	p.mu.Lock()
	p.queue = append(p.queue, m)
	p.mu.Unlock()
	select {
	case p.ready <- struct{}{}:
	default:
	}
}

func (p *pubsub) Subscribe(ctx context.Context, channel string) error {
	return p.do(ctx, p.conn.B().Subscribe().Channel(channel).Build(), "")
}

func (p *pubsub) SSubscribe(ctx context.Context, channel string) error {
	return p.do(ctx, p.conn.B().Ssubscribe().Channel(channel).Build(), "")
}

func (p *pubsub) SUnsubscribe(ctx context.Context, channel string) error {
	return p.do(ctx, p.conn.B().Sunsubscribe().Channel(channel).Build(), "")
}

// Ping implements redisdriver.PubSub: the answer (PONG, as a reply, in RESP3)
// is queued for Receive as a message of kind "pong".
func (p *pubsub) Ping(ctx context.Context) error {
	return p.do(ctx, p.conn.B().Ping().Build(), "pong")
}

// do sends cmd on the connection; rueidis returns once the server has
// answered it (a subscription's confirmation arrives through the hooks
// first). An error reply (MOVED) is returned as a *redisdriver.Error; when
// kind is not empty, the answer is queued for Receive as a message of that
// kind.
func (p *pubsub) do(ctx context.Context, cmd rueidis.Completed, kind string) error {
	r := p.conn.Do(ctx, cmd)
	if err := r.NonRedisError(); err != nil {
		return err
	}
	msg, _ := r.ToMessage()
	if rerr, ok := value(&msg).(*redisdriver.Error); ok {
		return rerr
	}
	if kind != "" {
		p.push(redisdriver.Message{Kind: kind})
	}
	return nil
}

// Receive implements redisdriver.PubSub: what was queued before the
// connection ended is returned first.
func (p *pubsub) Receive(ctx context.Context, timeout time.Duration) (redisdriver.Message, error) {
	var after <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		after = t.C
	}
	for {
		p.mu.Lock()
		if len(p.queue) > 0 {
			m := p.queue[0]
			p.queue = p.queue[1:]
			p.mu.Unlock()
			return m, nil
		}
		err := p.err
		p.mu.Unlock()
		if err != nil {
			return redisdriver.Message{}, err
		}
		select {
		case <-p.ready:
		case err, ok := <-p.broken:
			if !ok || err == nil {
				err = errClosed
			}
			p.end(err)
		case <-p.closed:
			p.end(errClosed)
		case <-ctx.Done():
			return redisdriver.Message{}, ctx.Err()
		case <-after:
			return redisdriver.Message{}, context.DeadlineExceeded
		}
	}
}

// end records err as the connection's end; the first one stays.
func (p *pubsub) end(err error) {
	p.mu.Lock()
	if p.err == nil {
		p.err = err
	}
	p.mu.Unlock()
}

// Close implements redisdriver.PubSub.
func (p *pubsub) Close() error {
	p.once.Do(func() {
		close(p.closed)
		p.conn.Close()
	})
	return nil
}
