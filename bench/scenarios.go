package main

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// result is what one library did in one scenario. Durations are in
// microseconds; a zero means not measured.
type result struct {
	Scenario   string  `json:"scenario"`
	Library    string  `json:"library"`
	Goroutines int     `json:"goroutines"`
	SectionUS  float64 `json:"section_us,omitempty"`
	PauseUS    float64 `json:"pause_us,omitempty"`
	Seconds    float64 `json:"seconds"`
	// Ops is the number of acquire+release cycles (uncontended) or critical
	// sections (contended) completed.
	Ops       int64   `json:"ops"`
	OpsPerSec float64 `json:"ops_per_sec"`
	// LatencyP50/P99: one acquire+release cycle (uncontended).
	LatencyP50 float64 `json:"latency_p50_us,omitempty"`
	LatencyP99 float64 `json:"latency_p99_us,omitempty"`
	// Handoffs: grants to a goroutine other than the one that released last;
	// HandoffP50/P99 time from that release to the grant.
	Handoffs   int64   `json:"handoffs"`
	HandoffP50 float64 `json:"handoff_p50_us,omitempty"`
	HandoffP99 float64 `json:"handoff_p99_us,omitempty"`
	// ReleaseP50 is the median time of the release call (contended).
	ReleaseP50 float64 `json:"release_p50_us,omitempty"`
	// WonBack is the share of grants (after the first) that went to the
	// goroutine that had just released.
	WonBack   float64 `json:"won_back_share"`
	MinGrants int64   `json:"min_grants_per_goroutine"`
	MaxGrants int64   `json:"max_grants_per_goroutine"`
	// LongestWait is the longest time a goroutine spent between wanting the
	// lock and getting it, counting waits still unfinished at the end.
	LongestWait float64 `json:"longest_wait_us"`
	// ClientBytes and RedisBytes are the memory that the harness process
	// (Go heap and stacks) and Redis (used_memory) held midway through the
	// run more than before it, per goroutine: the cost of a waiter.
	ClientBytes float64 `json:"client_bytes_per_goroutine,omitempty"`
	RedisBytes  float64 `json:"redis_bytes_per_goroutine,omitempty"`
	// SteadyCommands is RedisCommands over the second half of the run alone,
	// once every waiter has queued and before those still queued at the end
	// leave: the cost of a handoff without the waiters' first and last
	// requests.
	SteadyCommands float64 `json:"redis_commands_per_op_second_half,omitempty"`
	// RedisCommands: server-side command calls (INFO commandstats, including
	// the commands scripts run) per op. ClientCommands: commands the go-redis
	// client sent (round trips) per op.
	RedisCommands  float64 `json:"redis_commands_per_op"`
	ClientCommands float64 `json:"client_commands_per_op"`
	// RedisCPU is the server's CPU time (user and system) per op.
	RedisCPU float64 `json:"redis_cpu_us_per_op"`
	// ClientCPU is the harness process's CPU time (user and system) per op:
	// the library's work, the go-redis client's and the harness loop's.
	ClientCPU  float64 `json:"client_cpu_us_per_op"`
	Violations int64   `json:"mutual_exclusion_violations"`
	GaveUp     int64   `json:"gave_up"`
	Errors     int64   `json:"errors"`
	FirstError string  `json:"first_error,omitempty"`
}

// cell is one library in one scenario: the library opened on a client of
// its own, and the harness's client that reads the server's counters.
type cell struct {
	lib   *opened
	stats *redis.Client // INFO only, which the server's counts leave out
}

// openCell opens lib with n lockers and warms it up on a key of its own: a
// connection, and the scripts loaded in the server's cache. It returns the
// cell and its counters after the warm-up.
func openCell(ctx context.Context, addr, prefix string, lib library, n int) (*cell, counters, error) {
	opened, err := lib.open(addr, n)
	if err != nil {
		return nil, counters{}, fmt.Errorf("%s: %w", lib.name, err)
	}
	r := &cell{lib: opened, stats: redis.NewClient(&redis.Options{Addr: addr})}
	wctx, cancel := context.WithTimeout(ctx, warmUpTimeout)
	defer cancel()
	for range 3 {
		release, err := r.lib.lockers[0](wctx, prefix+":warmup")
		if err == nil {
			err = release(wctx)
		}
		if err != nil {
			r.close()
			return nil, counters{}, fmt.Errorf("%s: warm-up: %w", lib.name, err)
		}
	}
	before, err := r.counters(ctx)
	if err != nil {
		r.close()
		return nil, counters{}, err
	}
	return r, before, nil
}

