package postgres_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/postgres"
)

// claimer makes claims of one counted name with one limit, on one inbox
// whose grants arrive on grants.
type claimer struct {
	t      *testing.T
	p      *postgres.Provider
	key    string
	limit  int
	inbox  string
	grants chan lock.Notice
}

func newClaimer(t *testing.T, p *postgres.Provider, limit int) *claimer {
	t.Helper()
	c := &claimer{t: t, p: p, key: uniqueName(t), limit: limit, inbox: "inbox:" + randomHex(4), grants: make(chan lock.Notice, 100)}
	stop, err := p.Listen(ctxTimeout(t, 10*time.Second), c.inbox, func(g lock.Notice) { c.grants <- g })
	require.NoError(t, err)
	t.Cleanup(stop)
	return c
}

func (c *claimer) claim(owner string, weight int) lock.Claim {
	return lock.Claim{Owner: owner, Weight: weight, Limit: c.limit, Kind: lock.KindSemaphore, TTL: 10 * time.Second, Inbox: c.inbox}
}

func (c *claimer) acquire(owner string, weight int) lock.Record {
	c.t.Helper()
	r, err := c.p.AcquireClaim(context.Background(), c.key, c.claim(owner, weight))
	require.NoError(c.t, err)
	return r
}

func (c *claimer) queue(owner string, weight int) lock.Record {
	c.t.Helper()
	r, err := c.p.QueueClaim(context.Background(), c.key, c.claim(owner, weight))
	require.NoError(c.t, err)
	return r
}

func (c *claimer) inspect() lock.Claims {
	c.t.Helper()
	cs, err := c.p.InspectClaims(context.Background(), c.key)
	require.NoError(c.t, err)
	return cs
}

// holders returns the owners of the live claims, in grant order.
func (c *claimer) holders() []string {
	c.t.Helper()
	var owners []string
	for _, h := range c.inspect().Holders {
		owners = append(owners, h.Owner)
	}
	return owners
}

// grant waits for the next grant of the inbox.
func (c *claimer) grant() lock.Notice {
	c.t.Helper()
	select {
	case g := <-c.grants:
		return g
	case <-time.After(5 * time.Second):
		c.t.Fatal("no grant within 5s")
		return lock.Notice{}
	}
}

// noGrant checks that no grant arrives for a little while.
func (c *claimer) noGrant() {
	c.t.Helper()
	select {
	case g := <-c.grants:
		c.t.Fatalf("unexpected grant %+v", g)
	case <-time.After(100 * time.Millisecond):
	}
}

// rows counts the rows of the provider's claim tables.
func claimRows(t *testing.T, prefix string) int64 {
	t.Helper()
	var n int64
	require.NoError(t, newPool(t).QueryRow(context.Background(),
		"SELECT (SELECT count(*) FROM "+pgx.Identifier{prefix + "claims"}.Sanitize()+
			") + (SELECT count(*) FROM "+pgx.Identifier{prefix + "claim_queue"}.Sanitize()+")").Scan(&n))
	return n
}

func TestClaimsFit(t *testing.T) {
	c := newClaimer(t, newProvider(t, testPrefix(t)), 3)
	r := c.acquire("a", 2)
	assert.Equal(t, "a", r.Owner)
	assert.NotZero(t, r.Token)
	assert.Equal(t, 3, r.Limit)
	assert.Equal(t, 2, r.Used)
	assert.False(t, r.Since.IsZero())

	r = c.acquire("b", 2)
	assert.Equal(t, "a", r.Owner, "b does not fit: the record is the claim that expires first")
	assert.Equal(t, 2, r.Used)
	assert.False(t, r.Queued)

	r = c.acquire("c", 1)
	assert.Equal(t, "c", r.Owner, "c fits")
	assert.Equal(t, 3, r.Used)

	again := c.acquire("a", 2)
	assert.Equal(t, "a", again.Owner, "a retried acquire returns the claim")
	assert.Equal(t, 3, again.Used, "and takes no more room")
	assert.Equal(t, []string{"a", "c"}, c.holders())
	assert.Equal(t, []int{2, 1}, c.inspect().Weights)
}

