// Package redisdriver is what the lock package's Redis provider needs of a
// Redis client, for the author of a driver: a client library becomes one
// more backend by implementing [Driver]. The provider is written once,
// against it: its scripts, the decoding of their replies, its wait queues
// and hand-offs, its subscriptions, fences, Inspect, List, ForceRelease and
// CheckServer all go through these few methods. lock.NewRedisProvider wraps
// a go-redis client in the root module's driver;
// lock.NewRedisProviderWithDriver takes any other (the modules
// github.com/seed05627090/lock/rueidis and .../valkey are two).
//
// A driver sends commands and reports what the server answered; it decides
// nothing. It does not retry a command whose outcome is unknown, learn
// script digests (the provider sends EVALSHA and, after NOSCRIPT, EVAL
// itself), or resubscribe a broken pub/sub connection (the provider opens a
// new one). Replies are plain Go values, the same whatever the client
// library and the protocol (RESP2 or RESP3):
//
//   - an integer: int64
//   - a simple, bulk or verbatim string, a double, a big number: string
//   - an array, a set, a push: []any of its elements, as these rules
//     convert them
//   - a map: []any of its keys and values in turn, in the order of the
//     keys (CONFIG GET's answer is [name, value])
//   - a nil (RESP2's nil bulk string or array, RESP3's null; Lua's false):
//     nil
//   - a boolean: int64(1) for true, nil for false, as RESP2 sends Lua's
//   - an error inside an array: a *[Error]
//
// An error reply of the server is a *[Error] (the provider reads its
// text: NOSCRIPT, MOVED, WRONGTYPE, its scripts' own); every other error (a
// broken connection, a timeout, ctx's) is returned as the client library
// reports it.
//
// The provider never waits past its caller's context for a driver: it
// stops waiting when the context ends, and the driver's call goes on, on a
// goroutine of its own, until it returns (the provider reads nothing that
// call writes afterwards). A driver should end a call when ctx ends, or at
// its own timeouts. Every method may be called by several goroutines at
// once.
package redisdriver

import (
	"context"
	"time"
)

// Driver is what the Redis provider needs of a Redis client: a single
// server, a primary that Sentinel finds, or a Redis Cluster. Every command
// goes to a primary.
type Driver interface {
	// Exec sends cmds and sets each one's Reply or Err (see
	// [Command]), in one round trip per server when there are several
	// (a pipeline). Each command goes to the primary that serves the slot
	// of its key (Args[Key]); a command without a key (Key 0) goes to the
	// server, or on a Cluster to any primary. On a Cluster, Exec follows
	// MOVED and ASK redirections, as a Cluster client does, and reports a
	// MOVED only when following it failed; elsewhere it reports the reply
	// as it is. Commands sent to one server run in their order in cmds.
	// When Exec returns, every command has its result: a Reply (nil for a
	// nil reply) and a nil Err, or an Err; one that was not sent, or whose
	// reply was not read (the connection broke, ctx ended), has an Err.
	Exec(ctx context.Context, cmds []*Command)

	// Cluster reports whether the client is a Redis Cluster client. It
	// is asked once, when the provider is made, and must not change.
	Cluster() bool

	// ReadOnly reports whether a Cluster client sends read-only commands
	// or subscriptions to replicas (go-redis's ReadOnly, RouteByLatency,
	// RouteRandomly): the provider then does not trust SPUBLISH's count of
	// subscribers. False for other clients. Asked once, when the provider
	// is made.
	ReadOnly() bool

	// Primaries returns the Cluster's primaries, as the Cluster tells them
	// now: it loads the map of slots anew, and routes by it from then on
	// (the provider calls it after a MOVED that it reads itself, before it
	// tries again). For a client that is not a Cluster's, it returns the
	// one node that PrimaryForKey returns, and its error only when
	// PrimaryForKey would fail.
	Primaries(ctx context.Context) ([]Node, error)

	// PrimaryForKey returns the primary that serves key's slot, as the
	// driver's map of slots says (it does not ask the Cluster); for a
	// client that is not a Cluster's, the server it talks to (for
	// Sentinel, the primary it finds at each command).
	PrimaryForKey(ctx context.Context, key string) (Node, error)
}