// warmUpTimeout bounds a cell's warm-up, and callTimeout each uncontended
// call beyond the end of its run: a call that has not returned by then
// fails, and the harness does not wait for a library that never returns
// (rueidislock's WithContext can wait on a free key until its context
// ends; see README.md).
const (
	warmUpTimeout = 10 * time.Second
	callTimeout   = 2 * time.Second
)

func (r *cell) close() {
	r.lib.close()
	_ = r.stats.Close()
}

// counters are the server's and the client's counts at one moment.
type counters struct {
	server serverStats
	client int64         // commands sent by the library's client
	cpu    time.Duration // the harness process's CPU time, user and system
}

func (r *cell) counters(ctx context.Context) (counters, error) {
	st, err := readServerStats(ctx, r.stats)
	return counters{server: st, client: r.lib.sent.Load(), cpu: processCPU()}, err
}

// processCPU is the CPU time (user and system) this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// perOp fills the per-op counts from the counters before and after.
func (res *result) perOp(before, after counters) {
	if res.Ops == 0 {
		return
	}
	ops := float64(res.Ops)
	res.RedisCommands = float64(after.server.calls-before.server.calls) / ops
	res.RedisCPU = us(after.server.cpu-before.server.cpu) / ops
	res.ClientCPU = float64((after.cpu - before.cpu).Nanoseconds()) / 1e3 / ops
	res.ClientCommands = float64(after.client-before.client) / ops
}

// errorCount counts errors and keeps the first.
type errorCount struct {
	mu    sync.Mutex
	n     int64
	first string
}

func (e *errorCount) add(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.n == 0 {
		e.first = err.Error()
	}
	e.n++
}

