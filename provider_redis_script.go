package lock

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/seed05627090/lock/redisdriver"
)

// The Redis provider's scripts: each operation is one Lua script under
// scripts/, with record.lua (the functions that read and grant records and
// serve the wait queue) prepended to those that need it. A line
// "--#include NAME" is replaced by the fragment scripts/NAME when the
// provider is loaded: token.lua (taking a fencing token), owned.lua
// (reading the caller's own record) and publish.lua (telling a granted
// waiter) are written once and used where they are needed. What every script
// takes (one layout of KEYS and ARGV) and replies ({code, value, pttl, n},
// decoded by decode into a reply) is written once, at the top of
// scripts/record.lua; sendScripts is the one place that sends them.

// scriptFiles holds the provider's scripts and fragments (scripts/fence.lua
// is [RedisFence]'s, embedded in fence_redis.go).
//
//go:embed scripts/token.lua scripts/owned.lua scripts/publish.lua scripts/record.lua
//go:embed scripts/acquire.lua scripts/queue.lua scripts/leave.lua scripts/release.lua
//go:embed scripts/renew.lua scripts/finish.lua scripts/inspect.lua scripts/forcerelease.lua
//go:embed scripts/claim*.lua
var scriptFiles embed.FS

// lua returns the text of scripts/name.
func lua(name string) string {
	b, err := scriptFiles.ReadFile("scripts/" + name)
	if err != nil {
		panic("lock: no script " + name + " embedded: " + err.Error())
	}
	return string(b)
}

var (
	tokenLua   = lua("token.lua")
	ownedLua   = lua("owned.lua")
	publishLua = lua("publish.lua")

	recordLua = lua("record.lua")

	acquireScript      = newScript(lua("acquire.lua"), decode) // self-contained: record.lua not prepended
	queueScript        = newScript(recordLua+lua("queue.lua"), decode)
	leaveScript        = newScript(recordLua+lua("leave.lua"), decode)
	releaseScript      = newScript(recordLua+lua("release.lua"), decode)
	renewScript        = newScript(recordLua+lua("renew.lua"), decode)
	finishScript       = newScript(recordLua+lua("finish.lua"), decode)
	inspectScript      = newScript(lua("inspect.lua"), decode)
	forceReleaseScript = newScript(recordLua+lua("forcerelease.lua"), decode)
)

// script is a Lua script (one of the provider's, or a [RedisFence]'s), sent
// by its SHA1 digest (EVALSHA) once the digest is known, and in full (EVAL)
// before that and when the server does not know it. The digest is never
// computed here: it is the server's answer to SCRIPT LOAD (see learn), so
// that nothing in this package uses SHA-1, which Go's FIPS 140-3 mode
// (GODEBUG=fips140=only) refuses with a panic. The arguments that never
// change are boxed once: an acquisition and its release allocate a third
// less.
type script struct {
	text   string
	src    any                                          // text, as a command argument
	sha    atomic.Pointer[any]                          // its digest, as a command argument; nil until learned
	decode func(op, key string, res any) (reply, error) // its replies' decoder (see run); nil for a script run otherwise
}

// newScript returns the provider's script src, its fragments included (see
// expand), whose replies decode decodes.
func newScript(src string, decode func(op, key string, res any) (reply, error)) *script {
	s := scriptOf(expand(src))
	s.decode = decode
	return s
}

// scriptOf returns the script whose text is src, as it is.
func scriptOf(src string) *script { return &script{text: src, src: src} }

// reply is a script's reply, decoded: a lock's script's, {code, value,
// pttl, n} (see the top of scripts/record.lua), by decode; a counted name's
// script's, {code, limit, used, n, owner, value, pttl, head, kind} (see the
// top of scripts/claim.lua), by decodeClaim. Each method takes from it what
// it needs.
type reply struct {
	code int64  // one of the reply codes below
	rec  Record // the record or claim the reply names, with its TTL; zero without one
	n    int64  // the queue's length (inspect), the caller's place (queued) or its token (a lock granted)
	raw  any    // the reply as received, for an error's message
}

// The codes of the scripts' replies, one table for the locks' scripts and
// the counted names' (see scripts/record.lua).
const (
	replyEmpty   = 0 // the key holds nothing (a lock's scripts)
	replyDone    = 1 // the call did what it was asked
	replyValue   = 2 // the caller holds nothing; rec is what holds the key (or held it, for forcerelease)
	replyQueued  = 3 // the caller is in the queue, at place n
	replyGranted = 4 // the caller holds the key: a lock's new record, with token n; a claim, rec
	replyLost    = 5 // the caller holds no live claim; nothing changed (a counted name's scripts)
	replyCorrupt = 6 // a stored value is not the scripts' (a counted name's scripts)
	replyLocked  = 7 // the key holds a lock's record, rec, and no counted name; nothing changed
)

