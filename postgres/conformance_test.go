package postgres_test

import (
	"testing"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/locktest"
)

// TestConformance runs the provider conformance suite. Each provider New
// returns has a pool of its own, standing in for another process.
func TestConformance(t *testing.T) {
	prefix := testPrefix(t)
	locktest.Run(t, locktest.Backend{
		New:     func(t testing.TB) lock.Provider { return newProvider(t, prefix) },
		Expires: true,
		// PostgreSQL cannot tell whether anyone listens on a channel.
		SkipsUnlistened: false,
		// Two Listens on one inbox are two LISTENs on one channel.
		ExclusiveInbox: false,
		Remote:         true,
	})
}
