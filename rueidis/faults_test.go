package rueidis_test

import (
	"testing"

	"github.com/redis/rueidis"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/faults"
	"github.com/seed05627090/lock/internal/testenv"
	"github.com/seed05627090/lock/locktest"
	lockrueidis "github.com/seed05627090/lock/rueidis"
)

// TestDriverFaults runs the core fault scenarios of the root module's fault
// suite (faults.Scenarios: a stopped holder, a server restart, a Sentinel
// failover, killed pub/sub connections) through rueidis clients.
func TestDriverFaults(t *testing.T) {
	testenv.SkipShort(t, "the core fault scenarios (about 10 s)")
	single := func(t testing.TB, addr string) rueidis.Client {
		return dial(t, rueidis.ClientOption{InitAddress: []string{addr}})
	}
	faults.Scenarios(t, faults.Driver{
		Provider: func(t testing.TB, addr string) lock.Provider { return lockrueidis.NewProvider(single(t, addr)) },
		Sentinel: func(t testing.TB, addrs []string) lock.Provider {
			return lockrueidis.NewProvider(dial(t, rueidis.ClientOption{
				InitAddress: addrs, Sentinel: rueidis.SentinelOption{MasterSet: faults.MasterName},
			}))
		},
		Fence: func(t testing.TB, addr string) locktest.Fence { return redisFence{single(t, addr)} },
	})
}