// A waiter that does not fit blocks those behind it, though they would fit;
// a release serves the queue in order, each grant with its weight.
func TestClaimsFIFO(t *testing.T) {
	c := newClaimer(t, newProvider(t, testPrefix(t)), 3)
	c.acquire("a", 2)
	r := c.queue("b", 2)
	assert.True(t, r.Queued)
	assert.Equal(t, 0, r.Position)
	assert.Equal(t, "a", r.Owner)
	r = c.queue("c", 1)
	assert.True(t, r.Queued, "c fits but does not overtake b")
	assert.Equal(t, 1, r.Position)
	r = c.acquire("d", 1)
	assert.NotEqual(t, "d", r.Owner, "an acquire does not take room while others are queued")
	r = c.queue("c", 1)
	assert.Equal(t, 1, r.Position, "a look again keeps its place")

	cs := c.inspect()
	require.Len(t, cs.Queue, 2)
	assert.Equal(t, lock.Claim{Owner: "b", Weight: 2, Limit: 3, Kind: lock.KindSemaphore, TTL: 10 * time.Second, Inbox: c.inbox}, cs.Queue[0])
	assert.Equal(t, "c", cs.Queue[1].Owner)

	require.NoError(t, c.p.ReleaseClaim(context.Background(), c.key, "a"))
	g1, g2 := c.grant(), c.grant()
	assert.Equal(t, "b", g1.Owner)
	assert.Equal(t, 2, g1.Weight)
	assert.Equal(t, c.key, g1.Key)
	assert.Equal(t, 10*time.Second, g1.TTL)
	assert.Equal(t, "c", g2.Owner)
	assert.Equal(t, 1, g2.Weight)
	assert.Greater(t, g2.Token, g1.Token)
	assert.Equal(t, []string{"b", "c"}, c.holders())
	assert.Empty(t, c.inspect().Queue)

	r = c.queue("c", 1)
	assert.Equal(t, "c", r.Owner, "the granted waiter's next look finds its claim")
	assert.Equal(t, g2.Token, r.Token)
	assert.False(t, r.Queued)
}

// A waiter that leaves lets those behind it in.
func TestClaimsLeaveServes(t *testing.T) {
	c := newClaimer(t, newProvider(t, testPrefix(t)), 3)
	c.acquire("a", 2)
	c.queue("b", 2)
	c.queue("c", 1)
	require.NoError(t, c.p.LeaveClaim(context.Background(), c.key, c.claim("b", 2)))
	g := c.grant()
	assert.Equal(t, "c", g.Owner)
	assert.Equal(t, []string{"a", "c"}, c.holders())
	require.NoError(t, c.p.LeaveClaim(context.Background(), c.key, c.claim("nobody", 1)), "leaving a queue one is not in is no error")

	// A waiter granted meanwhile that leaves releases its claim.
	c.queue("d", 2)
	require.NoError(t, c.p.ReleaseClaim(context.Background(), c.key, "a"))
	assert.Equal(t, "d", c.grant().Owner)
	require.NoError(t, c.p.LeaveClaim(context.Background(), c.key, c.claim("d", 2)))
	assert.Equal(t, []string{"c"}, c.holders())
}

