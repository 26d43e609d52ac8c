package locktest

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
)

// runClaims checks the counted-name part of the Provider contract
// (AcquireClaim, QueueClaim, LeaveClaim, RenewClaim, ReleaseClaim,
// LowerClaim, InspectClaims, and List of a counted name), on which
// Semaphore and RWMutex rest.
func (s *suite) runClaims(t *testing.T) {
	t.Run("ClaimsFitUpToTheLimit", s.claimsFit)
	t.Run("ClaimRetriedByItsOwnerIsKept", s.claimRetried)
	t.Run("ClaimWithAnotherLimitChangesNothing", s.claimOtherLimit)
	t.Run("ClaimQueueIsServedInOrderWithoutOvertaking", s.claimQueueOrder)
	t.Run("ClaimReleaseGrantsEveryWaiterThatFits", s.claimReleaseGrantsAll)
	t.Run("ClaimLeaveOfTheHeadServesThoseBehind", s.claimLeaveServes)
	t.Run("ClaimLowerServesTheQueue", s.claimLowerServes)
	t.Run("ClaimOfAStrangerIsLost", s.claimStranger)
	t.Run("ClaimExpiresAndItsWeightIsServed", s.claimExpires)
	t.Run("ClaimWaiterThatStopsLookingIsPassedOver", s.claimEntryRunsOut)
	t.Run("ClaimOfAWaiterThatAcquiresIsGrantedOnce", s.claimWaiterAcquires)
	t.Run("ClaimTokensFollowTheLocksTokens", s.claimTokens)
	t.Run("ClaimsListed", s.claimsListed)
	t.Run("ClaimBadInput", s.claimBadInput)
}

// claimOf returns a claim of weight out of limit on a Semaphore's name, for
// a new owner, living a minute, waiting on in when in is not nil.
func claimOf(weight, limit int, in *listener) lock.Claim {
	c := lock.Claim{Owner: newOwner(), Weight: weight, Limit: limit, Kind: lock.KindSemaphore, TTL: time.Minute}
	if in != nil {
		c.Inbox = in.name
	}
	return c
}

// take takes c, or fails the test.
func (s *suite) take(t *testing.T, key string, c lock.Claim) lock.Record {
	t.Helper()
	rec, err := s.p.AcquireClaim(s.ctx, key, c)
	require.NoError(t, err)
	require.Equal(t, c.Owner, rec.Owner, "%s should have been granted %d of %d, got %+v", c.Owner, c.Weight, c.Limit, rec)
	return rec
}

// queueClaim queues c, or fails the test; it returns c's place.
func (s *suite) queueClaim(t *testing.T, key string, c lock.Claim) int {
	t.Helper()
	rec, err := s.p.QueueClaim(s.ctx, key, c)
	require.NoError(t, err)
	require.True(t, rec.Queued, "%s should have been queued, got %+v", c.Owner, rec)
	require.NotEqual(t, c.Owner, rec.Owner, "queued, not granted")
	return rec.Position
}

// claimOrQueue sends c by QueueClaim when queue is true, by AcquireClaim
// otherwise, and returns the reply, or fails the test on an error.
func (s *suite) claimOrQueue(t *testing.T, key string, c lock.Claim, queue bool) lock.Record {
	t.Helper()
	var rec lock.Record
	var err error
	if queue {
		rec, err = s.p.QueueClaim(s.ctx, key, c)
	} else {
		rec, err = s.p.AcquireClaim(s.ctx, key, c)
	}
	require.NoError(t, err)
	return rec
}

// releaseClaims releases the claims of owners under key, and checks that
// the name holds nothing after.
func (s *suite) releaseClaims(t *testing.T, key string, owners ...string) {
	t.Helper()
	for _, o := range owners {
		assert.NoError(t, s.p.ReleaseClaim(s.ctx, key, o), "release of %s", o)
	}
	cs, err := s.p.InspectClaims(s.ctx, key)
	require.NoError(t, err)
	assert.Zero(t, cs.Limit, "nothing left of %q: %+v", key, cs)
}

// owners returns the owners of the holders of cs, in their order.
func owners(cs lock.Claims) []string {
	var o []string
	for _, h := range cs.Holders {
		o = append(o, h.Owner)
	}
	return o
}