// run runs s for op on key, with nkeys keys, the first of args, and the
// rest of args as its arguments (in the layout of scripts/record.lua or
// scripts/claim.lua), at once or with others in a pipeline (see batcher),
// and decodes its reply (s.decode). With wait, for a call that grants or
// renews, and [WaitForReplicas], it runs s and a WAIT after it in one
// pipeline, on the connection of the key's primary (evalWait), and returns
// how many replicas acknowledged it; -1 otherwise.
func (p *RedisProvider) run(ctx context.Context, op, key string, s *script, wait bool, nkeys int, args ...any) (reply, int64, error) {
	var res any
	var err error
	acked := int64(-1)
	if wait && p.waits {
		res, acked, err = p.evalWait(ctx, s, nkeys, args)
	} else {
		res, err = p.batch.eval(ctx, s, nkeys, args...)
	}
	if err != nil {
		return reply{}, acked, wrap(key, err)
	}
	r, err := s.decode(op, key, res)
	return r, acked, err
}

// decode turns the reply of a lock's script run for op on key into a
// reply. A value that is not a record is reported as a [RecordError], and a
// reply of another shape as an error of its own.
func decode(op, key string, res any) (reply, error) {
	r := reply{raw: res}
	a, _ := res.([]any)
	if len(a) != 4 {
		return reply{}, r.unexpected(op, key)
	}
	code, ok1 := a[0].(int64)
	pttl, ok2 := a[2].(int64)
	n, ok3 := a[3].(int64)
	if !ok1 || !ok2 || !ok3 || code < replyEmpty || code > replyGranted {
		return reply{}, r.unexpected(op, key)
	}
	r.code, r.n = code, n
	switch v := a[1].(type) {
	case nil: // false
	case string:
		var err error
		if kind, ok := countedMark(v); ok {
			r.rec = Record{Kind: kind} // in use as a counted name: no lock's record
		} else if r.rec, err = parseRecord(key, v); err != nil {
			return reply{}, err
		}
	default:
		return reply{}, r.unexpected(op, key)
	}
	switch {
	case pttl > 0:
		r.rec.TTL = time.Duration(pttl) * time.Millisecond
	case pttl == 0 && r.rec.Owner != "":
		// PTTL rounds down: a record in its last millisecond has 0 left,
		// which a Record would read as "unknown" (a waiter would look
		// again a poll interval later, not as the record expires).
		r.rec.TTL = time.Millisecond
	}
	return r, nil
}

// unexpected is the error of a reply that op does not expect.
func (r reply) unexpected(op, key string) error {
	return fmt.Errorf("lock: %s %q: unexpected reply %v", op, key, r.raw)
}

// done turns the reply of a release, renewal, finish or lowering into an
// error: nil when done, a [LostError] when the key is empty or holds a
// record of another owner (or an ended one), or the caller holds no live
// claim.
func (r reply) done(op, key string) error {
	switch r.code {
	case replyDone:
		return nil
	case replyEmpty, replyValue, replyLost:
		return &LostError{Key: key}
	}
	return r.unexpected(op, key)
}

// inspected turns the reply of an inspection, or its error, into a Record:
// zero when the key is empty.
func (r reply) inspected(key string, err error) (Record, error) {
	switch {
	case err != nil:
		return Record{}, err
	case r.code == replyEmpty:
		return Record{}, nil
	case r.code == replyValue && r.rec.Kind != "":
		return Record{}, nil // a counted name's mark: no lock's record
	case r.code == replyValue:
		rec := r.rec
		rec.Waiters = int(r.n)
		return rec, nil
	}
	return Record{}, r.unexpected("inspect", key)
}

// call is one call of a script s: its command, an EVALSHA, and once
// sendScripts found that the server did not know s (or before s's digest is
// known), an EVAL of s in full; with room for its arguments, allocated
// together: one allocation a call instead of two.
type call struct {
	s    *script
	cmd  redisdriver.Command
	args [3 + 4 + 9]any          // the command, digest and key count; up to 4 keys and 9 arguments (the claims')
	one  [1]*redisdriver.Command // the commands of a call sent alone: cmd
}

// newCall returns the call of s with nkeys keys, the first of args, and the
// rest of args as its arguments.
func (s *script) newCall(nkeys int, args []any) *call {
	cl := &call{s: s}
	cl.init(nkeys, args)
	return cl
}

// init makes cl a call of cl.s with nkeys keys, the first of args, and the
// rest of args as its arguments.
func (cl *call) init(nkeys int, args []any) {
	a := cl.args[:0]
	if 3+len(args) > len(cl.args) {
		a = make([]any, 0, 3+len(args))
	}
	a = append(a, "eval", cl.s.src, nkeys)
	cl.cmd = redisdriver.Command{Args: append(a, args...)}
	if nkeys > 0 {
		cl.cmd.Key, cl.cmd.Keys = 3, nkeys // routes it on a Cluster
	}
	cl.by(false)
}

