package lock

import (
	"sync"
	"time"
)

// recent is a set of strings, each remembered for a while (keep) after it
// was last added, and 4096 of them at most: when that many are there, those
// older than keep are forgotten, or all of them when that is not enough.
// Its user guards it: the busy keys of a Client (busyKeys, below), the owners of
// the waiters that gave up (topic.go).
type recent struct {
	seen map[string]time.Time
}

const recentMax = 4096

func (r *recent) add(s string, now time.Time, keep time.Duration) {
	if r.seen == nil || len(r.seen) >= recentMax {
		for k, t := range r.seen {
			if now.Sub(t) >= keep {
				delete(r.seen, k)
			}
		}
		if r.seen == nil || len(r.seen) >= recentMax {
			r.seen = make(map[string]time.Time)
		}
	}
	r.seen[s] = now
}

// has reports whether s was added less than keep before now.
func (r *recent) has(s string, now time.Time, keep time.Duration) bool {
	t, ok := r.seen[s]
	return ok && now.Sub(t) < keep
}

// remove reports whether s was added less than keep before now, and forgets
// it.
func (r *recent) remove(s string, now time.Time, keep time.Duration) bool {
	ok := r.has(s, now, keep)
	delete(r.seen, s)
	return ok
}

// busyKeys remembers the keys this Client found held lately. A waiter's
// first request for such a key asks the provider to join the key's queue
// first ([LookJoin]): one command when others wait already. A key is
// forgotten a second after it was last seen busy.
type busyKeys struct {
	mu   sync.Mutex
	keys recent
}

const busyFor = time.Second

func (b *busyKeys) mark(key string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.keys.add(key, time.Now(), busyFor)
}

func (b *busyKeys) has(key string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.keys.has(key, time.Now(), busyFor)
}
