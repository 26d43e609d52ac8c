package lock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/seed05627090/lock/redisdriver"
)

//go:embed scripts/fence.lua
var fenceLua string

// RedisFence is a write to Redis that a stale holder of a lock cannot make:
// a Lua script of the caller's (its body) that runs only behind a fence.
// The fence is a key that keeps the greatest fencing token that has passed
// it (its mark). Run, in one script, reads the mark, refuses a token below
// it, sets the mark to the token, and then runs the body: so once a holder
// with token 9 has written, a holder still using token 7 (paused past the
// end of its lock: a GC pause, a stopped VM) cannot write, whether or not it
// was told it lost the lock. A token equal to the mark passes (the same
// holder writing again).
//
// Make one RedisFence per kind of write, once (as with redis.NewScript),
// and run it with the token of the lock held for the resource:
//
//	var saveInvoice = lock.NewRedisFence(`redis.call('SET', KEYS[1], ARGV[1])`)
//
//	l, _ := lock.FromContext(ctx) // in Do, Middleware; or the Lock from Acquire
//	err := saveInvoice.Run(ctx, rdb, "invoice:{7}:fence", l.Token(),
//		[]string{"invoice:{7}"}, total).Err()
//	if errors.Is(err, lock.ErrStaleToken) {
//		// a later holder has written: nothing was written by this call
//	}
//
// The check, the new mark and the body run as one script, on the node
// that holds the fence: the fence and the body's keys share a hash slot
// (give them one hash tag, as above), which Run checks on every client.
// The fence never expires; delete it only with its resource. What it
// guarantees, and its limits (a body's error does not roll back the mark),
// are in docs/fencing.md.
type RedisFence struct {
	script *script
}

// NewRedisFence returns the fenced write whose body is body: the text of a
// Lua script, as EVAL takes it, run after the check of the fence. The body
// sees its own keys and arguments in KEYS and ARGV (the fence and the token
// are not among them), its reply is Run's reply, and it must touch only the
// keys in KEYS, as every script must for Redis Cluster. An empty body writes
// nothing: Run then only checks the token and moves the mark.
//
// NewRedisFence computes nothing (unlike redis.NewScript, which hashes the
// script with SHA-1): the first Run sends the script in full and learns its
// digest from the server, so a [RedisFence] made in a package variable works
// under Go's FIPS 140-3 mode (GODEBUG=fips140=only).
func NewRedisFence(body string) *RedisFence {
	// The body's first line stays the script's first line, so that the line
	// numbers of Redis's errors are the body's.
	return &RedisFence{script: scriptOf("local function fenced(KEYS, ARGV) " + body + "\nend\n" + fenceLua)}
}

// Run runs the fenced write on rdb with fence as the fence key, token as the
// writer's fencing token, and keys and args as the body's KEYS and ARGV. It
// returns the body's reply; unlike redis.Script's, a nil reply (a body that
// returns nothing) is not an error: Err is nil whenever the token passed
// the fence and the body ran without error. When the fence has seen a greater token, nothing
// is written, and the command's error is a *StaleTokenError (errors.Is
// [ErrStaleToken]) with the token and the mark. When fence is empty, token is
// zero (no grant has token 0), or a key is in another Cluster hash slot than
// fence, nothing is sent and the error matches [ErrInvalidArgument]. When the
// fence holds something else than a token, nothing is written and the error
// is a *RecordError ([ErrCorruptRecord]). Other errors are Redis's or the
// body's (with the mark already moved: see [RedisFence]).
func (f *RedisFence) Run(ctx context.Context, rdb redis.UniversalClient, fence string, token uint64, keys []string, args ...any) *redis.Cmd {
	cmd := redis.NewCmd(ctx)
	res, err := f.RunWith(ctx, newGoRedis(rdb), fence, token, keys, args...)
	if rerr, ok := err.(*redisdriver.Error); ok && rerr.Err != nil {
		err = rerr.Err // go-redis's own error, as go-redis returns it
	}
	if err != nil {
		cmd.SetErr(err)
	} else {
		cmd.SetVal(res)
	}
	return cmd
}

// RunWith is [RedisFence.Run] through d, a driver of another Redis client
// library (see [redisdriver.Driver]): it returns the body's reply (nil for a nil
// reply) and the error that Run's command would have, a server's error as a
// *[redisdriver.Error].
func (f *RedisFence) RunWith(ctx context.Context, d redisdriver.Driver, fence string, token uint64, keys []string, args ...any) (any, error) {
	if err := checkFence(fence, token, keys); err != nil {
		return nil, err
	}
	a := make([]any, 0, 2+len(keys)+len(args))
	a = append(a, fence)
	for _, k := range keys {
		a = append(a, k)
	}
	a = append(a, strconv.FormatUint(token, 10))
	cl := f.script.newCall(1+len(keys), append(a, args...))
	if err := await(ctx, func() { sendScripts(ctx, d, d, []*call{cl}, nil) }, nil); err != nil {
		return nil, err // no answer by ctx's end: the write may yet be applied
	}
	var rerr *redisdriver.Error
	if err := cl.cmd.Err; errors.As(err, &rerr) {
		if m, ok := strings.CutPrefix(rerr.Msg, "LOCK_STALE_TOKEN "); ok {
			mark, _ := strconv.ParseUint(m, 10, 64)
			return nil, &StaleTokenError{Fence: fence, Token: token, Mark: mark}
		} else if v, ok := strings.CutPrefix(rerr.Msg, "LOCK_BAD_FENCE "); ok {
			return nil, &RecordError{Key: fence, Value: v}
		}
	}
	return cl.cmd.Reply, cl.cmd.Err
}

// checkFence checks Run's arguments: a fence, a token, and keys in the
// fence's hash slot.
func checkFence(fence string, token uint64, keys []string) error {
	if fence == "" {
		return fmt.Errorf("%w: empty fence key", ErrInvalidArgument)
	}
	if token == 0 {
		return fmt.Errorf("%w: fencing token 0 (no grant has it)", ErrInvalidArgument)
	}
	slot := slotOf(fence)
	for _, k := range keys {
		if s := slotOf(k); s != slot {
			return fmt.Errorf("%w: key %q is in hash slot %d, its fence %q in slot %d: give them the same hash tag",
				ErrInvalidArgument, k, s, fence, slot)
		}
	}
	return nil
}
