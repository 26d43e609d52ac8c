package main

// The claims table (-holds -claims): the cells of issue 30, measured on
// Semaphore and RWMutex as counted names (one claim per hold), each beside
// the figure measured on the gate design before them and the target.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed05627090/lock"
)

var claimsTable = flag.Bool("claims", false, "with -holds: run the claims table instead (issue 30: a Semaphore's commands per hold from 1 to 1,024 permits, throughput of a Semaphore and an RWMutex, a stopped process); -d scales it (5 s: about 50 s); -run selects its cells: sem1, sem4, sem16, sem64, sem1024, sem64x20, rw, stopped")

// The shapes of the claims table's cells, fixed so that runs compare with
// the figures of issue 30.
const (
	claimsClients  = 8 // Clients sharing a cell's callers, as 8 processes would
	claimsMaxCalls = 1024
	stoppedLimit   = 3
	stoppedCallers = 24
	stoppedClients = 6
	stoppedHold    = 10 * time.Millisecond
	stoppedLease   = 500 * time.Millisecond
	stoppedFor     = time.Second
	stopEvery      = 1500 * time.Millisecond
)

// claimsSems are the limits of the first cells: Semaphore(N), 4N callers
// (at most claimsMaxCalls), 1 ms holds.
var claimsSems = []int{1, 4, 16, 64, 1024}

// figure is one line of the claims table.
type figure struct {
	cell, name, got, target, old string
	met                          string // "yes", "no" or "" (no target)
}

func verdict(ok bool) string {
	if ok {
		return "yes"
	}
	return "no"
}

