package rueidis_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/seed05627090/lock/internal/testenv"
	"github.com/seed05627090/lock/internal/testenv/servers"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(servers.Main(m), // stops the Redis the tests started
		// rueidis's own goroutines that outlive a closed Cluster client by
		// up to 5 s after its map of slots changed: one closes the
		// connections to nodes no longer in the map, the other delays a
		// refresh of the map.
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"),
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*call).DelayDo.func1"),
	)
}

// The test environment's helpers (internal/testenv of the root module,
// which this module may import: Go's internal rule goes by import path),
// under the short names the tests use.
var (
	uniqueName = testenv.Name      // a name no other test uses
	ctxTimeout = testenv.Context   // a context that ends after d, or with the test
	newClient  = testenv.NewClient // a lock Client closed with the test
)

// newRueidis returns a rueidis client of the tests' Redis (servers.RedisAddr:
// LOCK_REDIS_ADDR, or a server of the test binary's own), with rueidis's
// defaults, closed at the end of the test.
func newRueidis(t testing.TB) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{servers.RedisAddr(t)}})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// cleanKeys deletes, at the end of t, the keys that t wrote: every one
// holds its name (see uniqueName), fencing counters included.
func cleanKeys(t testing.TB) {
	t.Helper()
	c := newRueidis(t)
	t.Cleanup(func() { // runs before c is closed
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var cursor uint64
		for {
			e, err := c.Do(ctx, c.B().Scan().Cursor(cursor).Match(testenv.Pattern(t)).Count(1000).Build()).AsScanEntry()
			if err != nil {
				t.Errorf("deleting the test's keys: %v", err)
				return
			}
			for _, k := range e.Elements {
				_ = c.Do(ctx, c.B().Del().Key(k).Build()).Error()
			}
			if cursor = e.Cursor; cursor == 0 {
				return
			}
		}
	})
}
