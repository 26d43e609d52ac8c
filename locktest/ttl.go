package locktest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
)

// ttlToTheEnd (issue 31, item 11): a record read in its last millisecond
// still reports a TTL, never 0, which a Record reads as "unknown". A waiter
// that reads TTL 0 looks again a poll interval later instead of as the
// record expires: Redis's PTTL rounds down to 0 there, and a successor in
// the fault suite took its dead leader's role 1.7 s after its death, not
// 0.7 s. A record of a short TTL is read in a tight loop, by a waiter's
// look again and by Inspect, until it is gone.
func (s *suite) ttlToTheEnd(t *testing.T) {
	if !s.expires(t) {
		return
	}
	ctx, p := s.ctx, s.p
	in := listen(t, ctx, p)
	key := uniqueName(t)
	// Long enough that the waiter queues before the record expires on a
	// loaded machine (30ms was not, on PostgreSQL in CI); the loop reads
	// it to its last millisecond all the same.
	ttl := 300 * time.Millisecond
	if g := s.b.TTLGranularity; g > ttl {
		ttl = g
	}
	owner := newOwner()
	mustAcquire(t, p, key, owner, ttl)
	w := in.waiter(time.Second)
	mustQueue(t, ctx, p, key, w)
	w.Look = lock.LookAgain
	var reads, zero int
	deadline := time.Now().Add(ttl + 5*time.Second)
	for time.Now().Before(deadline) {
		rec, err := p.Queue(ctx, key, w)
		require.NoError(t, err)
		if rec.Owner == w.Owner {
			require.NoError(t, p.Release(ctx, key, w.Owner))
			break
		}
		reads++
		if rec.Owner == owner && rec.TTL <= 0 {
			zero++
		}
		st, err := p.Inspect(ctx, key)
		require.NoError(t, err)
		reads++
		if st.Owner == owner && st.TTL <= 0 {
			zero++
		}
	}
	t.Logf("%d reads of a record of %v until it expired; %d said TTL 0", reads, ttl, zero)
	assert.Zero(t, zero, "a record still there reported TTL 0 (unknown)")
	assertFree(t, ctx, p, key, "the waiter released the lock it was handed")
}