// claimsFit: claims are granted while their weights fit the limit, each
// with a greater token; one that does not fit is refused, and told the
// limit, the weight used and the claim that expires first.
func (s *suite) claimsFit(t *testing.T) {
	key := uniqueName(t)
	a, b, c := claimOf(2, 3, nil), claimOf(1, 3, nil), claimOf(1, 3, nil)
	ra := s.take(t, key, a)
	assert.Equal(t, []int{3, 2}, []int{ra.Limit, ra.Used})
	assert.Equal(t, lock.KindSemaphore, ra.Kind, "the name's kind")
	assertTTL(t, time.Minute, ra.TTL, "the claim's TTL")
	rb := s.take(t, key, b)
	assert.Greater(t, rb.Token, ra.Token, "tokens increase")
	assert.Equal(t, 3, rb.Used)
	rc, err := s.p.AcquireClaim(s.ctx, key, c)
	require.NoError(t, err)
	assert.NotEqual(t, c.Owner, rc.Owner, "a claim that does not fit is refused")
	assert.Contains(t, []string{a.Owner, b.Owner}, rc.Owner, "the refusal names a holder")
	assert.Equal(t, []int{3, 3}, []int{rc.Limit, rc.Used})
	assert.Equal(t, lock.KindSemaphore, rc.Kind, "the name's kind")
	assert.Positive(t, rc.TTL)
	cs, err := s.p.InspectClaims(s.ctx, key)
	require.NoError(t, err)
	assert.Equal(t, 3, cs.Limit)
	assert.Equal(t, lock.KindSemaphore, cs.Kind)
	assert.Equal(t, []string{a.Owner, b.Owner}, owners(cs), "holders in grant order")
	assert.Equal(t, []int{2, 1}, cs.Weights)
	assert.Equal(t, []uint64{ra.Token, rb.Token}, []uint64{cs.Holders[0].Token, cs.Holders[1].Token})
	assert.Empty(t, cs.Queue)
	s.releaseClaims(t, key, a.Owner, b.Owner)
}

// claimRetried: AcquireClaim by the owner of a live claim (a retry after
// a lost reply) returns it, with its token, and resets its TTL.
func (s *suite) claimRetried(t *testing.T) {
	key := uniqueName(t)
	a := claimOf(1, 1, nil)
	a.TTL = 5 * time.Second
	r1 := s.take(t, key, a)
	a.TTL = time.Minute
	r2 := s.take(t, key, a)
	assert.Equal(t, r1.Token, r2.Token, "the same claim")
	assertTTL(t, time.Minute, r2.TTL, "the retried claim's TTL")
	s.releaseClaims(t, key, a.Owner)
}

// claimOtherLimit: a claim with another limit than the name's changes
// nothing, queued or not, and is told the name's limit.
func (s *suite) claimOtherLimit(t *testing.T) {
	key := uniqueName(t)
	in := listen(t, s.ctx, s.p)
	a := claimOf(1, 3, nil)
	s.take(t, key, a)
	for _, queue := range []bool{false, true} {
		b := claimOf(1, 4, in)
		rec := s.claimOrQueue(t, key, b, queue)
		assert.Equal(t, 3, rec.Limit, "the name's limit")
		assert.NotEqual(t, b.Owner, rec.Owner, "not granted")
		assert.False(t, rec.Queued, "not queued")
	}
	cs, err := s.p.InspectClaims(s.ctx, key)
	require.NoError(t, err)
	assert.Equal(t, []string{a.Owner}, owners(cs))
	assert.Empty(t, cs.Queue)
	s.releaseClaims(t, key, a.Owner)
}

