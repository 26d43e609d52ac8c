package locktest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
)

// runKinds checks that a key is one kind at a time (issue 38): the
// provider's part (a lock's record and a counted name's claims, or counted
// names of two kinds, refuse each other, also when two callers race), then
// the Client's: a lock, an election's role, a Semaphore and an RWMutex of
// one name refuse each other, whichever comes first.
func (s *suite) runKinds(t *testing.T) {
	t.Run("KindLockRefusesACountedName", s.kindLockRefusesClaims)
	t.Run("KindCountedNameRefusesALock", s.kindClaimsRefuseLock)
	t.Run("KindCountedNameRefusesTheOtherKind", s.kindOtherCountedKind)
	t.Run("KindRacingCallersMakeOneKind", s.kindRace)
	for _, pair := range [][2]kindOfName{
		{lockKind, semaphoreKind}, {lockKind, rwmutexKind}, {semaphoreKind, rwmutexKind},
		{roleKind, semaphoreKind}, {roleKind, rwmutexKind}, {lockKind, roleKind},
	} {
		for _, p := range [][2]kindOfName{pair, {pair[1], pair[0]}} {
			t.Run("KindsRefuseEachOther/"+p[0].name+"Then"+p[1].name, func(t *testing.T) { s.kindsRefuse(t, p[0], p[1]) })
		}
	}
}

// kindOfName is one way to use a name: take holds it once, through c,
// waiting as o says (a role always waits: o.MaxWait bounds it), and
// returns its release. said is how an error names it.
type kindOfName struct {
	name string
	said string
	take func(ctx context.Context, c *lock.Client, name string, o lock.Options) (release func() error, err error)
}

// The kinds of name: a Semaphore and an RWMutex of the same limit, so that
// only their kinds differ.
var (
	lockKind = kindOfName{name: "Lock", said: "a lock", take: func(ctx context.Context, c *lock.Client, name string, o lock.Options) (func() error, error) {
		l, err := c.Acquire(ctx, name, o)
		if err != nil {
			return nil, err
		}
		return func() error { return l.Release(ctx) }, nil
	}}
	roleKind = kindOfName{name: "Role", said: "an election role", take: func(ctx context.Context, c *lock.Client, name string, o lock.Options) (func() error, error) {
		ctx, cancel := context.WithTimeout(ctx, max(o.MaxWait, time.Second))
		defer cancel()
		tm, err := c.Campaign(ctx, name, lock.ElectionOptions{})
		if err != nil {
			return nil, err
		}
		return func() error { return tm.Resign(context.Background()) }, nil
	}}
	semaphoreKind = kindOfName{name: "Semaphore", said: "a Semaphore", take: func(ctx context.Context, c *lock.Client, name string, o lock.Options) (func() error, error) {
		sem, err := c.Semaphore(name, 2)
		if err != nil {
			return nil, err
		}
		h, err := sem.Acquire(ctx, 1, o)
		if err != nil {
			return nil, err
		}
		return func() error { return h.Release(ctx) }, nil
	}}
	rwmutexKind = kindOfName{name: "RWMutex", said: "an RWMutex", take: func(ctx context.Context, c *lock.Client, name string, o lock.Options) (func() error, error) {
		m, err := c.RWMutex(name, 2)
		if err != nil {
			return nil, err
		}
		h, err := m.RLock(ctx, o)
		if err != nil {
			return nil, err
		}
		return func() error { return h.Release(ctx) }, nil
	}}
)

// kindsRefuse: while one Client holds the name as first, another's try
// and wait for it as second fail at once with ErrInvalidArgument, naming
// both kinds, and leave first's hold as it was; once first releases, the
// name is second's to take, and first's kind is refused in turn.
func (s *suite) kindsRefuse(t *testing.T, first, second kindOfName) {
	name := uniqueName(t)
	cs := s.callers(t, 2)
	release, err := first.take(s.ctx, cs[0], name, lock.Options{})
	require.NoError(t, err, "%s of a free name", first.said)
	for _, o := range []lock.Options{{}, {Wait: true, MaxWait: 5 * time.Second}} {
		start := time.Now()
		other, err := second.take(s.ctx, cs[1], name, o)
		if other != nil {
			assert.NoError(t, other(), "release of %s taken beside %s", second.said, first.said)
		}
		assert.ErrorIs(t, err, lock.ErrInvalidArgument, "%s where %s holds (wait %v)", second.said, first.said, o.Wait)
		if err != nil {
			assert.Contains(t, err.Error(), first.said, "the error names the kind in use")
			assert.Contains(t, err.Error(), second.said, "and the kind asked for")
		}
		assert.Less(t, time.Since(start), 4*time.Second, "refused as soon as seen, not at the end of the wait")
	}
	require.NoError(t, release(), "the first hold is intact: it releases cleanly")
	again, err := second.take(s.ctx, cs[1], name, lock.Options{Wait: true, MaxWait: 5 * time.Second})
	require.NoError(t, err, "%s once %s was released", second.said, first.said)
	back, err := first.take(s.ctx, cs[0], name, lock.Options{})
	if back != nil {
		assert.NoError(t, back(), "release of %s taken beside %s", first.said, second.said)
	}
	assert.ErrorIs(t, err, lock.ErrInvalidArgument, "%s where %s holds now", first.said, second.said)
	require.NoError(t, again())
	rec, err := s.p.Inspect(s.ctx, cs[0].Key(name))
	require.NoError(t, err)
	assert.Empty(t, rec.Owner, "no lock left")
	claims, err := s.p.InspectClaims(s.ctx, cs[0].Key(name))
	require.NoError(t, err)
	assert.Zero(t, claims.Limit, "no counted name left")
}