// claimsMain runs the claims table against the Redis at addr: the
// Semaphore(N) cells for d/2 each, the throughput cells for d, the stopped
// process cell for 3d, each after a warm-up.
func claimsMain(ctx context.Context, w io.Writer, addr string, d time.Duration) error {
	only, err := regexp.Compile(flag.Lookup("run").Value.String())
	if err != nil {
		return err
	}
	run := func(id string) bool { return only.MatchString(id) }
	runID := strconv.FormatInt(time.Now().UnixNano(), 36)
	stats := redis.NewClient(&redis.Options{Addr: addr})
	defer stats.Close()
	warm := min(time.Second, d/2)
	wait := lock.Options{Wait: true, MaxWait: time.Minute}
	fmt.Fprintf(w, "Claims (issue 30): %d lock.Clients per cell (each on its own go-redis client) sharing the callers, as %d processes would; Redis commands from INFO commandstats (with those scripts run); each cell measured after a %v warm-up\n\n", claimsClients, claimsClients, warm)

	var figs []figure
	var failed, byCommand []string
	for _, n := range claimsSems {
		if !run("sem" + strconv.Itoa(n)) {
			continue
		}
		callers := min(4*n, claimsMaxCalls)
		name := fmt.Sprintf("Semaphore(%d), %d callers, 1 ms holds", n, callers)
		fmt.Fprintf(w, "%s ...\n", name)
		r, err := semCell(ctx, stats, addr, "bench:"+runID+":sem"+strconv.Itoa(n)+":", n, callers, time.Millisecond, wait, warm, d/2)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		failed = append(failed, r.failures(name)...)
		byCommand = append(byCommand, fmt.Sprintf("- %s: %s", name, r.perCommand()))
		old := map[int][2]string{1: {"27", ""}, 4: {"33", ""}, 16: {"42", "8"}, 64: {"91", "4"}}[n]
		figs = append(figs,
			figure{name, "holds/s", fmt.Sprintf("%.0f", r.perSec()), "", "", ""},
			figure{"", "Redis commands per hold", fmt.Sprintf("%.3f", r.commands()), "≤ 12", old[0], verdict(r.commands() <= 12)},
			figure{"", "of them script calls", fmt.Sprintf("%.2f", r.scripts()), "2", "", ""},
			figure{"", "cores busy: harness / Redis", r.cores(), "", "", ""},
		)
		if callers > n {
			figs = append(figs, figure{"", "most holders at once", strconv.FormatInt(r.most, 10), strconv.Itoa(n), old[1], verdict(r.most == int64(n))})
		} else {
			// As many callers as permits: never all holding at once, each
			// spends part of its loop in a call.
			figs = append(figs, figure{"", "most holders at once (of as many callers as permits)", strconv.FormatInt(r.most, 10), "", old[1], ""})
		}
	}

	if run("sem64x20") {
		const n, callers, hold = 64, 256, 20 * time.Millisecond
		name := fmt.Sprintf("Semaphore(%d), %d callers, %v holds", n, callers, hold)
		fmt.Fprintf(w, "%s ...\n", name)
		r, err := semCell(ctx, stats, addr, "bench:"+runID+":sem64x20:", n, callers, hold, wait, warm, d)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		failed = append(failed, r.failures(name)...)
		byCommand = append(byCommand, fmt.Sprintf("- %s: %s", name, r.perCommand()))
		ideal := float64(n) / hold.Seconds()
		figs = append(figs,
			figure{name, "holds/s (of ideal 3,200)", fmt.Sprintf("%.0f (%.2f)", r.perSec(), r.perSec()/ideal), "≥ 2,560 (0.8)", "844-1,022 (0.26-0.32)", verdict(r.perSec() >= 0.8*ideal)},
			figure{"", "most holders at once", strconv.FormatInt(r.most, 10), strconv.Itoa(n), "25-33", verdict(r.most == n)},
			figure{"", "Redis commands per hold", fmt.Sprintf("%.3f", r.commands()), "≤ 12", "169-181", verdict(r.commands() <= 12)},
			figure{"", "of them script calls", fmt.Sprintf("%.2f", r.scripts()), "2", "", ""},
			figure{"", "cores busy: harness / Redis", r.cores(), "", "", ""},
		)
	}

	if run("rw") {
		name := fmt.Sprintf("RWMutex(%d): %d readers (%v reads back to back), %d writers (a %v write every %v)", rwReaders, rwReaders, rwRead, rwWriters, rwWrite, rwEvery)
		fmt.Fprintf(w, "%s ...\n", name)
		r, err := rwCell(ctx, stats, addr, "bench:"+runID+":rw:", wait, warm, d)
		if err != nil {
			return fmt.Errorf("RWMutex: %w", err)
		}
		failed = append(failed, r.failures("RWMutex")...)
		byCommand = append(byCommand, fmt.Sprintf("- RWMutex(%d): %s", rwReaders, r.perCommand()))
		ideal := float64(rwReaders) / rwRead.Seconds()
		reads := float64(r.reads) / r.took.Seconds()
		figs = append(figs,
			figure{name, "reads/s (of ideal 6,400)", fmt.Sprintf("%.0f (%.2f)", reads, reads/ideal), "≥ 3,200 (0.5)", "1,031-1,069 (0.16-0.17)", verdict(reads >= 0.5*ideal)},
			figure{"", "writes/s", fmt.Sprintf("%.1f", float64(r.writes)/r.took.Seconds()), "", "", ""},
			figure{"", "mean RLock call; time a writer waited or wrote (both writers' summed, share of the window)", fmt.Sprintf("%.2f ms; %.0f%%", float64(r.readWait)/float64(max(r.reads, 1))/1e6, 100*r.writeBusy.Seconds()/r.took.Seconds()), "", "", ""},
			figure{"", "most readers at once", strconv.FormatInt(r.most, 10), strconv.Itoa(rwReaders), "13", verdict(r.most == rwReaders)},
			figure{"", "Redis commands per hold", fmt.Sprintf("%.3f", r.commands()), "≤ 12", "84", verdict(r.commands() <= 12)},
			figure{"", "of them script calls", fmt.Sprintf("%.2f", r.scripts()), "2", "", ""},
			figure{"", "cores busy: harness / Redis", r.cores(), "", "", ""},
		)
	}

	if run("stopped") {
		dur := 3 * d
		name := fmt.Sprintf("Semaphore(%d), %d callers in %d Clients, %v holds, lease %v, a Client stopped for %v every %v", stoppedLimit, stoppedCallers, stoppedClients, stoppedHold, stoppedLease, stoppedFor, stopEvery)
		fmt.Fprintf(w, "%s ...\n", name)
		r, err := stoppedCell(ctx, addr, "bench:"+runID+":stopped:", dur)
		if err != nil {
			return fmt.Errorf("stopped: %w", err)
		}
		if r.over > 0 {
			failed = append(failed, fmt.Sprintf("stopped: %d grants found more than %d live holders at once", r.over, stoppedLimit))
		}
		figs = append(figs,
			figure{name, "longest pause of grants to live callers while a permit is free", fmt.Sprintf("%.2f s (at %.1f s, %.2f s after the stop began)", r.longest.Seconds(), r.longestAt.Seconds(), r.afterStop.Seconds()), "< 1 s", "1.93 s", stoppedVerdict(r)},
			figure{"", fmt.Sprintf("grants to live callers in %v (%d stops)", dur, r.stops), strconv.FormatInt(r.grants, 10), "", "3,945-4,057 in 15 s", ""},
			figure{"", "holds lost / acquisitions that failed (stopped Clients)", fmt.Sprintf("%d / %d", r.lost, r.failed), "", "", ""},
		)
		var ps []string
		for _, p := range r.pauses {
			ps = append(ps, fmt.Sprintf("%.2f s at %.2f s", p.took.Seconds(), p.afterStop.Seconds()))
		}
		figs = append(figs,
			figure{"", fmt.Sprintf("pauses of %v or more: how many, how long together", longPause), fmt.Sprintf("%d, %.2f s", len(ps), r.paused.Seconds()), "", "", ""},
			figure{"", "each: how long, when after the last stop began", strings.Join(ps, "; "), "", "", ""},
			figure{"", fmt.Sprintf("of them ended by the stopped Client's resume (a grant within %v of it)", resumeEnds), strconv.Itoa(r.byResume), "", "", ""},
		)
		if r.firstErr != "" {
			figs = append(figs, figure{"", "first error", r.firstErr, "", "", ""})
		}
	}

	fmt.Fprintln(w)
	fmt.Fprintln(w, "| cell | figure | measured | target | gate design (before) | met |")
	fmt.Fprintln(w, "|---|---|---:|---|---|---|")
	for _, f := range figs {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s |\n", f.cell, f.name, f.got, f.target, f.old, f.met)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Redis commands per hold, by command:")
	for _, b := range byCommand {
		fmt.Fprintln(w, b)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "- Semaphore(N): caller i on Client i%%%d, each Acquire(weight 1, Wait), a sleep of the hold, Release, and again at once; figures over %v after the warm-up; most holders at once counted in the harness (more than N fails the run)\n", claimsClients, d/2)
	fmt.Fprintf(w, "- Semaphore(64) at 20 ms and RWMutex: the same over %v; RWMutex ideal: %d readers each reading back to back; commands per hold over reads and writes together\n", d, rwReaders)
	fmt.Fprintf(w, "- stopped: a stopped Client's provider holds every call before it is sent and before its answer returns, and every grant sent to its inbox, until it resumes (no renewals, releases or looks, grants not taken up), as SIGSTOP would; a pause is the time between two grants to callers of running Clients while those callers hold fewer than %d permits, or from the moment they came to hold fewer (a release, a stop) to the next grant; a pause that the stopped Client's resume ended would have lasted as long as the stop\n", stoppedLimit)
	if len(failed) > 0 {
		return errors.New(fmt.Sprint(failed))
	}
	return nil
}