// claimQueueOrder: with 1 of 2 held, a waiter for 2 is first; a waiter for
// 1 behind it is queued although 1 is free, and AcquireClaim of 1 is
// refused: nobody overtakes the head. The release grants the head (told
// on its inbox, with its weight), then the next release the one behind.
func (s *suite) claimQueueOrder(t *testing.T) {
	key := uniqueName(t)
	in1, in2 := listen(t, s.ctx, s.p), listen(t, s.ctx, s.p)
	a := claimOf(1, 2, nil)
	s.take(t, key, a)
	head, next := claimOf(2, 2, in1), claimOf(1, 2, in2)
	assert.Equal(t, 0, s.queueClaim(t, key, head))
	assert.Equal(t, 1, s.queueClaim(t, key, next))
	assert.Equal(t, 1, s.queueClaim(t, key, next), "a second look keeps its place")
	late := claimOf(1, 2, nil)
	rec, err := s.p.AcquireClaim(s.ctx, key, late)
	require.NoError(t, err)
	assert.NotEqual(t, late.Owner, rec.Owner, "AcquireClaim does not pass the queue")
	cs, err := s.p.InspectClaims(s.ctx, key)
	require.NoError(t, err)
	if assert.Len(t, cs.Queue, 2) {
		assert.Equal(t, []string{head.Owner, next.Owner}, []string{cs.Queue[0].Owner, cs.Queue[1].Owner})
		assert.Equal(t, []int{2, 1}, []int{cs.Queue[0].Weight, cs.Queue[1].Weight})
	}

	require.NoError(t, s.p.ReleaseClaim(s.ctx, key, a.Owner))
	g := in1.next(t, "the head is granted")
	assert.Equal(t, []any{key, head.Owner, 2}, []any{g.Key, g.Owner, g.Weight})
	assert.NotZero(t, g.Token)
	assertTTL(t, time.Minute, g.TTL, "the grant's TTL")
	cs, err = s.p.InspectClaims(s.ctx, key)
	require.NoError(t, err)
	assert.Equal(t, []string{head.Owner}, owners(cs))
	if assert.Len(t, cs.Holders, 1) {
		assert.Equal(t, g.Token, cs.Holders[0].Token)
	}
	require.NoError(t, s.p.ReleaseClaim(s.ctx, key, head.Owner))
	g2 := in2.next(t, "the next is granted")
	assert.Equal(t, []any{next.Owner, 1}, []any{g2.Owner, g2.Weight})
	assert.Greater(t, g2.Token, g.Token)
	quiet(t, s.ctx, s.p, in1, in2)
	s.releaseClaims(t, key, next.Owner)
}

// claimReleaseGrantsAll: a release that frees the whole limit grants every
// waiter at the head that fits, in one call, and stops at the first that
// does not.
func (s *suite) claimReleaseGrantsAll(t *testing.T) {
	key := uniqueName(t)
	in := listen(t, s.ctx, s.p)
	w := claimOf(4, 4, nil)
	s.take(t, key, w)
	r1, r2, r3, big := claimOf(1, 4, in), claimOf(1, 4, in), claimOf(1, 4, in), claimOf(2, 4, in)
	for _, c := range []lock.Claim{r1, r2, r3, big} {
		s.queueClaim(t, key, c)
	}
	require.NoError(t, s.p.ReleaseClaim(s.ctx, key, w.Owner))
	got := map[string]bool{}
	for range 3 {
		got[in.next(t, "three readers granted").Owner] = true
	}
	assert.Equal(t, map[string]bool{r1.Owner: true, r2.Owner: true, r3.Owner: true}, got)
	cs, err := s.p.InspectClaims(s.ctx, key)
	require.NoError(t, err)
	assert.Len(t, cs.Holders, 3)
	if assert.Len(t, cs.Queue, 1, "the waiter for 2 does not fit in the 1 left") {
		assert.Equal(t, big.Owner, cs.Queue[0].Owner)
	}
	quiet(t, s.ctx, s.p, in)
	require.NoError(t, s.p.LeaveClaim(s.ctx, key, big))
	s.releaseClaims(t, key, r1.Owner, r2.Owner, r3.Owner)
}

// claimLeaveServes: the head, which does not fit, leaves; the waiter
// behind it, which fits, is granted by that Leave.
func (s *suite) claimLeaveServes(t *testing.T) {
	key := uniqueName(t)
	in := listen(t, s.ctx, s.p)
	a := claimOf(1, 2, nil)
	s.take(t, key, a)
	head, next := claimOf(2, 2, in), claimOf(1, 2, in)
	s.queueClaim(t, key, head)
	s.queueClaim(t, key, next)
	require.NoError(t, s.p.LeaveClaim(s.ctx, key, head))
	g := in.next(t, "the waiter behind the head that left is granted")
	assert.Equal(t, next.Owner, g.Owner)
	require.NoError(t, s.p.LeaveClaim(s.ctx, key, head), "leaving twice is not an error")
	quiet(t, s.ctx, s.p, in)
	s.releaseClaims(t, key, a.Owner, next.Owner)
}

