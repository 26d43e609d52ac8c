// Package lock provides distributed locks for Go services that run as several
// replicas: a job that must run once, a migration the others wait for, an order
// that two requests must not process at once. A [Provider] stores the locks:
// the memory provider ([NewMemoryProvider]) in this process, [RedisProvider]
// on a Redis server, Sentinel or Cluster, and the postgres and etcd modules
// of this repository on PostgreSQL and etcd. A [Client] acquires, renews and
// releases them.
//
//	c, _ := lock.NewClient(lock.NewMemoryProvider())
//	defer c.Close()
//	err := c.Do(ctx, "nightly-report", lock.Options{}, func(ctx context.Context) error {
//		return sendReport(ctx) // runs in one replica at a time
//	})
//
// A held lock is a lease that the holder renews while it runs. When it is lost
// (renewal fails, the record is gone, MaxDuration is reached) the holder is
// told: its context is cancelled with an error matching [ErrLost]. Every grant
// carries a fencing token that the protected resource can check
// ([RedisFence], [SQLFence]).
//
// # Using it
//
// Locks: [Client.Do], [Client.Acquire] (which returns the held [Lock]),
// [Middleware] and [HTTPMiddleware] (a lock per call, named from its
// argument or request), [New] (a [Primitive]: a job that runs in one replica
// at a time, that the others wait for, or that runs at most once per window)
// and [Client.RunTick] for scheduled jobs. On every provider too: leader
// election ([Client.Campaign], [Client.Lead], [Client.Observe]) and
// all-or-nothing multi-locks ([Client.AcquireAll], [Client.DoAll]), made
// of locks; semaphores ([Client.Semaphore]) and read-write locks
// ([Client.RWMutex]), one counted claim per hold; the last three return a
// [Hold]. Operators: [Client.Inspect], [Client.List],
// [Client.ForceRelease]; [WithEvents] reports every grant, wait, renewal,
// loss and release as an [Event] ([PartOf] says what its lock is part of).
// Errors are tested with errors.Is against the Err values;
// [NotAcquiredError] and [LostError] say why.
//
// # Writing a backend
//
// Only a backend's author needs these: the [Provider] contract and its
// values ([Record], [Wait], [Look], [Notice], [Claim], [Claims]); the
// input checks every provider makes first, in package
// [github.com/seed05627090/lock/check] (and [Wait.Check], [Claim.Check]);
// a Redis client's driver, in package
// [github.com/seed05627090/lock/redisdriver]; and the conformance suite
// in package [github.com/seed05627090/lock/locktest], which the built-in
// providers pass as any other backend must.
package lock
