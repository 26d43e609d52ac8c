// Command lockctl shows and force-releases the locks that
// github.com/seed05627090/lock keeps in Redis.
//
// Usage:
//
//	lockctl [flags] ls             list the locks held or in a grace period
//	lockctl [flags] show NAME      show one lock in detail
//	lockctl [flags] release NAME   free a lock whoever holds it (needs -yes)
//
// Examples:
//
//	lockctl ls
//	lockctl -redis redis://redis.internal:6379/0 -prefix jobs: ls
//	lockctl -json show nightly-report
//	lockctl -yes release nightly-report
//
// Flags may also follow the command ("lockctl release -yes NAME"); a name
// that starts with "-" goes after "--". The Redis URL is -redis, else the
// environment variable LOCK_REDIS_URL, else redis://127.0.0.1:6379/0; a
// Redis Cluster is given as redis+cluster://host:port?addr=host2:port2.
//
// A forced release frees the lock at once and hands it to its first waiter,
// if any. The holder learns that it lost the lock only at its next renewal
// (within a third of its lease) and may act on the resource until then: its
// fencing token tells the resource which grant is newer. lockctl logs every
// forced release to stderr.
//
// The exit status is 0 on success, 1 on an error (Redis unreachable, a
// corrupt record), and 2 on a usage error (release without -yes included).
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
	redisURL string
	prefix   string
	json     bool
	limit    int
	timeout  time.Duration
	yes      bool // release: really do it

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
		fmt.Fprintf(stderr, "lockctl: release would free the lock %q whoever holds it, and hand it to its first waiter; "+
			"the holder would learn that it lost the lock only at its next renewal. Add -yes to do it.\n", cfg.args[0])
		return exitUsage
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()

	rc, err := newRedis(cfg.redisURL)
	if err != nil {
		fmt.Fprintf(stderr, "lockctl: -redis %q: %v\n", cfg.redisURL, err)
		return exitUsage
	}
	defer rc.Close()
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	client, err := lock.NewClient(lock.NewRedisProvider(rc), lock.WithPrefix(cfg.prefix), lock.WithLogger(logger))
	if err != nil {
		fmt.Fprintf(stderr, "lockctl: %v\n", err)
		return exitUsage // only a bad prefix fails here
	}
	defer client.Close()

	cmd := command{client: client, prefix: cfg.prefix, json: cfg.json, stdout: stdout, stderr: stderr}
	switch cfg.command {
	case "ls":
		err = cmd.list(ctx, cfg.limit)
	case "show":
		err = cmd.show(ctx, cfg.args[0])
	case "release":
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
	fs.StringVar(&cfg.prefix, "prefix", lock.DefaultPrefix, "key `prefix` of the locks, as given to lock.WithPrefix")
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
	return cfg, cfg.check(pos)
}

// check sets the command and its arguments from the positional arguments
// pos, and checks them and the flags.
func (cfg *config) check(pos []string) error {
	if len(pos) == 0 {
		return errors.New("no command: want ls, show or release")
	}
	cfg.command, cfg.args = pos[0], pos[1:]
	want := 1
	switch cfg.command {
	case "ls":
		want = 0
	case "show", "release":
	default:
		return fmt.Errorf("unknown command %q: want ls, show or release", cfg.command)
	}
	switch {
	case len(cfg.args) < want:
		return fmt.Errorf("%s needs a lock name", cfg.command)
	case len(cfg.args) > want:
		return fmt.Errorf("%s: unexpected arguments %q", cfg.command, cfg.args[want:])
	case cfg.limit <= 0:
		return fmt.Errorf("-limit %d is not positive", cfg.limit)
	case cfg.timeout <= 0:
		return fmt.Errorf("-timeout %v is not positive", cfg.timeout)
	}
	return nil
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
  lockctl [flags] ls             list the locks held or in a grace period
  lockctl [flags] show NAME      show one lock in detail
  lockctl [flags] release NAME   free a lock whoever holds it (needs -yes)

A forced release hands the lock to its first waiter; the holder learns that
it lost the lock at its next renewal (within a third of its lease).

Exit status: 0 success, 1 error, 2 usage error.

Flags:
`)
	fs.SetOutput(w)
	fs.PrintDefaults()
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
