package rueidis_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/faults"
	"github.com/seed05627090/lock/internal/testenv/servers"
	"github.com/seed05627090/lock/redisdriver"
	lockrueidis "github.com/seed05627090/lock/rueidis"
)

// TestDeadlineEndsItsCallAlone: a call whose context ends while the server
// has not answered fails with its context's error, and the call of another
// caller, sent on the same connection meanwhile, still gets its reply. On a
// connection not yet pipelining, rueidis sets a call's deadline on the
// connection and closes it when the deadline passes, failing every call
// queued behind with context.DeadlineExceeded, whatever their own contexts
// (seen as a try that failed with "context deadline exceeded" in the
// conformance suite's mixed load on a loaded machine, behind a wait with a
// short MaxWait).
func TestDeadlineEndsItsCallAlone(t *testing.T) {
	p, err := faults.NewProxy(servers.RedisAddr(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	// One connection, which has served one call at a time so far.
	d := lockrueidis.NewDriver(dial(t, rueidis.ClientOption{InitAddress: []string{p.Addr()}, PipelineMultiplex: -1}))
	ctx := ctxTimeout(t, 10*time.Second)
	ping := &redisdriver.Command{Args: []any{"ping"}}
	d.Exec(ctx, []*redisdriver.Command{ping})
	require.NoError(t, ping.Err)

	p.Pause(faults.Requests)
	short := &redisdriver.Command{Args: []any{"ping", "short"}}
	sent := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		close(sent)
		d.Exec(sctx, []*redisdriver.Command{short})
	}()
	<-sent
	time.Sleep(200 * time.Millisecond) // the short call is sent, unanswered
	other := &redisdriver.Command{Args: []any{"ping", "other"}}
	answered := make(chan struct{})
	go func() {
		defer close(answered)
		d.Exec(ctx, []*redisdriver.Command{other})
	}()
	<-done
	assert.ErrorIs(t, short.Err, context.DeadlineExceeded, "the short call ended with its context")
	p.Resume()
	<-answered
	require.NoError(t, other.Err, "the other call, whose context is live, is answered")
	assert.Equal(t, "other", other.Reply)
}

// TestDeadlines runs faults.Deadlines through this driver: every call of the
// library returns by its context's deadline (or MaxWait) whatever the
// server behind a proxy does (refuses, never answers, answers late, drops
// the connection), although exec hides the deadline from rueidis.
func TestDeadlines(t *testing.T) {
	p, err := faults.NewProxy(faults.StartRedis(t).Addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	faults.Deadlines(t, p, func(t *testing.T) *lock.Client {
		return newClient(t, lockrueidis.NewProvider(dial(t, rueidis.ClientOption{InitAddress: []string{p.Addr()}})))
	})
}
