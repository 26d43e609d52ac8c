package locktest

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/testenv"
)

// runQueue checks the wait-queue part of the Provider contract: Queue,
// Leave, Listen, and how Release and Finish serve a key's queue.
//
// "Nothing was sent" is checked without sleeping: quiet sends each inbox a
// last message through the provider, and an inbox's messages arrive in the
// order they were sent, so whatever is read before that one was sent before it.
func (s *suite) runQueue(t *testing.T) {
	t.Run("QueueHandsOverInOrder", func(t *testing.T) {
		t.Run("NotContended", func(t *testing.T) { s.handsOverInOrder(t, false) })
		t.Run("Contended", func(t *testing.T) { s.handsOverInOrder(t, true) })
	})
	t.Run("QueueFreeKeyTakesIt", s.freeKeyTakesIt)
	t.Run("NoMessageWithoutWaiters", s.noMessageWithoutWaiters)
	t.Run("AgainKeepsPlace", s.againKeepsPlace)
	t.Run("LeaveTakesOutOfQueue", s.leaveTakesOutOfQueue)
	t.Run("LeaveAfterGrantPassesOn", s.leaveAfterGrantPassesOn)
	t.Run("LeaveNotQueuedChangesNothing", s.leaveNotQueuedChangesNothing)
	t.Run("LeaveAfterLostReplyReleases", s.leaveAfterLostReplyReleases)
	t.Run("GracePeriodTellsWaiters", s.gracePeriodTellsWaiters)
	t.Run("UnlistenedWaiterIsSkipped", s.unlistenedWaiterIsSkipped)
	t.Run("AgainFindsOwnGrant", s.againFindsOwnGrant)
	t.Run("FairServesFirstWaiter", func(t *testing.T) { s.freeKeyServesFirstWaiter(t, lock.Wait{Look: lock.LookFair}) })
	t.Run("AgainServesFirstWaiter", func(t *testing.T) { s.freeKeyServesFirstWaiter(t, lock.Wait{Look: lock.LookAgain}) })
	t.Run("NonFairTakesFreeKey", func(t *testing.T) {
		t.Run("Acquire", func(t *testing.T) { s.nonFairTakesFreeKey(t, false, false) })
		t.Run("Queue", func(t *testing.T) { s.nonFairTakesFreeKey(t, true, false) })
		t.Run("AcquireThenGracePeriod", func(t *testing.T) { s.nonFairTakesFreeKey(t, false, true) })
	})
	t.Run("ListenStopWaitsForDeliver", s.listenStopWaitsForDeliver)
	t.Run("ListenAgainAfterStop", s.listenAgainAfterStop)
	t.Run("ListenTwiceSameInbox", s.listenTwiceSameInbox)
	t.Run("ListenBadInput", s.listenBadInput)
	t.Run("QueueBadInput", s.queueBadInput)
	t.Run("ConcurrentQueueHandOver", s.concurrentHandOver)
	t.Run("MixedLoadFreeLockGoesToLiveWaiter", s.mixedLoadFreeLockGoesToLiveWaiter)
}

const queueTTL = 10 * time.Second

