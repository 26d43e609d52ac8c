// Command example runs one job under a lock kept in PostgreSQL: it connects
// to LOCK_POSTGRES_DSN (or a PostgreSQL on 127.0.0.1:5432), makes the
// provider's tables under a prefix of its own, runs the job with Client.Do,
// prints what happened, and drops its tables. It exits with status 1 on
// error. Its test (TestExample) runs it on the tests' PostgreSQL.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/postgres"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "example:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dsn := os.Getenv("LOCK_POSTGRES_DSN")
	if dsn == "" {
		dsn = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return err
	}
	defer pool.Close()

	// A prefix of this run's own, so that the example leaves nothing behind;
	// a service keeps the default one ("lock_").
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	p, err := postgres.NewProvider(ctx, pool, postgres.WithTablePrefix("lock_example_"+hex.EncodeToString(b)+"_"))
	if err != nil {
		return err
	}
	defer func() {
		if err := p.Drop(context.Background()); err != nil {
			fmt.Fprintln(os.Stderr, "example: dropping the tables:", err)
		}
	}()

	c, err := lock.NewClient(p)
	if err != nil {
		return err
	}
	defer c.Close()

	err = c.Do(ctx, "nightly-report", lock.Options{Wait: true, Lease: 10 * time.Second}, func(ctx context.Context) error {
		l, _ := lock.FromContext(ctx)
		rec, err := p.Inspect(ctx, l.Key())
		if err != nil {
			return err
		}
		fmt.Printf("holding %s with fencing token %d, granted at %s by the server's clock, %v left\n",
			l.Key(), l.Token(), rec.Since.UTC().Format(time.RFC3339Nano), rec.TTL)
		return nil // the job's work goes here
	})
	if err != nil {
		return err
	}
	fmt.Println("released: the next replica may run the job")
	return nil
}
