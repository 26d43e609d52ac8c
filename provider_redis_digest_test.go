package lock_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
)

// Issue 31, item 4: a script's digest is the server's (SCRIPT LOAD), learned
// after its first call, which is sent in full; later calls send the digest,
// and a server that forgot the script (SCRIPT FLUSH, a restart) is sent it
// in full again.

// TestScriptDigestLearnedFromServer runs a script of its own through
// sendScripts three times, the server's script cache flushed before the
// third, and checks the commands sent: EVAL then SCRIPT LOAD; EVALSHA with
// the script's SHA-1; EVALSHA, NOSCRIPT, EVAL. Every call returns the
// script's reply.
func TestScriptDigestLearnedFromServer(t *testing.T) {
	clients := map[string]func(t *testing.T) *redis.Client{
		"miniredis": func(t *testing.T) *redis.Client {
			rc := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
			t.Cleanup(func() { _ = rc.Close() })
			return rc
		},
		"redis": func(t *testing.T) *redis.Client { return realRedis(t) },
	}
	for name, client := range clients {
		t.Run(name, func(t *testing.T) {
			ctx := ctxTimeout(t, 10*time.Second)
			rc := client(t)
			rec := &cmdNames{}
			rc.AddHook(rec)
			// A text of this test's own, so that no other test has taught
			// the server (or this process) its digest.
			s := lock.NewScript("return {KEYS[1], '" + uniqueName(t) + "'}")
			key := "{" + uniqueName(t) + "}"
			run := func(what string, want ...string) {
				t.Helper()
				res, err := s.Send(ctx, rc, key)
				require.NoError(t, err, what)
				require.Equal(t, []any{key, s.Text()[len("return {KEYS[1], '") : len(s.Text())-2]}, res, what)
				assert.Equal(t, want, rec.take(), "%s sent", what)
			}
			sum := sha1.Sum([]byte(s.Text()))
			digest := hex.EncodeToString(sum[:])

			run("the first call", "eval", "script load "+digest)
			require.Equal(t, digest, s.Digest(), "the digest learned")
			run("the second call", "evalsha "+digest)
			require.NoError(t, rc.ScriptFlush(ctx).Err())
			rec.take()
			run("a call after SCRIPT FLUSH", "evalsha "+digest, "eval")
		})
	}
}

// cmdNames is a hook that records the commands a client sends: its name,
// and the digest of an EVALSHA or SCRIPT LOAD's reply.
type cmdNames struct {
	mu    sync.Mutex
	names []string
}

func (h *cmdNames) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *cmdNames) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		name := cmd.Name()
		switch a := cmd.Args(); {
		case name == "evalsha":
			name += " " + a[1].(string)
		case name == "script" && strings.EqualFold(a[1].(string), "load"):
			digest := ""
			if c, ok := cmd.(*redis.Cmd); ok {
				digest, _ = c.Val().(string)
			}
			name = "script load " + digest
		case name == "hello" || name == "client" || name == "ping" || name == "select":
			return err // the connection's set-up
		}
		h.mu.Lock()
		h.names = append(h.names, name)
		h.mu.Unlock()
		return err
	}
}

func (h *cmdNames) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// take returns the commands recorded since the last take.
func (h *cmdNames) take() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	names := h.names
	h.names = nil
	return names
}
