package etcd_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/etcd"
)

// claimsEnv is one test's provider, with its namespace and client, for
// tests that read the keys the provider left.
type claimsEnv struct {
	t   *testing.T
	ctx context.Context
	p   *etcd.Provider
	cli *clientv3.Client
	ns  string
	key string
}

func newClaimsEnv(t *testing.T) *claimsEnv {
	ns := testNamespace()
	return &claimsEnv{t: t, ctx: ctxTimeout(t, time.Minute), p: newProvider(t, ns), cli: newClient(t, endpoint(t)), ns: ns, key: uniqueName(t)}
}

// claim returns a claim of a new owner on the env's name.
func (e *claimsEnv) claim(weight, limit int) lock.Claim {
	return lock.Claim{Owner: newOwner(), Weight: weight, Limit: limit, Kind: lock.KindSemaphore, TTL: time.Minute, Inbox: "inbox:" + randomHex(8)}
}

// listen listens to c's inbox and returns the channel of its grants.
func (e *claimsEnv) listen(c lock.Claim) <-chan lock.Notice {
	ch := make(chan lock.Notice, 16)
	stop, err := e.p.Listen(e.ctx, c.Inbox, func(g lock.Notice) {
		if g.Key != "" {
			ch <- g
		}
	})
	require.NoError(e.t, err)
	e.t.Cleanup(stop)
	return ch
}

func (e *claimsEnv) acquire(c lock.Claim) lock.Record {
	rec, err := e.p.AcquireClaim(e.ctx, e.key, c)
	require.NoError(e.t, err)
	return rec
}

func (e *claimsEnv) queue(c lock.Claim) lock.Record {
	rec, err := e.p.QueueClaim(e.ctx, e.key, c)
	require.NoError(e.t, err)
	return rec
}

// holdAndQueue takes first's claim, and queues each of waiting behind it,
// in order, listening to its inbox first; it returns the channels of
// their grants (see listen), in the same order.
func (e *claimsEnv) holdAndQueue(first lock.Claim, waiting ...lock.Claim) []<-chan lock.Notice {
	e.t.Helper()
	grants := make([]<-chan lock.Notice, len(waiting))
	for i, w := range waiting {
		grants[i] = e.listen(w)
	}
	e.acquire(first)
	for _, w := range waiting {
		require.True(e.t, e.queue(w).Queued, "%s waits", w.Owner)
	}
	return grants
}

func (e *claimsEnv) inspect() lock.Claims {
	cs, err := e.p.InspectClaims(e.ctx, e.key)
	require.NoError(e.t, err)
	return cs
}

// owners returns the owners of the claims and of the queue.
func owners(cs lock.Claims) (holders, queue []string) {
	for _, r := range cs.Holders {
		holders = append(holders, r.Owner)
	}
	for _, c := range cs.Queue {
		queue = append(queue, c.Owner)
	}
	return holders, queue
}

// held checks that the name's claims are those of holders, in grant
// order, and that nobody waits; it returns the name as InspectClaims read
// it.
func (e *claimsEnv) held(holders ...string) lock.Claims {
	e.t.Helper()
	cs := e.inspect()
	got, queue := owners(cs)
	assert.Equal(e.t, holders, got, "the holders")
	assert.Empty(e.t, queue, "the queue")
	return cs
}

