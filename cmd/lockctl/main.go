// Command lockctl shows and force-releases the locks that
// github.com/seed05627090/lock keeps in Redis or, with -postgres, in
// PostgreSQL (the provider of github.com/seed05627090/lock/postgres), or,
// with -etcd, in etcd (the provider of github.com/seed05627090/lock/etcd).
//
// Usage:
//
//	lockctl [flags] ls                    list the locks held or in a grace period,
//	                                      and the semaphores and read-write locks held
//	lockctl [flags] show NAME             show one lock, semaphore or read-write lock in detail
//	lockctl [flags] release NAME          free a lock whoever holds it (needs -yes)
//	lockctl [flags] release NAME OWNER    free one hold of a semaphore or read-write lock (needs -yes)
//
// Examples:
//
//	lockctl -prefix myapp:lock: ls
//	lockctl -redis redis://redis.internal:6379/0 -prefix myapp:lock: ls
//	lockctl -postgres postgres://app@db:5432/app -prefix myapp:lock: ls
//	lockctl -etcd etcd-0:2379,etcd-1:2379,etcd-2:2379 -namespace myapp/ -prefix myapp:lock: ls
//	lockctl -prefix myapp:lock: -json show nightly-report
//	lockctl -prefix myapp:lock: -yes release nightly-report
//
// -prefix is the prefix the services pass to lock.WithPrefix ("lock:" when
// they pass none). Flags may also follow the command ("lockctl release -yes
// NAME"); a name that starts with "-" goes after "--". The Redis URL is
// -redis, else the environment variable LOCK_REDIS_URL, else
// redis://127.0.0.1:6379/0; a Redis Cluster is given as
// redis+cluster://host:port?addr=host2:port2. -postgres DSN reads the
// PostgreSQL provider's tables instead (-table-prefix, "lock_" by default,
// as postgres.WithTablePrefix); lockctl does not create them. -etcd
// host:port[,host:port...] reads the etcd provider's keys instead, under
// -namespace ("lock/" by default, as etcd.WithNamespace); give it several
// members' endpoints, so that it reaches one that is up. TLS and etcd's
// authentication are not supported.
//
// A semaphore or a read-write lock (lock.Client.Semaphore, RWMutex) is
// listed as one entry, and shown with its holders and its queue; release
// does not free it whole, but frees one of its holds given the holder's
// owner (as show lists it).
//
// A forced release frees the lock at once and hands it to its first waiter,
// if any (a hold's release serves the waiters that now fit). The holder
// learns that it lost the lock only at its next renewal (within a third of
// its lease) and may act on the resource until then: its fencing token
// tells the resource which grant is newer. lockctl logs every forced
// release to stderr.
//
// The exit status is 0 on success, 1 on an error (the server unreachable, a
// corrupt record, no lock tables in PostgreSQL, a semaphore or read-write
// lock given to release without an owner, an owner that holds none of
// it), and 2 on a usage error (release without -yes included).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/etcd"
	"github.com/seed05627090/lock/postgres"
)

