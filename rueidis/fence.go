package rueidis

import (
	"context"

	"github.com/redis/rueidis"

	"github.com/seed05627090/lock"
)

// Fence is a [lock.RedisFence] run through a rueidis client: a write to
// Redis, a Lua script of the caller's, that runs only behind a fence key
// holding the greatest fencing token that has passed it, so that a stale
// holder of a lock cannot make it. Everything lock.RedisFence says holds
// (the fence and the body's keys in one hash slot, a fence that never
// expires, no SHA-1 computed in this process). Make one Fence per kind of
// write, once:
//
//	var saveInvoice = lockrueidis.NewFence(`redis.call('SET', KEYS[1], ARGV[1])`)
//
//	_, err := saveInvoice.Run(ctx, client, "invoice:{7}:fence", l.Token(), []string{"invoice:{7}"}, total)
//	if errors.Is(err, lock.ErrStaleToken) {
//		// a later holder has written: nothing was written by this call
//	}
type Fence struct {
	fence *lock.RedisFence
}

// NewFence returns the fenced write whose body is body, as
// [lock.NewRedisFence] takes it.
func NewFence(body string) *Fence {
	return &Fence{fence: lock.NewRedisFence(body)}
}

// Run runs the fenced write through client, as [lock.RedisFence.Run] does,
// with fence as the fence key, token as the writer's fencing token, and
// keys and args as the body's KEYS and ARGV. It returns the body's reply
// (an int64, a string, a []any of those, or nil) and nil when the token
// passed the fence and the body ran; a *lock.StaleTokenError (errors.Is
// lock.ErrStaleToken) when nothing was written because the fence has seen
// a greater token; an error matching lock.ErrInvalidArgument, nothing sent,
// for an empty fence, a token of 0 or a key in another hash slot than
// fence; a *lock.RecordError when the fence holds something else than a
// token; and otherwise the server's error (a *redisdriver.Error, with the
// mark already moved when the body failed) or the client's.
func (f *Fence) Run(ctx context.Context, client rueidis.Client, fence string, token uint64, keys []string, args ...string) (any, error) {
	a := make([]any, len(args))
	for i, s := range args {
		a[i] = s
	}
	return f.fence.RunWith(ctx, newDriver(client), fence, token, keys, a...)
}