// handsOverInOrder: each Release hands the key to the first waiter, in arrival
// order, with a fresh token and the waiter's TTL, and tells that waiter only.
func (s *suite) handsOverInOrder(t *testing.T, contended bool) {
	p, ctx := s.p, s.ctx
	key, a := uniqueName(t), newOwner()
	recA := mustAcquire(t, p, key, a, queueTTL)
	ins := make([]*listener, 3)
	ws := make([]lock.Wait, 3)
	for i := range ws {
		ins[i] = listen(t, ctx, p)
		ws[i] = ins[i].waiter(queueTTL + time.Duration(i+1)*time.Second) // each its own TTL
		ws[i].Look = join(contended)
		rec, err := p.Queue(ctx, key, ws[i])
		require.NoError(t, err)
		assert.True(t, rec.Queued, "waiter %d: a Queue on a held key joins the queue", i+1)
		if rec.Owner == "" && contended {
			continue // joined without reading the record, as Contended allows
		}
		assert.Equal(t, a, rec.Owner, "waiter %d: a queued caller is shown the holder", i+1)
		assert.Equal(t, recA.Token, rec.Token, "waiter %d: the holder's token", i+1)
		assert.False(t, rec.GracePeriod, "waiter %d", i+1)
		assert.Positive(t, rec.TTL, "waiter %d: the holder's remaining TTL", i+1)
		assert.LessOrEqual(t, rec.TTL, queueTTL, "waiter %d: queueing does not extend the holder's TTL", i+1)
	}
	assertHolder(t, p, key, a, recA.Token, "queueing leaves the holder's record and token")
	// A renewal tells no waiter: each inbox's first message is its grant.
	require.NoError(t, p.Renew(ctx, key, a, queueTTL), "the holder renews with waiters queued")

	prev, last := a, recA.Token
	for i, w := range ws {
		require.NoError(t, p.Release(ctx, key, prev), "the holder (%s) releases", prev)
		// The inbox's first message must be its own grant: a grant sent to
		// it at an earlier Release would come first.
		g := ins[i].next(t, "waiter %d's inbox is told of its grant", i+1)
		assert.Equal(t, lock.Notice{Key: key, Owner: w.Owner, Token: g.Token, TTL: w.TTL}, g,
			"waiter %d is sent a Notice for the key, to its owner, with its own TTL", i+1)
		assert.Greater(t, g.Token, last, "waiter %d's token is greater than the previous holder's", i+1)
		h := holder(t, p, key)
		assert.Equal(t, w.Owner, h.Owner, "Release hands the key to waiter %d, the first in the queue", i+1)
		assert.Equal(t, g.Token, h.Token, "the stored record carries the token of the Notice")
		assert.False(t, h.GracePeriod, "a handed-over record is not ended")
		assertTTL(t, w.TTL, h.TTL, "the handed-over record has the waiter's TTL")
		prev, last = w.Owner, g.Token
	}
	require.NoError(t, p.Release(ctx, key, prev), "the last waiter releases")
	assertFree(t, ctx, p, key, "the last Release, with nobody queued, frees the key")
	quiet(t, ctx, p, ins...)
}

// freeKeyTakesIt: a Queue on a free key without a queue takes it, whatever
// its flags, and is not queued.
func (s *suite) freeKeyTakesIt(t *testing.T) {
	in := listen(t, s.ctx, s.p)
	for _, look := range []lock.Look{lock.LookFirst, lock.LookJoin, lock.LookFair, lock.LookAgain} {
		t.Run(look.String(), func(t *testing.T) {
			key := uniqueName(t)
			w := in.waiter(queueTTL)
			w.Look = look
			rec, err := s.p.Queue(s.ctx, key, w)
			require.NoError(t, err)
			assert.Equal(t, w.Owner, rec.Owner, "a Queue on a free key takes it")
			assert.False(t, rec.Queued, "a caller that took the key is not queued")
			assert.False(t, rec.GracePeriod)
			assert.NotZero(t, rec.Token, "the grant carries a fencing token")
			assertTTL(t, queueTTL, rec.TTL, "the record has the waiter's TTL")
			assertHolder(t, s.p, key, w.Owner, rec.Token, "the record is stored")
			assert.NoError(t, s.p.Release(s.ctx, key, w.Owner))
		})
	}
	quiet(t, s.ctx, s.p, in) // the reply told the caller: no message
}

// noMessageWithoutWaiters: Acquire, Queue on a free key, renewals, ending and
// releasing a key nobody waits for send nothing, even to the inbox of the
// owner itself.
func (s *suite) noMessageWithoutWaiters(t *testing.T) {
	p, ctx := s.p, s.ctx
	key := uniqueName(t)
	in := listen(t, ctx, p)
	w := in.waiter(queueTTL)
	rec, err := p.Queue(ctx, key, w)
	require.NoError(t, err)
	require.Equal(t, w.Owner, rec.Owner, "a Queue on a free key takes it")
	require.NoError(t, p.Renew(ctx, key, w.Owner, 2*queueTTL), "a renewal")
	require.NoError(t, p.Renew(ctx, key, w.Owner, queueTTL), "a renewal")
	require.NoError(t, p.Release(ctx, key, w.Owner))

	o := newOwner()
	mustAcquire(t, p, key, o, queueTTL)
	require.NoError(t, p.Renew(ctx, key, o, 2*queueTTL))
	require.NoError(t, p.Release(ctx, key, o))

	o = newOwner()
	mustAcquire(t, p, key, o, queueTTL)
	require.NoError(t, p.Finish(ctx, key, o, queueTTL), "ending a record nobody waits for")
	require.NoError(t, p.Release(ctx, key, o))
	quiet(t, ctx, p, in)
}

