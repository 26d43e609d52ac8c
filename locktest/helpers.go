package locktest

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/testenv"
)

// The test environment's helpers (internal/testenv), shared with the
// library's own tests, under the short names the suite uses.
var (
	uniqueName  = testenv.Name        // a name no other test uses
	newOwner    = testenv.NewOwner    // a new owner: 34 bytes, no comma or white space
	mustAcquire = testenv.MustAcquire // a grant of a free key, or the test fails
	holder      = testenv.Holder      // the record that holds a key
	assertTTL   = testenv.AssertTTL   // a TTL, less what a slow machine takes
)

func withoutTTL(r lock.Record) lock.Record {
	r.TTL = 0
	return r
}

// listener is a listened inbox whose grants are kept, in arrival order.
type listener struct {
	name    string
	ch      chan lock.Notice
	dropped atomic.Int32
}

// listen listens on a new inbox until the end of the test.
func listen(t *testing.T, ctx context.Context, p lock.Provider) *listener {
	t.Helper()
	return listenOn(t, ctx, p, "inbox:"+uniqueName(t))
}

func listenOn(t *testing.T, ctx context.Context, p lock.Provider, name string) *listener {
	t.Helper()
	in, stop := record(t, name, func(deliver func(lock.Notice)) (func(), error) { return p.Listen(ctx, name, deliver) })
	t.Cleanup(stop)
	return in
}

// record opens a Listen or a Watch with open, keeping what it delivers in
// a listener, and returns the listener and the stop of what it opened,
// which also checks that nothing was dropped for a full buffer.
func record(t *testing.T, name string, open func(deliver func(lock.Notice)) (func(), error)) (*listener, func()) {
	t.Helper()
	in := &listener{name: name, ch: make(chan lock.Notice, 256)}
	stop, err := open(func(g lock.Notice) {
		select {
		case in.ch <- g:
		default: // deliver must not block
			in.dropped.Add(1)
		}
	})
	require.NoError(t, err)
	return in, func() {
		stop()
		assert.Zero(t, in.dropped.Load(), "inbox %s: no grant was dropped for a full buffer", name)
	}
}

// waiter returns a new waiter with in's inbox.
func (in *listener) waiter(ttl time.Duration) lock.Wait {
	return lock.Wait{Owner: newOwner(), TTL: ttl, Inbox: in.name}
}

// next returns the first grant not read yet, waiting up to 5s for it.
func (in *listener) next(t *testing.T, msgAndArgs ...any) lock.Notice {
	t.Helper()
	select {
	case g := <-in.ch:
		return g
	case <-time.After(5 * time.Second):
		require.FailNow(t, "no grant within 5s on inbox "+in.name, msgAndArgs...)
		return lock.Notice{}
	}
}

// quiet checks that ins were sent nothing besides the grants already read:
// it queues a waiter of each inbox on a fence key and ends the fence's
// record, which tells every inbox; an inbox's messages arrive in the order
// they were sent, so any grant read before the fence's was sent before it.
func quiet(t *testing.T, ctx context.Context, p lock.Provider, ins ...*listener) {
	t.Helper()
	quietBut(t, ctx, p, nil, ins...)
}

// quietBut is quiet, but lets through the messages that allowed accepts (a
// grant that may or may not have been sent, or may not have arrived yet):
// allowed nil lets none through.
func quietBut(t *testing.T, ctx context.Context, p lock.Provider, allowed func(lock.Notice) bool, ins ...*listener) {
	t.Helper()
	fence, f := uniqueName(t)+":quiet", newOwner()
	mustAcquire(t, p, fence, f, time.Minute)
	for _, in := range ins {
		mustQueue(t, ctx, p, fence, in.waiter(time.Minute))
	}
	require.NoError(t, p.Finish(ctx, fence, f, time.Minute), "ending the fence's record")
	for _, in := range ins {
		for {
			g := in.next(t, "the fence's grace-period message reaches inbox %s", in.name)
			if g.Key == fence && g.Owner == "" {
				break
			}
			if allowed != nil && allowed(g) {
				continue
			}
			assert.Fail(t, "unexpected grant", "inbox %s was sent %+v; wanted no more grants", in.name, g)
		}
	}
	assert.NoError(t, p.Release(ctx, fence, f), "the fence's owner deletes its ended record")
}

