package etcd_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/etcd"
)

// splitResult is what split saw of one partition of the leader.
type splitResult struct {
	told     time.Duration // from the cut to the cut-off holder told of its loss
	margin   time.Duration // from then to the majority's grant of its lock
	majority time.Duration // from the cut to the majority's grant of a free lock
	tries    int           // the minority's tries at that lock, none granted
}

// split cuts the leader off from its peers, both ways, while its client
// port stays up, for stall or until the minority's holder is told of its
// loss, whichever is longer, with two lock.Clients in this process: the
// minority's, whose etcd client knows only the leader's endpoint, and the
// majority's, which knows the others'. Before the cut, the minority takes
// the lock name+"/held". During it, the minority tries to take
// name+"/free", again and again, while the majority takes it. After it,
// the majority takes the held lock (once the minority's record is gone) and
// makes a fenced write to its resource, and then the minority's holder,
// told of its loss, writes with its old token. It asserts that the minority
// got no lock, that its holder was told of its loss within its lease (plus
// 1s for a loaded machine) and before the majority's grant, and that its
// late write was refused; the grants, holds and writes go to h, for the
// test's checks.
func (c *cluster) split(ctx context.Context, t *testing.T, leader int, ns string, lease, stall time.Duration, name string, h *history) (r splitResult) {
	t.Helper()
	others := slices.Delete(slices.Clone(c.endpoints), leader, leader+1)
	minority := newSide(ctx, t, ns, "minority", c.endpoints[leader])
	defer minority.close()
	majority := newSide(ctx, t, ns, "majority", others...)
	defer majority.close()
	held, free := name+"/held", name+"/free"

	ml := minority.take(ctx, t, held, lease, false, h)
	told := make(chan time.Time, 1)
	go func() {
		<-ml.Done() // released at the latest by the minority's Close
		told <- time.Now()
	}()
	cut := time.Now()
	c.net.partition(leader)
	defer c.net.heal()
	tries, grants := make(chan int, 1), make(chan int, 1)
	stop := make(chan struct{})
	go func() {
		n, g := minority.tryUntil(stop, free, lease)
		tries <- n
		grants <- g
	}()

	fl := majority.take(ctx, t, free, lease, true, h)
	r.majority = time.Since(cut)
	var toldAt time.Time
	select {
	case toldAt = <-told:
	case <-time.After(10 * time.Second):
		require.Fail(t, "the cut-off holder is told of its loss")
	}
	etcd.Sleep(ctx, time.Until(cut.Add(stall)))
	c.net.heal()
	close(stop)
	r.tries = <-tries
	assert.Zero(t, <-grants, "no grant on the minority side: its tries at %s while the majority held it", free)

	hl := majority.take(ctx, t, held, lease, true, h)
	heldAt := time.Now()
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, fencedWrite(wctx, majority.cli, ns, held, hl.Token(), false, h.add), "the majority's write")
	h.add(event{Kind: "span", Lock: held, Token: ml.Token(), Start: ml.start.UnixNano(), End: toldAt.UnixNano(), Lost: true})
	r.told, r.margin = toldAt.Sub(cut), heldAt.Sub(toldAt)
	assert.ErrorIs(t, ml.Err(), lock.ErrLost, "the cut-off holder's lock ends as lost")
	assert.LessOrEqual(t, r.told, lease+time.Second, "the cut-off holder is told of its loss within its lease (+1s) of the cut")
	assert.Positive(t, r.margin, "the cut-off holder is told of its loss before the majority's grant")

	err := fencedWrite(wctx, minority.cli, ns, held, ml.Token(), true, h.add)
	assert.ErrorIs(t, err, lock.ErrStaleToken, "the cut-off holder's write after its loss is refused")
	majority.release(ctx, fl, h)
	majority.release(ctx, hl, h)
	return r
}

// side is a lock.Client of the test process on some of the members.
type side struct {
	cli *clientv3.Client
	p   *etcd.Provider
	lc  *lock.Client
}

func newSide(ctx context.Context, t *testing.T, ns, identity string, endpoints ...string) *side {
	cli := newFaultClient(t, endpoints...)
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	p, err := etcd.NewProvider(pctx, cli, etcd.WithNamespace(ns), etcd.WithProgressInterval(faultProgress),
		etcd.WithRequestTimeout(time.Second))
	require.NoError(t, err)
	lc, err := lock.NewClient(p, lock.WithIdentity(identity))
	require.NoError(t, err)
	return &side{cli: cli, p: p, lc: lc}
}

// heldLock is a lock the side took, and when.
type heldLock struct {
	*lock.Lock
	start time.Time
}

// take takes the lock name (waiting up to 15s if wait) and records the
// grant in h.
func (s *side) take(ctx context.Context, t *testing.T, name string, lease time.Duration, wait bool, h *history) heldLock {
	t.Helper()
	actx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	l, err := s.lc.Acquire(actx, name, lock.Options{Wait: wait, Lease: lease})
	require.NoError(t, err, "taking %s", name)
	start := time.Now()
	h.add(event{Kind: "grant", Lock: name, Token: l.Token(), Start: start.UnixNano()})
	return heldLock{Lock: l, start: start}
}

// release releases l and records its span in h.
func (s *side) release(ctx context.Context, l heldLock, h *history) {
	_ = l.Release(ctx)
	h.add(event{Kind: "span", Lock: l.Key(), Token: l.Token(), Start: l.start.UnixNano(), End: time.Now().UnixNano()})
}

// tryUntil tries to take the lock name, without waiting, each try given up
// after a second, until stop closes; it returns how many tries it made and
// how many were granted.
func (s *side) tryUntil(stop <-chan struct{}, name string, lease time.Duration) (tries, grants int) {
	for {
		select {
		case <-stop:
			return tries, grants
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		l, err := s.lc.Acquire(ctx, name, lock.Options{Lease: lease})
		cancel()
		tries++
		if err == nil {
			grants++
			_ = l.Release(context.Background())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *side) close() {
	_ = s.lc.Close()
	_ = s.p.Close()
	_ = s.cli.Close()
}