// uncontended runs goroutines that each acquire and release a key of their
// own, back to back, for d.
func uncontended(ctx context.Context, addr, prefix string, lib library, goroutines int, d time.Duration) (result, error) {
	res := result{Library: lib.name, Goroutines: goroutines}
	r, before, err := openCell(ctx, addr, prefix, lib, goroutines)
	if err != nil {
		return res, err
	}
	defer r.close()

	var errs errorCount
	lat := make([][]time.Duration, goroutines)
	var wg sync.WaitGroup
	begin := time.Now()
	end := begin.Add(d)
	callCtx, cancel := context.WithDeadline(ctx, end.Add(callTimeout))
	defer cancel()
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lk := r.lib.lockers[g]
			key := prefix + ":k" + strconv.Itoa(g)
			for {
				t0 := time.Now()
				if !t0.Before(end) {
					return
				}
				release, err := lk(callCtx, key)
				if err != nil {
					errs.add(err)
					continue
				}
				if err := release(callCtx); err != nil {
					errs.add(err)
					continue
				}
				lat[g] = append(lat[g], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	res.Seconds = time.Since(begin).Seconds()

	after, err := r.counters(ctx)
	if err != nil {
		return res, err
	}
	all := slices.Concat(lat...)
	res.Ops = int64(len(all))
	res.OpsPerSec = float64(res.Ops) / res.Seconds
	res.LatencyP50, res.LatencyP99 = percentiles(all)
	res.perOp(before, after)
	res.Errors, res.FirstError = errs.n, errs.first
	return res, nil
}

// contended runs goroutines that take turns on one key: each acquires it
// (waiting), busy-waits section inside it, releases it, sleeps pause, and
// again, for d.
func contended(ctx context.Context, addr, prefix string, lib library, goroutines int, section, pause, d time.Duration) (result, error) {
	res := result{Library: lib.name, Goroutines: goroutines, SectionUS: us(section), PauseUS: us(pause)}
	r, before, err := openCell(ctx, addr, prefix, lib, goroutines)
	if err != nil {
		return res, err
	}
	defer r.close()

	type goroutineStats struct {
		grants, wonBack, gaveUp int64
		longest                 time.Duration
		handoffs, releases      []time.Duration
	}
	var (
		key        = prefix + ":one"
		stats      = make([]goroutineStats, goroutines)
		inside     atomic.Int32 // goroutines inside the critical section
		sections   atomic.Int64 // sections so far
		violations atomic.Int64
		errs       errorCount

		lastMu      sync.Mutex // the last release: who, when
		lastHolder  = -1
		lastRelease time.Time
	)
	runCtx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	// Releases run on their own context so that the end of the run does not
	// fail them.
	relCtx := context.WithoutCancel(ctx)

	var wg sync.WaitGroup
	clientBefore, redisBefore := memoryInUse(ctx, r.stats)
	begin := time.Now()
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lk, st := r.lib.lockers[g], &stats[g]
			for {
				want := time.Now()
				var release func(context.Context) error
				for release == nil {
					rel, err := lk(runCtx, key)
					switch {
					case err == nil:
						release = rel
					case runCtx.Err() != nil:
						st.longest = max(st.longest, time.Since(want))
						return
					case gaveUp(err):
						st.gaveUp++
					default:
						errs.add(err)
						time.Sleep(10 * time.Millisecond)
					}
				}
				granted := time.Now()
				st.longest = max(st.longest, granted.Sub(want))
				st.grants++
				sections.Add(1)
				if inside.Add(1) != 1 {
					violations.Add(1)
				}
				lastMu.Lock()
				prev, prevAt := lastHolder, lastRelease
				lastMu.Unlock()
				switch prev {
				case -1: // the first grant of the run
				case g:
					st.wonBack++
				default:
					st.handoffs = append(st.handoffs, granted.Sub(prevAt))
				}

				for time.Since(granted) < section {
					// busy: the critical section uses the CPU
				}

				inside.Add(-1)
				released := time.Now()
				lastMu.Lock()
				lastHolder, lastRelease = g, released
				lastMu.Unlock()
				if err := release(relCtx); err != nil {
					errs.add(err)
				}
				st.releases = append(st.releases, time.Since(released))
				if runCtx.Err() != nil {
					return
				}
				if pause > 0 {
					time.Sleep(pause)
				}
			}
		}()
	}
	select {
	case <-time.After(d / 2):
		clientMid, redisMid := memoryInUse(ctx, r.stats)
		res.ClientBytes = float64(clientMid-clientBefore) / float64(goroutines)
		res.RedisBytes = float64(redisMid-redisBefore) / float64(goroutines)
	case <-ctx.Done():
	}
	// The second half: from here to the end of the run, before the waiters
	// still queued give up and leave.
	midOps := sections.Load()
	mid, err := r.counters(ctx)
	if err != nil {
		return res, err
	}
	<-runCtx.Done()
	endOps := sections.Load()
	end, err := r.counters(ctx)
	if err != nil {
		return res, err
	}
	if n := endOps - midOps; n > 0 {
		res.SteadyCommands = float64(end.server.calls-mid.server.calls) / float64(n)
	}
	wg.Wait()
	res.Seconds = time.Since(begin).Seconds()

	after, err := r.counters(ctx)
	if err != nil {
		return res, err
	}
	var handoffs, releases []time.Duration
	var wonBack int64
	res.MinGrants = -1
	for _, st := range stats {
		res.Ops += st.grants
		wonBack += st.wonBack
		res.GaveUp += st.gaveUp
		handoffs = append(handoffs, st.handoffs...)
		releases = append(releases, st.releases...)
		res.LongestWait = max(res.LongestWait, us(st.longest))
		res.MaxGrants = max(res.MaxGrants, st.grants)
		if res.MinGrants < 0 || st.grants < res.MinGrants {
			res.MinGrants = st.grants
		}
	}
	res.OpsPerSec = float64(res.Ops) / res.Seconds
	res.Handoffs = int64(len(handoffs))
	res.HandoffP50, res.HandoffP99 = percentiles(handoffs)
	res.ReleaseP50, _ = percentiles(releases)
	if res.Ops > 1 {
		res.WonBack = float64(wonBack) / float64(res.Ops-1)
	}
	res.Violations = violations.Load()
	res.perOp(before, after)
	res.Errors, res.FirstError = errs.n, errs.first
	return res, nil
}

// memoryInUse returns the harness's Go heap and stacks in use, and Redis's
// used_memory less what rc's own connection holds (0 when INFO fails). That
// connection is the harness's, not the library's, and its reply buffer
// holds INFO commandstats at the first sample (16 KB) and has shrunk by the
// second.
func memoryInUse(ctx context.Context, rc *redis.Client) (client, server int64) {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	var self int64
	if ci, err := rc.ClientInfo(ctx).Result(); err == nil {
		self = int64(ci.TotalMemory)
	}
	info, err := rc.Info(ctx, "memory").Result()
	if err != nil {
		return int64(ms.HeapInuse + ms.StackInuse), 0
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			server, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return int64(ms.HeapInuse + ms.StackInuse), server - self
}

// percentiles returns the 50th and 99th percentiles of ds in microseconds
// (nearest rank), or zeros for none.
func percentiles(ds []time.Duration) (p50, p99 float64) {
	if len(ds) == 0 {
		return 0, 0
	}
	slices.Sort(ds)
	rank := func(p float64) time.Duration {
		i := int(p*float64(len(ds))+0.5) - 1
		return ds[min(max(i, 0), len(ds)-1)]
	}
	return us(rank(0.50)), us(rank(0.99))
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
