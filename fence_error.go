package lock

import (
	"errors"
	"strconv"
)

// ErrStaleToken reports a fenced write refused because its fence had seen a
// greater fencing token than the writer's: a later holder of the lock has
// written ([RedisFence]) or advanced the fence ([SQLFence]), so the writer's lock
// had ended, whether or not its holder was told. Errors that match it are
// *StaleTokenError values. RedisFence wrote nothing; after SQLFence, roll the
// transaction back.
var ErrStaleToken = errors.New("lock: stale fencing token")

// StaleTokenError is returned by a fenced write whose token is below its
// fence's mark. It matches [ErrStaleToken].
type StaleTokenError struct {
	// Fence is the fence: the Redis key of a [RedisFence], the name of an
	// [SQLFence]'s row.
	Fence string
	// Token is the writer's token.
	Token uint64
	// Mark is the greatest token the fence had seen.
	Mark uint64
}

// Error names the fence and both tokens: "lock: stale fencing token 7 at
// fence "invoice:{7}:fence": token 9 has passed it".
func (e *StaleTokenError) Error() string {
	return "lock: stale fencing token " + strconv.FormatUint(e.Token, 10) + " at fence " +
		strconv.Quote(e.Fence) + ": token " + strconv.FormatUint(e.Mark, 10) + " has passed it"
}

// Is reports whether target is [ErrStaleToken].
func (e *StaleTokenError) Is(target error) bool { return target == ErrStaleToken }