// againKeepsPlace: a waiter that looks again while queued keeps its place and
// is not queued twice.
func (s *suite) againKeepsPlace(t *testing.T) {
	p, ctx := s.p, s.ctx
	in1, in2 := listen(t, ctx, p), listen(t, ctx, p)
	key, recA, w1 := queueBehind(t, ctx, p, in1)
	a := recA.Owner
	w2 := in2.waiter(queueTTL)
	mustQueue(t, ctx, p, key, w2)
	w1.Look = lock.LookAgain
	for i := range 2 {
		rec, err := p.Queue(ctx, key, w1)
		require.NoError(t, err)
		assert.True(t, rec.Queued, "look %d: a queued waiter that looks again is still queued", i+1)
		assert.Equal(t, a, rec.Owner, "look %d: it is shown the holder", i+1)
	}
	require.NoError(t, p.Release(ctx, key, a))
	assert.Equal(t, w1.Owner, in1.next(t, "the first waiter is told").Owner, "the look again kept the first waiter first")
	assert.Equal(t, w1.Owner, holder(t, p, key).Owner, "the look again kept the first waiter first")
	require.NoError(t, p.Release(ctx, key, w1.Owner))
	assert.Equal(t, w2.Owner, holder(t, p, key).Owner, "the second Release goes to the second waiter: the first was not queued twice")
	assert.Equal(t, w2.Owner, in2.next(t, "the second waiter is told").Owner)
	require.NoError(t, p.Release(ctx, key, w2.Owner))
	assertFree(t, ctx, p, key, "nobody is left in the queue")
	quiet(t, ctx, p, in1, in2)
}

// leaveTakesOutOfQueue: a waiter that left is not handed the key.
func (s *suite) leaveTakesOutOfQueue(t *testing.T) {
	p, ctx := s.p, s.ctx
	in := listen(t, ctx, p)
	key, recA, w1 := queueBehind(t, ctx, p, in)
	require.NoError(t, p.Leave(ctx, key, w1), "a queued waiter leaves")
	assertHolder(t, p, key, recA.Owner, recA.Token, "a waiter's Leave leaves the holder's record")
	require.NoError(t, p.Release(ctx, key, recA.Owner))
	assertFree(t, ctx, p, key, "after its only waiter left, Release frees the key instead of handing it over")
	quiet(t, ctx, p, in) // the waiter that left was not told of a grant
}

// leaveAfterGrantPassesOn: a waiter that leaves after the key was handed to
// it passes it on to the next waiter, as Release does.
func (s *suite) leaveAfterGrantPassesOn(t *testing.T) {
	p, ctx := s.p, s.ctx
	in1, in2 := listen(t, ctx, p), listen(t, ctx, p)
	key, recA, w1 := queueBehind(t, ctx, p, in1)
	w2 := in2.waiter(2 * queueTTL)
	mustQueue(t, ctx, p, key, w2)
	require.NoError(t, p.Release(ctx, key, recA.Owner))
	g1 := in1.next(t, "the first waiter is told of its grant")
	require.Equal(t, w1.Owner, g1.Owner, "Release hands the key to the first waiter")

	require.NoError(t, p.Leave(ctx, key, w1), "the first waiter leaves, holding the key")
	g2 := in2.next(t, "the second waiter is told of the key passed on by Leave")
	assert.Equal(t, lock.Notice{Key: key, Owner: w2.Owner, Token: g2.Token, TTL: w2.TTL}, g2,
		"the second waiter is sent a Notice with its owner and TTL")
	assert.Greater(t, g2.Token, g1.Token, "the passed-on grant has a greater token")
	assertHolder(t, p, key, w2.Owner, g2.Token, "Leave by the holder passes the key on to the next waiter")
	assert.ErrorIs(t, p.Release(ctx, key, w1.Owner), lock.ErrLost, "the waiter that left holds nothing")
	require.NoError(t, p.Release(ctx, key, w2.Owner))
	assertFree(t, ctx, p, key, "the key is free after the last waiter released")
	quiet(t, ctx, p, in1, in2)
}