// LowerClaim frees weight: the writer that becomes a reader lets the readers in.
func TestClaimsLowerServes(t *testing.T) {
	c := newClaimer(t, newProvider(t, testPrefix(t)), 3)
	w := c.acquire("writer", 3)
	c.queue("r1", 1)
	c.queue("r2", 1)
	c.queue("w2", 3)
	require.NoError(t, c.p.LowerClaim(context.Background(), c.key, "writer", 1))
	assert.Equal(t, "r1", c.grant().Owner)
	assert.Equal(t, "r2", c.grant().Owner)
	c.noGrant()
	cs := c.inspect()
	assert.Equal(t, []int{1, 1, 1}, cs.Weights)
	assert.Equal(t, w.Token, cs.Holders[0].Token, "a lowered claim keeps its token")
	require.NoError(t, c.p.LowerClaim(context.Background(), c.key, "writer", 3), "never raised")
	assert.Equal(t, []int{1, 1, 1}, c.inspect().Weights)
}

// A claim expires by the server's clock; the next call serves the queue.
func TestClaimsExpiry(t *testing.T) {
	c := newClaimer(t, newProvider(t, testPrefix(t)), 2)
	short := c.claim("a", 2)
	short.TTL = 200 * time.Millisecond
	_, err := c.p.AcquireClaim(context.Background(), c.key, short)
	require.NoError(t, err)
	c.queue("b", 1)
	c.queue("c", 1)
	time.Sleep(300 * time.Millisecond)
	cs := c.inspect()
	assert.Empty(t, cs.Holders, "an expired claim inspects as gone")
	assert.Len(t, cs.Queue, 2)
	assert.Equal(t, 2, cs.Limit)

	var lost *lock.LostError
	require.ErrorAs(t, c.p.RenewClaim(context.Background(), c.key, "a", time.Second), &lost)
	assert.Equal(t, c.key, lost.Key)
	assert.Equal(t, "b", c.grant().Owner, "the call that found the claim expired served the queue")
	assert.Equal(t, "c", c.grant().Owner)
}

func TestClaimsLimitMismatchChangesNothing(t *testing.T) {
	c := newClaimer(t, newProvider(t, testPrefix(t)), 3)
	c.acquire("a", 1)
	before := c.inspect()
	other := c.claim("b", 1)
	other.Limit = 5
	r, err := c.p.AcquireClaim(context.Background(), c.key, other)
	require.NoError(t, err)
	assert.Equal(t, 3, r.Limit, "the stored limit")
	assert.Equal(t, "a", r.Owner)
	r, err = c.p.QueueClaim(context.Background(), c.key, other)
	require.NoError(t, err)
	assert.Equal(t, 3, r.Limit)
	assert.False(t, r.Queued)
	after := c.inspect()
	assert.Equal(t, before.Weights, after.Weights)
	assert.Equal(t, before.Queue, after.Queue)
	assert.Equal(t, []string{"a"}, c.holders())
}

// Claim tokens come from the locks' sequence; a key is one kind at a time
// (issue 38): a claim is refused while the key's lock is held, a lock
// while its counted name holds a claim, and each is granted once the other
// is released.
func TestClaimsTokensAndLocks(t *testing.T) {
	p := newProvider(t, testPrefix(t))
	c := newClaimer(t, p, 2)
	ctx := context.Background()
	l, err := p.Acquire(ctx, c.key, "locker", 10*time.Second)
	require.NoError(t, err)
	r := c.acquire("a", 2)
	assert.Equal(t, lock.KindLock, r.Kind, "a held lock of the key refuses a claim: %+v", r)
	assert.Equal(t, "locker", r.Owner)
	assert.Empty(t, c.holders())
	require.NoError(t, p.Release(ctx, c.key, "locker"))
	r = c.acquire("a", 2)
	assert.Equal(t, "a", r.Owner)
	assert.Greater(t, r.Token, l.Token)
	rec, err := p.Acquire(ctx, c.key, "locker2", 10*time.Second)
	require.NoError(t, err)
	assert.Equal(t, lock.Record{Kind: lock.KindSemaphore}, rec, "a claim of the key refuses a lock")
	assert.Empty(t, mustInspect(t, p, c.key).Owner)
	require.NoError(t, p.ReleaseClaim(ctx, c.key, "a"))
	l2, err := p.Acquire(ctx, c.key, "locker2", 10*time.Second)
	require.NoError(t, err)
	assert.Equal(t, "locker2", l2.Owner)
	assert.Greater(t, l2.Token, r.Token)
	require.NoError(t, p.Release(ctx, c.key, "locker2"))
	r = c.acquire("b", 1)
	assert.Greater(t, r.Token, l2.Token)
}