func main() {
	redis.SetLogger(quiet{}) // its dial failures repeat the error lockctl reports
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// quiet is a go-redis logger that drops what it is told.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// Exit statuses.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// defaultRedisURL is the Redis used without -redis and LOCK_REDIS_URL.
const defaultRedisURL = "redis://127.0.0.1:6379/0"

// config is what the command line asks for.
type config struct {
	redisURL    string
	postgresDSN string // when set, PostgreSQL instead of Redis
	tablePrefix string // of the PostgreSQL provider's tables
	// etcdEndpoints, when set, is etcd instead of Redis: host:port or
	// http:// URLs, separated by commas.
	etcdEndpoints string
	namespace     string // of the etcd provider's keys
	prefix        string
	json          bool
	limit         int
	timeout       time.Duration
	yes           bool // release: really do it

	command string   // ls, show or release
	args    []string // the command's arguments
}

// run runs lockctl with the command-line arguments args (without the
// program name), writes its output to stdout and its errors to stderr, and
// returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parseArgs(args, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "lockctl: %v\nRun 'lockctl -h' for usage.\n", err)
		return exitUsage
	}
	if cfg.command == "release" && !cfg.yes {
		if len(cfg.args) == 2 {
			fmt.Fprintf(stderr, "lockctl: release would free the hold %q of %q, and serve the waiters that then fit; "+
				"the holder would learn that it lost its hold only at its next renewal. Add -yes to do it.\n", cfg.args[1], cfg.args[0])
			return exitUsage
		}
		fmt.Fprintf(stderr, "lockctl: release would free the lock %q whoever holds it, and hand it to its first waiter; "+
			"the holder would learn that it lost the lock only at its next renewal. Add -yes to do it.\n", cfg.args[0])
		return exitUsage
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()

	provider, where, closeProvider, err := openProvider(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "lockctl: %v\n", err)
		if errors.As(err, new(usageError)) {
			return exitUsage
		}
		return exitError
	}
	defer closeProvider() // after the Client's Close
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	client, err := lock.NewClient(provider, lock.WithPrefix(cfg.prefix), lock.WithLogger(logger))
	if err != nil {
		fmt.Fprintf(stderr, "lockctl: %v\n", err)
		return exitUsage // only a bad prefix fails here
	}
	defer client.Close()

	cmd := command{client: client, provider: provider, log: logger, prefix: cfg.prefix, where: where, hint: emptyListHint(cfg),
		json: cfg.json, stdout: stdout, stderr: stderr}
	switch {
	case cfg.command == "ls":
		err = cmd.list(ctx, cfg.limit)
	case cfg.command == "show":
		err = cmd.show(ctx, cfg.args[0])
	case cfg.command == "release" && len(cfg.args) == 2:
		err = cmd.releaseHold(ctx, cfg.args[0], cfg.args[1])
	case cfg.command == "release":
		err = cmd.release(ctx, cfg.args[0])
	}
	if err != nil {
		fmt.Fprintf(stderr, "lockctl: %v\n", err)
		if errors.Is(err, lock.ErrInvalidArgument) {
			return exitUsage // a name too long, say
		}
		return exitError
	}
	return exitOK
}

// emptyListHint says, for ls when it finds no lock, which flags give
// lockctl the settings of the services: on etcd, the namespace they pass to
// etcd.WithNamespace (-namespace) and the prefix they pass to lock.WithPrefix
// (-prefix); elsewhere the prefix. (Issue 31: on etcd it named -prefix
// alone, where a service's etcd.WithNamespace was what lockctl missed.)
func emptyListHint(cfg config) string {
	if cfg.etcdEndpoints != "" {
		return "If your services pass a namespace to etcd.WithNamespace, or a prefix to lock.WithPrefix, give lockctl the same: " +
			"lockctl -etcd <endpoints> -namespace <namespace> -prefix <prefix> ls"
	}
	return "If your services pass a prefix to lock.WithPrefix, give lockctl the same one: lockctl -prefix <prefix> ls"
}

