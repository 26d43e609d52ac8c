package lock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
)

// Issue 31, item 9: a fencing counter that holds something else than an
// integer is reported as a corrupt record that names the lock the caller
// asked for, beside the counter's key and what it holds, whether the lock
// was asked for with Acquire, Do, Middleware or a Primitive.

// TestCorruptFenceCounterNamesTheLock sets the fencing counter of a lock's
// slot to "xyz" (and then to a list) and acquires the lock in each way: the
// error matches ErrCorruptRecord, is a *RecordError at the counter's key, and
// its message names the lock's key, the counter's key and the value. The
// Client has a prefix of the test's own, so that the counter it breaks
// serves no other test's locks.
func TestCorruptFenceCounterNamesTheLock(t *testing.T) {
	redisBackends(t, func(t *testing.T, b backend) {
		ctx := ctxTimeout(t, 10*time.Second)
		c := newClient(t, b.replica(t), lock.WithPrefix(uniqueName(t)+":"))
		name := "counter"
		key := c.Key(name)
		_, fence, _, err := lock.RedisKeys(key)
		require.NoError(t, err)
		t.Cleanup(func() { _ = b.raw.Del(context.Background(), fence).Err() })

		mw, err := lock.Middleware(c, func(context.Context, int) (int, error) {
			t.Error("Middleware ran its handler without the lock")
			return 0, nil
		}, lock.MiddlewareOptions[int]{Name: name})
		require.NoError(t, err)
		prim, err := lock.New(c, func(context.Context, int) error {
			t.Error("the Primitive ran its handler without the lock")
			return nil
		}, lock.PrimitiveOptions[int]{Name: name})
		require.NoError(t, err)
		calls := map[string]func() error{
			"Acquire": func() error {
				l, err := c.Acquire(ctx, name, lock.Options{})
				assert.Nil(t, l, "a lock granted without a token")
				return err
			},
			"Do": func() error {
				return c.Do(ctx, name, lock.Options{}, func(context.Context) error {
					t.Error("Do ran its function without the lock")
					return nil
				})
			},
			"Middleware": func() error { _, err := mw(ctx, 1); return err },
			"Primitive":  func() error { return prim.Run(ctx, 1) },
		}

		for _, stored := range []struct{ kind, value string }{
			{"string", "xyz"}, {"list", "(a value of another Redis type)"},
		} {
			require.NoError(t, b.raw.Del(ctx, fence).Err())
			if stored.kind == "string" {
				require.NoError(t, b.raw.Set(ctx, fence, stored.value, 0).Err())
			} else {
				require.NoError(t, b.raw.RPush(ctx, fence, "xyz").Err())
			}
			for op, call := range calls {
				err := call()
				require.ErrorIs(t, err, lock.ErrCorruptRecord, "%s with a %s in the fencing counter", op, stored.kind)
				var rec *lock.RecordError
				require.True(t, errors.As(err, &rec), "%s: %v is not a *RecordError", op, err)
				assert.Equal(t, fence, rec.Key, "%s: the RecordError's key is the counter's", op)
				assert.Equal(t, key, rec.Lock, "%s: the RecordError's lock is the one asked for", op)
				msg := err.Error()
				assert.Contains(t, msg, `"`+key+`"`, "%s: the message names the lock the caller asked for", op)
				assert.Contains(t, msg, `"`+fence+`"`, "%s: the message names the counter", op)
				assert.Contains(t, msg, stored.value, "%s: the message says what the counter holds", op)
			}
		}
		n, err := b.raw.Exists(ctx, key).Result()
		require.NoError(t, err)
		assert.Zero(t, n, "a record was stored for a lock refused its token")
	})
}