// claimLowerServes: a writer's claim of the whole limit lowered to 1
// keeps its token and lets the waiters that fit in.
func (s *suite) claimLowerServes(t *testing.T) {
	key := uniqueName(t)
	in := listen(t, s.ctx, s.p)
	w := claimOf(3, 3, nil)
	rw := s.take(t, key, w)
	r1, r2, r3 := claimOf(1, 3, in), claimOf(1, 3, in), claimOf(1, 3, in)
	for _, c := range []lock.Claim{r1, r2, r3} {
		s.queueClaim(t, key, c)
	}
	require.NoError(t, s.p.LowerClaim(s.ctx, key, w.Owner, 1))
	got := map[string]bool{in.next(t).Owner: true, in.next(t).Owner: true}
	assert.Equal(t, map[string]bool{r1.Owner: true, r2.Owner: true}, got, "two fit beside the lowered claim")
	require.NoError(t, s.p.LowerClaim(s.ctx, key, w.Owner, 3), "raising is not done, and not an error")
	cs, err := s.p.InspectClaims(s.ctx, key)
	require.NoError(t, err)
	require.Len(t, cs.Holders, 3)
	assert.Equal(t, []any{w.Owner, rw.Token, 1}, []any{cs.Holders[0].Owner, cs.Holders[0].Token, cs.Weights[0]}, "lowered in place")
	quiet(t, s.ctx, s.p, in)
	require.NoError(t, s.p.LeaveClaim(s.ctx, key, r3))
	s.releaseClaims(t, key, w.Owner, r1.Owner, r2.Owner)
}

// claimStranger: renewing, releasing or lowering the claim of an owner
// that holds none is a *LostError and changes nothing.
func (s *suite) claimStranger(t *testing.T) {
	key := uniqueName(t)
	a := claimOf(1, 2, nil)
	s.take(t, key, a)
	stranger := newOwner()
	for name, err := range map[string]error{
		"renew":   s.p.RenewClaim(s.ctx, key, stranger, time.Minute),
		"release": s.p.ReleaseClaim(s.ctx, key, stranger),
		"lower":   s.p.LowerClaim(s.ctx, key, stranger, 1),
		"free":    s.p.RenewClaim(s.ctx, uniqueName(t), stranger, time.Minute),
	} {
		var lost *lock.LostError
		assert.True(t, errors.As(err, &lost), "%s: want a *LostError, got %v", name, err)
	}
	cs, err := s.p.InspectClaims(s.ctx, key)
	require.NoError(t, err)
	assert.Equal(t, []string{a.Owner}, owners(cs))
	s.releaseClaims(t, key, a.Owner)
	var lost *lock.LostError
	assert.True(t, errors.As(s.p.ReleaseClaim(s.ctx, key, a.Owner), &lost), "a second release")
}

// claimExpires: a claim that is not renewed expires by the store's clock;
// its weight goes to the waiter, at the waiter's next look.
func (s *suite) claimExpires(t *testing.T) {
	if !s.expires(t) {
		return
	}
	key := uniqueName(t)
	in := listen(t, s.ctx, s.p)
	a := claimOf(1, 1, nil)
	a.TTL = 300 * time.Millisecond
	s.take(t, key, a)
	b := claimOf(1, 1, in)
	s.queueClaim(t, key, b)
	b.Look = lock.LookAgain
	require.Eventually(t, func() bool {
		rec, err := s.p.QueueClaim(s.ctx, key, b)
		return err == nil && rec.Owner == b.Owner
	}, 5*time.Second+2*s.b.TTLGranularity, 20*time.Millisecond, "the waiter is granted once the claim expired")
	var lost *lock.LostError
	assert.True(t, errors.As(s.p.RenewClaim(s.ctx, key, a.Owner, time.Minute), &lost), "the expired claim is gone")
	s.releaseClaims(t, key, b.Owner)
}