// stoppedVerdict says whether the stopped process cell met its target: no
// pause of a second, and none that only the stopped Client's resume ended
// (such a pause is as long as the stop, whatever the lease).
func stoppedVerdict(r *stoppedResult) string {
	switch {
	case r.longest >= time.Second:
		return "no"
	case r.byResume > 0:
		return "no: the resumes ended the pauses"
	}
	return "yes"
}

// cellResult is what a Semaphore or RWMutex cell measured over its window.
type cellResult struct {
	holds, reads, writes int64
	took                 time.Duration
	calls                int64 // Redis commands
	harnessCPU, redisCPU time.Duration
	readWait, writeBusy  time.Duration    // RWMutex: all RLock calls; writes from Lock call to release
	byCommand            map[string]int64 // of calls
	most                 int64            // holders (readers) at once
	violations           int64
	errs                 errorCount
}

func (r *cellResult) perSec() float64 { return float64(r.holds) / r.took.Seconds() }

func (r *cellResult) commands() float64 {
	if r.holds == 0 {
		return 0
	}
	return float64(r.calls) / float64(r.holds)
}

// count sets calls and byCommand from the command counts before and
// after the window.
func (r *cellResult) count(before, after map[string]int64) {
	r.byCommand = map[string]int64{}
	for name, n := range after {
		if n -= before[name]; n > 0 {
			r.byCommand[name] = n
			r.calls += n
		}
	}
}

