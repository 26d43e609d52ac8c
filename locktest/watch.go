package locktest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/testenv"
)

// runWatch checks the provider's Watch and Notify, and Client.Observe built
// on them: a watcher polls once an hour, so that what it sees it heard, or
// read when a record expired.
func (s *suite) runWatch(t *testing.T) {
	t.Run("WatchHearsEveryNotifyOfItsKey", s.watchHearsNotify)
	t.Run("ObserveHearsATermShorterThanItsPoll", s.observeHearsShortTerm)
	t.Run("ObserveSeesALeaderThatStoppedAtItsExpiry", s.observeSeesExpiry)
}

// watch opens a Watch of key on p until the end of the test, keeping
// what it delivers.
func watch(t *testing.T, ctx context.Context, p lock.Provider, key string) *listener {
	t.Helper()
	w, stop := record(t, "watch of "+key, func(deliver func(lock.Notice)) (func(), error) { return p.Watch(ctx, key, deliver) })
	t.Cleanup(stop)
	return w
}

// heard returns the next notice of w with a Key (one without says that
// notices may have been lost: a reconnection), waiting up to 5s for each.
func heard(t *testing.T, w *listener, what string) lock.Notice {
	t.Helper()
	for {
		if g := w.next(t, what); g.Key != "" {
			return g
		}
	}
}

// watchHearsNotify: two Watches of a key, on providers of their own, each
// hear every Notify of the key, from another provider, as sent (a term,
// then an end); a Watch of another key hears neither; a stopped Watch
// hears nothing more.
func (s *suite) watchHearsNotify(t *testing.T) {
	ctx := s.ctx
	key, other := uniqueName(t), uniqueName(t)+"-other"
	sender := s.b.New(t)
	a, b, o := watch(t, ctx, s.b.New(t), key), watch(t, ctx, s.b.New(t), key), watch(t, ctx, s.b.New(t), other)
	stopped, stop := record(t, "stopped watch", func(deliver func(lock.Notice)) (func(), error) {
		return s.b.New(t).Watch(ctx, key, deliver)
	})
	stop()
	term := lock.Notice{Key: key, Owner: "leader-1", Token: 42, TTL: 1500 * time.Millisecond}
	require.NoError(t, sender.Notify(ctx, key, term))
	require.NoError(t, sender.Notify(ctx, key, lock.Notice{Key: key}))
	for _, w := range []*listener{a, b} {
		assert.Equal(t, term, heard(t, w, "the term"), "a Notice with Owner arrives as sent")
		assert.Equal(t, lock.Notice{Key: key}, heard(t, w, "the end"), "then the one without, in order")
	}
	// The other key's Watch is told its own Notify, and nothing before it.
	require.NoError(t, sender.Notify(ctx, other, lock.Notice{Key: other}))
	assert.Equal(t, lock.Notice{Key: other}, heard(t, o, "the other key's notice"), "a Watch hears only its key")
	assert.Empty(t, stopped.ch, "a stopped Watch hears nothing")

	_, err := s.b.New(t).Watch(ctx, key, nil)
	assert.ErrorIs(t, err, lock.ErrInvalidArgument, "a nil deliver function")
	_, err = s.b.New(t).Watch(ctx, "", func(lock.Notice) {})
	assert.ErrorIs(t, err, lock.ErrInvalidArgument, "an empty key")
	assert.ErrorIs(t, sender.Notify(ctx, "", term), lock.ErrInvalidArgument, "Notify of an empty key")
}

// observeHearsShortTerm: a watcher that polls once an hour sees a term won
// and resigned at once, then nobody: it heard them (Campaign and Resign
// tell the role's Watches), it could not have read them.
func (s *suite) observeHearsShortTerm(t *testing.T) {
	ctx, stop := context.WithCancel(s.ctx)
	defer stop()
	role := uniqueName(t)
	cand := s.candidates(t, 1, 50*time.Millisecond)[0]
	watcher := newClient(t, s.b.New(t), lock.WithPollInterval(time.Hour))
	seen, err := watcher.Observe(ctx, role)
	require.NoError(t, err)
	first := nextLeader(t, seen, "the state now")
	require.True(t, first.Vacant(), "nobody leads yet: %+v", first)

	for i := range 3 {
		term, err := cand.Campaign(ctx, role, lock.ElectionOptions{})
		require.NoError(t, err)
		require.NoError(t, term.Resign(ctx))
		l := nextLeader(t, seen, "the short term")
		assert.Equal(t, term.Token(), l.Term, "term %d is seen although it lasted less than a poll", i+1)
		assert.Equal(t, term.Owner(), l.Owner, "term %d's owner", i+1)
		assert.Equal(t, "cand-0", l.Identity, "term %d's identity", i+1)
		assert.True(t, nextLeader(t, seen, "nobody, after Resign").Vacant(), "term %d ended", i+1)
	}
}

// observeSeesExpiry: a leader whose renewals never reach the provider (a
// process stopped, a network cut) loses its record at the end of its
// lease; a watcher that polls once an hour sees nobody lead then, because
// it reads when the record would expire.
func (s *suite) observeSeesExpiry(t *testing.T) {
	if !s.expires(t) {
		return
	}
	ctx, stop := context.WithCancel(s.ctx)
	defer stop()
	role := uniqueName(t)
	stalled := &testenv.Hooked{Provider: s.b.New(t), OnRenew: func(context.Context, string, string, time.Duration) error {
		return nil // the renewal is lost on the way, and the leader does not know
	}}
	leader := newClient(t, stalled)
	watcher := newClient(t, s.b.New(t), lock.WithPollInterval(time.Hour))
	seen, err := watcher.Observe(ctx, role)
	require.NoError(t, err)
	require.True(t, nextLeader(t, seen, "the state now").Vacant())

	lease := 600 * time.Millisecond
	asked := time.Now()
	term, err := leader.Campaign(ctx, role, lock.ElectionOptions{Lease: lease})
	require.NoError(t, err)
	l := nextLeader(t, seen, "the term")
	assert.Equal(t, term.Token(), l.Term)
	gone := nextLeader(t, seen, "nobody, once the record expired")
	assert.True(t, gone.Vacant(), "the stopped leader's record expired: %+v", gone)
	assert.GreaterOrEqual(t, time.Since(asked), lease-20*time.Millisecond, "not before the lease could end")
}

// nextLeader waits for the next value of an Observe channel, without Err.
func nextLeader(t *testing.T, seen <-chan lock.Leader, what string) lock.Leader {
	t.Helper()
	select {
	case l, ok := <-seen:
		require.True(t, ok, "the channel is open until the context ends (%s)", what)
		require.NoError(t, l.Err, what)
		return l
	case <-time.After(10 * time.Second):
		t.Fatalf("nothing observed within 10s: wanted %s", what)
	}
	return lock.Leader{}
}
