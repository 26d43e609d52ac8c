package main

import (
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"
)

// row is one metric: its label and how to show it from a result.
type row struct {
	label string
	cell  func(r result) string
}

var uncontendedRows = []row{
	{"cycles/s", func(r result) string { return count(r.OpsPerSec) }},
	{"cycle latency p50", func(r result) string { return dur(r.LatencyP50) }},
	{"cycle latency p99", func(r result) string { return dur(r.LatencyP99) }},
	{"Redis commands per cycle", func(r result) string { return fmt.Sprintf("%.1f", r.RedisCommands) }},
	{"Redis CPU per cycle", func(r result) string { return dur(r.RedisCPU) }},
	{"harness CPU per cycle", func(r result) string { return dur(r.ClientCPU) }},
	{"errors", func(r result) string { return fmt.Sprint(r.Errors) }},
}

var contendedRows = []row{
	{"sections/s", func(r result) string { return count(r.OpsPerSec) }},
	{"handoff to another goroutine p50", handoff(func(r result) float64 { return r.HandoffP50 })},
	{"handoff to another goroutine p99", handoff(func(r result) float64 { return r.HandoffP99 })},
	{"handoffs to another goroutine", func(r result) string { return fmt.Sprint(r.Handoffs) }},
	{"release call p50", func(r result) string { return dur(r.ReleaseP50) }},
	{"won back by the releaser", func(r result) string { return fmt.Sprintf("%.1f%%", 100*r.WonBack) }},
	{"grants per goroutine min/max", func(r result) string { return fmt.Sprintf("%d/%d", r.MinGrants, r.MaxGrants) }},
	{"longest single wait", func(r result) string { return dur(r.LongestWait) }},
	{"Redis commands per section", func(r result) string { return fmt.Sprintf("%.1f", r.RedisCommands) }},
	{"client round trips per section", func(r result) string { return fmt.Sprintf("%.1f", r.ClientCommands) }},
	{"Redis CPU per section", func(r result) string { return dur(r.RedisCPU) }},
	{"harness CPU per section", func(r result) string { return dur(r.ClientCPU) }},
	{"mutual-exclusion violations", func(r result) string { return fmt.Sprint(r.Violations) }},
	{"gave up (tried again) / errors", func(r result) string { return fmt.Sprintf("%d/%d", r.GaveUp, r.Errors) }},
}

var waitersRows = []row{
	{"Redis commands per section", func(r result) string { return fmt.Sprintf("%.1f", r.RedisCommands) }},
	{"same, second half of the run", func(r result) string { return fmt.Sprintf("%.1f", r.SteadyCommands) }},
	{"client round trips per section", func(r result) string { return fmt.Sprintf("%.1f", r.ClientCommands) }},
	{"sections/s", func(r result) string { return count(r.OpsPerSec) }},
	{"handoff to another goroutine p50", handoff(func(r result) float64 { return r.HandoffP50 })},
	{"won back by the releaser", func(r result) string { return fmt.Sprintf("%.1f%%", 100*r.WonBack) }},
	{"grants per goroutine min/max", func(r result) string { return fmt.Sprintf("%d/%d", r.MinGrants, r.MaxGrants) }},
	{"longest single wait", func(r result) string { return dur(r.LongestWait) }},
	{"memory per waiter, process / Redis", func(r result) string {
		return fmt.Sprintf("%s / %s", size(r.ClientBytes), size(r.RedisBytes))
	}},
	{"mutual-exclusion violations", func(r result) string { return fmt.Sprint(r.Violations) }},
}

// size shows a size per goroutine.
func size(b float64) string {
	if b >= 1024 {
		return fmt.Sprintf("%.1f KB", b/1024)
	}
	return fmt.Sprintf("%.0f B", b)
}

// handoff shows a handoff percentile, or "none" when no grant went to another
// goroutine.
func handoff(f func(r result) float64) func(r result) string {
	return func(r result) string {
		if r.Handoffs == 0 {
			return "none"
		}
		return dur(f(r))
	}
}

// printTable writes one aligned table: a group of rows per scenario, a column
// per library, and notes saying what the columns run.
func printTable(w io.Writer, results map[string]result, d time.Duration) {
	header := []string{fmt.Sprintf("metric (%v per cell)", d)}
	for _, lib := range columns {
		header = append(header, lib.name)
	}
	lines := [][]string{header}
	for _, sc := range scenarios(d) {
		ran := false
		for _, lib := range sc.libs {
			_, ok := results[sc.id+"/"+lib.name]
			ran = ran || ok
		}
		if !ran {
			continue
		}
		lines = append(lines, []string{sc.title})
		for _, rw := range sc.rows {
			line := []string{"  " + rw.label}
			for _, lib := range columns {
				r, ok := results[sc.id+"/"+lib.name]
				if !ok {
					line = append(line, "-")
					continue
				}
				line = append(line, rw.cell(r))
			}
			lines = append(lines, line)
		}
	}

	widths := make([]int, len(header))
	for _, l := range lines {
		if len(l) == 1 {
			continue // a scenario title runs across the columns
		}
		for i, c := range l {
			widths[i] = max(widths[i], utf8.RuneCountInString(c))
		}
	}
	for _, l := range lines {
		var b strings.Builder
		for i, c := range l {
			pad := strings.Repeat(" ", max(widths[i]-utf8.RuneCountInString(c), 0))
			switch {
			case len(l) == 1:
				b.WriteString(c)
			case i == 0:
				b.WriteString(c + pad)
			default:
				b.WriteString("  " + pad + c)
			}
		}
		fmt.Fprintln(w, b.String())
	}

	fmt.Fprintln(w)
	nameWidth := 0
	for _, lib := range columns {
		nameWidth = max(nameWidth, utf8.RuneCountInString(lib.name)+1)
	}
	for _, lib := range columns {
		fmt.Fprintf(w, "%-*s %s\n", nameWidth, lib.name+":", lib.detail)
	}
	fmt.Fprintln(w, `Every column gets a client of its own: the go-redis ones the same settings (PoolSize 64),
lock (rueidis) and lock (valkey-go) their client's defaults, rueidislock and valkeylock
those with the options their Locker sets.
Client round trips: the commands the column's client sent (auto-pipelined ones count each).
A handoff is a grant to a goroutine other than the one that released last, timed from the
start of that release. Longest wait counts waits still unfinished when the run ended.
Redis commands: INFO commandstats calls during the run (the commands inside scripts count;
connection set-up and INFO do not), divided by the cycles or sections completed.`)
}

// count formats a rate.
func count(v float64) string {
	switch {
	case v >= 10000:
		return fmt.Sprintf("%.1fk", v/1000)
	case v >= 1000:
		return fmt.Sprintf("%.2fk", v/1000)
	}
	return fmt.Sprintf("%.0f", v)
}

// dur formats microseconds.
func dur(us float64) string {
	switch {
	case us == 0:
		return "0"
	case us < 10:
		return fmt.Sprintf("%.1f us", us)
	case us < 1000:
		return fmt.Sprintf("%.0f us", us)
	case us < 1e6:
		return fmt.Sprintf("%.2f ms", us/1000)
	}
	return fmt.Sprintf("%.2f s", us/1e6)
}