// claimEntryRunsOut: the head of the queue does not fit beside the claim
// held; while it looks again within its QueueTTL it keeps its place, and
// the waiter behind it, which would fit, is not granted. Once the head
// stops looking, its entry runs out: the waiter behind it, told in HeadTTL
// when that is, is granted at its next look, although the claim before
// them is still held (issue 38: it used to wait until that claim was
// released). The head's look after that is a new one.
func (s *suite) claimEntryRunsOut(t *testing.T) {
	if !s.expires(t) {
		return
	}
	key := uniqueName(t)
	in := listen(t, s.ctx, s.p)
	a := claimOf(1, 2, nil)
	s.take(t, key, a)
	head, next := claimOf(2, 2, in), claimOf(1, 2, in)
	head.QueueTTL, next.QueueTTL = time.Second, time.Minute
	assert.Equal(t, 0, s.queueClaim(t, key, head))
	head.Look, next.Look = lock.LookAgain, lock.LookAgain
	most := head.QueueTTL + 2*s.b.TTLGranularity + s.b.MinLease // the longest the head's entry may last
	// The head looks every tenth of its QueueTTL, for three of them.
	var last time.Time
	for end := time.Now().Add(3 * head.QueueTTL); time.Now().Before(end); time.Sleep(head.QueueTTL / 10) {
		assert.Equal(t, 0, s.queueClaim(t, key, head), "the head keeps its place while it looks")
		last = time.Now()
		rec, err := s.p.QueueClaim(s.ctx, key, next)
		require.NoError(t, err)
		require.True(t, rec.Queued, "the waiter behind a head that looks is not granted: %+v", rec)
		assert.Equal(t, 1, rec.Position)
		assert.Positive(t, rec.HeadTTL, "the reply says when the head's entry runs out")
		assert.LessOrEqual(t, rec.HeadTTL, most, "within the head's QueueTTL")
	}
	var granted lock.Record
	require.Eventually(t, func() bool {
		rec, err := s.p.QueueClaim(s.ctx, key, next)
		granted = rec
		return err == nil && rec.Owner == next.Owner
	}, most+5*time.Second, 20*time.Millisecond, "the waiter behind a head that stopped looking is granted")
	t.Logf("granted %v after the head's last look (its QueueTTL %v)", time.Since(last).Round(time.Millisecond), head.QueueTTL)
	assert.Equal(t, 2, granted.Used, "beside the claim held")
	cs, err := s.p.InspectClaims(s.ctx, key)
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{a.Owner, next.Owner}, owners(cs))
	assert.Empty(t, cs.Queue, "the head that stopped looking is gone")
	assert.Equal(t, next.Owner, in.next(t, "the caller granted by its own look is told too").Owner)
	assert.Equal(t, 0, s.queueClaim(t, key, head), "the head's late look queues it anew")
	require.NoError(t, s.p.LeaveClaim(s.ctx, key, head))
	quiet(t, s.ctx, s.p, in)
	s.releaseClaims(t, key, a.Owner, next.Owner)
}

// claimWaiterAcquires: a queued owner that calls AcquireClaim once the
// weight ahead of it expired is granted its claim once: the call that
// serves the queue grants it, and does not take a second claim for it.
func (s *suite) claimWaiterAcquires(t *testing.T) {
	if !s.expires(t) {
		return
	}
	key := uniqueName(t)
	in := listen(t, s.ctx, s.p)
	a := claimOf(2, 2, nil)
	a.TTL = 300 * time.Millisecond
	s.take(t, key, a)
	b := claimOf(1, 2, in)
	s.queueClaim(t, key, b)
	require.Eventually(t, func() bool {
		cs, err := s.p.InspectClaims(s.ctx, key)
		return err == nil && len(cs.Holders) == 0
	}, 5*time.Second+2*s.b.TTLGranularity, 20*time.Millisecond, "a's claim expires")
	rec, err := s.p.AcquireClaim(s.ctx, key, b)
	require.NoError(t, err)
	assert.Equal(t, b.Owner, rec.Owner, "the waiter holds its claim")
	assert.Equal(t, 1, rec.Used, "once: its weight is counted once")
	cs, err := s.p.InspectClaims(s.ctx, key)
	require.NoError(t, err)
	assert.Equal(t, []string{b.Owner}, owners(cs))
	assert.Equal(t, []int{1}, cs.Weights)
	assert.Empty(t, cs.Queue, "nor is it queued any more")
	c := claimOf(1, 2, nil)
	s.take(t, key, c) // the other half of the limit is free
	s.releaseClaims(t, key, b.Owner, c.Owner)
}

// claimTokens: a claim's token is greater than every earlier grant's of
// its key, a lock's included, and the next lock's greater than the claim's.
func (s *suite) claimTokens(t *testing.T) {
	key := uniqueName(t)
	o1 := newOwner()
	l1 := mustAcquire(t, s.p, key, o1, time.Minute)
	require.NoError(t, s.p.Release(s.ctx, key, o1))
	c := claimOf(1, 1, nil)
	rc := s.take(t, key, c)
	assert.Greater(t, rc.Token, l1.Token, "the claim's token is above the lock's before it")
	s.releaseClaims(t, key, c.Owner)
	o2 := newOwner()
	l2 := mustAcquire(t, s.p, key, o2, time.Minute)
	assert.Greater(t, l2.Token, rc.Token, "the next lock's token is above the claim's")
	require.NoError(t, s.p.Release(s.ctx, key, o2))
}

