// Command bench measures this lock library against redsync, redislock,
// rueidislock and valkeylock on one Redis server: uncontended
// acquire+release cycles, a contended lock with a short critical section,
// and the Redis commands each handoff costs. See README.md.
//
//	cd bench && go run .            # starts its own redis-server
//	go run . -addr 127.0.0.1:6379   # uses an existing Redis
//	go run . -quick                 # 1 s per scenario
//	go run . -run 'c/'              # only scenario c
//	go run . -holds                 # semaphores, read-write locks, multi-locks
//	go run . -election              # a leader's death or Resign to its successor running
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"regexp"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Scenario shapes, fixed so that runs compare.
const (
	uncontendedWide = 32                     // goroutines on distinct keys, scenario b
	contenders      = 16                     // goroutines on one key, scenarios c and d
	busySection     = 100 * time.Microsecond // the critical section, busy
	pauseBetween    = time.Millisecond       // scenario d's pause between a goroutine's locks
)

var manyWaiters = []int{16, 256} // scenario e

// spreadWaiters are the waiter counts of scenario f, over 8 Clients.
var spreadWaiters = []int{16, 256, 4096, 10000}

func main() {
	if os.Getenv(electionChildEnv) != "" {
		os.Exit(electionChild()) // the leader of an -election round
	}
	os.Exit(mainCode())
}

func mainCode() int {
	addr := flag.String("addr", "", "host:port of an existing Redis to use; without it, start redis-server on a free loopback port")
	redisBin := flag.String("redis-server", "redis-server", "the redis-server binary started when -addr is not given")
	jsonPath := flag.String("json", "", "also write one JSON line per scenario and library to this file")
	quick := flag.Bool("quick", false, "smoke run: 1 s per scenario")
	dur := flag.Duration("d", 5*time.Second, "how long each scenario runs for each library")
	only := flag.String("run", "", "run only the cells whose \"scenario/library\" matches this regular expression, e.g. 'c/lock$'")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the harness process to this file")
	holds := flag.Bool("holds", false, "run the holds table instead (a semaphore, a read-write lock, a multi-lock, each beside a by-hand one)")
	election := flag.Bool("election", false, "run the election table instead: from a leader's death (SIGKILL of its process) or Resign to its successor's function running")
	rounds := flag.Int("rounds", 20, "with -election: rounds of each kind; with -observe, ten times as many rounds")
	lease := flag.Duration("lease", time.Second, "with -election: the leader's lease")
	poll := flag.Duration("poll", time.Second, "with -election: the successor's poll interval (WithPollInterval)")
	observe := flag.Bool("observe", false, "run the observe table instead: from a role's change (a term won, resigned, a leader stopped) to Observe sending it")
	flag.Parse()
	match, err := regexp.Compile(*only)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: -run:", err)
		return 2
	}
	if *quick {
		*dur = time.Second
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	serverAddr, origin := *addr, "given by -addr"
	if serverAddr == "" {
		s, err := startServer(ctx, *redisBin)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 1
		}
		defer s.stop()
		serverAddr, origin = s.addr, "started by the harness"
	}

	m, err := describeMachine(ctx, serverAddr, origin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	fmt.Println(m.line())
	if *holds {
		if err := holdsMain(ctx, os.Stdout, serverAddr, *dur); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 1
		}
		return 0
	}
	if *observe {
		if err := observeMain(ctx, os.Stdout, serverAddr, max(*rounds, 1)*10); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 1
		}
		return 0
	}
	if *election {
		if err := electionMain(ctx, os.Stdout, serverAddr, electionConfig{rounds: max(*rounds, 1), lease: *lease, poll: *poll}); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 1
		}
		return 0
	}
	fmt.Printf("each scenario runs %v per library; about %v in all\n\n", *dur, estimate(*dur, match).Round(time.Second))

	var out *json.Encoder
	if *jsonPath != "" {
		f, err := os.Create(*jsonPath)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 1
		}
		defer f.Close()
		out = json.NewEncoder(f)
	}

	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}

	runID := strconv.FormatInt(time.Now().UnixNano(), 36)
	results := make(map[string]result)
	for _, sc := range scenarios(*dur) {
		for _, lib := range sc.libs {
			if !match.MatchString(sc.id + "/" + lib.name) {
				continue
			}
			if ctx.Err() != nil {
				fmt.Fprintln(os.Stderr, "bench: interrupted")
				return 1
			}
			fmt.Fprintf(os.Stderr, "%-4s %-14s ", sc.id, lib.name)
			prefix := "bench:" + runID + ":" + sc.id + ":" + strings.ReplaceAll(lib.name, " ", "-")
			res, err := sc.run(ctx, serverAddr, prefix, lib)
			if err != nil {
				fmt.Fprintln(os.Stderr)
				fmt.Fprintln(os.Stderr, "bench:", sc.id, lib.name+":", err)
				return 1
			}
			res.Scenario = sc.id
			fmt.Fprintf(os.Stderr, "%10.0f ops/s\n", res.OpsPerSec)
			results[sc.id+"/"+lib.name] = res
			if out != nil {
				if err := out.Encode(jsonLine{m, res}); err != nil {
					fmt.Fprintln(os.Stderr, "bench:", err)
					return 1
				}
			}
		}
	}
	fmt.Fprintln(os.Stderr)
	printTable(os.Stdout, results, *dur)
	fmt.Println()
	fmt.Println(m.line())

	// Two holders at once is a bug, not a slow result: fail the run (CI runs
	// -quick).
	code := 0
	for _, sc := range scenarios(*dur) {
		for _, lib := range sc.libs {
			if r, ok := results[sc.id+"/"+lib.name]; ok && r.Violations > 0 {
				fmt.Fprintf(os.Stderr, "bench: %s %s: %d mutual-exclusion violations\n", sc.id, lib.name, r.Violations)
				code = 1
			}
		}
	}
	return code
}