// by makes cl's command an EVALSHA, or an EVAL when full or the digest is
// not known yet, with no result.
func (cl *call) by(full bool) {
	if sha := cl.s.sha.Load(); sha != nil && !full {
		cl.cmd.Args[0], cl.cmd.Args[1] = "evalsha", *sha
	} else {
		cl.cmd.Args[0], cl.cmd.Args[1] = "eval", cl.s.src
	}
	cl.cmd.Reply, cl.cmd.Err = nil, nil
}

// execer sends commands: a [redisdriver.Driver] (each to its key's primary) or a
// [redisdriver.Node].
type execer interface {
	Exec(ctx context.Context, cmds []*redisdriver.Command)
}

// sendScripts sends calls through via, and is the one place that sends the
// provider's scripts: in one Exec (a pipeline, when there are several).
// With wait (a WAIT) it sends the calls and the WAIT in one Exec, via a
// node, so that the WAIT runs on the connection that wrote. Each call that
// the server did not know (restarted, or SCRIPT FLUSH) is sent again in
// full, with EVAL, in the same way (and the WAIT again after them): one
// more round trip. Each call's cmd then holds its reply or its error. A
// script whose digest is not known yet is sent in full, and its digest
// learned afterwards from d (see learn).
func sendScripts(ctx context.Context, d redisdriver.Driver, via execer, calls []*call, wait *redisdriver.Command) {
	var cmds []*redisdriver.Command
	if len(calls) == 1 && wait == nil {
		cmds = calls[0].one[:0] // no allocation for a script alone
	} else {
		cmds = make([]*redisdriver.Command, 0, len(calls)+1)
	}
	for _, cl := range calls {
		if cl.cmd.Args[0] == "eval" && cl.s.sha.Load() != nil {
			cl.by(false) // made before the digest was learned: by digest now
		}
		cmds = append(cmds, &cl.cmd)
	}
	if wait != nil {
		cmds = append(cmds, wait)
	}
	via.Exec(ctx, cmds)
	cmds = cmds[:0]
	for _, cl := range calls {
		if noScript(cl.cmd.Err) {
			cl.by(true)
			cmds = append(cmds, &cl.cmd)
		}
	}
	if len(cmds) > 0 {
		if wait != nil {
			wait.Reply, wait.Err = nil, nil
			cmds = append(cmds, wait)
		}
		via.Exec(ctx, cmds)
	}
	learn(ctx, d, calls)
}

// learn asks the server for the digest of each script of calls whose
// digest is not known yet, with SCRIPT LOAD, once the server answered the
// call (a reply, or an error of the server's): one more round trip for each
// script, the first time it is used in this process, and none while the
// server does not answer (the call's own error says so). On a Cluster it
// asks the primary of the call's key (the one that answered), not every
// node, so that a node that is down delays nothing. A digest that SCRIPT
// LOAD did not tell is asked for again after the script's next call. The
// digest is the server's SHA1 of the text, the same on every node: a node
// that does not know the script answers NOSCRIPT, which sendScripts
// handles.
func learn(ctx context.Context, d redisdriver.Driver, calls []*call) {
	for _, cl := range calls {
		if cl.s.sha.Load() != nil || (cl.cmd.Err != nil && !isRedisError(cl.cmd.Err)) {
			continue
		}
		var via execer = d
		if cl.cmd.Key > 0 {
			key, _ := cl.cmd.Args[cl.cmd.Key].(string)
			node, err := d.PrimaryForKey(ctx, key)
			if err != nil {
				continue
			}
			via = node
		}
		load := &redisdriver.Command{Args: []any{"script", "load", cl.s.text}}
		via.Exec(ctx, []*redisdriver.Command{load})
		if sha, ok := load.Reply.(string); ok && load.Err == nil {
			var a any = sha
			cl.s.sha.Store(&a)
		}
	}
}

// noScript reports whether err is the server's answer to an EVALSHA of a
// script it does not know.
func noScript(err error) bool {
	if err == nil {
		return false
	}
	var rerr *redisdriver.Error
	return errors.As(err, &rerr) && strings.HasPrefix(rerr.Msg, "NOSCRIPT")
}

// isRedisError reports whether err is, or wraps, an error reply of the
// server's.
func isRedisError(err error) bool {
	var rerr *redisdriver.Error
	return errors.As(err, &rerr)
}

// expand replaces each line "--#include NAME" of src, indented or not, by
// the fragment NAME, indented as the line was.
func expand(src string) string {
	fragments := map[string]string{"token.lua": tokenLua, "owned.lua": ownedLua, "publish.lua": publishLua}
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