// cpu adds sign times the CPU time the harness and Redis have used so far
// to r's.
func (r *cellResult) cpu(ctx context.Context, stats *redis.Client, sign time.Duration) error {
	st, err := readServerStats(ctx, stats)
	r.harnessCPU += sign * processCPU()
	r.redisCPU += sign * st.cpu
	return err
}

// cores returns the cores the harness and Redis kept busy in the window.
func (r *cellResult) cores() string {
	return fmt.Sprintf("%.2f / %.2f", r.harnessCPU.Seconds()/r.took.Seconds(), r.redisCPU.Seconds()/r.took.Seconds())
}

// scripts returns the script calls per hold (EVALSHA, EVAL).
func (r *cellResult) scripts() float64 {
	n := r.byCommand["evalsha"] + r.byCommand["eval"] + r.byCommand["evalsha_ro"] + r.byCommand["eval_ro"]
	return float64(n) / float64(max(r.holds, 1))
}

// perCommand returns the commands of a hold, most first: "evalsha 3.0,
// time 3.0, ...".
func (r *cellResult) perCommand() string {
	names := slices.SortedFunc(maps.Keys(r.byCommand), func(a, b string) int {
		if c := r.byCommand[b] - r.byCommand[a]; c != 0 {
			return int(c)
		}
		return strings.Compare(a, b)
	})
	var parts []string
	for _, name := range names {
		if per := float64(r.byCommand[name]) / float64(max(r.holds, 1)); per >= 0.05 {
			parts = append(parts, fmt.Sprintf("%s %.1f", name, per))
		}
	}
	return strings.Join(parts, ", ")
}

// readCommands returns the calls of each command in INFO commandstats
// (see commandCalls).
func readCommands(ctx context.Context, rc *redis.Client) (map[string]int64, error) {
	info, err := rc.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, err
	}
	return commandCalls(info)
}

// failures says what makes the run fail: violations, errors, no hold.
func (r *cellResult) failures(name string) []string {
	var fs []string
	if r.violations > 0 {
		fs = append(fs, fmt.Sprintf("%s: %d violations", name, r.violations))
	}
	if r.errs.n > 0 {
		fs = append(fs, fmt.Sprintf("%s: %d errors, the first: %s", name, r.errs.n, r.errs.first))
	}
	if r.holds == 0 {
		fs = append(fs, name+": no hold in the window")
	}
	return fs
}

// gauge counts holders at once and the most it has seen.
type gauge struct{ n, most atomic.Int64 }

// enter counts a holder in and returns the holders now.
func (g *gauge) enter() int64 {
	v := g.n.Add(1)
	for m := g.most.Load(); v > m && !g.most.CompareAndSwap(m, v); m = g.most.Load() {
	}
	return v
}

func (g *gauge) leave() { g.n.Add(-1) }

// restart makes the most seen the holders now.
func (g *gauge) restart() { g.most.Store(g.n.Load()) }

