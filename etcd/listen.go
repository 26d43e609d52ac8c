package etcd

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/check"
)

const (
	// The wait between two watches of an inbox, after one ended, starts at
	// minBackoff and doubles up to maxBackoff.
	minBackoff = 50 * time.Millisecond
	maxBackoff = 2 * time.Second
	// stopTimeout bounds the delete of a Listen's key when it stops.
	stopTimeout = 2 * time.Second
)

// errStalled ends a watch that answered no progress request within a
// progress interval.
var errStalled = errors.New("watch answered no progress request")

// Listen implements lock.Provider. It lists the inbox as listened to (a
// key on the session lease, which Release reads to pass over waiters
// nobody listens for), then watches the inbox's messages from the revision
// of that write on, so that every grant sent after Listen returns reaches
// deliver, in the order sent; one goroutine calls deliver, one call at a
// time. The watch requires a leader (a member cut off from the others
// ends it), and is asked for its progress every progress interval (see
// WithProgressInterval): a watch that answers neither is given up and
// opened again from the last revision it delivered, and deliver is called
// with a Notice without Key, so that the waiters look again at once rather
// than at their next poll. The same happens when the session is lost.
// stop deletes the inbox's key and returns once the goroutine has ended.
// Two Listens may share an inbox; each gets every grant.
func (p *Provider) Listen(ctx context.Context, inbox string, deliver func(lock.Notice)) (stop func(), err error) {
	if err := check.Inbox(inbox); err != nil {
		return nil, err
	}
	if deliver == nil {
		return nil, check.Invalidf("nil deliver function")
	}
	l := &listener{
		p:        p,
		inbox:    inbox,
		mailbox:  p.mailPrefix(inbox),
		key:      p.listenPrefix(inbox) + uuid.NewString(),
		deliver:  deliver,
		relisten: make(chan struct{}, 1),
		done:     make(chan struct{}),
		moved:    make(chan struct{}),
	}
	p.sess.add(l)
	rev, err := l.register(ctx, false)
	if err != nil {
		p.sess.remove(l)
		return nil, fmt.Errorf("lock: etcd listen %q: %w", inbox, err)
	}
	runCtx, cancel := context.WithCancel(p.cli.Ctx()) // ends with the client too
	l.reached(rev + 1)                                // a message sent before is not this Listen's
	go l.run(runCtx, rev+1)
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			<-l.done
			p.sess.remove(l)
			dctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
			defer cancel()
			_, _ = p.cli.Delete(dctx, l.key)
		})
	}, nil
}

// Watch implements lock.Provider: a Listen of an inbox of key's own, "w/"
// and 40 hex digits of the key's SHA-256 sum, where Notify writes.
func (p *Provider) Watch(ctx context.Context, key string, deliver func(lock.Notice)) (stop func(), err error) {
	if err := check.Key(key); err != nil {
		return nil, err
	}
	return p.Listen(ctx, watchInbox(key), deliver)
}

// Notify implements lock.Provider: it writes the message "n <lease> <key>"
// of key's watch inbox (see Watch), on the provider's session lease, with
// "<token> <ttl ms> <owner>" as its value, or nothing for a Notice without
// Owner. Each provider has one such message per key, written again by each
// Notify, gone with the session.
func (p *Provider) Notify(ctx context.Context, key string, n lock.Notice) error {
	if err := check.Key(key); err != nil {
		return err
	}
	id, err := p.sess.lease(ctx)
	if err != nil {
		return err
	}
	val := ""
	if n.Owner != "" {
		val = strconv.FormatUint(n.Token, 10) + " " + strconv.FormatInt(n.TTL.Milliseconds(), 10) + " " + n.Owner
	}
	rctx, cancel := p.request(ctx)
	defer cancel()
	name := p.mailPrefix(watchInbox(key)) + "n " + strconv.FormatInt(int64(id), 16) + " " + key
	if _, err := p.cli.Put(rctx, name, val, clientv3.WithLease(id)); err != nil {
		p.sess.check(ctx)
		return fail(err)
	}
	return nil
}