func mustInspect(t *testing.T, p lock.Provider, key string) lock.Record {
	t.Helper()
	r, err := p.Inspect(context.Background(), key)
	require.NoError(t, err)
	return r
}

func TestClaimsStrangerIsLost(t *testing.T) {
	c := newClaimer(t, newProvider(t, testPrefix(t)), 2)
	c.acquire("a", 2)
	ctx := context.Background()
	var lost *lock.LostError
	assert.ErrorAs(t, c.p.RenewClaim(ctx, c.key, "b", time.Second), &lost)
	assert.ErrorAs(t, c.p.ReleaseClaim(ctx, c.key, "b"), &lost)
	assert.ErrorAs(t, c.p.LowerClaim(ctx, c.key, "b", 1), &lost)
	assert.ErrorAs(t, c.p.ReleaseClaim(ctx, "other:"+c.key, "a"), &lost)
	assert.Equal(t, []int{2}, c.inspect().Weights, "nothing changed")
	require.NoError(t, c.p.RenewClaim(ctx, c.key, "a", time.Minute))
	assert.Greater(t, c.inspect().Holders[0].TTL, 50*time.Second)
}

func TestClaimsBadInput(t *testing.T) {
	p := newProvider(t, testPrefix(t))
	ctx := context.Background()
	good := lock.Claim{Owner: "o", Weight: 1, Limit: 2, Kind: lock.KindSemaphore, TTL: time.Second, Inbox: "i"}
	for _, bad := range []lock.Claim{
		{Owner: "o", Weight: 3, Limit: 2, Kind: lock.KindSemaphore, TTL: time.Second, Inbox: "i"},
		{Owner: "o", Weight: 1, Limit: 0, Kind: lock.KindSemaphore, TTL: time.Second, Inbox: "i"},
		{Owner: "o", Weight: 1, Limit: 2, Kind: lock.KindSemaphore, TTL: 0, Inbox: "i"},
		{Owner: "o\x00", Weight: 1, Limit: 2, Kind: lock.KindSemaphore, TTL: time.Second, Inbox: "i"},
		{Owner: "o", Weight: 1, Limit: 2, TTL: time.Second, Inbox: "i"},
	} {
		_, err := p.AcquireClaim(ctx, "k", bad)
		assert.ErrorIs(t, err, lock.ErrInvalidArgument, "%+v", bad)
	}
	noInbox := good
	noInbox.Inbox = ""
	_, err := p.QueueClaim(ctx, "k", noInbox)
	assert.ErrorIs(t, err, lock.ErrInvalidArgument)
	assert.ErrorIs(t, p.LeaveClaim(ctx, "k", noInbox), lock.ErrInvalidArgument)
	_, err = p.AcquireClaim(ctx, "k", noInbox)
	assert.NoError(t, err, "AcquireClaim does not read the inbox")
	assert.ErrorIs(t, p.LowerClaim(ctx, "k", "o", 0), lock.ErrInvalidArgument)
	assert.ErrorIs(t, p.RenewClaim(ctx, "k", "o", 0), lock.ErrInvalidArgument)
	assert.ErrorIs(t, p.ReleaseClaim(ctx, "", "o"), lock.ErrInvalidArgument)
	_, err = p.InspectClaims(ctx, "a\xff")
	assert.ErrorIs(t, err, lock.ErrInvalidArgument)
}