// newClients returns n Clients under prefix, each on a go-redis client of
// its own (wrapped by wrap, when not nil), Client i with the identity who
// and i, and a function that closes them.
func newClients(ctx context.Context, addr, prefix, who string, n int, wrap func(i int, p lock.Provider) lock.Provider) ([]*lock.Client, func(), error) {
	var cs []*lock.Client
	var rcs []*redis.Client
	closeAll := func() {
		for _, c := range cs {
			_ = c.Close()
		}
		for _, rc := range rcs {
			_ = rc.Close()
		}
	}
	for i := range n {
		rc := redis.NewClient(&redis.Options{Addr: addr})
		rcs = append(rcs, rc)
		if err := rc.Ping(ctx).Err(); err != nil {
			closeAll()
			return nil, nil, err
		}
		var p lock.Provider = lock.NewRedisProvider(rc)
		if wrap != nil {
			p = wrap(i, p)
		}
		c, err := lock.NewClient(p, lock.WithPrefix(prefix), lock.WithIdentity(who+strconv.Itoa(i)))
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		cs = append(cs, c)
	}
	return cs, closeAll, nil
}

// measure measures a cell's window: it runs until warm has passed, reads
// the commands Redis has run (on stats) and calls begin, which notes the
// cell's own counts, then reads the CPU times; it runs until d more has
// passed, reads the commands and the CPU times again and calls end, which
// sets the cell's figures in r from its counts. It sets how long the window
// took, the commands and the CPU times in r.
func (r *cellResult) measure(ctx context.Context, stats *redis.Client, warm, d time.Duration, begin, end func()) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(warm):
	}
	before, err := readCommands(ctx, stats)
	begin()
	if err == nil {
		err = r.cpu(ctx, stats, -1)
	}
	if err != nil {
		return err
	}
	start := time.Now()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
	}
	r.took = time.Since(start)
	after, err := readCommands(ctx, stats)
	if err == nil {
		err = r.cpu(ctx, stats, 1)
	}
	end()
	r.count(before, after)
	return err
}

// claimsPrimitives returns one primitive on each of claimsClients Clients
// under prefix (see newClients), made by open, and a function that closes
// the Clients.
func claimsPrimitives[P any](ctx context.Context, addr, prefix string, open func(*lock.Client) (P, error)) ([]P, func(), error) {
	cs, closeAll, err := newClients(ctx, addr, prefix, "process-", claimsClients, nil)
	if err != nil {
		return nil, nil, err
	}
	ps := make([]P, len(cs))
	for i, c := range cs {
		if ps[i], err = open(c); err != nil {
			closeAll()
			return nil, nil, err
		}
	}
	return ps, closeAll, nil
}

// semCell runs callers goroutines on one Semaphore(n) of claimsClients
// Clients, each holding for hold, and measures the window of d after warm.
func semCell(ctx context.Context, stats *redis.Client, addr, prefix string, n, callers int, hold time.Duration, o lock.Options, warm, d time.Duration) (*cellResult, error) {
	sems, closeAll, err := claimsPrimitives(ctx, addr, prefix, func(c *lock.Client) (*lock.Semaphore, error) {
		return c.Semaphore("sem", n)
	})
	if err != nil {
		return nil, err
	}
	defer closeAll()
	r := &cellResult{}
	var g gauge
	var holds, violations atomic.Int64
	rctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			s := sems[i%len(sems)]
			for rctx.Err() == nil {
				h, err := s.Acquire(rctx, 1, o)
				if err != nil {
					if rctx.Err() == nil {
						r.errs.add(err)
					}
					continue
				}
				holds.Add(1)
				if g.enter() > int64(n) {
					violations.Add(1)
				}
				time.Sleep(hold)
				g.leave()
				if err := h.Release(ctx); err != nil {
					r.errs.add(err)
				}
			}
		})
	}
	var h0 int64
	err = r.measure(ctx, stats, warm, d, func() {
		g.restart()
		h0 = holds.Load()
	}, func() {
		r.holds, r.most = holds.Load()-h0, g.most.Load()
	})
	cancel()
	wg.Wait()
	r.violations = violations.Load()
	return r, err
}

// The RWMutex cell.
const (
	rwReaders = 32
	rwWriters = 2
	rwRead    = 5 * time.Millisecond
	rwWrite   = 2 * time.Millisecond
	rwEvery   = 50 * time.Millisecond
)

