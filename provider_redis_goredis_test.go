package lock

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/seed05627090/lock/redisdriver"
)

// TestGoRedisRepliesArePlain: the go-redis driver hands the provider the
// plain values that redisdriver.Driver's doc lists, whatever the protocol: a
// RESP3 map as its keys and values in turn, a boolean as 1 or nil, a
// double as its text, a nil as nil, and an error reply as a *redisdriver.Error
// that unwraps to go-redis's own error.
func TestGoRedisRepliesArePlain(t *testing.T) {
	got := goRedisValue([]any{
		int64(7), "s", nil, true, false, 1.5,
		map[any]any{"appendfsync": "everysec"},
		[]any{int64(1), []any{"nested", true}},
	})
	want := []any{
		int64(7), "s", nil, int64(1), nil, "1.5",
		[]any{"appendfsync", "everysec"},
		[]any{int64(1), []any{"nested", int64(1)}},
	}
	if !equalReplies(got, want) {
		t.Errorf("converted %#v, want %#v", got, want)
	}

	// A map's pairs come in the order of their keys, as the other drivers
	// give them, not in Go's random order of a map.
	m := map[any]any{}
	ms := map[string]string{}
	var pairs []any
	for _, k := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		m[k], ms[k] = k+"!", k+"!"
		pairs = append(pairs, k, k+"!")
	}
	for range 10 {
		if got := goRedisValue(m); !equalReplies(got, pairs) {
			t.Fatalf("a map converted to %v, want %v", got, pairs)
		}
		if got := goRedisValue(ms); !equalReplies(got, pairs) {
			t.Fatalf("a map of strings converted to %v, want %v", got, pairs)
		}
	}

	var cmd redisdriver.Command
	rc := redis.NewCmd(context.Background())
	rc.SetErr(redis.Nil)
	goRedisResult(rc, &cmd, nil)
	if cmd.Reply != nil || cmd.Err != nil {
		t.Errorf("a nil reply gave %v, %v; want nil, nil", cmd.Reply, cmd.Err)
	}

	c := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	defer c.Close()
	unknown := &redisdriver.Command{Args: []any{"evalsha", "0000000000000000000000000000000000000000", 0}}
	goRedisExec(context.Background(), c, []*redisdriver.Command{unknown})
	var rerr *redisdriver.Error
	var gerr redis.Error
	if !errors.As(unknown.Err, &rerr) || !strings.HasPrefix(rerr.Msg, "NOSCRIPT") || !errors.As(unknown.Err, &gerr) {
		t.Errorf("an EVALSHA of an unknown script gave %#v; want a *redisdriver.Error NOSCRIPT that unwraps to a redis.Error", unknown.Err)
	}
}

func equalReplies(a, b any) bool {
	as, ok1 := a.([]any)
	bs, ok2 := b.([]any)
	if ok1 != ok2 {
		return false
	}
	if !ok1 {
		return a == b
	}
	if len(as) != len(bs) {
		return false
	}
	for i := range as {
		if !equalReplies(as[i], bs[i]) {
			return false
		}
	}
	return true
}