// watchInbox returns the inbox of key's Watches.
func watchInbox(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "w/" + hex.EncodeToString(sum[:20])
}

// listener is one Listen.
type listener struct {
	p        *Provider
	inbox    string
	mailbox  string // the prefix of the inbox's messages
	key      string // the key that says the inbox is listened to
	deliver  func(lock.Notice)
	relisten chan struct{} // the session was lost: list the inbox again
	done     chan struct{} // closed when run returns

	mu    sync.Mutex
	seen  int64         // every message of the inbox below this revision was delivered; 0 until Listen listed the inbox
	moved chan struct{} // closed, and made again, when seen grows
}

// register writes the listener's key on the session lease and returns the
// revision of the write. With retry, it tries until it succeeds, ctx ends
// or the provider is closed, waiting longer after each failure.
func (l *listener) register(ctx context.Context, retry bool) (int64, error) {
	wait := minBackoff
	for {
		id, err := l.p.sess.lease(ctx)
		if err == nil {
			var resp *clientv3.PutResponse
			rctx, cancel := l.p.request(ctx)
			resp, err = l.p.cli.Put(rctx, l.key, "", clientv3.WithLease(id))
			cancel()
			if err == nil {
				return resp.Header.Revision, nil
			}
			err = fail(err)
			l.p.sess.check(ctx) // the lease may be gone: the next try grants another
		}
		if !retry || errors.Is(err, errClosed) || !sleep(ctx, wait) {
			return 0, err
		}
		wait = min(2*wait, maxBackoff)
	}
}

// sessionLost asks run to list the inbox again.
func (l *listener) sessionLost() {
	select {
	case l.relisten <- struct{}{}:
	default:
	}
}

// run watches the inbox from revision rev until ctx ends, opening the
// watch again when it ends or stalls.
func (l *listener) run(ctx context.Context, rev int64) {
	defer close(l.done)
	wait := minBackoff
	for {
		next, err := l.watch(ctx, rev)
		if ctx.Err() != nil {
			return
		}
		if next > rev {
			wait = minBackoff // it delivered: not a failure in a row
		}
		rev = next
		if errors.Is(err, errRelisten) {
			if _, err := l.register(ctx, true); err != nil {
				return // ctx ended, or the provider closed
			}
		}
		l.deliver(lock.Notice{}) // grants may be late, entries lost: look again
		l.reached(rev)
		if !sleep(ctx, wait) {
			return
		}
		wait = min(2*wait, maxBackoff)
	}
}

var errRelisten = errors.New("session lost")

// watch delivers the inbox's messages from revision rev until the watch
// ends, stalls or the session is lost, and returns the revision to go on
// from. The watch starts a revision early and drops what it sees there
// (delivered already): the server answers a progress request only when
// its watches start at a revision it has reached, and rev is often the
// next one.
func (l *listener) watch(ctx context.Context, rev int64) (int64, error) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	ch := l.p.cli.Watch(wctx, l.mailbox, clientv3.WithPrefix(), clientv3.WithRev(max(rev-1, 1)),
		clientv3.WithFilterDelete(), clientv3.WithProgressNotify())
	tick := time.NewTicker(l.p.progress)
	defer tick.Stop()
	asked := false // a progress request is not answered yet
	for {
		select {
		case resp, ok := <-ch:
			if !ok {
				return rev, errors.New("watch closed")
			}
			if err := resp.Err(); err != nil {
				if resp.CompactRevision > rev {
					rev = resp.CompactRevision // messages were compacted away
				}
				return rev, err
			}
			asked = false
			from := rev // one transaction may send the inbox several messages: one revision
			for _, ev := range resp.Events {
				if ev.Kv.ModRevision < from {
					continue
				}
				if g, ok := l.parse(ev.Kv); ok {
					l.deliver(g)
				}
				rev = ev.Kv.ModRevision + 1
			}
			if resp.IsProgressNotify() && resp.Header.Revision >= rev {
				rev = resp.Header.Revision + 1
			}
			l.reached(rev)
		case <-tick.C:
			if asked {
				return rev, errStalled
			}
			asked = true
			_ = l.p.cli.RequestProgress(wctx)
		case <-l.relisten:
			return rev, errRelisten
		case <-ctx.Done():
			return rev, ctx.Err()
		}
	}
}

