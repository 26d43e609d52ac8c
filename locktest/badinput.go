package locktest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/seed05627090/lock"
)

// BadInput is a call of Acquire, Renew, Finish and Release with one bad
// argument, which every provider refuses with lock.ErrInvalidArgument
// (see BadInputs).
type BadInput struct {
	Name  string // what is wrong, the name of its subtest
	Key   string
	Owner string
	TTL   time.Duration
}

// BadInputs returns the calls the suite's BadInput check makes: a bad key,
// owner or TTL, with key and a new owner for the good arguments. A
// backend's own tests may make them too, to check what the suite cannot
// see (that a refused call stored nothing, say).
func BadInputs(key string) []BadInput {
	return []BadInput{
		{"EmptyKey", "", newOwner(), time.Second},
		{"KeyTooLong", strings.Repeat("k", lock.MaxKeyLen+1), newOwner(), time.Second},
		{"EmptyOwner", key, "", time.Second},
		{"OwnerTooLong", key, strings.Repeat("o", lock.MaxOwnerLen+1), time.Second},
		{"OwnerWithComma", key, "a,1", time.Second},
		{"OwnerWithSpace", key, "a b", time.Second},
		{"OwnerWithNewline", key, "a\n", time.Second},
		{"ZeroTTL", key, newOwner(), 0},
		{"TTLUnderOneMillisecond", key, newOwner(), 999 * time.Microsecond},
		{"NegativeTTL", key, newOwner(), -time.Second},
	}
}

// Check checks that p refuses the call with lock.ErrInvalidArgument: in
// Acquire, Renew and Finish, and in Release when the bad argument is not
// the TTL (Release takes none).
func (in BadInput) Check(t *testing.T, ctx context.Context, p lock.Provider) {
	t.Helper()
	_, err := p.Acquire(ctx, in.Key, in.Owner, in.TTL)
	assert.ErrorIs(t, err, lock.ErrInvalidArgument, "Acquire rejects it")
	assert.ErrorIs(t, p.Renew(ctx, in.Key, in.Owner, in.TTL), lock.ErrInvalidArgument, "Renew rejects it")
	assert.ErrorIs(t, p.Finish(ctx, in.Key, in.Owner, in.TTL), lock.ErrInvalidArgument, "Finish rejects it")
	if in.TTL >= time.Millisecond {
		assert.ErrorIs(t, p.Release(ctx, in.Key, in.Owner), lock.ErrInvalidArgument, "Release rejects it")
	}
}

// BadWait is a call of Queue and Leave with one bad argument, which
// every provider refuses with lock.ErrInvalidArgument (see BadWaits).
type BadWait struct {
	Name string // what is wrong, the name of its subtest
	Key  string
	Wait lock.Wait
}

// BadWaits returns the calls the suite's QueueBadInput check makes: a bad
// key, or good with a bad owner, inbox or TTL on key. A backend's
// own tests may make them too, as with BadInputs.
func BadWaits(key string, good lock.Wait) []BadWait {
	with := func(name string, change func(w *lock.Wait)) BadWait {
		w := good
		change(&w)
		return BadWait{name, key, w}
	}
	return []BadWait{
		{"EmptyKey", "", good},
		{"KeyTooLong", strings.Repeat("k", lock.MaxKeyLen+1), good},
		with("EmptyOwner", func(w *lock.Wait) { w.Owner = "" }),
		with("OwnerWithComma", func(w *lock.Wait) { w.Owner = "a,1" }),
		with("OwnerWithSpace", func(w *lock.Wait) { w.Owner = "a b" }),
		with("OwnerTooLong", func(w *lock.Wait) { w.Owner = strings.Repeat("o", lock.MaxOwnerLen+1) }),
		with("EmptyInbox", func(w *lock.Wait) { w.Inbox = "" }),
		with("InboxWithSpace", func(w *lock.Wait) { w.Inbox = "in box" }),
		with("InboxWithNewline", func(w *lock.Wait) { w.Inbox += "\n" }),
		with("InboxTooLong", func(w *lock.Wait) { w.Inbox = strings.Repeat("i", lock.MaxKeyLen+1) }),
		with("ZeroTTL", func(w *lock.Wait) { w.TTL = 0 }),
		with("TTLUnderOneMillisecond", func(w *lock.Wait) { w.TTL = 999 * time.Microsecond }),
		with("NegativeTTL", func(w *lock.Wait) { w.TTL = -time.Second }),
	}
}

// Check checks that p refuses the call with lock.ErrInvalidArgument: in
// Queue, with each Look, and in Leave.
func (in BadWait) Check(t *testing.T, ctx context.Context, p lock.Provider) {
	t.Helper()
	for _, look := range []lock.Look{lock.LookFirst, lock.LookJoin, lock.LookFair, lock.LookAgain} {
		w := in.Wait
		w.Look = look
		_, err := p.Queue(ctx, in.Key, w)
		assert.ErrorIs(t, err, lock.ErrInvalidArgument, "Queue with %v rejects it", look)
	}
	assert.ErrorIs(t, p.Leave(ctx, in.Key, in.Wait), lock.ErrInvalidArgument, "Leave rejects it")
}
