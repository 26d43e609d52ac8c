package lock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/seed05627090/lock"
)

// A RedisFence makes the write of a holder whose lock ended (it was paused
// past its lease: a GC pause, a stopped VM) fail once a later holder has
// written, so the resource keeps the later holder's data.
func ExampleRedisFence() {
	ctx := context.Background()
	srv, err := miniredis.Run() // or any Redis: the locks' or another
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()

	// The write, made once: its body is a Lua script of its own keys and
	// arguments, run only when the token passes the fence.
	saveInvoice := lock.NewRedisFence(`redis.call('SET', KEYS[1], ARGV[1])`)
	// The fence and the data share a hash tag: one Cluster slot.
	const fence, invoice = "invoice:{7}:fence", "invoice:{7}"

	a, err := lock.NewClient(lock.NewRedisProvider(rdb))
	if err != nil {
		panic(err)
	}
	defer a.Close()
	b, err := lock.NewClient(lock.NewRedisProvider(rdb))
	if err != nil {
		panic(err)
	}
	defer b.Close()

	// A holds the lock, and stalls. Meanwhile its lock ends: an operator
	// frees it as hung (as its lease running out during a pause would).
	la, err := a.Acquire(ctx, "invoice:7", lock.Options{})
	if err != nil {
		panic(err)
	}
	if _, err := b.ForceRelease(ctx, "invoice:7"); err != nil {
		panic(err)
	}

	// B takes the lock, with a greater token, and writes.
	lb, err := b.Acquire(ctx, "invoice:7", lock.Options{})
	if err != nil {
		panic(err)
	}
	defer lb.Release(ctx)
	err = saveInvoice.Run(ctx, rdb, fence, lb.Token(), []string{invoice}, "total=120 (B)").Err()
	fmt.Println("B writes:", err)

	// A resumes and writes with its token: refused.
	err = saveInvoice.Run(ctx, rdb, fence, la.Token(), []string{invoice}, "total=100 (A)").Err()
	fmt.Println("A writes: stale token:", errors.Is(err, lock.ErrStaleToken))
	var stale *lock.StaleTokenError
	if errors.As(err, &stale) {
		fmt.Println("A's token, the mark:", stale.Token == la.Token(), stale.Mark == lb.Token())
	}

	// B writes again with the same token: accepted.
	err = saveInvoice.Run(ctx, rdb, fence, lb.Token(), []string{invoice}, "total=125 (B)").Err()
	fmt.Println("B writes again:", err)
	fmt.Println(invoice+":", rdb.Get(ctx, invoice).Val())
	// Output:
	// B writes: <nil>
	// A writes: stale token: true
	// A's token, the mark: true true
	// B writes again: <nil>
	// invoice:{7}: total=125 (B)
}

// An SQLFence advances the fence row of a resource in the transaction that
// writes it: a holder whose token is below the fence's mark gets
// ErrStaleToken and rolls back. (Not run: it needs PostgreSQL; the postgres
// module's tests run it.)
func ExampleSQLFence() {
	var db *sql.DB // sql.Open("pgx", "postgres://...")
	ctx := context.Background()
	c, err := lock.NewClient(lock.NewMemoryProvider())
	if err != nil {
		panic(err)
	}
	defer c.Close()

	fence := lock.SQLFence{} // the table lock_fences
	if err := fence.CreateTable(ctx, db); err != nil {
		panic(err)
	}
	err = c.Do(ctx, "invoice:7", lock.Options{}, func(ctx context.Context) error {
		l, _ := lock.FromContext(ctx)
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback() // after Commit, does nothing
		if err := fence.Advance(ctx, tx, "invoice:7", l.Token()); err != nil {
			return err // errors.Is(err, lock.ErrStaleToken): a later holder has written
		}
		if _, err := tx.ExecContext(ctx, `UPDATE invoices SET total = $1 WHERE id = $2`, 120, 7); err != nil {
			return err
		}
		return tx.Commit()
	})
	if errors.Is(err, lock.ErrStaleToken) {
		fmt.Println("a later holder has written")
	}
}
