package main

// The observe table (-observe): how long after a role changes an observer
// in another Client (its own go-redis client, the default poll interval of
// one second) is sent the change by Client.Observe: a term won, a term
// resigned, and a leader that stopped renewing (its record expires). Each
// round starts its clock before the change can happen (before Campaign is
// called, before Resign, at the earliest moment the record can expire), so
// the figures are upper bounds.

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed05627090/lock"
)

// lostRenewals is a provider whose renewals never reach the server, and
// say they did: its leader stops renewing without knowing.
type lostRenewals struct{ lock.Provider }

func (lostRenewals) Renew(context.Context, string, string, time.Duration) error { return nil }

// observeMain runs rounds rounds against the Redis at addr and writes the
// table to w.
func observeMain(ctx context.Context, w io.Writer, addr string, rounds int) error {
	prefix := "bench:" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
	newClient := func(p func(redis.UniversalClient) lock.Provider) (*lock.Client, func(), error) {
		rc := redis.NewClient(&redis.Options{Addr: addr})
		c, err := lock.NewClient(p(rc), lock.WithPrefix(prefix))
		if err != nil {
			rc.Close()
			return nil, nil, err
		}
		return c, func() { c.Close(); rc.Close() }, nil
	}
	plain := func(rc redis.UniversalClient) lock.Provider { return lock.NewRedisProvider(rc) }
	leader, closeLeader, err := newClient(plain)
	if err != nil {
		return err
	}
	defer closeLeader()
	stopped, closeStopped, err := newClient(func(rc redis.UniversalClient) lock.Provider {
		return lostRenewals{lock.NewRedisProvider(rc)}
	})
	if err != nil {
		return err
	}
	defer closeStopped()
	watcher, closeWatcher, err := newClient(plain)
	if err != nil {
		return err
	}
	defer closeWatcher()

	role := "observe"
	octx, cancel := context.WithCancel(ctx)
	defer cancel()
	seen, err := watcher.Observe(octx, role)
	if err != nil {
		return err
	}
	// wait returns when a value that ok accepts is sent.
	wait := func(ok func(lock.Leader) bool) (time.Time, error) {
		timeout := time.After(10 * time.Second)
		for {
			select {
			case l, open := <-seen:
				if !open {
					return time.Time{}, ctx.Err()
				}
				if l.Err == nil && ok(l) {
					return time.Now(), nil
				}
			case <-timeout:
				return time.Time{}, fmt.Errorf("nothing observed within 10s")
			}
		}
	}
	vacant := func(l lock.Leader) bool { return l.Vacant() }
	if _, err := wait(vacant); err != nil {
		return err
	}

	var won, resigned, expired []time.Duration
	short, shortSeen := 0, 0
	lease := 300 * time.Millisecond
	for r := range rounds {
		// A term that lasts a millisecond: seen at all?
		t, err := leader.Campaign(ctx, role, lock.ElectionOptions{})
		if err != nil {
			return err
		}
		time.Sleep(time.Millisecond)
		if err := t.Resign(ctx); err != nil {
			return err
		}
		short++
		if _, err := wait(func(l lock.Leader) bool { return l.Term == t.Token() }); err == nil {
			shortSeen++
		}
		if _, err := wait(vacant); err != nil {
			return err
		}

		// A term won, then resigned.
		start := time.Now()
		t, err = leader.Campaign(ctx, role, lock.ElectionOptions{})
		if err != nil {
			return err
		}
		at, err := wait(func(l lock.Leader) bool { return l.Term == t.Token() })
		if err != nil {
			return err
		}
		won = append(won, at.Sub(start))
		time.Sleep(20 * time.Millisecond)
		start = time.Now()
		if err := t.Resign(ctx); err != nil {
			return err
		}
		if at, err = wait(vacant); err != nil {
			return err
		}
		resigned = append(resigned, at.Sub(start))

		// A leader that stops renewing: its record expires a lease after
		// it was granted, which is after Campaign was called.
		if r%4 == 0 { // each takes a lease
			start = time.Now()
			t, err = stopped.Campaign(ctx, role, lock.ElectionOptions{Lease: lease})
			if err != nil {
				return err
			}
			if _, err := wait(func(l lock.Leader) bool { return l.Term == t.Token() }); err != nil {
				return err
			}
			if at, err = wait(vacant); err != nil {
				return err
			}
			expired = append(expired, at.Sub(start.Add(lease)))
			_ = t.Resign(ctx) // lost already; ends its Lock
		}
		fmt.Fprint(os.Stderr, ".")
	}
	fmt.Fprintln(os.Stderr)
	fmt.Fprintf(w, "Observe: the observer's Client polls every %v (WithPollInterval's default); a leader's Client and the observer's each have their own go-redis client; %d rounds\n\n", time.Second, rounds)
	fmt.Fprintf(w, "Terms of about a millisecond (Campaign, 1 ms, Resign) seen by the observer: %d of %d\n\n", shortSeen, short)
	fmt.Fprintln(w, "| change | until Observe sends it: p50 | p99 | max |")
	fmt.Fprintln(w, "|---|---|---|---|")
	for _, row := range []struct {
		what string
		ds   []time.Duration
	}{
		{"a term won (from the call of Campaign)", won},
		{"a term resigned (from the call of Resign)", resigned},
		{fmt.Sprintf("a leader stopped renewing (from the earliest its %v record can expire)", lease), expired},
	} {
		ds := slices.Sorted(slices.Values(row.ds))
		at := func(q float64) time.Duration { return ds[min(len(ds)-1, int(q*float64(len(ds))))] }
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", row.what, fmtDur(at(0.5)), fmtDur(at(0.99)), fmtDur(ds[len(ds)-1]))
	}
	return nil
}
