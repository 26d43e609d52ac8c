package lockotel_test

import (
	"context"
	"errors"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/seed05627090/lock"
)

// readmeMetric is a row of README.md's table of metrics.
type readmeMetric struct {
	kind, unit string
	attributes []string // the attributes it lists (lock.outcome, lock.part)
	outcomes   []string // the lock.outcome values it lists; nil when it names none
}

// readme returns README.md's table of metrics by name, the values of the
// outcome table and of the part table, and the Prometheus names it lists.
func readme(t *testing.T) (metrics map[string]readmeMetric, outcomes, parts, prometheus []string) {
	t.Helper()
	b, err := os.ReadFile("README.md")
	require.NoError(t, err)
	text := string(b)
	section := func(heading string) string {
		_, rest, ok := strings.Cut(text, "\n"+heading+"\n")
		require.True(t, ok, "README.md has no %q", heading)
		if i := strings.Index(rest, "\n## "); i >= 0 {
			rest = rest[:i]
		}
		return rest
	}
	code := regexp.MustCompile("`([^`]*)`")
	metrics = map[string]readmeMetric{}
	table := "metrics" // the table being read; then lock.outcome's or lock.part's
	for _, line := range strings.Split(section("## Metrics"), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 || strings.HasPrefix(strings.TrimSpace(cells[1]), "---") {
			continue
		}
		first := strings.TrimSpace(cells[1])
		switch {
		case first == "`lock.outcome`" || first == "`lock.part`":
			table = strings.Trim(first, "`")
		case table == "lock.outcome" && strings.HasPrefix(first, "`"):
			outcomes = append(outcomes, strings.Trim(first, "`"))
		case table == "lock.part" && strings.HasPrefix(first, "`"):
			parts = append(parts, strings.Trim(first, "`"))
		case table == "metrics" && strings.HasPrefix(first, "`lock."):
			kind, unit, _ := strings.Cut(strings.TrimSpace(cells[2]), ", ")
			m := readmeMetric{kind: kind, unit: strings.Trim(unit, "`")}
			// "`lock.outcome`: `released`, `error`; `lock.part`"
			for _, v := range code.FindAllStringSubmatch(cells[3], -1) {
				if strings.HasPrefix(v[1], "lock.") {
					m.attributes = append(m.attributes, v[1])
				} else {
					m.outcomes = append(m.outcomes, v[1])
				}
			}
			metrics[strings.Trim(first, "`")] = m
		}
	}
	_, prom, ok := strings.Cut(text, "In Prometheus")
	require.True(t, ok, "README.md has no Prometheus names")
	prom, _, _ = strings.Cut(prom, "```")
	for _, v := range code.FindAllStringSubmatch(prom, -1) {
		if strings.HasPrefix(v[1], "lock_") && v[1] != "lock_outcome" && v[1] != "lock_part" {
			prometheus = append(prometheus, v[1])
		}
	}
	return metrics, outcomes, parts, prometheus
}

