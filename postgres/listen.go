package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/check"
)

const (
	// maxChannelLen is the longest channel name PostgreSQL takes, in bytes.
	maxChannelLen = 63
	// pingEvery is how long a Listen connection may stay silent before it
	// is checked with a ping: a connection cut without a word from the
	// network is found in about this time.
	pingEvery = 30 * time.Second
	// connectTimeout bounds one attempt to open, or check, a Listen
	// connection.
	connectTimeout = 10 * time.Second
	// The wait between attempts to reopen a Listen connection starts at
	// minBackoff and doubles up to maxBackoff.
	minBackoff = 50 * time.Millisecond
	maxBackoff = 5 * time.Second
)

// channel returns the NOTIFY channel of inbox: the inbox itself when it
// fits a channel name, otherwise a name made from its SHA-256 sum. The
// queue stores the channel, so both sides use this one function.
func channel(inbox string) string {
	if len(inbox) <= maxChannelLen {
		return inbox
	}
	sum := sha256.Sum256([]byte(inbox))
	return "lock_inbox_" + hex.EncodeToString(sum[:20])
}

// Listen implements lock.Provider. It takes a connection from the pool and
// keeps it (the pool opens another when it needs one), sets its
// application_name, and returns once LISTEN has succeeded on the inbox's
// channel, so that every grant notified afterwards reaches deliver. A
// goroutine then waits for notifications and calls deliver, one call at a
// time. When the connection fails, it opens another (backing off up to 5s
// between attempts), listens again, and delivers a Notice without Key. stop
// closes the connection and returns once the goroutine has ended. Two
// Listens may share an inbox; each gets every grant.
func (p *Provider) Listen(ctx context.Context, inbox string, deliver func(lock.Notice)) (stop func(), err error) {
	if err := checkInbox(inbox); err != nil {
		return nil, err
	}
	if deliver == nil {
		return nil, check.Invalidf("nil deliver function")
	}
	stop, err = p.listen(ctx, channel(inbox), deliver)
	if err != nil {
		return nil, fmt.Errorf("lock: postgres listen %q: %w", inbox, err)
	}
	return stop, nil
}

// Watch implements lock.Provider, as Listen does on a channel of key's
// own: "lock_watch_" and 40 hex digits of the key's SHA-256 sum.
func (p *Provider) Watch(ctx context.Context, key string, deliver func(lock.Notice)) (stop func(), err error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	if deliver == nil {
		return nil, check.Invalidf("nil deliver function")
	}
	stop, err = p.listen(ctx, watchChannel(key), deliver)
	if err != nil {
		return nil, fmt.Errorf("lock: postgres watch %q: %w", key, err)
	}
	return stop, nil
}

// Notify implements lock.Provider: one pg_notify on key's watch channel
// (see Watch), with the payload of a grant (see notice).
func (p *Provider) Notify(ctx context.Context, key string, n lock.Notice) error {
	if err := checkKey(key); err != nil {
		return err
	}
	msg := notice{Key: key}
	if n.Owner != "" {
		msg = notice{Key: key, Owner: n.Owner, Token: n.Token, TTL: max(n.TTL.Milliseconds(), 1)}
	}
	payload, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	_, err = p.pool.Exec(ctx, "SELECT pg_notify($1, $2)", watchChannel(key), string(payload))
	return err
}

// watchChannel returns the NOTIFY channel of key's Watches.
func watchChannel(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "lock_watch_" + hex.EncodeToString(sum[:20])
}

// listen listens on channel (see Listen).
func (p *Provider) listen(ctx context.Context, channel string, deliver func(lock.Notice)) (stop func(), err error) {
	l := &listener{p: p, channel: channel, deliver: deliver}
	conn, err := l.connect(ctx)
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.run(runCtx, conn)
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			<-done
		})
	}, nil
}

// listener is one Listen: its channel and where its grants go.
type listener struct {
	p       *Provider
	channel string
	deliver func(lock.Notice)
}

// connect takes a connection out of the pool and listens on it.
func (l *listener) connect(ctx context.Context) (*pgx.Conn, error) {
	pc, err := l.p.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	conn := pc.Hijack()
	_, err = conn.Exec(ctx, "SELECT set_config('application_name', $1, false)", l.p.appName)
	if err == nil {
		_, err = conn.Exec(ctx, "LISTEN "+pgx.Identifier{l.channel}.Sanitize())
	}
	if err != nil {
		closeConn(conn)
		return nil, err
	}
	return conn, nil
}

// run delivers the grants that reach the connection, and reopens it when
// it fails, until ctx ends; it closes the connection it has then.
func (l *listener) run(ctx context.Context, conn *pgx.Conn) {
	for {
		_ = l.receive(ctx, conn)
		closeConn(conn)
		if ctx.Err() != nil {
			return
		}
		if conn = l.reconnect(ctx); conn == nil {
			return
		}
		l.deliver(lock.Notice{}) // grants notified meanwhile were lost
	}
}

// receive delivers the grants that reach conn until ctx ends or conn
// fails. A connection silent for pingEvery is pinged.
func (l *listener) receive(ctx context.Context, conn *pgx.Conn) error {
	for {
		wctx, cancel := context.WithTimeout(ctx, pingEvery)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case err == nil:
			if g, ok := parseGrant(n.Payload); ok {
				l.deliver(g)
			}
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, context.DeadlineExceeded) && !conn.IsClosed():
			pctx, cancel := context.WithTimeout(ctx, connectTimeout)
			err = conn.Ping(pctx)
			cancel()
			if err != nil {
				return err
			}
		default:
			return err
		}
	}
}

// reconnect opens a listening connection again, waiting longer after each
// failed attempt; it returns nil when ctx ends first.
func (l *listener) reconnect(ctx context.Context) *pgx.Conn {
	wait := minBackoff
	for {
		actx, cancel := context.WithTimeout(ctx, connectTimeout)
		conn, err := l.connect(actx)
		cancel()
		if err == nil {
			return conn
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		wait = min(2*wait, maxBackoff)
	}
}

// closeConn closes conn, waiting a second at most for the server.
func closeConn(conn *pgx.Conn) {
	if conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}

// notice is the payload of a NOTIFY, as schema.sql writes it: a grant
// ({"k": key, "o": owner, "t": token, "ttl": ms}, with "w": weight for a
// claim), or, with only "k", a grace period.
type notice struct {
	Key    string `json:"k"`
	Owner  string `json:"o"`
	Token  uint64 `json:"t"`
	TTL    int64  `json:"ttl"`
	Weight int    `json:"w"`
}

// parseGrant decodes a payload; ok is false for one that is not ours.
func parseGrant(payload string) (g lock.Notice, ok bool) {
	var n notice
	if err := json.Unmarshal([]byte(payload), &n); err != nil || n.Key == "" {
		return lock.Notice{}, false
	}
	if n.Owner == "" {
		return lock.Notice{Key: n.Key}, true
	}
	if n.Token == 0 || n.TTL <= 0 || n.Weight < 0 {
		return lock.Notice{}, false
	}
	return lock.Notice{Key: n.Key, Owner: n.Owner, Token: n.Token, TTL: time.Duration(n.TTL) * time.Millisecond, Weight: n.Weight}, true
}
