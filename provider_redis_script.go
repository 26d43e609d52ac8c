package lock

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The Redis provider's scripts: each operation is one Lua script under
// scripts/, with record.lua (the functions that read and grant records and
// serve the wait queue) prepended to those that need it. A line
// "--#include NAME" is replaced by the fragment scripts/NAME when the
// provider is loaded: token.lua (taking a fencing token) and owned.lua
// (reading the caller's own record) are written once and used where a
// function would cost more than the script around it.

var (
	//go:embed scripts/token.lua
	tokenLua string
	//go:embed scripts/owned.lua
	ownedLua string

	//go:embed scripts/record.lua
	recordLua string

	//go:embed scripts/acquire.lua
	acquireLua    string
	acquireScript = newScript(acquireLua) // self-contained: record.lua not prepended

	//go:embed scripts/queue.lua
	queueLua    string
	queueScript = newScript(recordLua + queueLua)

	//go:embed scripts/leave.lua
	leaveLua    string
	leaveScript = newScript(recordLua + leaveLua)

	//go:embed scripts/release.lua
	releaseLua    string
	releaseScript = newScript(recordLua + releaseLua)

	//go:embed scripts/renew.lua
	renewLua    string
	renewScript = newScript(recordLua + renewLua)

	//go:embed scripts/finish.lua
	finishLua    string
	finishScript = newScript(recordLua + finishLua)

	//go:embed scripts/inspect.lua
	inspectLua    string
	inspectScript = newScript(inspectLua)

	//go:embed scripts/forcerelease.lua
	forceReleaseLua    string
	forceReleaseScript = newScript(recordLua + forceReleaseLua)
)

// script is one of the provider's Lua scripts, sent by its SHA1 digest
// (EVALSHA), and in full (EVAL) when the server does not know it yet. The
// command is built here, not by go-redis's Script, with the arguments that
// never change boxed once: an acquisition and its release allocate a third
// less.
type script struct {
	src, sha any // the source and its digest, as command arguments
}

func newScript(src string) *script {
	src = expand(src)
	sum := sha1.Sum([]byte(src))
	return &script{src: src, sha: hex.EncodeToString(sum[:])}
}

// cmd returns the command that runs s, with EVALSHA or, when full, EVAL: the
// first nkeys of args are its keys, the rest its arguments.
func (s *script) cmd(ctx context.Context, full bool, nkeys int, args []any) *redis.Cmd {
	a := make([]any, 3+len(args))
	a[0], a[1], a[2] = "evalsha", s.sha, nkeys
	if full {
		a[0], a[1] = "eval", s.src
	}
	copy(a[3:], args)
	cmd := redis.NewCmd(ctx, a...)
	if nkeys > 0 {
		cmd.SetFirstKeyPos(3) // routes it on a Cluster
	}
	return cmd
}

// noScript reports whether err is the server's answer to an EVALSHA of a
// script it does not know.
func noScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// expand replaces each line "--#include NAME" of src, indented or not, by
// the fragment NAME, indented as the line was.
func expand(src string) string {
	fragments := map[string]string{"token.lua": tokenLua, "owned.lua": ownedLua}
	var b strings.Builder
	for _, line := range strings.SplitAfter(src, "\n") {
		body := strings.TrimLeft(line, " ")
		name, ok := strings.CutPrefix(strings.TrimSpace(body), "--#include ")
		if !ok {
			b.WriteString(line)
			continue
		}
		frag, ok := fragments[name]
		if !ok {
			panic("lock: scripts include an unknown fragment " + name)
		}
		indent := line[:len(line)-len(body)]
		for _, fl := range strings.SplitAfter(strings.TrimSuffix(frag, "\n"), "\n") {
			b.WriteString(indent + strings.TrimSuffix(fl, "\n") + "\n")
		}
	}
	return b.String()
}