// leaveNotQueuedChangesNothing: Leave of an owner that neither waits nor holds
// is not an error and changes nothing.
func (s *suite) leaveNotQueuedChangesNothing(t *testing.T) {
	p, ctx := s.p, s.ctx
	in := listen(t, ctx, p)
	free := uniqueName(t) + ":free"
	assert.NoError(t, p.Leave(ctx, free, in.waiter(queueTTL)), "Leave on a key without record or queue is not an error")
	assert.NoError(t, p.Leave(ctx, free, lock.Wait{Owner: newOwner(), TTL: queueTTL, Inbox: in.name, Look: lock.LookAgain}))
	assertFree(t, ctx, p, free, "Leave on a free key leaves it free")

	key, recA, w1 := queueBehind(t, ctx, p, in)
	assert.NoError(t, p.Leave(ctx, key, in.waiter(queueTTL)), "Leave of an owner not in the queue is not an error")
	assertHolder(t, p, key, recA.Owner, recA.Token, "Leave of a stranger leaves the holder's record")
	require.NoError(t, p.Release(ctx, key, recA.Owner))
	g := in.next(t, "the queued waiter is still told of its grant")
	assert.Equal(t, w1.Owner, g.Owner, "Leave of a stranger left the queue as it was")
	assert.Equal(t, w1.Owner, holder(t, p, key).Owner)
	require.NoError(t, p.Release(ctx, key, w1.Owner))
	quiet(t, ctx, p, in)
}

// leaveAfterLostReplyReleases: a waiter whose Queue took the free key (and
// whose reply was lost) releases it by leaving: the key is not kept for a
// caller that gave up.
func (s *suite) leaveAfterLostReplyReleases(t *testing.T) {
	p, ctx := s.p, s.ctx
	key := uniqueName(t)
	in := listen(t, ctx, p)
	w := in.waiter(queueTTL)
	rec, err := p.Queue(ctx, key, w)
	require.NoError(t, err)
	require.Equal(t, w.Owner, rec.Owner, "a Queue on a free key takes it")
	require.NoError(t, p.Leave(ctx, key, w))
	assertFree(t, ctx, p, key, "Leave by the owner of the record releases it")
	quiet(t, ctx, p, in)
}

// gracePeriodTellsWaiters: ending a record tells its waiters with a Notice
// without Owner, takes them out of the queue, and keeps the key closed to
// them until the record expires.
func (s *suite) gracePeriodTellsWaiters(t *testing.T) {
	testenv.SkipShort(t, "a conformance check of 2 s (a grace period runs out)")
	p, ctx := s.p, s.ctx
	in1, in2 := listen(t, ctx, p), listen(t, ctx, p)
	key, recA, w1 := queueBehind(t, ctx, p, in1)
	a := recA.Owner

	const grace = 2 * time.Second
	require.NoError(t, p.Finish(ctx, key, a, grace), "the holder ends its record")
	g := in1.next(t, "the waiter is told of the grace period")
	assert.Equal(t, lock.Notice{Key: key}, g, "a grace period is told with a Notice for the key without Owner")

	w1.Look = lock.LookAgain
	rec, err := p.Queue(ctx, key, w1)
	require.NoError(t, err)
	assert.True(t, rec.GracePeriod, "a look again during the grace period sees the ended record")
	assert.Equal(t, a, rec.Owner, "the ended record is the holder's")
	assert.Equal(t, recA.Token, rec.Token)
	assert.False(t, rec.Queued, "no caller is queued during a grace period")
	assert.LessOrEqual(t, rec.TTL, grace, "the ended record lives for the grace period")

	for _, contended := range []bool{false, true} {
		w2 := in2.waiter(queueTTL)
		w2.Look = join(contended)
		rec, err = p.Queue(ctx, key, w2)
		require.NoError(t, err)
		assert.True(t, rec.GracePeriod, "a newcomer (Contended %v) sees the ended record", contended)
		assert.False(t, rec.Queued, "a newcomer (Contended %v) is not queued during a grace period", contended)
	}
	if !s.expires(t) {
		require.NoError(t, p.Release(ctx, key, a))
		quiet(t, ctx, p, in1, in2)
		return
	}
	require.Eventually(t, func() bool {
		rec, err := p.Queue(ctx, key, w1)
		return err == nil && rec.Owner == w1.Owner && !rec.GracePeriod
	}, 5*grace, 10*time.Millisecond, "once the grace period has passed, a look again takes the key")
	h := holder(t, p, key)
	assert.Equal(t, w1.Owner, h.Owner)
	assert.Greater(t, h.Token, recA.Token, "the new grant has a greater token")
	require.NoError(t, p.Release(ctx, key, w1.Owner))
	assertFree(t, ctx, p, key, "nobody was left queued from before the grace period")
	quiet(t, ctx, p, in1, in2)
}