// Node is one server as a [Driver] reaches it: a Cluster's
// primary, or the server of a client that is not a Cluster's.
type Node interface {
	// Addr is the node's address, "host:port", as the client knows it;
	// "" when the client does not say (a Sentinel client). Nodes with the
	// same Addr are the same server: the provider keeps one pub/sub
	// connection per address.
	Addr() string

	// Exec sends cmds to this node, whatever their keys, on one
	// connection and in one pipeline, in order, and sets each one's Reply
	// or Err as [Driver.Exec] does. It follows no redirection: a
	// MOVED is reported as the command's Err. The provider sends a script
	// and a WAIT after it this way, so that the WAIT counts the replicas
	// that acknowledged the script's writes.
	Exec(ctx context.Context, cmds []*Command)

	// PubSub returns a new pub/sub connection to this node, subscribed to
	// nothing. It may dial at once or at its first command; an error of
	// either kind tells the provider the node is not reachable.
	PubSub(ctx context.Context) (PubSub, error)
}

// PubSub is one pub/sub connection (see [Node.PubSub]). One
// goroutine calls Receive while others call its other methods, Close
// included: it is safe for that use. A connection that broke is not
// mended: once Receive or a command has failed with an error other than a
// *[Error] or a timeout, the provider closes it and opens another, so
// a driver need not reconnect it (nor must it: a connection that
// reconnects by itself must not deliver messages through this value
// again).
type PubSub interface {
	// Subscribe sends SUBSCRIBE channel, SSubscribe SSUBSCRIBE channel,
	// and SUnsubscribe SUNSUBSCRIBE channel. Each may return once the
	// command is written, without waiting for the server's confirmation,
	// which Receive returns in any case. An error reply, such as MOVED to
	// an SSUBSCRIBE of a slot that moved, is a *[Error], returned by
	// the command itself or by Receive.
	Subscribe(ctx context.Context, channel string) error
	SSubscribe(ctx context.Context, channel string) error
	SUnsubscribe(ctx context.Context, channel string) error

	// Ping sends PING on the connection; Receive returns the answer, a
	// message of Kind "pong". The provider pings a connection that has
	// been silent, and takes it for broken when no answer comes.
	Ping(ctx context.Context) error

	// Receive returns the next message that arrives on the connection:
	// a published message, a confirmation of a subscription or an
	// unsubscription (sent by the provider, or by the server itself, as
	// Redis ends the subscriptions of a slot that moved), or a pong. With
	// timeout above 0, when nothing arrives within it, it returns an error
	// whose Timeout method reports true (a net.Error of the read deadline,
	// or context.DeadlineExceeded) and the connection stays usable; 0 waits
	// until something arrives, ctx ends, or Close is called. After Close,
	// it returns an error at once.
	Receive(ctx context.Context, timeout time.Duration) (Message, error)

	// Close closes the connection; a Receive under way returns an error.
	Close() error
}

// Command is one command for a [Driver] to send, and, once sent,
// its result.
type Command struct {
	// Args are the command's name and its arguments, each a string, an
	// int or an int64, to be sent as they are (as bulk strings; an integer
	// in decimal).
	Args []any
	// Key is the index in Args of the command's first key, which decides
	// the slot, and so the Cluster node, that runs it; 0 for a command
	// without keys. Keys is how many keys there are, from Args[Key] on, all
	// in the slot of the first (a client that checks slots may use them).
	// PUBLISH and SPUBLISH have their channel as their key: an SPUBLISH
	// must run on the node that serves the channel's slot.
	Key, Keys int

	// Reply is the command's reply, converted as the package doc
	// says (int64, string, []any or nil); set by the driver.
	Reply any
	// Err is why the command has no reply: a *[Error] for an error
	// reply of the server, or the error that kept it from being sent or
	// its reply from being read; set by the driver.
	Err error
}

// Message is what a [PubSub] receives.
type Message struct {
	// Kind is "message" for a published message (a message or an
	// smessage); "subscribe", "ssubscribe", "unsubscribe" or
	// "sunsubscribe" for the confirmation of a subscription's change, as
	// the server names it; "pong" for the answer to a PING.
	Kind string
	// Channel is the message's channel, or the one the confirmation is
	// about.
	Channel string
	// Payload is a published message's text.
	Payload string
	// Count is, in a confirmation, how many channels the connection is
	// subscribed to now.
	Count int
}

// Error is an error reply of a Redis server, as a [Driver]
// reports it: "NOSCRIPT No matching script...", "MOVED 3999
// 127.0.0.1:6381", "WRONGTYPE ...", or a script's own error. The provider
// returns it, as the error of a call, when it is not one of those it reads.
type Error struct {
	// Msg is the reply's text, as the server sent it (without RESP's "-").
	Msg string
	// Err, when not nil, is the client library's own error for the reply,
	// which Unwrap returns, so that errors.As finds the library's type.
	Err error
}

// Error returns e.Msg.
func (e *Error) Error() string { return e.Msg }

// Unwrap returns e.Err.
func (e *Error) Unwrap() error { return e.Err }