// scenario is one row group of the table.
type scenario struct {
	id, title string
	libs      []library
	run       func(ctx context.Context, addr, prefix string, lib library) (result, error)
	rows      []row
}

// The columns, in the table's order. A column is one entry: a library with
// the function that opens it on the server's address (libs.go).
var (
	// drivers are this library's columns on each Redis client it has a
	// driver for, in scenarios (a) to (d): go-redis, rueidis, valkey-go.
	drivers = []library{libLock, libLockRueidis, libLockValkey}
	// multiFair are this library with a Client per goroutine, unfair and
	// fair, in the contended scenarios.
	multiFair = []library{libLockMulti, libLockFair}
	peers     = []library{libRedsync, libRedislockLinear, libRedislockExp, libRueidislock, libValkeylock}

	columns = slices.Concat(drivers, multiFair, []library{libLock8}, peers)
)

func scenarios(d time.Duration) []scenario {
	unc := func(goroutines int) func(context.Context, string, string, library) (result, error) {
		return func(ctx context.Context, addr, prefix string, lib library) (result, error) {
			return uncontended(ctx, addr, prefix, lib, goroutines, d)
		}
	}
	con := func(goroutines int, pause time.Duration) func(context.Context, string, string, library) (result, error) {
		return func(ctx context.Context, addr, prefix string, lib library) (result, error) {
			return contended(ctx, addr, prefix, lib, goroutines, busySection, pause, d)
		}
	}
	scs := []scenario{
		{id: "a", title: "(a) uncontended, 1 goroutine: acquire+release", libs: slices.Concat(drivers, peers), run: unc(1), rows: uncontendedRows},
		{id: "b", title: fmt.Sprintf("(b) uncontended, %d goroutines on distinct keys", uncontendedWide), libs: slices.Concat(drivers, peers), run: unc(uncontendedWide), rows: uncontendedRows},
		{id: "c", title: fmt.Sprintf("(c) %d goroutines, one key, %v busy section, no pause", contenders, busySection), libs: slices.Concat(drivers, multiFair, peers), run: con(contenders, 0), rows: contendedRows},
		{id: "d", title: fmt.Sprintf("(d) as (c) with a %v pause between a goroutine's locks", pauseBetween), libs: slices.Concat(drivers, multiFair, peers), run: con(contenders, pauseBetween), rows: contendedRows},
	}
	for _, n := range manyWaiters {
		scs = append(scs, scenario{
			id:    "e" + strconv.Itoa(n),
			title: fmt.Sprintf("(e) %d waiters on one key, %v busy section, no pause", n, busySection),
			libs:  slices.Concat([]library{libLock}, multiFair, peers),
			run:   con(n, 0),
			rows:  waitersRows,
		})
	}
	for _, n := range spreadWaiters {
		scs = append(scs, scenario{
			id:    "f" + strconv.Itoa(n),
			title: fmt.Sprintf("(f) %d waiters over 8 Clients on one key, %v busy section, no pause (this library only)", n, busySection),
			libs:  []library{libLock8},
			run:   con(n, 0),
			rows:  waitersRows,
		})
	}
	return scs
}

// estimate is how long a run takes: each scenario's libraries, plus set-up.
func estimate(d time.Duration, match *regexp.Regexp) time.Duration {
	var total time.Duration
	for _, sc := range scenarios(d) {
		for _, lib := range sc.libs {
			if match.MatchString(sc.id + "/" + lib.name) {
				total += d + 100*time.Millisecond
			}
		}
	}
	return total
}

// machine describes where the run happened.
type machine struct {
	CPU          string `json:"cpu"`
	Cores        int    `json:"cores"`
	GOMAXPROCS   int    `json:"gomaxprocs"`
	Go           string `json:"go"`
	Redis        string `json:"redis"`
	RedisOrigin  string `json:"redis_origin"`
	LoadAvgStart string `json:"loadavg_at_start"`
}

func describeMachine(ctx context.Context, addr, origin string) (machine, error) {
	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()
	v, err := serverVersion(ctx, rc)
	if err != nil {
		return machine{}, fmt.Errorf("redis at %s: %w", addr, err)
	}
	return machine{
		CPU:          cpuModel(),
		Cores:        runtime.NumCPU(),
		GOMAXPROCS:   runtime.GOMAXPROCS(0),
		Go:           runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH,
		Redis:        v,
		RedisOrigin:  addr + ", " + origin,
		LoadAvgStart: loadAvg(),
	}, nil
}

func (m machine) line() string {
	s := fmt.Sprintf("machine: %s, %d cores (GOMAXPROCS %d), %s, Redis %s (%s)",
		m.CPU, m.Cores, m.GOMAXPROCS, m.Go, m.Redis, m.RedisOrigin)
	if m.LoadAvgStart != "" {
		s += ", load average at start " + m.LoadAvgStart
	}
	return s
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// jsonLine is one line of the -json file.
type jsonLine struct {
	Machine machine `json:"machine"`
	result
}
