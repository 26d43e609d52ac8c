package lock

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
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

	acquireScript      = newScript(lua("acquire.lua")) // self-contained: record.lua not prepended
	queueScript        = newScript(recordLua + lua("queue.lua"))
	leaveScript        = newScript(recordLua + lua("leave.lua"))
	releaseScript      = newScript(recordLua + lua("release.lua"))
	renewScript        = newScript(recordLua + lua("renew.lua"))
	finishScript       = newScript(recordLua + lua("finish.lua"))
	inspectScript      = newScript(lua("inspect.lua"))
	forceReleaseScript = newScript(recordLua + lua("forcerelease.lua"))
)

// script is a Lua script (one of the provider's, or a [RedisFence]'s), sent
// by its SHA1 digest (EVALSHA) once the digest is known, and in full (EVAL)
// before that and when the server does not know it. The digest is never
// computed here: it is the server's answer to SCRIPT LOAD (see learn), so
// that nothing in this package uses SHA-1, which Go's FIPS 140-3 mode
// (GODEBUG=fips140=only) refuses with a panic. The command is built here, not
// by go-redis's Script (which hashes the source when it is made), with the
// arguments that never change boxed once: an acquisition and its release
// allocate a third less.
type script struct {
	text string
	src  any                 // text, as a command argument
	sha  atomic.Pointer[any] // its digest, as a command argument; nil until learned
}

// newScript returns the provider's script src, its fragments included (see
// expand).
func newScript(src string) *script { return scriptOf(expand(src)) }

// scriptOf returns the script whose text is src, as it is.
func scriptOf(src string) *script { return &script{text: src, src: src} }

// cmd returns the command that runs s, with EVALSHA or, when full or the
// digest is not known yet, EVAL: the first nkeys of args are its keys, the
// rest its arguments.
func (s *script) cmd(ctx context.Context, full bool, nkeys int, args []any) *redis.Cmd {
	e := new(evalCmd)
	a := e.args[:0]
	if 3+len(args) > len(e.args) {
		a = make([]any, 0, 3+len(args))
	}
	if sha := s.sha.Load(); sha != nil && !full {
		a = append(a, "evalsha", *sha, nkeys)
	} else {
		a = append(a, "eval", s.src, nkeys)
	}
	a = append(a, args...)
	e.cmd = *redis.NewCmd(ctx, a...)
	if nkeys > 0 {
		e.cmd.SetFirstKeyPos(3) // routes it on a Cluster
	}
	return &e.cmd
}

// evalCmd is a script's command with room for its arguments, allocated
// together: one allocation a call instead of two, which pays for the
// array that every reply is (see scripts/record.lua).
type evalCmd struct {
	cmd  redis.Cmd
	args [3 + 4 + 9]any // the command, digest and key count; up to 4 keys and 9 arguments (the claims')
}

// reply is a script's reply, {code, value, pttl, n}, decoded (see the
// replies at the top of scripts/record.lua); each method takes from it what
// it needs.
type reply struct {
	code int64  // one of the reply codes below
	rec  Record // the value, parsed, with the pttl as its TTL; zero without a value
	n    int64  // the queue's length (inspect), the caller's place (queued) or its token (granted)
	raw  any    // the reply as received, for an error's message
}

// The codes of the scripts' replies (see scripts/record.lua).
const (
	replyEmpty   = 0 // the key holds nothing
	replyDone    = 1 // the call did what it was asked
	replyValue   = 2 // rec is what the key holds (or held, for forcerelease)
	replyQueued  = 3 // the caller is in the queue, at place n
	replyGranted = 4 // the caller's new record was stored, with token n
)

