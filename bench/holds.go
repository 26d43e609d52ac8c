package main

// The holds table (-holds): a semaphore, a read-write lock and a multi-lock
// of this library under contention from 16 replicas, each beside what a
// team builds by hand from a plain lock.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed05627090/lock"
)

const (
	holdReplicas = 16
	holdSection  = time.Millisecond
	holdPermits  = 4
	holdNames    = 8 // of the multi-lock rows: each operation takes 2
)

// holdRow is one row of the holds table.
type holdRow struct {
	id, what string
	// op runs one operation of replica i: it waits for its hold, calls
	// section with how long it waited and what it holds, and releases.
	op func(ctx context.Context, i int, section func(waited time.Duration, kind string, keys []int)) error
}

// holdResult is what a row measured.
type holdResult struct {
	ops        int64
	waits      map[string][]time.Duration // by kind: "", "read", "write"
	commands   float64                    // Redis commands per operation
	violations int64
	errors     int64
	firstErr   string
}

// holdsMain runs the holds table against the Redis at addr, each row for d.
func holdsMain(ctx context.Context, w io.Writer, addr string, d time.Duration) error {
	if *claimsTable {
		return claimsMain(ctx, w, addr, d)
	}
	runID := strconv.FormatInt(time.Now().UnixNano(), 36)
	cs, closeAll, err := newClients(ctx, addr, "bench:"+runID+":", "replica-", holdReplicas, nil)
	if err != nil {
		return err
	}
	defer closeAll()
	stats := redis.NewClient(&redis.Options{Addr: addr})
	defer stats.Close()
	wait := lock.Options{Wait: true, MaxWait: time.Minute, Lease: 8 * time.Second}
	sems := make([]*lock.Semaphore, holdReplicas)
	rws := make([]*lock.RWMutex, holdReplicas)
	for i, c := range cs {
		var err error
		if sems[i], err = c.Semaphore("sem", holdPermits); err != nil {
			return err
		}
		if rws[i], err = c.RWMutex("rw", holdReplicas); err != nil {
			return err
		}
	}
	names := make([]string, holdNames)
	for i := range names {
		names[i] = "multi-" + strconv.Itoa(i)
	}
	rows := []holdRow{
		{"sem", "Semaphore(4): Do(weight 1, Wait)", func(ctx context.Context, i int, section func(time.Duration, string, []int)) error {
			began := time.Now()
			h, err := sems[i].Acquire(ctx, 1, wait)
			if err != nil {
				return err
			}
			section(time.Since(began), "", nil)
			return h.Release(ctx)
		}},
		{"sem by hand", "4 locks sem-0..3: try each (from a random one) without waiting; none free: sleep 0-5 ms, again", func(ctx context.Context, i int, section func(time.Duration, string, []int)) error {
			began := time.Now()
			for ctx.Err() == nil {
				start := rand.IntN(holdPermits)
				for j := range holdPermits {
					k := (start + j) % holdPermits
					l, err := cs[i].Acquire(ctx, "sem-"+strconv.Itoa(k), lock.Options{Lease: 8 * time.Second})
					if err != nil {
						continue
					}
					section(time.Since(began), "", []int{k})
					return l.Release(ctx)
				}
				time.Sleep(time.Duration(rand.Int64N(int64(5 * time.Millisecond))))
			}
			return ctx.Err()
		}},
		{"rw", "RWMutex(16): 1 write in 5 (Do), else RDo, Wait", func(ctx context.Context, i int, section func(time.Duration, string, []int)) error {
			began := time.Now()
			var h *lock.Hold
			var err error
			kind := "read"
			if rand.IntN(5) == 0 {
				kind = "write"
				h, err = rws[i].Lock(ctx, wait)
			} else {
				h, err = rws[i].RLock(ctx, wait)
			}
			if err != nil {
				return err
			}
			section(time.Since(began), kind, nil)
			return h.Release(ctx)
		}},
		{"rw by hand", "one lock for readers and writers alike (Acquire, Wait, Fair)", func(ctx context.Context, i int, section func(time.Duration, string, []int)) error {
			began := time.Now()
			kind := "read"
			if rand.IntN(5) == 0 {
				kind = "write"
			}
			l, err := cs[i].Acquire(ctx, "rw-plain", lock.Options{Wait: true, Fair: true, MaxWait: time.Minute, Lease: 8 * time.Second})
			if err != nil {
				return err
			}
			section(time.Since(began), kind, nil)
			return l.Release(ctx)
		}},
		{"multi", "DoAll of 2 names of 8 at random, Wait", func(ctx context.Context, i int, section func(time.Duration, string, []int)) error {
			a, b := twoOf(holdNames)
			began := time.Now()
			h, err := cs[i].AcquireAll(ctx, []string{names[a], names[b]}, wait)
			if err != nil {
				return err
			}
			section(time.Since(began), "", []int{a, b})
			return h.Release(ctx)
		}},
		{"multi by hand", "the same 2 names, Acquire with Wait one after the other in name order (holds the first while it waits)", func(ctx context.Context, i int, section func(time.Duration, string, []int)) error {
			a, b := twoOf(holdNames)
			began := time.Now()
			first, err := cs[i].Acquire(ctx, names[min(a, b)], wait)
			if err != nil {
				return err
			}
			second, err := cs[i].Acquire(ctx, names[max(a, b)], wait)
			if err != nil {
				_ = first.Release(ctx)
				return err
			}
			section(time.Since(began), "", []int{a, b})
			return errors.Join(second.Release(ctx), first.Release(ctx))
		}},
	}
	fmt.Fprintf(w, "Holds: %d replicas (lock.Clients, each on its own go-redis client), critical section %v, each row %v\n\n", holdReplicas, holdSection, d)
	fmt.Fprintln(w, "| row | holds/s | wait p50 | wait p99 | wait max | Redis cmds/hold | violations | errors |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|")
	var notes []string
	for _, r := range rows {
		res, err := runHoldRow(ctx, stats, r, d)
		if err != nil {
			return fmt.Errorf("%s: %w", r.id, err)
		}
		kinds := slices.Sorted(maps.Keys(res.waits))
		for _, kind := range kinds {
			ws := res.waits[kind]
			p50, p99 := percentiles(ws)
			label := r.id
			if kind != "" {
				label += " (" + kind + "s)"
			}
			fmt.Fprintf(w, "| %s | %.0f | %.2f ms | %.1f ms | %.1f ms | %.1f | %d | %d |\n",
				label, float64(len(ws))/d.Seconds(), p50/1e3, p99/1e3, float64(slices.Max(ws))/1e6, res.commands, res.violations, res.errors)
		}
		notes = append(notes, fmt.Sprintf("- %s: %s", r.id, r.what))
		if res.firstErr != "" {
			notes = append(notes, "  first error: "+res.firstErr)
		}
		if res.violations > 0 {
			return fmt.Errorf("%s: %d violations", r.id, res.violations)
		}
	}
	fmt.Fprintln(w)
	for _, n := range notes {
		fmt.Fprintln(w, n)
	}
	fmt.Fprintln(w, "wait: from the call to the hold; violations: more than 4 permit holders, a writer with anyone, a name held twice, at once")
	return nil
}

