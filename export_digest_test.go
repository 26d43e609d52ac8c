package lock

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// Script is a Lua script as the Redis provider sends its own (see script),
// for tests of how its digest is learned.
type Script = script

// NewScript returns the script whose text is text.
func NewScript(text string) *Script { return scriptOf(text) }

// Send runs s with key as its one key on c, as the provider sends its
// scripts (sendScripts), and returns its reply.
func (s *Script) Send(ctx context.Context, c redis.UniversalClient, key string) (any, error) {
	d := newGoRedis(c)
	cl := s.newCall(1, []any{key})
	sendScripts(ctx, d, d, []*call{cl}, nil)
	return cl.cmd.Reply, cl.cmd.Err
}

// Digest returns the digest of s learned from a server, "" before.
func (s *Script) Digest() string {
	if sha := s.sha.Load(); sha != nil {
		return (*sha).(string)
	}
	return ""
}

// Text returns the text of s.
func (s *Script) Text() string { return s.text }