// decode turns the reply of a script run for op on key, or its error, into a
// reply. A value that is not a record is reported as a [RecordError], a reply
// of another shape as an error of its own, and an error of the server as
// wrap reports it.
func (p *RedisProvider) decode(op, key string, res any, err error) (reply, error) {
	if err != nil {
		return reply{}, p.wrap(key, err)
	}
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

// done turns the reply of a release, renewal or finish, or its error, into
// an error: nil when done, a [LostError] when the key is empty or holds a
// record of another owner (or an ended one), err otherwise.
func (r reply) done(op, key string, err error) error {
	switch {
	case err != nil:
		return err
	case r.code == replyDone:
		return nil
	case r.code == replyEmpty || r.code == replyValue:
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

// call is one call of a script s, as the command cmd: an EVALSHA, and once
// sendScripts found that the server did not know s (or before s's digest is
// known), an EVAL of s in full.
type call struct {
	s   *script
	cmd *redis.Cmd
}

// call returns the call of s with nkeys keys, the first of args, and the
// rest of args as its arguments.
func (s *script) call(ctx context.Context, nkeys int, args []any) call {
	return call{s: s, cmd: s.cmd(ctx, false, nkeys, args)}
}

// sendScripts sends calls on c, and is the one place that sends the
// provider's scripts: one call alone as one command, several in one
// pipeline (go-redis splits it by node on a Cluster). With wait (the
// arguments of a WAIT) it sends the calls and the WAIT in one pipeline, so
// that the WAIT runs on the connection that wrote, and returns the WAIT's
// command (nil without wait). Each call that the server did not know
// (restarted, or SCRIPT FLUSH) is sent again in full, with EVAL, in the same
// way (and the WAIT again after them): one more round trip. Each call's cmd
// then holds its reply or its error. A script whose digest is not known yet
// is sent in full, and its digest learned afterwards (see learn).
func sendScripts(ctx context.Context, c redis.UniversalClient, calls []*call, wait []any) *redis.Cmd {
	for _, cl := range calls {
		if cl.cmd.Args()[0] == "eval" && cl.s.sha.Load() != nil {
			cl.remake(ctx, false) // made before the digest was learned: by digest now
		}
	}
	waited := sendRound(ctx, c, calls, wait)
	again := false
	for _, cl := range calls {
		if noScript(cl.cmd.Err()) {
			cl.remake(ctx, true)
			again = true
		}
	}
	if again {
		waited = sendRound(ctx, c, calls, wait)
	}
	learn(ctx, c, calls)
	return waited
}

// remake makes cl's command anew, with EVAL when full (see script.cmd).
func (cl *call) remake(ctx context.Context, full bool) {
	args := cl.cmd.Args()
	nkeys, _ := args[2].(int)
	cl.cmd = cl.s.cmd(ctx, full, nkeys, args[3:])
}

// learn asks the server for the digest of each script of calls whose
// digest is not known yet, with SCRIPT LOAD, once the server answered the
// call (a reply, or an error of the server's): one more round trip for each
// script, the first time it is used in this process, and none while the
// server does not answer (the call's own error says so). On a Cluster it
// asks the primary that answered the call, not every node, so that a node
// that is down delays nothing. A digest that SCRIPT LOAD did not tell is
// asked for again after the script's next call. The digest is the server's
// SHA1 of the text, the same on every node: a node that does not know the
// script answers NOSCRIPT, which sendScripts handles.
func learn(ctx context.Context, c redis.UniversalClient, calls []*call) {
	for _, cl := range calls {
		var rerr redis.Error
		if cl.s.sha.Load() != nil || (cl.cmd.Err() != nil && !errors.As(cl.cmd.Err(), &rerr)) {
			continue
		}
		var node redis.Scripter = c
		args := cl.cmd.Args()
		if cc, ok := c.(clusterClient); ok && args[2] != 0 {
			key, _ := args[3].(string)
			n, err := cc.MasterForKey(ctx, key)
			if err != nil {
				continue
			}
			node = n
		}
		if sha, err := node.ScriptLoad(ctx, cl.s.text).Result(); err == nil {
			var a any = sha
			cl.s.sha.Store(&a)
		}
	}
}

// sendRound is one round trip of sendScripts: it sends the commands of
// calls that have no reply yet.
func sendRound(ctx context.Context, c redis.UniversalClient, calls []*call, wait []any) *redis.Cmd {
	var last *call
	n := 0
	for _, cl := range calls {
		if unanswered(cl.cmd) {
			last = cl
			n++
		}
	}
	if n == 1 && wait == nil {
		_ = c.Process(ctx, last.cmd)
		return nil
	}
	pipe := c.Pipeline()
	for _, cl := range calls {
		if unanswered(cl.cmd) {
			_ = pipe.Process(ctx, cl.cmd)
		}
	}
	var waited *redis.Cmd
	if wait != nil {
		waited = redis.NewCmd(ctx, wait...)
		_ = pipe.Process(ctx, waited)
	}
	_, err := pipe.Exec(ctx) // each command's error is its caller's
	for _, cl := range calls {
		unread(cl.cmd, err)
	}
	if waited != nil {
		unread(waited, err)
	}
	return waited
}

// unanswered reports whether cmd has neither a reply nor an error: it was
// not sent, or its pipeline failed before its reply was read. (A nil reply
// is the error redis.Nil.)
func unanswered(cmd *redis.Cmd) bool {
	return cmd.Err() == nil && cmd.Val() == nil
}

// unread gives cmd err, the pipeline's, when the pipeline failed before
// cmd's reply was read: go-redis does not always say so on the command.
func unread(cmd *redis.Cmd, err error) {
	if unanswered(cmd) {
		cmd.SetErr(err)
	}
}

// noScript reports whether err is the server's answer to an EVALSHA of a
// script it does not know.
func noScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
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
