package rueidis_test

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock/redisdriver"
	lockrueidis "github.com/seed05627090/lock/rueidis"
)

// TestRepliesArePlain: the driver hands the provider the plain values that
// redisdriver.Driver's doc lists, from rueidis's RESP3: a map as its keys and
// values in turn, a boolean as 1 or nil, a double as its text, Lua's false
// as nil, an error in an array as a *redisdriver.Error; and an error reply as
// a *redisdriver.Error with the server's text ("ERR" included) that unwraps
// to rueidis's own error.
func TestRepliesArePlain(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	d := lockrueidis.NewDriver(newRueidis(t))
	mixed := &redisdriver.Command{Args: []any{"eval", `redis.setresp(3)
redis.call('HSET', KEYS[1], 'f', 'v')
local m = redis.call('HGETALL', KEYS[1])
redis.call('DEL', KEYS[1])
return {7, 's', false, true, {double = 1.5}, m, {1, {'nested', true}}, redis.error_reply('LOCK_X inner')}`, 1, uniqueName(t)}, Key: 3, Keys: 1}
	unknown := &redisdriver.Command{Args: []any{"evalsha", "0000000000000000000000000000000000000000", 0}}
	failed := &redisdriver.Command{Args: []any{"eval", "return redis.error_reply('ERR boom')", 0}}
	none := &redisdriver.Command{Args: []any{"eval", "return nil", 0}}
	d.Exec(ctx, []*redisdriver.Command{mixed, unknown, failed, none})

	require.NoError(t, mixed.Err)
	got, _ := mixed.Reply.([]any)
	require.Len(t, got, 8, "the reply %#v", mixed.Reply)
	assert.Equal(t, []any{int64(7), "s", nil, int64(1), "1.5", []any{"f", "v"}, []any{int64(1), []any{"nested", int64(1)}}}, got[:7])
	var inner *redisdriver.Error
	if assert.ErrorAs(t, got[7].(error), &inner) {
		assert.Equal(t, "LOCK_X inner", inner.Msg)
	}

	var rerr *redisdriver.Error
	var own *rueidis.RedisError
	require.ErrorAs(t, unknown.Err, &rerr, "an EVALSHA of an unknown script")
	assert.Regexp(t, "^NOSCRIPT", rerr.Msg)
	assert.True(t, errors.As(unknown.Err, &own), "the error unwraps to rueidis's")
	require.ErrorAs(t, failed.Err, &rerr)
	assert.Equal(t, "ERR boom", rerr.Msg)
	assert.NoError(t, none.Err, "a nil reply is no error")
	assert.Nil(t, none.Reply)
}