// unlistenedWaiterIsSkipped: a provider with Backend.SkipsUnlistened (the
// memory provider and the Redis provider, on a Cluster with sharded pub/sub
// only) skips a waiter whose inbox nobody listens to (provider_memory.go
// serve, scripts/record.lua serve): the key is never handed to a caller that
// cannot be told.
func (s *suite) unlistenedWaiterIsSkipped(t *testing.T) {
	if !s.b.SkipsUnlistened {
		t.Skip("the backend may hand a key to a waiter nobody listens for (Backend.SkipsUnlistened is false); the contract leaves it open")
	}
	p, ctx := s.p, s.ctx
	key, a := uniqueName(t), newOwner()
	mustAcquire(t, p, key, a, queueTTL)
	deaf := lock.Wait{Owner: newOwner(), TTL: queueTTL, Inbox: "inbox:" + uniqueName(t) + ":deaf"}
	mustQueue(t, ctx, p, key, deaf)
	in := listen(t, ctx, p)
	w2 := in.waiter(queueTTL)
	mustQueue(t, ctx, p, key, w2)
	require.NoError(t, p.Release(ctx, key, a))
	g := in.next(t, "the listened waiter is told")
	assert.Equal(t, w2.Owner, g.Owner, "Release skips the waiter nobody listens for and hands the key to the next")
	assert.Equal(t, w2.Owner, holder(t, p, key).Owner, "the key is held by the listened waiter")
	require.NoError(t, p.Release(ctx, key, w2.Owner))
	assertFree(t, ctx, p, key, "the skipped waiter left the queue")

	// Only an unlistened waiter: the key is freed, not held for nobody.
	b := newOwner()
	mustAcquire(t, p, key, b, queueTTL)
	deaf.Owner = newOwner()
	mustQueue(t, ctx, p, key, deaf)
	require.NoError(t, p.Release(ctx, key, b))
	assertFree(t, ctx, p, key, "Release with only an unlistened waiter frees the key")
	quiet(t, ctx, p, in)
}

// againFindsOwnGrant: a waiter that missed its grant message finds the key
// handed to it when it looks again.
func (s *suite) againFindsOwnGrant(t *testing.T) {
	p, ctx := s.p, s.ctx
	in := listen(t, ctx, p)
	key, recA, w1 := queueBehind(t, ctx, p, in)
	a := recA.Owner
	require.NoError(t, p.Release(ctx, key, a))

	// The waiter has not read its inbox (as after a lost message): it looks.
	w1.Look = lock.LookAgain
	rec, err := p.Queue(ctx, key, w1)
	require.NoError(t, err)
	assert.Equal(t, w1.Owner, rec.Owner, "a look again finds the key handed to the waiter")
	assert.False(t, rec.GracePeriod)
	assert.False(t, rec.Queued, "a waiter that holds the key is not queued")
	assert.Greater(t, rec.Token, recA.Token)
	assertTTL(t, queueTTL, rec.TTL, "the found record has the waiter's TTL")
	g := in.next(t, "the grant message was sent all the same")
	assert.Equal(t, lock.Notice{Key: key, Owner: w1.Owner, Token: rec.Token, TTL: queueTTL}, g,
		"the look again returns the grant the message announced")
	require.NoError(t, p.Release(ctx, key, w1.Owner))
	assertFree(t, ctx, p, key, "the waiter that found its grant was not left in the queue")
	quiet(t, ctx, p, in)
}