// After every claim is released and every waiter left, no row is left;
// names whose claims expired are deleted by later grants of other names.
func TestClaimsNothingLeftBehind(t *testing.T) {
	prefix := testPrefix(t)
	c := newClaimer(t, newProvider(t, prefix), 2)
	ctx := context.Background()
	c.acquire("a", 2)
	c.queue("b", 1)
	require.NoError(t, c.p.LeaveClaim(ctx, c.key, c.claim("b", 1)))
	require.NoError(t, c.p.ReleaseClaim(ctx, c.key, "a"))
	assert.Zero(t, claimRows(t, prefix))
	assert.Equal(t, lock.Claims{}, c.inspect(), "a name that holds nothing has limit 0")

	short := c.claim("x", 1)
	short.TTL = 50 * time.Millisecond
	_, err := c.p.AcquireClaim(ctx, c.key, short)
	require.NoError(t, err)
	time.Sleep(100 * time.Millisecond)
	other := c.claim("y", 1)
	_, err = c.p.AcquireClaim(ctx, c.key+":other", other)
	require.NoError(t, err)
	require.NoError(t, c.p.ReleaseClaim(ctx, c.key+":other", "y"))
	assert.Zero(t, claimRows(t, prefix), "the expired claim of a name nobody uses was deleted by another name's grant")
}

func TestClaimsList(t *testing.T) {
	p := newProvider(t, testPrefix(t))
	c := newClaimer(t, p, 3)
	ctx := context.Background()
	_, err := p.Acquire(ctx, c.key+":lock", "locker", time.Minute)
	require.NoError(t, err)
	c.acquire("a", 2)
	c.queue("b", 2)
	c.queue("c", 1)
	var got []lock.Record
	var keys []string
	require.NoError(t, p.List(ctx, c.key, func(key string, r lock.Record, err error) bool {
		require.NoError(t, err)
		keys = append(keys, key)
		got = append(got, r)
		return true
	}))
	require.Len(t, got, 2, "the lock and the counted name")
	assert.Equal(t, []string{c.key + ":lock", c.key}, keys, "the records first, then the counted names")
	assert.Equal(t, "locker", got[0].Owner)
	assert.Zero(t, got[0].Limit)
	assert.Empty(t, got[0].Kind)
	counted := got[1]
	assert.Equal(t, lock.KindSemaphore, counted.Kind)
	assert.Equal(t, 3, counted.Limit)
	assert.Equal(t, 2, counted.Used)
	assert.Equal(t, 2, counted.Waiters)
	assert.Empty(t, counted.Owner)
	assert.Zero(t, counted.Token)
	assert.InDelta(t, 10*time.Second, counted.TTL, float64(2*time.Second))

	// A name with waiters only is listed too, and List stops when fn says so.
	require.NoError(t, p.ReleaseClaim(ctx, c.key, "a"))
	require.NoError(t, p.Release(ctx, c.key+":lock", "locker"))
	seen := 0
	require.NoError(t, p.List(ctx, c.key, func(string, lock.Record, error) bool { seen++; return false }))
	assert.Equal(t, 1, seen)
}

