package main

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/postgres"
)

// usageError is an error in what the command line asks for (a URL or DSN
// that cannot be parsed, a bad table prefix): exit status 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// openProvider returns the provider of the store that cfg names, Redis
// (-redis) or PostgreSQL (-postgres), a description of where it looks for
// use in messages ("in Redis", "in the tables public.lock_*"), and a function that closes its
// connections, to call after the Client's Close. A URL, DSN or table prefix
// that cannot be used is a usageError; a server that cannot be reached is
// an error.
func openProvider(ctx context.Context, cfg config) (p lock.Provider, where string, closeFn func(), err error) {
	if cfg.postgresDSN == "" {
		rc, err := newRedis(cfg.redisURL)
		if err != nil {
			return nil, "", nil, usageError{fmt.Errorf("-redis %q: %w", cfg.redisURL, err)}
		}
		return lock.NewRedisProvider(rc), "in Redis", func() { _ = rc.Close() }, nil
	}
	return openPostgres(ctx, cfg.postgresDSN, cfg.tablePrefix)
}

// tablePrefixPattern is postgres.WithTablePrefix's rule, checked before
// anything is asked of the server.
var tablePrefixPattern = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,39}$`)

// openPostgres returns the PostgreSQL provider of the database at dsn with
// the tables of tablePrefix. When the tables do not exist (a wrong
// database, schema or prefix), it fails instead of letting
// postgres.NewProvider create them; when they do, NewProvider (re)defines
// the provider's functions, as every service's NewProvider does. lockctl
// does not repeat the DSN in its errors (pgx's show it with the password
// hidden).
func openPostgres(ctx context.Context, dsn, tablePrefix string) (lock.Provider, string, func(), error) {
	if !tablePrefixPattern.MatchString(tablePrefix) {
		return nil, "", nil, usageError{fmt.Errorf("-table-prefix %q: want 1 to 40 of a-z, 0-9 and _, not starting with a digit", tablePrefix)}
	}
	pc, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, "", nil, usageError{fmt.Errorf("-postgres: %w", err)}
	}
	pc.ConnConfig.RuntimeParams["application_name"] = "lockctl"
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, "", nil, usageError{fmt.Errorf("-postgres: %w", err)}
	}
	var schema *string
	var exists bool
	err = pool.QueryRow(ctx, "SELECT current_schema(), to_regclass(quote_ident(current_schema()) || '.' || quote_ident($1)) IS NOT NULL",
		tablePrefix+"records").Scan(&schema, &exists)
	switch {
	case err != nil:
		pool.Close()
		return nil, "", nil, fmt.Errorf("postgres: %w", err)
	case schema == nil:
		pool.Close()
		return nil, "", nil, errors.New("postgres: no current schema (search_path names none that exists)")
	case !exists:
		pool.Close()
		return nil, "", nil, fmt.Errorf("no lock tables %s* in the schema %q of this database: the services make them at their first postgres.NewProvider; check -postgres and -table-prefix", tablePrefix, *schema)
	}
	p, err := postgres.NewProvider(ctx, pool, postgres.WithTablePrefix(tablePrefix))
	if err != nil {
		pool.Close()
		return nil, "", nil, err
	}
	return p, fmt.Sprintf("in the tables %s.%s*", *schema, tablePrefix), pool.Close, nil
}

// newRedis returns a client of the Redis at rawURL: a single node for
// redis://, rediss:// and unix:// URLs (redis.ParseURL), a Cluster for
// redis+cluster:// and rediss+cluster:// (redis.ParseClusterURL, with the
// scheme's "+cluster" removed). The client honours context deadlines.
func newRedis(rawURL string) (redis.UniversalClient, error) {
	scheme, rest, _ := strings.Cut(rawURL, "://")
	if base, ok := strings.CutSuffix(scheme, "+cluster"); ok {
		opts, err := redis.ParseClusterURL(base + "://" + rest)
		if err != nil {
			return nil, err
		}
		opts.ContextTimeoutEnabled = true
		return redis.NewClusterClient(opts), nil
	}
	opts, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	opts.ContextTimeoutEnabled = true
	return redis.NewClient(opts), nil
}