// rwCell runs rwReaders readers reading back to back and rwWriters
// writers writing every rwEvery on one RWMutex(rwReaders) of
// claimsClients Clients, and measures the window of d after warm.
func rwCell(ctx context.Context, stats *redis.Client, addr, prefix string, o lock.Options, warm, d time.Duration) (*cellResult, error) {
	rws, closeAll, err := claimsPrimitives(ctx, addr, prefix, func(c *lock.Client) (*lock.RWMutex, error) {
		return c.RWMutex("rw", rwReaders)
	})
	if err != nil {
		return nil, err
	}
	defer closeAll()
	r := &cellResult{}
	var readers, writers gauge
	var reads, writes, violations atomic.Int64
	var readWait, writeBusy atomic.Int64 // ns: RLock calls, writes from Lock call to release
	rctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := range rwReaders {
		wg.Go(func() {
			m := rws[i%len(rws)]
			for rctx.Err() == nil {
				began := time.Now()
				h, err := m.RLock(rctx, o)
				if err != nil {
					if rctx.Err() == nil {
						r.errs.add(err)
					}
					continue
				}
				readWait.Add(int64(time.Since(began)))
				reads.Add(1)
				readers.enter()
				if writers.n.Load() != 0 {
					violations.Add(1)
				}
				time.Sleep(rwRead)
				readers.leave()
				if err := h.Release(ctx); err != nil {
					r.errs.add(err)
				}
			}
		})
	}
	for j := range rwWriters {
		wg.Go(func() {
			m := rws[(rwReaders+j)%len(rws)]
			time.Sleep(time.Duration(j) * rwEvery / rwWriters)
			tick := time.NewTicker(rwEvery)
			defer tick.Stop()
			for {
				select {
				case <-rctx.Done():
					return
				case <-tick.C:
				}
				began := time.Now()
				h, err := m.Lock(rctx, o)
				if err != nil {
					if rctx.Err() == nil {
						r.errs.add(err)
					}
					continue
				}
				writes.Add(1)
				if writers.enter() != 1 || readers.n.Load() != 0 {
					violations.Add(1)
				}
				time.Sleep(rwWrite)
				writers.leave()
				if err := h.Release(ctx); err != nil {
					r.errs.add(err)
				}
				writeBusy.Add(int64(time.Since(began)))
			}
		})
	}
	var r0, w0, rw0, wb0 int64
	err = r.measure(ctx, stats, warm, d, func() {
		readers.restart()
		r0, w0, rw0, wb0 = reads.Load(), writes.Load(), readWait.Load(), writeBusy.Load()
	}, func() {
		r.reads, r.writes, r.most = reads.Load()-r0, writes.Load()-w0, readers.most.Load()
		r.readWait, r.writeBusy = time.Duration(readWait.Load()-rw0), time.Duration(writeBusy.Load()-wb0)
		r.holds = r.reads + r.writes
	})
	cancel()
	wg.Wait()
	r.violations = violations.Load()
	return r, err
}

// stoppable is a Provider in a process that can be stopped as SIGSTOP
// stops one: while stopped, each of a Semaphore's calls waits before it
// is sent and again before its answer returns, and each grant sent to the
// inbox waits, until resumed. A Semaphore uses the claim methods and
// Listen; the lock methods pass through.
type stoppable struct {
	lock.Provider
	mu      sync.Mutex
	resumed chan struct{} // closed on resume; nil while running
	held    []func()      // deliveries that came while stopped
}

// stop stops p until resume.
func (p *stoppable) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.resumed == nil {
		p.resumed = make(chan struct{})
	}
}

// resume delivers the grants held while stopped, in order, and lets the
// waiting calls go on.
func (p *stoppable) resume() {
	p.mu.Lock()
	held := p.held
	p.held = nil
	if p.resumed != nil {
		close(p.resumed)
		p.resumed = nil
	}
	p.mu.Unlock()
	// Outside p.mu: a delivery may call the provider (a grant handed back
	// by a Client that is closing runs its release at once).
	for _, deliver := range held {
		deliver()
	}
}

// pause waits while p is stopped.
func (p *stoppable) pause() {
	p.mu.Lock()
	ch := p.resumed
	p.mu.Unlock()
	if ch != nil {
		<-ch
	}
}