// freeKeyServesFirstWaiter: a Queue with Fair (or Again) on a free key that
// has waiters serves the first waiter, and queues the caller behind it.
func (s *suite) freeKeyServesFirstWaiter(t *testing.T, flags lock.Wait) {
	p, ctx := s.p, s.ctx
	in1, in2 := listen(t, ctx, p), listen(t, ctx, p)
	key, recA, w1 := s.freeWithWaiter(t, in1)

	w2 := in2.waiter(queueTTL)
	w2.Look = flags.Look
	rec, err := p.Queue(ctx, key, w2)
	require.NoError(t, err)
	assert.True(t, rec.Queued, "the caller queues behind the first waiter")
	assert.NotEqual(t, w2.Owner, rec.Owner, "the caller does not take a free key others wait for")
	if rec.Owner != "" {
		assert.Equal(t, w1.Owner, rec.Owner, "the caller is shown the first waiter as the holder")
	}
	g := in1.next(t, "the first waiter is told of its grant")
	assert.Equal(t, lock.Notice{Key: key, Owner: w1.Owner, Token: g.Token, TTL: w1.TTL}, g, "the first waiter is served")
	assert.Greater(t, g.Token, recA.Token)
	assert.Equal(t, w1.Owner, holder(t, p, key).Owner, "the first waiter holds the key")

	require.NoError(t, p.Release(ctx, key, w1.Owner))
	g = in2.next(t, "the caller is told when its turn comes")
	assert.Equal(t, w2.Owner, g.Owner, "the caller was queued behind the first waiter")
	require.NoError(t, p.Release(ctx, key, w2.Owner))
	assertFree(t, ctx, p, key, "nobody is left in the queue")
	quiet(t, ctx, p, in1, in2)
}

// nonFairTakesFreeKey: a plain Acquire, or a Queue without Fair or Again, on a
// free key that has waiters takes it: that is the non-fair behaviour (a
// newcomer may overtake the queue while the key is free, which happens only
// after a holder's record expired). The waiters keep their places: the
// taker's Release may hand the key to the first of them, or free it (the
// Redis provider marks a record as waited for only when a waiter asks while
// it is held); either way the first waiter's next look (Again) gets the key,
// before anyone else's. When the taker ends its record instead, the waiter's
// next look finds the grace period.
func (s *suite) nonFairTakesFreeKey(t *testing.T, byQueue, grace bool) {
	p, ctx := s.p, s.ctx
	in1, in3 := listen(t, ctx, p), listen(t, ctx, p)
	key, _, w1 := s.freeWithWaiter(t, in1)

	w3 := in3.waiter(queueTTL)
	var rec lock.Record
	var err error
	if byQueue {
		rec, err = p.Queue(ctx, key, w3)
	} else {
		rec, err = p.Acquire(ctx, key, w3.Owner, queueTTL)
	}
	require.NoError(t, err)
	require.Equal(t, w3.Owner, rec.Owner, "a non-fair caller takes a free key although others are queued")
	assert.False(t, rec.Queued)

	again := w1
	again.Look = lock.LookAgain
	if grace {
		require.NoError(t, p.Finish(ctx, key, w3.Owner, queueTTL), "the non-fair taker ends its record")
		rec, err = p.Queue(ctx, key, again)
		require.NoError(t, err)
		assert.True(t, rec.GracePeriod, "the waiter's next look finds the grace period")
		assert.False(t, rec.Queued, "and it is not queued in it")
		require.NoError(t, p.Release(ctx, key, w3.Owner))
		return
	}
	require.NoError(t, p.Release(ctx, key, w3.Owner))
	rec, err = p.Queue(ctx, key, again)
	require.NoError(t, err)
	assert.Equal(t, w1.Owner, rec.Owner, "the first waiter's next look gets the key")
	assert.False(t, rec.GracePeriod)
	require.NoError(t, p.Release(ctx, key, w1.Owner))
	assertFree(t, ctx, p, key, "nobody is left in the queue")
	// A grant message, if the Release sent one, went to w1 alone; it may
	// arrive after the look that found the key w1's (PostgreSQL's NOTIFY
	// under load: the check with no wait failed 4 runs of 20).
	quietBut(t, ctx, p, func(g lock.Notice) bool { return g.Key == key && g.Owner == w1.Owner }, in1)
	quiet(t, ctx, p, in3)
}