// kindLockRefusesClaims: while a lock's record holds the key, held or in
// a grace period, AcquireClaim and QueueClaim change nothing and say so:
// Kind lock, with the record's holder. Once the record is gone, the key is
// a counted name's to make.
func (s *suite) kindLockRefusesClaims(t *testing.T) {
	key := uniqueName(t)
	in := listen(t, s.ctx, s.p)
	o := newOwner()
	mustAcquire(t, s.p, key, o, time.Minute)
	refused := func(grace bool) {
		t.Helper()
		for _, queue := range []bool{false, true} {
			c := claimOf(1, 2, in)
			rec := s.claimOrQueue(t, key, c, queue)
			assert.Equal(t, lock.KindLock, rec.Kind, "refused for the lock's record (queue %v, grace period %v): %+v", queue, grace, rec)
			assert.Equal(t, o, rec.Owner, "the reply names the lock's holder")
			assert.Equal(t, grace, rec.GracePeriod, "and its grace period")
			assert.False(t, rec.Queued, "not queued")
			assert.Zero(t, rec.Limit, "no counted name")
		}
		cs, err := s.p.InspectClaims(s.ctx, key)
		require.NoError(t, err)
		assert.Zero(t, cs.Limit, "no counted name was made: %+v", cs)
		assert.Empty(t, cs.Queue)
	}
	refused(false)
	require.NoError(t, s.p.Finish(s.ctx, key, o, time.Minute))
	refused(true)
	_, err := s.p.ForceRelease(s.ctx, key)
	require.NoError(t, err)
	c := claimOf(1, 2, nil)
	rec := s.take(t, key, c)
	assert.Equal(t, lock.KindSemaphore, rec.Kind)
	s.releaseClaims(t, key, c.Owner)
}

// kindClaimsRefuseLock: while a counted name holds claims and waiters, a
// lock's Acquire and Queue (every Look) change nothing and say so: Kind
// the name's, no Owner. Inspect and ForceRelease find no record there.
// Once the name holds nothing, the key is a lock's to take.
func (s *suite) kindClaimsRefuseLock(t *testing.T) {
	key := uniqueName(t)
	in := listen(t, s.ctx, s.p)
	a, w := claimOf(1, 2, nil), claimOf(2, 2, in)
	a.Kind, w.Kind = lock.KindRWMutex, lock.KindRWMutex
	s.take(t, key, a)
	s.queueClaim(t, key, w)
	o := newOwner()
	rec, err := s.p.Acquire(s.ctx, key, o, time.Minute)
	require.NoError(t, err)
	assert.Equal(t, lock.KindRWMutex, rec.Kind, "Acquire refused for the counted name: %+v", rec)
	assert.Empty(t, rec.Owner, "no lock holds it")
	for _, look := range []lock.Look{lock.LookFirst, lock.LookFair, lock.LookJoin, lock.LookAgain} {
		rec, err := s.p.Queue(s.ctx, key, lock.Wait{Owner: o, TTL: time.Minute, Inbox: in.name, Look: look})
		require.NoError(t, err)
		assert.Equal(t, lock.KindRWMutex, rec.Kind, "Queue (%v) refused for the counted name: %+v", look, rec)
		assert.Empty(t, rec.Owner, "no lock holds it")
		assert.False(t, rec.Queued, "not queued (%v)", look)
	}
	ins, err := s.p.Inspect(s.ctx, key)
	require.NoError(t, err)
	assert.Empty(t, ins.Owner, "Inspect finds no record")
	assert.Zero(t, ins.Waiters, "nor a lock's waiter")
	forced, err := s.p.ForceRelease(s.ctx, key)
	require.NoError(t, err)
	assert.Empty(t, forced.Owner, "ForceRelease removes no record")
	cs, err := s.p.InspectClaims(s.ctx, key)
	require.NoError(t, err)
	assert.Equal(t, []string{a.Owner}, owners(cs), "the counted name is as it was")
	assert.Len(t, cs.Queue, 1)
	assert.Equal(t, lock.KindRWMutex, cs.Kind)
	require.NoError(t, s.p.LeaveClaim(s.ctx, key, w))
	s.releaseClaims(t, key, a.Owner)
	mustAcquire(t, s.p, key, o, time.Minute)
	require.NoError(t, s.p.Release(s.ctx, key, o))
	quiet(t, s.ctx, s.p, in)
}