func (p *stoppable) Listen(ctx context.Context, inbox string, deliver func(lock.Notice)) (func(), error) {
	p.pause()
	stop, err := p.Provider.Listen(ctx, inbox, func(g lock.Notice) {
		p.mu.Lock()
		if p.resumed != nil {
			p.held = append(p.held, func() { deliver(g) })
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		deliver(g) // outside p.mu: see resume
	})
	p.pause()
	return stop, err
}

func (p *stoppable) AcquireClaim(ctx context.Context, key string, c lock.Claim) (lock.Record, error) {
	p.pause()
	defer p.pause()
	return p.Provider.AcquireClaim(ctx, key, c)
}

func (p *stoppable) QueueClaim(ctx context.Context, key string, c lock.Claim) (lock.Record, error) {
	p.pause()
	defer p.pause()
	return p.Provider.QueueClaim(ctx, key, c)
}

func (p *stoppable) LeaveClaim(ctx context.Context, key string, c lock.Claim) error {
	p.pause()
	defer p.pause()
	return p.Provider.LeaveClaim(ctx, key, c)
}

func (p *stoppable) RenewClaim(ctx context.Context, key, owner string, ttl time.Duration) error {
	p.pause()
	defer p.pause()
	return p.Provider.RenewClaim(ctx, key, owner, ttl)
}

func (p *stoppable) ReleaseClaim(ctx context.Context, key, owner string) error {
	p.pause()
	defer p.pause()
	return p.Provider.ReleaseClaim(ctx, key, owner)
}

func (p *stoppable) LowerClaim(ctx context.Context, key, owner string, weight int) error {
	p.pause()
	defer p.pause()
	return p.Provider.LowerClaim(ctx, key, owner, weight)
}

func (p *stoppable) InspectClaims(ctx context.Context, key string) (lock.Claims, error) {
	p.pause()
	defer p.pause()
	return p.Provider.InspectClaims(ctx, key)
}

// liveHolds follows the permits that callers of running Clients hold, as
// the harness sees them, and the pauses of grants to them while they hold
// fewer than the limit.
type liveHolds struct {
	mu        sync.Mutex
	start     time.Time
	stopped   []bool    // by Client
	counted   [][]bool  // by Client and caller: holds a permit, counted in held
	held      int       // permits held by callers of running Clients
	freeSince time.Time // since when fewer than the limit are held with no grant; zero when all are
	lastStop  time.Time
	resumed   time.Time // the last resume
	byResume  int       // long pauses that ended within resumeEnds of a resume
	grants    int64
	over      int64 // grants that found more than the limit held
	longest   time.Duration
	longestAt time.Duration // from start, when that pause began
	afterStop time.Duration // from the stop before it to its beginning
	pauses    []pause       // of at least longPause
	paused    time.Duration // those together
}

// pause is one pause of grants to live callers while a permit was free.
type pause struct {
	at, afterStop, took time.Duration
}

// longPause is the shortest pause listed; a pause that ends within
// resumeEnds of a resume was ended by it.
const (
	longPause  = 200 * time.Millisecond
	resumeEnds = 50 * time.Millisecond
)

// free notes that fewer than the limit are held now, if no pause is open.
func (t *liveHolds) free(now time.Time) {
	if t.held < stoppedLimit && t.freeSince.IsZero() {
		t.freeSince = now
	}
}

// grant notes a permit granted to caller j of Client i.
func (t *liveHolds) grant(i, j int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped[i] {
		return
	}
	now := time.Now()
	if !t.freeSince.IsZero() {
		gap := now.Sub(t.freeSince)
		p := pause{at: t.freeSince.Sub(t.start), afterStop: t.freeSince.Sub(t.lastStop), took: gap}
		if gap > t.longest {
			t.longest, t.longestAt, t.afterStop = gap, p.at, p.afterStop
		}
		if gap >= longPause {
			t.pauses = append(t.pauses, p)
			t.paused += gap
			if t.freeSince.Before(t.resumed) && now.Sub(t.resumed) < resumeEnds {
				t.byResume++
			}
		}
		t.freeSince = time.Time{}
	}
	t.grants++
	t.counted[i][j] = true
	t.held++
	if t.held > stoppedLimit {
		t.over++
	}
	t.free(now)
}

// release notes that caller j of Client i is about to release its permit.
func (t *liveHolds) release(i, j int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.counted[i][j] {
		return
	}
	t.counted[i][j] = false
	t.held--
	t.free(time.Now())
}

// stop notes that Client i stopped or resumed: a stopped Client's callers
// hold nothing that counts, and a resumed one's holds count from their
// next grant.
func (t *liveHolds) stop(i int, stopped bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stopped[i] = stopped
	if !stopped {
		t.resumed = time.Now()
		return
	}
	now := time.Now()
	t.lastStop = now
	for j, c := range t.counted[i] {
		if c {
			t.counted[i][j] = false
			t.held--
		}
	}
	t.free(now)
}

// stoppedResult is what the stopped process cell measured.
type stoppedResult struct {
	grants, over       int64
	longest, longestAt time.Duration
	afterStop          time.Duration
	stops              int
	lost, failed       int64
	firstErr           string
	pauses             []pause
	paused             time.Duration
	byResume           int
}

// stoppedCell runs stoppedCallers callers, holding stoppedHold each, on a
// Semaphore(stoppedLimit) of stoppedClients Clients for d, and stops one
// Client after another for stoppedFor every stopEvery.
func stoppedCell(ctx context.Context, addr, prefix string, d time.Duration) (*stoppedResult, error) {
	ps := make([]*stoppable, stoppedClients)
	cs, closeAll, err := newClients(ctx, addr, prefix, "process-", stoppedClients, func(i int, p lock.Provider) lock.Provider {
		ps[i] = &stoppable{Provider: p}
		return ps[i]
	})
	if err != nil {
		return nil, err
	}
	defer closeAll()
	sems := make([]*lock.Semaphore, len(cs))
	for i, c := range cs {
		if sems[i], err = c.Semaphore("sem", stoppedLimit); err != nil {
			return nil, err
		}
	}
	t := &liveHolds{start: time.Now(), stopped: make([]bool, stoppedClients), counted: make([][]bool, stoppedClients)}
	for i := range t.counted {
		t.counted[i] = make([]bool, stoppedCallers/stoppedClients)
	}
	r := &stoppedResult{}
	var errs errorCount
	var lost, failed atomic.Int64
	o := lock.Options{Wait: true, MaxWait: time.Minute, Lease: stoppedLease}
	rctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var wg sync.WaitGroup
	for k := range stoppedCallers {
		i, j := k%stoppedClients, k/stoppedClients
		wg.Go(func() {
			for rctx.Err() == nil {
				h, err := sems[i].Acquire(rctx, 1, o)
				if err != nil {
					if rctx.Err() == nil {
						failed.Add(1)
						errs.add(err)
					}
					continue
				}
				t.grant(i, j)
				time.Sleep(stoppedHold)
				t.release(i, j)
				if err := h.Release(ctx); err != nil {
					lost.Add(1)
					if !errors.Is(err, lock.ErrLost) {
						errs.add(err)
					}
				}
			}
		})
	}
	for next := t.start.Add(stopEvery); next.Add(stoppedFor).Before(t.start.Add(d)); next = next.Add(stopEvery) {
		select {
		case <-rctx.Done():
		case <-time.After(time.Until(next)):
		}
		if rctx.Err() != nil {
			break
		}
		i := r.stops % stoppedClients
		t.stop(i, true)
		ps[i].stop()
		r.stops++
		select {
		case <-rctx.Done():
		case <-time.After(stoppedFor):
		}
		ps[i].resume()
		t.stop(i, false)
	}
	<-rctx.Done()
	wg.Wait()
	t.mu.Lock()
	r.grants, r.over, r.longest, r.longestAt, r.afterStop = t.grants, t.over, t.longest, t.longestAt, t.afterStop
	r.pauses, r.paused, r.byResume = t.pauses, t.paused, t.byResume
	t.mu.Unlock()
	r.lost, r.failed, r.firstErr = lost.Load(), failed.Load(), errs.first
	return r, nil
}