// claimsListed: List reports a counted name with its limit, the weight
// held and its waiters, and nothing once it holds nothing.
func (s *suite) claimsListed(t *testing.T) {
	key := uniqueName(t)
	in := listen(t, s.ctx, s.p)
	a, w := claimOf(2, 3, nil), claimOf(2, 3, in)
	s.take(t, key, a)
	s.queueClaim(t, key, w)
	list := func() []lock.Record {
		var found []lock.Record
		require.NoError(t, s.p.List(s.ctx, key, func(k string, r lock.Record, err error) bool {
			assert.NoError(t, err)
			if k == key {
				found = append(found, r)
			}
			return true
		}))
		return found
	}
	got := list()
	if assert.Len(t, got, 1) {
		assert.Equal(t, []int{3, 2, 1}, []int{got[0].Limit, got[0].Used, got[0].Waiters})
		assert.Equal(t, lock.KindSemaphore, got[0].Kind, "the listed kind")
		assert.Empty(t, got[0].Owner)
		assertTTL(t, time.Minute, got[0].TTL, "the listed TTL")
	}
	require.NoError(t, s.p.LeaveClaim(s.ctx, key, w))
	s.releaseClaims(t, key, a.Owner)
	assert.Empty(t, list(), "a counted name that holds nothing is not listed")
}

// claimBadInput: arguments out of range fail with ErrInvalidArgument.
func (s *suite) claimBadInput(t *testing.T) {
	key := uniqueName(t)
	good := func() lock.Claim {
		return lock.Claim{Owner: newOwner(), Weight: 1, Limit: 2, Kind: lock.KindRWMutex, TTL: time.Minute, Inbox: "inbox:" + uniqueName(t)}
	}
	for name, change := range map[string]func(*lock.Claim){
		"zero weight":        func(c *lock.Claim) { c.Weight = 0 },
		"weight over limit":  func(c *lock.Claim) { c.Weight = 3 },
		"zero limit":         func(c *lock.Claim) { c.Limit, c.Weight = 0, 0 },
		"limit too high":     func(c *lock.Claim) { c.Limit = lock.MaxLimit + 1 },
		"short ttl":          func(c *lock.Claim) { c.TTL = time.Microsecond },
		"negative queue ttl": func(c *lock.Claim) { c.QueueTTL = -time.Second },
		"empty owner":        func(c *lock.Claim) { c.Owner = "" },
		"no kind":            func(c *lock.Claim) { c.Kind = "" },
		"a lock's kind":      func(c *lock.Claim) { c.Kind = lock.KindLock },
	} {
		c := good()
		change(&c)
		_, err := s.p.AcquireClaim(s.ctx, key, c)
		assert.ErrorIs(t, err, lock.ErrInvalidArgument, "AcquireClaim: %s", name)
		_, err = s.p.QueueClaim(s.ctx, key, c)
		assert.ErrorIs(t, err, lock.ErrInvalidArgument, "QueueClaim: %s", name)
	}
	c := good()
	c.Inbox = ""
	_, err := s.p.QueueClaim(s.ctx, key, c)
	assert.ErrorIs(t, err, lock.ErrInvalidArgument, "QueueClaim without an inbox")
	assert.ErrorIs(t, s.p.LeaveClaim(s.ctx, key, c), lock.ErrInvalidArgument, "LeaveClaim without an inbox")
	_, err = s.p.AcquireClaim(s.ctx, "", good())
	assert.ErrorIs(t, err, lock.ErrInvalidArgument, "empty key")
	assert.ErrorIs(t, s.p.LowerClaim(s.ctx, key, newOwner(), 0), lock.ErrInvalidArgument, "LowerClaim to 0")
	assert.ErrorIs(t, s.p.RenewClaim(s.ctx, key, newOwner(), 0), lock.ErrInvalidArgument, "RenewClaim of 0")
	assert.ErrorIs(t, s.p.ReleaseClaim(s.ctx, key, ""), lock.ErrInvalidArgument, "ReleaseClaim of no owner")
	_, err = s.p.InspectClaims(s.ctx, "")
	assert.ErrorIs(t, err, lock.ErrInvalidArgument, "InspectClaims of no key")
	cs, err := s.p.InspectClaims(s.ctx, key)
	require.NoError(t, err)
	assert.Zero(t, cs.Limit, "nothing stored")
}