// listenStopWaitsForDeliver: stop returns only once a running deliver has
// returned, and deliver is not called after stop.
func (s *suite) listenStopWaitsForDeliver(t *testing.T) {
	p, ctx := s.p, s.ctx
	inbox := "inbox:" + uniqueName(t)
	var calls atomic.Int32
	entered := make(chan lock.Notice, 1)
	unblock := make(chan struct{})
	var unblockOnce sync.Once
	release := func() { unblockOnce.Do(func() { close(unblock) }) }
	t.Cleanup(release)
	stop, err := p.Listen(ctx, inbox, func(g lock.Notice) {
		calls.Add(1)
		select {
		case entered <- g:
		default:
		}
		<-unblock
	})
	require.NoError(t, err)
	t.Cleanup(stop)

	key, a := uniqueName(t), newOwner()
	mustAcquire(t, p, key, a, queueTTL)
	w1 := lock.Wait{Owner: newOwner(), TTL: queueTTL, Inbox: inbox}
	mustQueue(t, ctx, p, key, w1)
	released := make(chan error, 1)
	go func() { released <- p.Release(ctx, key, a) }() // the memory provider delivers in Release
	select {
	case g := <-entered:
		assert.Equal(t, w1.Owner, g.Owner)
	case <-time.After(5 * time.Second):
		require.FailNow(t, "deliver was not called within 5s of the grant")
	}

	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	select {
	case <-stopped:
		assert.Fail(t, "stop returned while deliver was still running; wanted it to wait for deliver")
	case <-time.After(100 * time.Millisecond):
	}
	release()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		require.FailNow(t, "stop did not return within 5s after deliver returned")
	}
	require.NoError(t, <-released)
	stop() // a second stop returns at once

	// The inbox is no longer listened to: the next grant does not reach deliver.
	w2 := lock.Wait{Owner: newOwner(), TTL: queueTTL, Inbox: inbox}
	mustQueue(t, ctx, p, key, w2)
	require.NoError(t, p.Release(ctx, key, w1.Owner))
	assert.EqualValues(t, 1, calls.Load(), "deliver is not called after stop returned")
	_ = p.Release(ctx, key, w2.Owner)
}

// listenAgainAfterStop: an inbox whose Listen stopped can be listened to
// again, and the new Listen gets its grants.
func (s *suite) listenAgainAfterStop(t *testing.T) {
	p, ctx := s.p, s.ctx
	inbox := "inbox:" + uniqueName(t)
	stop, err := p.Listen(ctx, inbox, func(lock.Notice) {})
	require.NoError(t, err)
	stop()
	handsOver(t, ctx, p, listenOn(t, ctx, p, inbox), "the second Listen on the inbox gets its grants")
}

// listenTwiceSameInbox: a provider with Backend.ExclusiveInbox (the memory
// provider) refuses a second Listen on an inbox that is listened to, and the
// first keeps its grants.
func (s *suite) listenTwiceSameInbox(t *testing.T) {
	if !s.b.ExclusiveInbox {
		t.Skip("the backend may let two Listens share an inbox (Backend.ExclusiveInbox is false), as the Redis provider does (each is a subscription); the contract leaves it open")
	}
	p, ctx := s.p, s.ctx
	in := listen(t, ctx, p)
	stop, err := p.Listen(ctx, in.name, func(lock.Notice) {})
	assert.ErrorIs(t, err, lock.ErrInvalidArgument, "a second Listen on an inbox already listened to is refused")
	assert.Nil(t, stop, "a refused Listen returns no stop function")
	handsOver(t, ctx, p, in, "the first Listen still gets the inbox's grants")
}

// listenBadInput: Listen refuses an empty, too long or white-space inbox and a
// nil deliver.
func (s *suite) listenBadInput(t *testing.T) {
	deliver := func(lock.Notice) {}
	cases := []struct {
		name, inbox string
		deliver     func(lock.Notice)
	}{
		{"EmptyInbox", "", deliver},
		{"InboxWithSpace", "in box", deliver},
		{"InboxOnlySpace", " ", deliver},
		{"InboxWithTab", "in\tbox", deliver},
		{"InboxWithNewline", "inbox\n", deliver},
		{"InboxTooLong", strings.Repeat("i", lock.MaxKeyLen+1), deliver},
		{"NilDeliver", "inbox:" + uniqueName(t), nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			stop, err := s.p.Listen(s.ctx, c.inbox, c.deliver)
			assert.ErrorIs(t, err, lock.ErrInvalidArgument, "Listen rejects it")
			if !assert.Nil(t, stop, "a refused Listen returns no stop function") {
				stop()
			}
		})
	}
}

// queueBadInput: Queue and Leave refuse a bad key, owner, inbox or TTL, on a
// free key and on a held one, and no refused call takes the key or joins its
// queue.
func (s *suite) queueBadInput(t *testing.T) {
	p, ctx := s.p, s.ctx
	key := uniqueName(t)
	in := listen(t, ctx, p)
	check := func(t *testing.T) {
		for _, c := range BadWaits(key, in.waiter(queueTTL)) {
			t.Run(c.Name, func(t *testing.T) { c.Check(t, ctx, p) })
		}
	}
	t.Run("FreeKey", check)
	a := newOwner()
	mustAcquire(t, p, key, a, queueTTL) // no bad call took the key
	t.Run("HeldKey", check)
	require.NoError(t, p.Release(ctx, key, a))
	assertFree(t, ctx, p, key, "no bad Queue joined the queue: the release frees the key")
	quiet(t, ctx, p, in)
}

