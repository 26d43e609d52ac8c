package etcd_test

import (
	"testing"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/etcd"
	"github.com/seed05627090/lock/locktest"
)

// TestConformance runs the provider conformance suite against a member
// started in the test process. Each provider New returns has a client of
// its own, standing in for another process.
func TestConformance(t *testing.T) {
	ns := testNamespace()
	locktest.Run(t, locktest.Backend{
		New:             func(t testing.TB) lock.Provider { return newProvider(t, ns) },
		Expires:         true,
		SkipsUnlistened: true,
		// Two Listens on one inbox are two watches of its messages.
		ExclusiveInbox: false,
		Remote:         true,
		TTLGranularity: etcd.TTLGranularity,
	})
}
