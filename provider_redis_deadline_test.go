package lock

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed05627090/lock/internal/testenv/servers"
)

// TestShardedDetectionHonoursTheContext: while one caller finds out
// whether a Cluster has sharded pub/sub from nodes that never answer,
// another caller waits for that only as long as its context lets it (issue
// 38 item 7: the detection held a mutex across its network calls, and a
// caller with a 200 ms deadline waited for the first one's read timeout).
func TestShardedDetectionHonoursTheContext(t *testing.T) {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{servers.Silent(t)}, ReadTimeout: 2 * time.Second, MaxRetries: -1})
	defer cc.Close()
	p := NewRedisProvider(cc)
	first := make(chan struct{})
	go func() {
		defer close(first)
		_, _ = p.sharded(context.Background()) // holds the detection until go-redis gives up
	}()
	time.Sleep(100 * time.Millisecond) // the first caller is detecting
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := p.sharded(ctx)
	took := time.Since(start)
	if err == nil {
		t.Error("sharded answered although no node did")
	}
	if took > 1500*time.Millisecond {
		t.Errorf("a caller with a 200ms deadline waited %v for another's detection", took)
	}
	<-first
}

// TestBatchEndsWithItsCallers: a round trip of scripts that callers with
// deadlines asked for gives up once the last of them has, with a client
// that honours deadlines (ContextTimeoutEnabled), rather than hold the
// batcher until go-redis's read timeout (issue 38 item 7: a batch ran on a
// context that was never cancelled, so a server that hung held it, and
// every call behind it, for the read timeout: 10 s here).
func TestBatchEndsWithItsCallers(t *testing.T) {
	rc := redis.NewClient(&redis.Options{Addr: servers.Silent(t), ContextTimeoutEnabled: true, ReadTimeout: 10 * time.Second, MaxRetries: -1, PoolSize: 16})
	defer rc.Close()
	p := NewRedisProvider(rc)
	var wg sync.WaitGroup
	for range 8 { // more than the round trips under way at once: some are batched
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			_, _ = p.Inspect(ctx, "lock:{batch}")
		}()
	}
	wg.Wait()
	deadline := time.Now().Add(2 * time.Second)
	for {
		p.batch.mu.Lock()
		n := p.batch.inFlight
		p.batch.mu.Unlock()
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d round trips still under way 2s after their callers gave up", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestConfirmerStartsNothingAfterStop: a confirmer that stopped starts no
// confirmation, whatever calls grant (issue 38 item 7: the WaitGroup's Add
// was made outside the confirmer's lock, so that a grant after stop, or
// racing with it, added to a WaitGroup that stop had waited on already;
// right only while the subscription stopped first). With the Add outside
// the lock, a grant after stop ran a renewal.
func TestConfirmerStartsNothingAfterStop(t *testing.T) {
	var mu sync.Mutex
	renewals, delivered := 0, 0
	c := &confirmer{
		renew: func(context.Context, Notice) error {
			mu.Lock()
			defer mu.Unlock()
			renewals++
			return nil
		},
		timeout: time.Second,
	}
	first := make(chan struct{})
	c.deliver = func(Notice) {
		mu.Lock()
		defer mu.Unlock()
		if delivered++; delivered == 1 {
			close(first)
		}
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.grant(Notice{Key: "lock:{c}", Owner: "o", Token: 1, TTL: time.Second})
	<-first
	c.stop()
	mu.Lock()
	if renewals != 1 || delivered != 1 {
		t.Fatalf("before stop: %d renewals, %d grants delivered; want 1 and 1", renewals, delivered)
	}
	mu.Unlock()
	c.grant(Notice{Key: "lock:{c}", Owner: "o", Token: 2, TTL: time.Second})
	c.wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if renewals != 1 || delivered != 1 {
		t.Errorf("after stop: %d renewals, %d grants delivered; want none more", renewals-1, delivered-1)
	}
}
