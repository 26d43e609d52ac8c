package faults

import (
	"maps"
	"strconv"
	"sync"
	"time"
)

// WriteBoard collects the reports of the fenced writers of an election
// fault test: child processes that Lead one role and, while they lead,
// write through a fence with their term's number, without looking at their
// context in between, as a leader that does not know it was paused would.
// Each child reports, in lines that Fields parses:
//
//	elected term=T
//	write term=T result=ok|stale|error start=<Unix ns>
//	ended term=T
//
// (result: the write passed the fence, the fence refused it as stale, or it
// failed otherwise). The zero WriteBoard is empty and ready; it is safe
// for concurrent use.
type WriteBoard struct {
	mu       sync.Mutex
	accepted map[uint64]int // writes that passed the fence, by term
	writes   []writeReport
	elected  map[int]int // terms led, by child
	ended    map[uint64]bool
}

type writeReport struct {
	term   uint64
	result string // "ok", "stale" or "error"
	start  time.Time
}

// Follow reads child i's report lines until lines is closed.
func (b *WriteBoard) Follow(i int, lines <-chan string) {
	for line := range lines {
		b.Read(i, line)
	}
}

// Read takes one report line of child i; it ignores other lines.
func (b *WriteBoard) Read(i int, line string) {
	word, f := Fields(line)
	term, _ := strconv.ParseUint(f["term"], 10, 64)
	b.mu.Lock()
	defer b.mu.Unlock()
	switch word {
	case "elected":
		if b.elected == nil {
			b.elected = map[int]int{}
		}
		b.elected[i]++
	case "ended":
		if b.ended == nil {
			b.ended = map[uint64]bool{}
		}
		b.ended[term] = true
	case "write":
		ns, _ := strconv.ParseInt(f["start"], 10, 64)
		w := writeReport{term: term, result: f["result"], start: time.Unix(0, ns)}
		b.writes = append(b.writes, w)
		if w.result == "ok" {
			if b.accepted == nil {
				b.accepted = map[uint64]int{}
			}
			b.accepted[term]++
		}
	}
}

// Wrote reports whether a write with term passed the fence.
func (b *WriteBoard) Wrote(term uint64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.accepted[term] > 0
}

// Ended reports whether the term's Lead has ended it.
func (b *WriteBoard) Ended(term uint64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ended[term]
}

// ResumedWrites counts the writes with term that started after at (when
// the term's stopped leader was continued): those that passed the fence,
// which a correct fence never lets through once a later term has written;
// those it refused as stale; and those that failed otherwise (the
// connection).
func (b *WriteBoard) ResumedWrites(term uint64, at time.Time) (passed, refused, failed int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, w := range b.writes {
		if w.term != term || !w.start.After(at) {
			continue
		}
		switch w.result {
		case "ok":
			passed++
		case "stale":
			refused++
		default:
			failed++
		}
	}
	return passed, refused, failed
}

// ElectedBy returns how many terms each child led, by child.
func (b *WriteBoard) ElectedBy() map[int]int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return maps.Clone(b.elected)
}