// runHoldRow runs r on every replica for d.
func runHoldRow(ctx context.Context, rc *redis.Client, r holdRow, d time.Duration) (holdResult, error) {
	res := holdResult{waits: map[string][]time.Duration{}}
	var (
		mu              sync.Mutex
		inUse, readers  atomic.Int64
		writers         atomic.Int64
		held            [holdNames]atomic.Int64
		ops, violations atomic.Int64
		errs            errorCount
	)
	section := func(waited time.Duration, kind string, keys []int) {
		switch kind {
		case "read":
			readers.Add(1)
			if writers.Load() != 0 {
				violations.Add(1)
			}
		case "write":
			if writers.Add(1) != 1 || readers.Load() != 0 {
				violations.Add(1)
			}
		}
		if r.id == "sem" || r.id == "sem by hand" {
			if inUse.Add(1) > holdPermits {
				violations.Add(1)
			}
		}
		for _, k := range keys {
			if held[k].Add(1) != 1 {
				violations.Add(1)
			}
		}
		time.Sleep(holdSection)
		for _, k := range keys {
			held[k].Add(-1)
		}
		if r.id == "sem" || r.id == "sem by hand" {
			inUse.Add(-1)
		}
		switch kind {
		case "read":
			readers.Add(-1)
		case "write":
			writers.Add(-1)
		}
		ops.Add(1)
		mu.Lock()
		res.waits[kind] = append(res.waits[kind], waited)
		mu.Unlock()
	}
	before, err := readServerStats(ctx, rc)
	if err != nil {
		return res, err
	}
	rctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var wg sync.WaitGroup
	for i := range holdReplicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for rctx.Err() == nil {
				if err := r.op(rctx, i, section); err != nil && rctx.Err() == nil {
					errs.add(err)
				}
			}
		}()
	}
	wg.Wait()
	after, err := readServerStats(ctx, rc)
	if err != nil {
		return res, err
	}
	res.ops, res.violations = ops.Load(), violations.Load()
	res.errors, res.firstErr = errs.n, errs.first
	if res.ops > 0 {
		res.commands = float64(after.calls-before.calls) / float64(res.ops)
	}
	if res.ops == 0 {
		return res, fmt.Errorf("no operation completed")
	}
	return res, nil
}

// twoOf returns two different numbers below n, at random.
func twoOf(n int) (int, int) {
	a := rand.IntN(n)
	b := rand.IntN(n - 1)
	if b >= a {
		b++
	}
	return a, b
}