// kindOtherCountedKind: a counted name's claims and waiters are of one
// kind: a claim of the other kind, with the same limit, changes nothing,
// queued or not, and is told the name's kind. Once the name holds
// nothing, it is made anew, of the next caller's kind.
func (s *suite) kindOtherCountedKind(t *testing.T) {
	key := uniqueName(t)
	in := listen(t, s.ctx, s.p)
	a := claimOf(1, 2, nil)
	s.take(t, key, a)
	for _, queue := range []bool{false, true} {
		b := claimOf(1, 2, in)
		b.Kind = lock.KindRWMutex
		rec := s.claimOrQueue(t, key, b, queue)
		assert.Equal(t, lock.KindSemaphore, rec.Kind, "the name's kind (queue %v)", queue)
		assert.Equal(t, 2, rec.Limit)
		assert.NotEqual(t, b.Owner, rec.Owner, "not granted")
		assert.False(t, rec.Queued, "not queued")
	}
	cs, err := s.p.InspectClaims(s.ctx, key)
	require.NoError(t, err)
	assert.Equal(t, lock.KindSemaphore, cs.Kind)
	assert.Equal(t, []string{a.Owner}, owners(cs))
	assert.Empty(t, cs.Queue)
	s.releaseClaims(t, key, a.Owner)
	b := claimOf(1, 2, nil)
	b.Kind = lock.KindRWMutex
	assert.Equal(t, lock.KindRWMutex, s.take(t, key, b).Kind, "the name made anew, of the other kind")
	c := claimOf(1, 2, nil)
	rec, err := s.p.AcquireClaim(s.ctx, key, c)
	require.NoError(t, err)
	assert.Equal(t, lock.KindRWMutex, rec.Kind, "a Semaphore's claim is refused now")
	assert.NotEqual(t, c.Owner, rec.Owner)
	s.releaseClaims(t, key, b.Owner)
}

// kindRace: a lock's Acquire and a claim's AcquireClaim of one free key,
// sent at once from two providers (two processes), never both succeed:
// exactly one kind is made, every time. One of the two is sent up to a
// millisecond after the other (a step of 100µs each round, the lock first
// in odd rounds), so that the two calls overlap in every way a backend's
// steps allow, not only in the order one of them always wins.
func (s *suite) kindRace(t *testing.T) {
	rounds := 80
	if s.b.Remote {
		rounds = 40
	}
	p1, p2 := s.b.New(t), s.b.New(t)
	locks, claims := 0, 0
	for i := range rounds {
		lockAfter, claimAfter := time.Duration(i/2%11)*100*time.Microsecond, time.Duration(0)
		if i%2 == 1 {
			lockAfter, claimAfter = claimAfter, lockAfter
		}
		key := uniqueName(t)
		o, c := newOwner(), claimOf(1, 1, nil)
		var lrec, crec lock.Record
		var lerr, cerr error
		var wg sync.WaitGroup
		start := make(chan struct{})
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			time.Sleep(lockAfter)
			lrec, lerr = p1.Acquire(s.ctx, key, o, time.Minute)
		}()
		go func() {
			defer wg.Done()
			<-start
			time.Sleep(claimAfter)
			crec, cerr = p2.AcquireClaim(s.ctx, key, c)
		}()
		close(start)
		wg.Wait()
		require.NoError(t, lerr)
		require.NoError(t, cerr)
		lockWon, claimWon := lrec.Owner == o, crec.Owner == c.Owner
		if lockWon {
			locks++
			assert.NoError(t, p1.Release(s.ctx, key, o))
		}
		if claimWon {
			claims++
			assert.NoError(t, p2.ReleaseClaim(s.ctx, key, c.Owner))
		}
		require.True(t, lockWon != claimWon, "exactly one kind is made of %q: the lock %+v, the claim %+v", key, lrec, crec)
	}
	t.Logf("%d rounds: the lock won %d, the claim %d", rounds, locks, claims)
}