// reached notes that every message of the inbox below revision rev was
// delivered.
func (l *listener) reached(rev int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if rev > l.seen {
		l.seen = rev
		close(l.moved)
		l.moved = make(chan struct{})
	}
}

// await waits until the message at revision rev was delivered, the Listen
// stopped, or ctx ended. It does not wait for a Listen that has not listed
// the inbox yet: that Listen was not there when the message was sent.
func (l *listener) await(ctx context.Context, rev int64) {
	for {
		l.mu.Lock()
		seen, moved := l.seen, l.moved
		l.mu.Unlock()
		if seen == 0 || seen > rev {
			return
		}
		select {
		case <-moved:
		case <-l.done:
			return
		case <-ctx.Done():
			return
		}
	}
}

// deliveryWait bounds how long a reply waits for a Listen to deliver the
// message of the grant it tells (see delivered). A watch delivers within
// milliseconds, or a few hundred on a loaded machine; one that has not by
// then is stalled (its progress request will tell), and the caller, who
// looked again perhaps because no message came, is not held up for it.
const deliveryWait = 500 * time.Millisecond

// delivered waits until every Listen of inbox in this provider has
// delivered the message at revision rev, for at most deliveryWait. Queue
// calls it before it answers a caller that finds its grant in the reply:
// the watch delivers a message some time after its write, and the caller,
// answered first, could have released the lock by then, so that its inbox
// would be told of a grant nobody waits for any more.
func (p *Provider) delivered(ctx context.Context, inbox string, rev int64) {
	ctx, cancel := context.WithTimeout(ctx, deliveryWait)
	defer cancel()
	for _, l := range p.sess.listening(inbox) {
		l.await(ctx, rev)
	}
}

// parse reads a message of the inbox: "g <owner> <key>" with the TTL in
// milliseconds as its value and its revision as the token, "c <owner>
// <key>", a claim's, with "<ttl ms> <weight>" as its value,
// "e <token> <key>" for a grace period, or "n <lease> <key>", Notify's. ok is false for a key that is
// neither.
func (l *listener) parse(kv *mvccKV) (lock.Notice, bool) {
	rest, _ := strings.CutPrefix(string(kv.Key), l.mailbox)
	kind, rest, _ := strings.Cut(rest, " ")
	word, key, found := strings.Cut(rest, " ")
	if !found || key == "" {
		return lock.Notice{}, false
	}
	switch kind {
	case "g":
		ms, err := strconv.ParseInt(string(kv.Value), 10, 64)
		if err != nil || ms <= 0 {
			return lock.Notice{}, false
		}
		return lock.Notice{Key: key, Owner: word, Token: uint64(kv.ModRevision), TTL: time.Duration(ms) * time.Millisecond}, true
	case "c":
		ms, weight, _ := strings.Cut(string(kv.Value), " ")
		n, err := strconv.ParseInt(ms, 10, 64)
		w, werr := strconv.Atoi(weight)
		if err != nil || werr != nil || n <= 0 || w <= 0 {
			return lock.Notice{}, false
		}
		return lock.Notice{Key: key, Owner: word, Token: uint64(kv.ModRevision), TTL: time.Duration(n) * time.Millisecond, Weight: w}, true
	case "e":
		return lock.Notice{Key: key}, true
	case "n":
		if len(kv.Value) == 0 {
			return lock.Notice{Key: key}, true
		}
		token, rest, _ := strings.Cut(string(kv.Value), " ")
		ms, owner, _ := strings.Cut(rest, " ")
		t, err := strconv.ParseUint(token, 10, 64)
		d, derr := strconv.ParseInt(ms, 10, 64)
		if err != nil || derr != nil || owner == "" {
			return lock.Notice{}, false
		}
		return lock.Notice{Key: key, Owner: owner, Token: t, TTL: time.Duration(d) * time.Millisecond}, true
	}
	return lock.Notice{}, false
}

// sleep waits d, or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