// TestREADMEMetrics checks README.md's table of metrics and its list of
// Prometheus names against what the module records when a Client takes,
// renews, releases and loses locks, is refused one, takes a semaphore's
// permits and is refused one, takes a read-write lock to read and to write,
// wins an election, and meets a provider that fails: the same names, kinds, units,
// attributes, outcomes and parts (issue 22: the README said no renewal was
// measured while lock.renewals was).
func TestREADMEMetrics(t *testing.T) {
	ctx := context.Background()
	mem := lock.NewMemoryProvider()
	p := &failingAcquire{Provider: mem}
	tm := newTelemetry(t)
	c := newClient(t, p, tm.events(t))

	// A lease long enough to stay held on a loaded machine (a renewal may run
	// up to 2/3 of it, 600ms, late), so the second Acquire finds it held and
	// Release releases it; renewed every 300ms, so the renewal is soon measured.
	l, err := c.Acquire(ctx, "job", lock.Options{Lease: 900 * time.Millisecond})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return counts(t, tm.collect(t), "lock.renewals")["renewed"] >= 1
	}, 10*time.Second, 10*time.Millisecond, "the lease is renewed")
	_, err = c.Acquire(ctx, "job", lock.Options{})
	require.ErrorIs(t, err, lock.ErrHeld)
	require.NoError(t, l.Release(ctx))

	// Lost by deleting its record, found by the renewal after 200ms; the lease
	// is long enough for the grant to come back before it ends under load.
	lost, err := c.Acquire(ctx, "lost", lock.Options{Lease: 600 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, mem.Release(ctx, lost.Key(), lost.Owner()))
	select {
	case <-lost.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the renewal did not notice the record was gone")
	}

	sem, err := c.Semaphore("pool", 2)
	require.NoError(t, err)
	full, err := sem.Acquire(ctx, 2, lock.Options{})
	require.NoError(t, err)
	_, err = sem.Acquire(ctx, 1, lock.Options{}) // finds the permits held
	require.ErrorIs(t, err, lock.ErrHeld)
	require.NoError(t, full.Release(ctx))
	rw, err := c.RWMutex("doc", 4)
	require.NoError(t, err)
	require.NoError(t, rw.RDo(ctx, lock.Options{}, func(context.Context) error { return nil }))
	require.NoError(t, rw.Do(ctx, lock.Options{}, func(context.Context) error { return nil }))
	term, err := c.Campaign(ctx, "scheduler", lock.ElectionOptions{})
	require.NoError(t, err)
	require.NoError(t, term.Resign(ctx))

	p.fail.Store(true)
	_, err = c.Acquire(ctx, "down", lock.Options{})
	require.Error(t, err)

	type recorded struct {
		kind, unit string
		attributes []string
		outcomes   []string
	}
	got := map[string]recorded{}
	var gotParts []string
	for _, sm := range tm.collect(t).ScopeMetrics {
		for _, m := range sm.Metrics {
			r := recorded{unit: m.Unit}
			var sets []attribute.Set
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				require.True(t, d.IsMonotonic, "%s", m.Name)
				r.kind = "counter"
				for _, dp := range d.DataPoints {
					sets = append(sets, dp.Attributes)
				}
			case metricdata.Histogram[float64]:
				r.kind = "histogram"
				for _, dp := range d.DataPoints {
					sets = append(sets, dp.Attributes)
				}
			default:
				t.Fatalf("%s is a %T: add its kind to this test", m.Name, m.Data)
			}
			for _, s := range sets {
				r.outcomes = append(r.outcomes, outcomeOf(s))
				for _, kv := range s.ToSlice() {
					r.attributes = append(r.attributes, string(kv.Key))
				}
				if v, ok := s.Value("lock.part"); ok && !slices.Contains(gotParts, v.AsString()) {
					gotParts = append(gotParts, v.AsString())
				}
			}
			got[m.Name] = r
		}
	}

	doc, outcomes, parts, prometheus := readme(t)
	var gotNames, docNames, wantProm []string
	for name, r := range got {
		gotNames = append(gotNames, name)
		prom := strings.ReplaceAll(name, ".", "_")
		if r.unit == "s" {
			prom += "_seconds"
		}
		if r.kind == "counter" {
			prom += "_total"
		}
		wantProm = append(wantProm, prom)
	}
	for name := range doc {
		docNames = append(docNames, name)
	}
	slices.Sort(gotNames)
	slices.Sort(docNames)
	slices.Sort(wantProm)
	slices.Sort(prometheus)
	require.Equal(t, gotNames, docNames, "README.md's metrics table should list the metrics the module records")
	assert.Equal(t, wantProm, prometheus, "README.md's Prometheus names should be those of the metrics recorded")

	for name, r := range got {
		d := doc[name]
		assert.Equal(t, r.kind, d.kind, "README.md: the kind of %s", name)
		assert.Equal(t, r.unit, d.unit, "README.md: the unit of %s", name)
		listed := d.outcomes
		if listed == nil {
			listed = outcomes // the outcomes of an acquisition
		}
		for _, o := range r.outcomes {
			if o != "" {
				assert.Contains(t, listed, o, "README.md should list the outcome %q of %s", o, name)
			}
		}
		for _, a := range r.attributes {
			assert.Contains(t, d.attributes, a, "README.md should list the attribute %s of %s", a, name)
		}
	}
	assert.ElementsMatch(t, parts, gotParts, "README.md's table of lock.part should list the parts recorded")
	assert.Contains(t, got["lock.acquisitions"].outcomes, "error", "a provider's failure is counted as an error")
	assert.Contains(t, got["lock.renewals"].outcomes, "renewed")
}

// TestProviderErrorCounted checks what README.md says of an acquisition that
// the provider failed: it is counted in lock.acquisitions with the outcome
// error (issue 22: the README said it was not counted).
func TestProviderErrorCounted(t *testing.T) {
	ctx := context.Background()
	tm := newTelemetry(t)
	p := &failingAcquire{Provider: lock.NewMemoryProvider()}
	p.fail.Store(true)
	c := newClient(t, p, tm.events(t))
	_, err := c.Acquire(ctx, "job", lock.Options{})
	require.ErrorIs(t, err, errRefused)

	rm := tm.collect(t)
	assert.Equal(t, map[string]int64{"error": 1}, counts(t, rm, "lock.acquisitions"))
	assert.Equal(t, uint64(1), histograms(t, rm, "lock.wait.duration")["error"].Count)
	waits := tm.ended("lock.wait")
	require.Len(t, waits, 1, "one wait span")
	assert.Equal(t, "error", attr(waits[0], "lock.outcome").AsString())
}

var errRefused = errors.New("connection refused")

// failingAcquire is a provider whose Acquire fails while fail is set.
type failingAcquire struct {
	lock.Provider
	fail atomic.Bool
}

func (p *failingAcquire) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (lock.Record, error) {
	if p.fail.Load() {
		return lock.Record{}, errRefused
	}
	return p.Provider.Acquire(ctx, key, owner, ttl)
}