// concurrentHandOver: workers on two replicas queue for one key round after
// round, each waiting for its grant (or finding it by looking again); at most
// one holds the key at any instant, tokens increase from holder to holder,
// and every wait ends within a generous bound.
func (s *suite) concurrentHandOver(t *testing.T) {
	const workers, maxWait = 8, 5 * time.Second
	rounds := 25 // 200 grants
	if s.b.Remote {
		rounds = 5 // 40 grants
	}
	key := uniqueName(t)
	ps := []lock.Provider{s.p, s.b.New(t)}
	var inside, maxInside, grants atomic.Int64
	var lastToken atomic.Uint64
	var byReply, byGrant, byLook atomic.Int64 // how the turns came
	var wg sync.WaitGroup
	for i := range workers {
		pw := ps[i%2]
		in := listen(t, s.ctx, pw) // one inbox per worker, as one per Client
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				w := in.waiter(queueTTL)
				w.Look = join(r%2 == 1)
				start := time.Now()
				token, how, err := takeTurn(s.ctx, pw, key, in, w, maxWait)
				if !assert.NoError(t, err, "worker %d round %d: wanted its turn within %v", i, r, maxWait) {
					return
				}
				grants.Add(1)
				map[string]*atomic.Int64{"reply": &byReply, "grant": &byGrant, "look": &byLook}[how].Add(1)
				raise(&maxInside, inside.Add(1))
				assert.Greater(t, token, lastToken.Load(), "each holder's token is greater than the previous holder's")
				lastToken.Store(token)
				runtime.Gosched()
				inside.Add(-1)
				if !assert.NoError(t, pw.Release(s.ctx, key, w.Owner), "worker %d round %d: the holder releases (waited %v)",
					i, r, time.Since(start)) {
					return
				}
			}
		}()
	}
	wg.Wait()
	assert.EqualValues(t, 1, maxInside.Load(), "at most one holder at any instant")
	assert.EqualValues(t, workers*rounds, grants.Load(), "every waiter got its turn in every round")
	assertFree(t, s.ctx, s.p, key, "the key is free after every holder released")
	t.Logf("%d turns: %d taken at once, %d by a grant message, %d by looking again",
		grants.Load(), byReply.Load(), byGrant.Load(), byLook.Load())
}

// takeTurn queues w for key and waits until w.Owner holds it: told by a grant
// on in, or found by looking again (Again) every 200ms. It returns the token
// of the grant and how it came ("reply" to the first Queue, "grant" message,
// "look" again), or an error when the wait took longer than limit.
func takeTurn(ctx context.Context, p lock.Provider, key string, in *listener, w lock.Wait, limit time.Duration) (uint64, string, error) {
	timeout := time.NewTimer(limit)
	defer timeout.Stop()
	look := time.NewTicker(200 * time.Millisecond)
	defer look.Stop()
	rec, err := p.Queue(ctx, key, w)
	how := "reply"
	w.Look = lock.LookAgain
	for {
		switch {
		case err != nil:
			return 0, "", err
		case rec.Owner == w.Owner && !rec.GracePeriod:
			return rec.Token, how, nil
		case !rec.Queued:
			return 0, "", fmt.Errorf("neither granted nor queued: %+v", rec)
		}
		select {
		case g := <-in.ch:
			if g.Key == key && g.Owner == w.Owner {
				return g.Token, "grant", nil
			}
			// A grant of an earlier round, found by looking again.
		case <-look.C:
			rec, err = p.Queue(ctx, key, w)
			how = "look"
		case <-timeout.C:
			return 0, "", fmt.Errorf("waited %v without a grant", limit)
		}
	}
}

// join returns LookJoin when contended, LookFirst otherwise.
func join(contended bool) lock.Look {
	if contended {
		return lock.LookJoin
	}
	return lock.LookFirst
}

// assertHolder checks that owner holds key under token: msg says why it
// should.
func assertHolder(t *testing.T, p lock.Provider, key, owner string, token uint64, msg string) {
	t.Helper()
	h := holder(t, p, key)
	assert.Equal(t, owner, h.Owner, msg)
	assert.Equal(t, token, h.Token, msg)
}
