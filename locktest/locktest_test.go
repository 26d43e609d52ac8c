package locktest_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/locktest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestMemoryProvider runs the suite as a backend author would run it against
// their own provider: here the memory provider, whose replicas are one
// provider, since its storage is the process's memory.
func TestMemoryProvider(t *testing.T) {
	mem := lock.NewMemoryProvider()
	locktest.Run(t, locktest.Backend{
		New:             func(testing.TB) lock.Provider { return mem },
		Expires:         true,
		SkipsUnlistened: true,
		ExclusiveInbox:  true,
	})
}
