package main

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/etcd"
	"github.com/seed05627090/lock/postgres"
)

// usageError is an error in what the command line asks for (a URL or DSN
// that cannot be parsed, a bad table prefix): exit status 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// openProvider returns the provider of the store that cfg names, Redis
// (-redis), PostgreSQL (-postgres) or etcd (-etcd), a description of where
// it looks for use in messages ("in Redis", "in the tables
// public.lock_*", "in etcd under the namespace \"lock/\""), and a function
// that closes its connections, to call after the Client's Close. A URL,
// DSN, endpoint list or table prefix that cannot be used is a usageError; a
// server that cannot be reached is an error.
func openProvider(ctx context.Context, cfg config) (p lock.Provider, where string, closeFn func(), err error) {
	switch {
	case cfg.postgresDSN != "":
		return openPostgres(ctx, cfg.postgresDSN, cfg.tablePrefix)
	case cfg.etcdEndpoints != "":
		return openEtcd(ctx, cfg.etcdEndpoints, cfg.namespace)
	}
	rc, err := newRedis(cfg.redisURL)
	if err != nil {
		return nil, "", nil, usageError{fmt.Errorf("-redis %q: %w", cfg.redisURL, err)}
	}
	return lock.NewRedisProvider(rc), "in Redis", func() { _ = rc.Close() }, nil
}

// etcdDialTimeout bounds the connection to the first etcd member.
const etcdDialTimeout = 5 * time.Second

// openEtcd returns the etcd provider of the cluster at endpoints (a
// comma-separated list of host:port, or of http:// URLs), with its keys
// under namespace. The provider's set-up grants and revokes a lease of one
// second (two writes); its session lease, which only waiting and listening
// need, is never granted by lockctl's commands.
func openEtcd(ctx context.Context, endpoints, namespace string) (lock.Provider, string, func(), error) {
	var eps []string
	for _, ep := range strings.Split(endpoints, ",") {
		ep = strings.TrimSpace(ep)
		if ep == "" {
			return nil, "", nil, usageError{fmt.Errorf("-etcd %q: an empty endpoint", endpoints)}
		}
		if strings.HasPrefix(ep, "https://") || strings.HasPrefix(ep, "unixs://") {
			return nil, "", nil, usageError{fmt.Errorf("-etcd %q: TLS is not supported", ep)}
		}
		eps = append(eps, ep)
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:            eps,
		Context:              ctx,
		DialTimeout:          etcdDialTimeout,
		DialKeepAliveTime:    5 * time.Second,
		DialKeepAliveTimeout: 2 * time.Second,
		Logger:               zap.NewNop(),
	})
	if err != nil {
		return nil, "", nil, fmt.Errorf("etcd %s: %w", strings.Join(eps, ","), err)
	}
	p, err := etcd.NewProvider(ctx, cli, etcd.WithNamespace(namespace))
	if err != nil {
		_ = cli.Close()
		return nil, "", nil, fmt.Errorf("etcd %s: %w", strings.Join(eps, ","), err)
	}
	closeFn := func() {
		_ = p.Close()
		_ = cli.Close()
	}
	return p, fmt.Sprintf("in etcd under the namespace %q", namespace), closeFn, nil
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