// Many processes claim one name at once: the weights held never add up
// to more than the limit (checked by the claims held as their holders see
// them), and the queue is served to the end.
func TestClaimsConcurrent(t *testing.T) {
	prefix := testPrefix(t)
	key := uniqueName(t)
	const limit, workers, rounds = 3, 8, 15
	var held atomic.Int64
	var peak atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		p := newProvider(t, prefix)
		weight := 1 + w%2
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := ctxTimeout(t, time.Minute)
			for i := range rounds {
				owner := "w" + randomHex(4)
				c := lock.Claim{Owner: owner, Weight: weight, Limit: limit, Kind: lock.KindSemaphore, TTL: 10 * time.Second, Inbox: "i" + randomHex(4)}
				for {
					r, err := p.QueueClaim(ctx, key, c)
					if err != nil {
						errs <- err
						return
					}
					if r.Owner == owner {
						break
					}
					time.Sleep(time.Duration(1+i%3) * time.Millisecond)
				}
				now := held.Add(int64(weight))
				for {
					old := peak.Load()
					if now <= old || peak.CompareAndSwap(old, now) {
						break
					}
				}
				time.Sleep(time.Millisecond)
				held.Add(-int64(weight))
				if err := p.ReleaseClaim(ctx, key, owner); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	assert.LessOrEqual(t, peak.Load(), int64(limit), "weights held at once")
	assert.Zero(t, claimRows(t, prefix))
}

// A database made before the counted names gains their tables at the next
// NewProvider, and its locks stay.
func TestClaimsTablesAdded(t *testing.T) {
	prefix := testPrefix(t)
	p := newProvider(t, prefix)
	ctx := context.Background()
	_, err := p.Acquire(ctx, "kept", "o", time.Minute)
	require.NoError(t, err)
	_, err = newPool(t).Exec(ctx, "DROP TABLE "+pgx.Identifier{prefix + "claims"}.Sanitize()+", "+
		pgx.Identifier{prefix + "claim_queue"}.Sanitize())
	require.NoError(t, err)
	_, err = p.AcquireClaim(ctx, "k", lock.Claim{Owner: "o", Weight: 1, Limit: 1, Kind: lock.KindSemaphore, TTL: time.Second})
	require.Error(t, err, "no tables yet")
	p = newProvider(t, prefix)
	r, err := p.AcquireClaim(ctx, "k", lock.Claim{Owner: "o", Weight: 1, Limit: 1, Kind: lock.KindSemaphore, TTL: time.Second})
	require.NoError(t, err)
	assert.Equal(t, "o", r.Owner)
	assert.Equal(t, "o", mustInspect(t, p, "kept").Owner)
	assert.False(t, errors.Is(err, lock.ErrInvalidArgument))
}

// A queue entry ages out two minutes after its waiter's last look (made
// here by moving its expiry to the past): it no longer blocks a claim that
// fits, nobody sees it, a release passes it over, and its waiter's next
// look puts it at the back.
func TestClaimsQueueEntryAgesOut(t *testing.T) {
	prefix := testPrefix(t)
	c := newClaimer(t, newProvider(t, prefix), 2)
	pool := newPool(t)
	ageOut := func(owner string) {
		t.Helper()
		tag, err := pool.Exec(context.Background(), "UPDATE "+pgx.Identifier{prefix + "claim_queue"}.Sanitize()+
			" SET expires_at = now() - interval '1 second' WHERE key = $1 AND owner = $2", c.key, owner)
		require.NoError(t, err)
		require.EqualValues(t, 1, tag.RowsAffected(), "%s's entry", owner)
	}
	queueOwners := func() []string {
		var owners []string
		for _, q := range c.inspect().Queue {
			owners = append(owners, q.Owner)
		}
		return owners
	}

	c.acquire("a", 1)
	require.True(t, c.queue("heavy", 2).Queued, "heavy does not fit beside a")
	assert.Equal(t, "a", c.acquire("b", 1).Owner, "b would fit, but heavy is queued ahead")
	ageOut("heavy")
	assert.Empty(t, queueOwners(), "an entry that aged out is not shown")
	assert.Equal(t, "b", c.acquire("b", 1).Owner, "nor does it block a claim that fits")

	w := c.queue("w", 1)
	require.True(t, w.Queued)
	assert.Equal(t, 0, w.Position, "the aged-out entry is not ahead of w")
	ageOut("w")
	require.True(t, c.queue("x", 1).Queued)
	back := c.queue("w", 1)
	require.True(t, back.Queued)
	assert.Equal(t, 1, back.Position, "w's look after it aged out puts it behind x")
	assert.Equal(t, []string{"x", "w"}, queueOwners())

	require.NoError(t, c.p.ReleaseClaim(context.Background(), c.key, "a"))
	assert.Equal(t, "x", c.grant().Owner, "the release grants the head, x")
	c.noGrant()
}