// keys counts the keys of the counted names left under the namespace.
func (e *claimsEnv) keys() int64 {
	n := int64(0)
	for _, prefix := range []string{"c/", "n/"} {
		resp, err := e.cli.Get(e.ctx, e.ns+prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		require.NoError(e.t, err)
		n += resp.Count
	}
	return n
}

func awaitGrant(t *testing.T, ch <-chan lock.Notice) lock.Notice {
	t.Helper()
	select {
	case g := <-ch:
		return g
	case <-time.After(10 * time.Second):
		t.Fatal("no grant within 10s")
		return lock.Notice{}
	}
}

// Claims are taken while their weights fit the limit; an owner that holds
// one gets it again, with its token; the Record tells what the name holds.
func TestClaimFit(t *testing.T) {
	e := newClaimsEnv(t)
	a, b, c := e.claim(2, 3), e.claim(2, 3), e.claim(1, 3)
	ra := e.acquire(a)
	assert.Equal(t, a.Owner, ra.Owner)
	assert.NotZero(t, ra.Token)
	assert.Equal(t, 3, ra.Limit)
	assert.Equal(t, 2, ra.Used)

	rb := e.acquire(b)
	assert.Equal(t, a.Owner, rb.Owner, "b does not fit: the record shows the claim that expires first")
	assert.Equal(t, ra.Token, rb.Token)
	assert.Equal(t, 2, rb.Used)

	rc := e.acquire(c)
	assert.Equal(t, c.Owner, rc.Owner)
	assert.Greater(t, rc.Token, ra.Token)
	assert.Equal(t, 3, rc.Used)

	again := e.acquire(a)
	assert.Equal(t, a.Owner, again.Owner)
	assert.Equal(t, ra.Token, again.Token, "an owner's claim is returned with its token")
	assert.Equal(t, 3, again.Used)

	cs := e.inspect()
	holders, queue := owners(cs)
	assert.Equal(t, 3, cs.Limit)
	assert.ElementsMatch(t, []string{a.Owner, c.Owner}, holders)
	assert.Empty(t, queue)
	assert.Equal(t, 3, cs.Weights[0]+cs.Weights[1])
}

// A call with another limit changes nothing, and is told the stored one.
func TestClaimLimitMismatch(t *testing.T) {
	e := newClaimsEnv(t)
	a := e.claim(1, 3)
	e.acquire(a)
	b := e.claim(1, 4)
	rec := e.acquire(b)
	assert.Equal(t, 3, rec.Limit)
	assert.Equal(t, a.Owner, rec.Owner)
	rec = e.queue(b)
	assert.Equal(t, 3, rec.Limit)
	assert.False(t, rec.Queued)
	e.held(a.Owner)
}

// The queue is served in arrival order: a head that does not fit holds
// back those behind it, even those that would fit, and AcquireClaim does
// not pass a queue either. A release grants the head, telling its inbox
// with the claim's weight.
func TestClaimQueueFIFO(t *testing.T) {
	e := newClaimsEnv(t)
	a, b, c := e.claim(2, 3), e.claim(2, 3), e.claim(1, 3)
	gb, gc := e.listen(b), e.listen(c)
	e.acquire(a)
	rb := e.queue(b)
	assert.True(t, rb.Queued)
	assert.Equal(t, 0, rb.Position)
	assert.Equal(t, a.Owner, rb.Owner)
	rc := e.queue(c)
	assert.True(t, rc.Queued, "c fits, but b is first")
	assert.Equal(t, 1, rc.Position)
	rc = e.queue(c)
	assert.Equal(t, 1, rc.Position, "a look again keeps its place")
	d := e.claim(1, 3)
	assert.Equal(t, a.Owner, e.acquire(d).Owner, "AcquireClaim does not pass the queue")

	require.NoError(t, e.p.ReleaseClaim(e.ctx, e.key, a.Owner))
	g := awaitGrant(t, gb)
	assert.Equal(t, lock.Notice{Key: e.key, Owner: b.Owner, Token: g.Token, TTL: b.TTL, Weight: 2}, g)
	g = awaitGrant(t, gc)
	assert.Equal(t, c.Owner, g.Owner, "c fits beside b")
	assert.Equal(t, 1, g.Weight)

	cs := e.held(b.Owner, c.Owner)
	assert.Equal(t, g.Token, cs.Holders[0].Token, "granted together: one transaction's revision")

	rec := e.queue(b)
	assert.Equal(t, b.Owner, rec.Owner, "b finds its claim")
	assert.False(t, rec.Queued)
	assert.Equal(t, g.Token, rec.Token)
}

// LowerClaim frees weight, and the waiters that fit now are granted.
func TestClaimLowerServes(t *testing.T) {
	e := newClaimsEnv(t)
	w, r1, r2 := e.claim(3, 3), e.claim(1, 3), e.claim(1, 3)
	g1, g2 := e.listen(r1), e.listen(r2)
	rw := e.acquire(w)
	assert.True(t, e.queue(r1).Queued)
	assert.True(t, e.queue(r2).Queued)
	require.NoError(t, e.p.LowerClaim(e.ctx, e.key, w.Owner, 1))
	assert.Equal(t, r1.Owner, awaitGrant(t, g1).Owner)
	assert.Equal(t, r2.Owner, awaitGrant(t, g2).Owner)
	cs := e.held(w.Owner, r1.Owner, r2.Owner)
	assert.Equal(t, []int{1, 1, 1}, cs.Weights)
	assert.Equal(t, rw.Token, cs.Holders[0].Token, "a lowered claim keeps its token")
	require.NoError(t, e.p.LowerClaim(e.ctx, e.key, w.Owner, 3))
	assert.Equal(t, 1, e.inspect().Weights[0], "never raised")
}

// A waiter that leaves lets those behind it in; one granted meanwhile
// releases its claim.
func TestClaimLeaveServes(t *testing.T) {
	e := newClaimsEnv(t)
	a, b, c := e.claim(2, 3), e.claim(2, 3), e.claim(1, 3)
	grants := e.holdAndQueue(a, b, c)
	require.NoError(t, e.p.LeaveClaim(e.ctx, e.key, b))
	assert.Equal(t, c.Owner, awaitGrant(t, grants[1]).Owner)
	require.NoError(t, e.p.LeaveClaim(e.ctx, e.key, b), "absent: not an error")

	require.NoError(t, e.p.LeaveClaim(e.ctx, e.key, c), "c was granted: its claim is released")
	e.held(a.Owner)
}

// A waiter whose inbox nobody listens to is passed over.
func TestClaimSkipsUnlistened(t *testing.T) {
	e := newClaimsEnv(t)
	a, deaf, c := e.claim(1, 1), e.claim(1, 1), e.claim(1, 1)
	gc := e.listen(c)
	e.acquire(a)
	e.queue(deaf)
	e.queue(c)
	require.NoError(t, e.p.ReleaseClaim(e.ctx, e.key, a.Owner))
	assert.Equal(t, c.Owner, awaitGrant(t, gc).Owner)
	e.held(c.Owner)
}

// A claim's token comes from the same counter as the lock's of its key;
// a key is one kind at a time (issue 38): a claim is refused while the
// key's lock is held, a lock while the name holds a claim.
func TestClaimTokensAboveLockTokens(t *testing.T) {
	e := newClaimsEnv(t)
	l, err := e.p.Acquire(e.ctx, e.key, newOwner(), time.Minute)
	require.NoError(t, err)
	c := e.claim(1, 2)
	refused, err := e.p.AcquireClaim(e.ctx, e.key, c)
	require.NoError(t, err)
	assert.Equal(t, lock.KindLock, refused.Kind, "refused for the lock: %+v", refused)
	assert.Equal(t, l.Owner, refused.Owner)
	require.NoError(t, e.p.Release(e.ctx, e.key, l.Owner))
	rc := e.acquire(c)
	assert.Greater(t, rc.Token, l.Token)
	l2, err := e.p.Acquire(e.ctx, e.key+"x", newOwner(), time.Minute)
	require.NoError(t, err)
	rec, err := e.p.Acquire(e.ctx, e.key, newOwner(), time.Minute)
	require.NoError(t, err)
	assert.Equal(t, lock.Record{Kind: lock.KindSemaphore}, rec, "refused for the counted name")
	require.NoError(t, e.p.ReleaseClaim(e.ctx, e.key, c.Owner))
	l3, err := e.p.Acquire(e.ctx, e.key, newOwner(), time.Minute)
	require.NoError(t, err)
	assert.Greater(t, l3.Token, rc.Token)
	assert.Greater(t, l3.Token, l2.Token)
	assert.Equal(t, lock.Claims{}, e.inspect())
}

// A claim and a waiter stored before kinds (values without one) are read
// as a name without a kind: it takes a claim of either kind, which stores
// that kind.
func TestClaimStoredWithoutKind(t *testing.T) {
	e := newClaimsEnv(t)
	prefix := e.ns + "c/" + strconv.Itoa(len(e.key)) + "/" + e.key + "/"
	ms := strconv.FormatInt(time.Now().UnixMilli(), 10)
	_, err := e.cli.Put(e.ctx, prefix+"h/old", "1 1 3 "+ms+" 60000 "+ms+" 0")
	require.NoError(t, err)
	_, err = e.cli.Put(e.ctx, prefix+"w/waiting", "3 3 60000 "+strconv.FormatInt(time.Now().Add(time.Minute).UnixMilli(), 10)+" inbox:old")
	require.NoError(t, err)
	cs := e.inspect()
	require.Len(t, cs.Holders, 1)
	require.Len(t, cs.Queue, 1)
	assert.Equal(t, 3, cs.Limit)
	assert.Empty(t, cs.Kind, "stored without a kind")
	c := e.claim(1, 3)
	c.Kind = lock.KindRWMutex
	rec, err := e.p.QueueClaim(e.ctx, e.key, c)
	require.NoError(t, err)
	assert.True(t, rec.Queued, "behind the waiter: %+v", rec)
	assert.Equal(t, lock.KindRWMutex, rec.Kind)
	cs = e.inspect()
	assert.Equal(t, lock.KindRWMutex, cs.Kind, "the kind of its first waiter that has one")
	assert.Equal(t, lock.KindRWMutex, cs.Queue[1].Kind)
	_, err = e.cli.Delete(e.ctx, prefix, clientv3.WithPrefix())
	require.NoError(t, err)
}

// Renewing, releasing or lowering a claim one does not hold is a loss, and
// changes nothing.
func TestClaimStrangerLost(t *testing.T) {
	e := newClaimsEnv(t)
	a := e.claim(1, 2)
	e.acquire(a)
	var lost *lock.LostError
	require.ErrorAs(t, e.p.RenewClaim(e.ctx, e.key, "stranger", time.Minute), &lost)
	assert.Equal(t, e.key, lost.Key)
	require.ErrorAs(t, e.p.ReleaseClaim(e.ctx, e.key, "stranger"), &lost)
	require.ErrorAs(t, e.p.LowerClaim(e.ctx, e.key, "stranger", 1), &lost)
	require.ErrorAs(t, e.p.ReleaseClaim(e.ctx, e.key+"none", a.Owner), &lost)
	require.NoError(t, e.p.RenewClaim(e.ctx, e.key, a.Owner, time.Minute))
	require.NoError(t, e.p.ReleaseClaim(e.ctx, e.key, a.Owner))
	require.ErrorAs(t, e.p.ReleaseClaim(e.ctx, e.key, a.Owner), &lost, "released already")
}

// Bad input fails before anything is sent.
func TestClaimInvalid(t *testing.T) {
	e := newClaimsEnv(t)
	c := e.claim(2, 1)
	_, err := e.p.AcquireClaim(e.ctx, e.key, c)
	assert.ErrorIs(t, err, lock.ErrInvalidArgument, "weight above the limit")
	c = e.claim(1, 1)
	c.Inbox = ""
	_, err = e.p.QueueClaim(e.ctx, e.key, c)
	assert.ErrorIs(t, err, lock.ErrInvalidArgument, "no inbox")
	assert.ErrorIs(t, e.p.LowerClaim(e.ctx, e.key, "o", 0), lock.ErrInvalidArgument)
	assert.ErrorIs(t, e.p.RenewClaim(e.ctx, e.key, "o", 0), lock.ErrInvalidArgument)
}

// A claim expires with its lease: its weight goes to the waiter's next
// look, and the name leaves no key behind once its claims are gone.
func TestClaimExpires(t *testing.T) {
	e := newClaimsEnv(t)
	a, b := e.claim(1, 1), e.claim(1, 1)
	a.TTL = time.Second
	e.listen(b)
	e.acquire(a)
	rb := e.queue(b)
	require.True(t, rb.Queued)
	assert.Equal(t, a.Owner, rb.Owner)
	assert.LessOrEqual(t, rb.TTL, e.p.MinTTL())
	time.Sleep(rb.TTL + 1500*time.Millisecond) // etcd checks its leases every 500ms
	b.Look = lock.LookAgain
	rb = e.queue(b)
	assert.Equal(t, b.Owner, rb.Owner, "a's claim expired: b is granted")
	assert.False(t, rb.Queued)

	c := e.claim(1, 1)
	c.TTL = time.Second
	require.NoError(t, e.p.ReleaseClaim(e.ctx, e.key, b.Owner))
	e.acquire(c)
	require.Eventually(t, func() bool { return e.inspect().Limit == 0 }, 5*time.Second, 50*time.Millisecond)
	assert.Zero(t, e.keys(), "no key of the name is left")
}

// A name whose claims and waiters all left leaves no key behind.
func TestClaimNothingLeftBehind(t *testing.T) {
	e := newClaimsEnv(t)
	a, b, c := e.claim(2, 2), e.claim(1, 2), e.claim(1, 2)
	grants := e.holdAndQueue(a, b, c)
	require.NoError(t, e.p.LeaveClaim(e.ctx, e.key, c))
	require.NoError(t, e.p.ReleaseClaim(e.ctx, e.key, a.Owner))
	awaitGrant(t, grants[0])
	require.NoError(t, e.p.ReleaseClaim(e.ctx, e.key, b.Owner))
	assert.Equal(t, lock.Claims{}, e.inspect())
	assert.Zero(t, e.keys())
}

// List reports a counted name, with its kind, beside a lock.
func TestClaimList(t *testing.T) {
	e := newClaimsEnv(t)
	prefix := e.key + "/"
	e.key = prefix + "sem"
	_, err := e.p.Acquire(e.ctx, prefix+"lock", newOwner(), time.Minute)
	require.NoError(t, err)
	a, b := e.claim(2, 4), e.claim(3, 4)
	e.acquire(a)
	e.queue(b)
	var counted, locks []lock.Record
	require.NoError(t, e.p.List(e.ctx, prefix, func(key string, r lock.Record, err error) bool {
		assert.NoError(t, err)
		if r.Limit != 0 {
			assert.Equal(t, e.key, key)
			counted = append(counted, r)
		} else {
			assert.Equal(t, prefix+"lock", key)
			locks = append(locks, r)
		}
		return true
	}))
	require.Len(t, locks, 1)
	require.Len(t, counted, 1)
	r := counted[0]
	assert.Equal(t, lock.KindSemaphore, r.Kind)
	assert.Equal(t, 4, r.Limit)
	assert.Equal(t, 2, r.Used)
	assert.Equal(t, 1, r.Waiters)
	assert.Greater(t, r.TTL, 30*time.Second)
	assert.Empty(t, r.Owner)
	assert.Zero(t, r.Token)

	calls := 0
	require.NoError(t, e.p.List(e.ctx, prefix, func(string, lock.Record, error) bool { calls++; return false }))
	assert.Equal(t, 1, calls, "List stops when fn says so")
}

// Workers on providers of their own take and release claims of random
// weights, waiting in the queue: the weights held at once never pass the
// limit, and every worker gets its turns.
func TestClaimConcurrentFit(t *testing.T) {
	const limit, workers, rounds = 3, 6, 5
	ns := testNamespace()
	key := uniqueName(t)
	ctx := ctxTimeout(t, 2*time.Minute)
	var mu sync.Mutex
	held := 0
	var wg sync.WaitGroup
	for i := range workers {
		p := newProvider(t, ns)
		c := lock.Claim{Weight: 1 + i%limit, Limit: limit, Kind: lock.KindSemaphore, TTL: time.Minute, Inbox: "inbox:" + randomHex(8)}
		wake := make(chan struct{}, 1)
		stop, err := p.Listen(ctx, c.Inbox, func(lock.Notice) {
			select {
			case wake <- struct{}{}:
			default:
			}
		})
		require.NoError(t, err)
		t.Cleanup(stop)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				c.Owner, c.Look = newOwner(), lock.LookFirst
				for {
					rec, err := p.QueueClaim(ctx, key, c)
					if !assert.NoError(t, err) {
						return
					}
					if rec.Owner == c.Owner && !rec.Queued {
						break
					}
					c.Look = lock.LookAgain
					select {
					case <-wake:
					case <-time.After(100 * time.Millisecond):
					case <-ctx.Done():
						t.Error("a worker waited too long")
						return
					}
				}
				mu.Lock()
				held += c.Weight
				assert.LessOrEqual(t, held, limit, "the weights held at once")
				mu.Unlock()
				time.Sleep(5 * time.Millisecond)
				mu.Lock()
				held -= c.Weight
				mu.Unlock()
				if !assert.NoError(t, p.ReleaseClaim(ctx, key, c.Owner)) {
					return
				}
			}
		}()
	}
	wg.Wait()
	cs, err := newProvider(t, ns).InspectClaims(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, lock.Claims{}, cs)
}