// mustQueue queues w on the held key.
func mustQueue(t *testing.T, ctx context.Context, p lock.Provider, key string, w lock.Wait) {
	t.Helper()
	rec, err := p.Queue(ctx, key, w)
	require.NoError(t, err)
	require.True(t, rec.Queued, "%s should have been queued on held key %q, got %+v", w.Owner, key, rec)
}

// receive returns the first value sent on ch, or fails the test when none
// comes within d: msg and args say what did not happen.
func receive[T any](t *testing.T, ch <-chan T, d time.Duration, msg string, args ...any) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf(msg, args...)
		panic("unreachable") // Fatalf does not return
	}
}

// queueBehind takes a new key for a new owner and queues a waiter of in for
// it: it returns the key, the holder's record and the waiter.
func queueBehind(t *testing.T, ctx context.Context, p lock.Provider, in *listener) (string, lock.Record, lock.Wait) {
	t.Helper()
	key := uniqueName(t)
	held := mustAcquire(t, p, key, newOwner(), queueTTL)
	w := in.waiter(queueTTL)
	mustQueue(t, ctx, p, key, w)
	return key, held, w
}

// freeWithWaiter returns a key that is free with a waiter of in still
// queued for it: the key's holder's record (returned) expired. It skips the
// test when the backend's records do not expire in real time.
func (s *suite) freeWithWaiter(t *testing.T, in *listener) (string, lock.Record, lock.Wait) {
	t.Helper()
	if !s.expires(t) {
		t.Skip("needs a record that expires, with its waiter still queued")
	}
	key, held, w := queueBehind(t, s.ctx, s.p, in)
	s.expire(t, key, held.Owner)
	return key, held, w
}

// handsOver checks that in gets its grants: a waiter of in queued for a held
// key is told when the holder releases it (msg says why that matters), and
// in is told nothing else.
func handsOver(t *testing.T, ctx context.Context, p lock.Provider, in *listener, msg string) {
	t.Helper()
	key, held, w := queueBehind(t, ctx, p, in)
	require.NoError(t, p.Release(ctx, key, held.Owner))
	assert.Equal(t, w.Owner, in.next(t, msg).Owner)
	require.NoError(t, p.Release(ctx, key, w.Owner))
	quiet(t, ctx, p, in)
}

// assertFree checks that key is free by taking it with a fresh owner, which
// gets a new record, and releases it.
func assertFree(t *testing.T, ctx context.Context, p lock.Provider, key, msg string) {
	t.Helper()
	o := newOwner()
	rec, err := p.Acquire(ctx, key, o, queueTTL)
	require.NoError(t, err)
	if assert.Equal(t, o, rec.Owner, "%s: wanted the key free, found it held (%+v)", msg, rec) {
		assert.False(t, rec.GracePeriod, "%s: a new record is not in a grace period", msg)
		assert.NoError(t, p.Release(ctx, key, o))
	}
}

// expire makes owner's record under key expire now: it shortens its TTL to
// 1ms and waits until the record is gone. With a Backend.TTLGranularity,
// where each renewal of 1ms would keep the record another step, it
// renews once and watches the record with Inspect.
func (s *suite) expire(t *testing.T, key, owner string) {
	t.Helper()
	p, ctx := s.p, s.ctx
	require.NoError(t, p.Renew(ctx, key, owner, time.Millisecond))
	if g := s.b.TTLGranularity; g > 0 {
		require.Eventually(t, func() bool {
			rec, err := p.Inspect(ctx, key)
			return err == nil && rec.Owner != owner
		}, 5*time.Second+2*g, 5*time.Millisecond, "%s's record expires after a 1ms TTL (rounded up to %v)", owner, g)
		return
	}
	require.Eventually(t, func() bool {
		return errors.Is(p.Renew(ctx, key, owner, time.Millisecond), lock.ErrLost)
	}, 5*time.Second, 5*time.Millisecond, "%s's record expires after a 1ms TTL", owner)
}

// raise sets most to v if v is greater: most keeps the highest value seen
// by any goroutine.
func raise(most *atomic.Int64, v int64) {
	for m := most.Load(); v > m && !most.CompareAndSwap(m, v); m = most.Load() {
	}
}