// parseArgs reads the flags, the command and its arguments, and checks
// them. On -h it prints the usage to stdout and returns flag.ErrHelp.
func parseArgs(args []string, stdout io.Writer) (config, error) {
	cfg := config{}
	fs := flag.NewFlagSet("lockctl", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // the caller prints the error
	fs.Usage = func() {}
	redisURL := os.Getenv("LOCK_REDIS_URL")
	if redisURL == "" {
		redisURL = defaultRedisURL
	}
	fs.StringVar(&cfg.redisURL, "redis", redisURL, "Redis `URL`: redis://, rediss://, unix:// or redis+cluster://host:port?addr=host2:port2;\n$LOCK_REDIS_URL when set")
	fs.StringVar(&cfg.postgresDSN, "postgres", "", "PostgreSQL `DSN` (postgres://user@host:5432/db): read the locks of the PostgreSQL provider\n(github.com/seed05627090/lock/postgres) instead of Redis")
	fs.StringVar(&cfg.tablePrefix, "table-prefix", postgres.DefaultTablePrefix, "with -postgres: the `prefix` of the provider's tables, as given to postgres.WithTablePrefix")
	fs.StringVar(&cfg.etcdEndpoints, "etcd", "", "etcd `endpoints`, host:port[,host:port...]: read the locks of the etcd provider\n(github.com/seed05627090/lock/etcd) instead of Redis")
	fs.StringVar(&cfg.namespace, "namespace", etcd.DefaultNamespace, "with -etcd: the `namespace` of the provider's keys, as given to etcd.WithNamespace")
	fs.StringVar(&cfg.prefix, "prefix", lock.DefaultPrefix, "key `prefix` of the locks, as the services give it to lock.WithPrefix")
	fs.BoolVar(&cfg.json, "json", false, "print JSON: an array for ls, one object for show and release")
	fs.IntVar(&cfg.limit, "limit", 1000, "list at most `N` locks (ls)")
	fs.DurationVar(&cfg.timeout, "timeout", 10*time.Second, "bound the whole command by this `duration`")
	fs.BoolVar(&cfg.yes, "yes", false, "really force the release (release)")

	pos, err := parseInterleaved(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		usage(stdout, fs)
		return cfg, err
	}
	if err != nil {
		return cfg, err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return cfg, cfg.check(pos, set)
}

// check sets the command and its arguments from the positional arguments
// pos, and checks them and the flags; set holds the flags given.
func (cfg *config) check(pos []string, set map[string]bool) error {
	switch {
	case set["postgres"] && cfg.postgresDSN == "":
		return errors.New("-postgres needs a DSN")
	case set["etcd"] && cfg.etcdEndpoints == "":
		return errors.New("-etcd needs endpoints")
	case len(storesSet(set)) > 1:
		return fmt.Errorf("%s: give one of them", strings.Join(storesSet(set), " and "))
	case set["table-prefix"] && !set["postgres"]:
		return errors.New("-table-prefix goes with -postgres")
	case set["namespace"] && !set["etcd"]:
		return errors.New("-namespace goes with -etcd")
	case set["namespace"] && cfg.namespace == "":
		return errors.New("-namespace is empty")
	case len(pos) == 0:
		return errors.New("no command: want ls, show or release")
	}
	cfg.command, cfg.args = pos[0], pos[1:]
	least, most := 1, 1 // arguments
	switch cfg.command {
	case "ls":
		least, most = 0, 0
	case "show":
	case "release":
		most = 2 // NAME OWNER: a hold of a semaphore or a read-write lock
	default:
		return fmt.Errorf("unknown command %q: want ls, show or release", cfg.command)
	}
	switch {
	case len(cfg.args) < least:
		return fmt.Errorf("%s needs a lock name", cfg.command)
	case len(cfg.args) > most:
		return fmt.Errorf("%s: unexpected arguments %q", cfg.command, cfg.args[most:])
	case cfg.command == "release" && len(cfg.args) == 2 && cfg.args[1] == "":
		return errors.New("release: the owner is empty")
	case cfg.limit <= 0:
		return fmt.Errorf("-limit %d is not positive", cfg.limit)
	case cfg.timeout <= 0:
		return fmt.Errorf("-timeout %v is not positive", cfg.timeout)
	}
	return nil
}

// storesSet returns the flags of set that pick a store, in order.
func storesSet(set map[string]bool) []string {
	var given []string
	for _, name := range []string{"redis", "postgres", "etcd"} {
		if set[name] {
			given = append(given, "-"+name)
		}
	}
	return given
}

// parseInterleaved parses the flags of args wherever they are, before or
// after the command and its arguments, and returns the other arguments. An
// argument "--" ends the flags.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// usage prints how to call lockctl, and its flags, to w.
func usage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprint(w, `Usage:
  lockctl [flags] ls                   list the locks held or in a grace period,
                                       and the semaphores and read-write locks held
  lockctl [flags] show NAME            show one lock, semaphore or read-write lock in detail
  lockctl [flags] release NAME         free a lock whoever holds it (needs -yes)
  lockctl [flags] release NAME OWNER   free one hold of a semaphore or read-write lock
                                       (needs -yes; show NAME lists the holders' owners)

The locks are read from Redis (-redis), from PostgreSQL (-postgres) or from
etcd (-etcd), under -prefix: the prefix the services pass to lock.WithPrefix
("lock:" if none); on etcd, under -namespace too: the namespace they pass to
etcd.WithNamespace ("lock/" if none).

A forced release hands the lock to its first waiter (a hold's release serves
the waiters that then fit); the holder learns that it lost the lock at its
next renewal (within a third of its lease).

Exit status: 0 success, 1 error, 2 usage error.

Flags:
`)
	fs.SetOutput(w)
	fs.PrintDefaults()
}
