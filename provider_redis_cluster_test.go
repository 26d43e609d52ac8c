package lock

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed05627090/lock/internal/testenv/servers"
	"github.com/seed05627090/lock/redisdriver"
)

// TestWrappedClusterClientIsACluster: a type that embeds a
// *redis.ClusterClient (an instrumented wrapper) is taken for the Cluster
// client it is, once, in NewRedisProvider, so that List scans every primary,
// WAIT goes to the key's primary and grants use sharded pub/sub (issue 21:
// each of those asserted *redis.ClusterClient itself, and a wrapper lost
// them silently); a single-node client is not.
func TestWrappedClusterClientIsACluster(t *testing.T) {
	type wrapped struct{ *redis.ClusterClient }
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	defer cc.Close()
	for name, c := range map[string]redis.UniversalClient{"cluster": cc, "wrapped cluster": wrapped{cc}} {
		if p := NewRedisProvider(c); !p.cluster {
			t.Errorf("a %s client is not taken for a Cluster", name)
		}
	}
	single := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer single.Close()
	if p := NewRedisProvider(single); p.cluster {
		t.Error("a single-node client is taken for a Cluster")
	}
}

// flakyShards is a driver whose PrimaryForKey gives a node that refuses
// connections for its first fails calls, then live.
type flakyShards struct {
	redisdriver.Driver
	dead, live redisdriver.Node
	fails      int
	calls      atomic.Int32
}

func (f *flakyShards) PrimaryForKey(context.Context, string) (redisdriver.Node, error) {
	if int(f.calls.Add(1)) <= f.fails {
		return f.dead, nil
	}
	return f.live, nil
}

// newFlakyShards returns a flakyShards whose live node is live's.
func newFlakyShards(live, dead *redis.Client, fails int) *flakyShards {
	d := newGoRedis(live)
	return &flakyShards{Driver: d, dead: newGoRedis(dead).self, live: d.self, fails: fails}
}

// TestWatchFollowKeepsTrying: a Watch whose shard channel Redis ended (its
// slot moved) subscribes it anew where the slot lives; while that node
// cannot be reached, it tries again after a pause, until it is stopped.
// Before, a first round of tries that failed left it deaf for good
// (follow returned nil after one call here).
func TestWatchFollowKeepsTrying(t *testing.T) {
	live := servers.Redis(t)
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer dead.Close()
	t.Run("reached at last", func(t *testing.T) {
		f := newFlakyShards(live, dead, 3)
		var notices atomic.Int32
		s := &subscription{driver: f, sharded: true, channel: "lock-test:follow:w", deliver: func(Notice) { notices.Add(1) }}
		s.ctx, s.cancel = context.WithCancel(context.Background())
		defer s.cancel()
		ps := s.follow()
		if ps == nil {
			t.Fatalf("follow gave up after %d tries", f.calls.Load())
		}
		defer ps.Close()
		if got := f.calls.Load(); got != 4 {
			t.Errorf("%d tries, want 4 (3 refused, then the live node)", got)
		}
		if notices.Load() != 1 {
			t.Errorf("%d notices delivered once subscribed, want 1", notices.Load())
		}
	})
	t.Run("stopped while it tries", func(t *testing.T) {
		f := newFlakyShards(live, dead, 1<<30)
		s := &subscription{driver: f, sharded: true, channel: "lock-test:follow:w", deliver: func(Notice) { t.Error("a notice, never subscribed") }}
		s.ctx, s.cancel = context.WithCancel(context.Background())
		time.AfterFunc(500*time.Millisecond, s.cancel)
		done := make(chan redisdriver.PubSub)
		go func() { done <- s.follow() }()
		select {
		case ps := <-done:
			if ps != nil {
				t.Error("follow subscribed on a node that refuses connections")
			}
		case <-time.After(10 * time.Second):
			t.Fatal("follow did not return within 10s of its stop")
		}
		if f.calls.Load() < 2 {
			t.Errorf("%d tries before the stop, want more than one", f.calls.Load())
		}
	})
}
