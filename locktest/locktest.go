// Package locktest is the conformance suite of lock.Provider, exported so
// that a backend written outside this module proves itself the way the
// built-in providers (memory, Redis) do: they pass this very suite. A backend
// author runs it from a test of their own package:
//
//	func TestConformance(t *testing.T) {
//		srv := startServer(t) // the storage every replica shares
//		locktest.Run(t, locktest.Backend{
//			New: func(t testing.TB) lock.Provider {
//				p := mybackend.New(srv.Addr()) // its own connections
//				t.Cleanup(func() { _ = p.Close() })
//				return p
//			},
//			Expires: true,
//			Remote:  true,
//		})
//	}
//
// The suite works through the lock.Provider interface only. It checks
// records, fencing tokens, renewals and grace periods (Acquire, Release,
// Renew, Finish), bad input, the wait queue (Queue, Leave, Listen, and how
// Release and Finish serve a queue), the counted names (the claim methods),
// one kind a key (a lock's record and a counted name's claims, or counted
// names of two kinds, refuse each other, also when two callers race), and
// what operators use (Inspect, List,
// ForceRelease), and what a lock.Client on the provider promises where it
// rests on the provider's answers (a lock found lost is reported, with why,
// before Done is closed); each check is a subtest named after the
// property it checks, so that one can be rerun with go test -run. Last,
// HistoryIsLinearizable runs several Clients at once (locks, semaphore
// holds, an election and its Observe, fenced writes; one Client stalled and
// one dead, where records expire), records every operation in a History,
// and checks it with a linearizability checker (porcupine) against models
// of a lock, a counted name, a fenced resource and an election: a failure
// names the file of its visualization (docs/testing.md). Checks of
// behaviour that the contract leaves open run only when the Backend says the
// provider has it (see its fields).
//
// Every key and inbox the suite uses contains the name of the subtest that
// uses it (t.Name(), with "/" replaced by ":") and a random part, so runs can
// share one server, and what a run left there can be found by its name. A
// check that passes releases every record it took; what a backend keeps
// beside its records (the Redis provider's fencing counters, one per
// hash slot and prefix, which never expire) is the backend's to clean up.
package locktest

import (
	"context"
	"testing"
	"time"

	"github.com/seed05627090/lock"
)

// Backend describes the provider under test to Run. Only New is required.
// The zero value of every other field is the cautious one: a false
// capability (Expires, SkipsUnlistened, ExclusiveInbox) skips the checks that
// need it, and a false Remote runs the concurrent checks at full size.
type Backend struct {
	// New returns a provider over the backend's storage. Each call may return
	// a new provider, with its own connections, standing in for another
	// process: every provider New returns must share the records, queues and
	// inboxes of the others (an in-process backend may return one provider
	// every time). Resources it opens are closed with t.Cleanup. Run calls
	// it once for most checks, and again for the checks that involve two
	// processes. Required.
	New func(t testing.TB) lock.Provider

	// Expires says that records expire in real time when their TTL runs out.
	// When false (a server whose clock does not run, such as miniredis),
	// the checks that wait for a record to expire are skipped, or stop
	// before that part.
	Expires bool

	// SkipsUnlistened says that Release, handing a key on, passes over a
	// waiter whose inbox nobody listens to, and frees the key when no
	// waiter is left; the memory provider and the Redis provider do (on a
	// Redis Cluster only with sharded pub/sub, where SPUBLISH counts its
	// receivers exactly). When false, that check is skipped.
	SkipsUnlistened bool

	// ExclusiveInbox says that Listen refuses, with lock.ErrInvalidArgument,
	// an inbox that another Listen is listening to, as the memory provider
	// does; the Redis provider lets two Listens share one. When false, that
	// check is skipped.
	ExclusiveInbox bool

	// TTLGranularity is the step in which the backend stores TTLs, when it
	// rounds them up (etcd: leases of whole seconds, so 1s): a record asked
	// to live 1ms lives up to a step, and every renewal in that time sets
	// another step. When not zero, the checks that make a record expire
	// (expire, used by FairServesFirstWaiter, AgainServesFirstWaiter and
	// NonFairTakesFreeKey) shorten its TTL once and wait for the record to
	// be gone, watching with Inspect rather than with renewals of 1ms, for
	// up to 5s plus two steps. When zero, the TTLs asked for are kept to
	// the millisecond, as the memory and Redis providers keep them.
	TTLGranularity time.Duration

	// MinLease is the shortest lease the backend keeps a record for, when
	// it raises shorter ones (etcd: the server's minimum lease,
	// etcd.Provider.MinTTL). ElectionFailover, whose leases are 1s, bounds
	// a failover by the longer of the two plus the poll interval. When zero,
	// the lease asked for is kept. Run does not read it.
	MinLease time.Duration

	// Fence returns the backend's own fenced resource (a RedisFence, an
	// SQL fence, etcd.Fence), which the history check's holders write
	// through with their tokens (see Workload); nil for one in this
	// process's memory (NewMemoryFence). Resources it opens are closed with
	// t.Cleanup.
	Fence func(t testing.TB) Fence

	// Remote says that each call is a round trip to a server: the checks
	// that take many grants in a row or at once take fewer (30 grants in a
	// row rather than 100, 8 workers of 40 rounds rather than 16 of 200, 40
	// queued hand-overs rather than 200), so that they stay quick. When false,
	// the full number is taken.
	Remote bool
}

// Run runs the conformance suite against b as subtests of t, one for each
// property checked, one after another. When it returns, every check has run,
// and t has failed if any check did; a check that passed left no record
// behind. Run fails t at once when b.New is nil.
func Run(t *testing.T, b Backend) {
	t.Helper()
	if b.New == nil {
		t.Fatal("locktest: Backend.New is nil")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	t.Cleanup(cancel)
	s := &suite{b: b, p: b.New(t), ctx: ctx}
	s.runRecords(t)
	s.runQueue(t)
	s.runClaims(t)
	s.runInspect(t)
	s.runClient(t)
	s.runElection(t)
	s.runWatch(t)
	s.runHolds(t)
	s.runKinds(t)
	s.runHistory(t)
}

// suite is one backend's provider under test.
type suite struct {
	b   Backend
	p   lock.Provider
	ctx context.Context
}

// expires reports whether the backend's records expire in real time, and
// says so in the log when they do not.
func (s *suite) expires(t *testing.T) bool {
	t.Helper()
	if !s.b.Expires {
		t.Log("the backend's TTLs do not run out in real time (Backend.Expires is false); expiry not checked")
		return false
	}
	return true
}
