// Package rueidis is the Redis provider of github.com/seed05627090/lock over
// a github.com/redis/rueidis client: the same [lock.RedisProvider] as
// [lock.NewRedisProvider] makes over go-redis (its scripts, wait queues,
// hand-offs, fencing tokens), with its commands sent through rueidis, which
// pipelines the commands of concurrent callers on one connection by
// itself. Single servers, Sentinel and Redis Cluster clients all work;
// [Fence] is [lock.RedisFence] through the same client.
//
// The package has the name of the client's, so a file that uses both
// names one of them:
//
//	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}})
//	if err != nil { ... }
//	defer client.Close()
//	c, err := lock.NewClient(lockrueidis.NewProvider(client))
//	if err != nil { ... }
//	defer c.Close() // before client.Close
//	err = c.Do(ctx, "nightly-report", lock.Options{}, func(ctx context.Context) error {
//		return sendReport(ctx) // in one replica at a time
//	})
package rueidis

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/redisdriver"
)

// NewProvider returns a lock.RedisProvider that sends its commands through
// client, with opts as [lock.NewRedisProvider] takes them ([lock.WaitForReplicas],
// [lock.ShardedPubSub]). The client stays the caller's to close, after the
// lock Clients that use the provider. rueidis ends each command when its
// context ends.
func NewProvider(client rueidis.Client, opts ...lock.RedisOption) *lock.RedisProvider {
	if client == nil {
		return lock.NewRedisProviderWithDriver(nil, opts...)
	}
	return lock.NewRedisProviderWithDriver(newDriver(client), opts...)
}

// driver is the redisdriver.Driver of a rueidis client.
type driver struct {
	client rueidis.Client
	self   *node // the node of a client that is not a Cluster's; nil on a Cluster

	mu    sync.Mutex
	slots []string // on a Cluster: the address of each slot's primary, from CLUSTER SLOTS; nil until loaded
}

var _ redisdriver.Driver = (*driver)(nil)

func newDriver(client rueidis.Client) *driver {
	d := &driver{client: client}
	switch client.Mode() {
	case rueidis.ClientModeCluster:
	case rueidis.ClientModeStandalone:
		d.self = &node{client: client}
		for addr := range client.Nodes() {
			d.self.addr = addr
		}
	default: // Sentinel: the primary may change at any command
		d.self = &node{client: client}
	}
	return d
}

// Exec implements redisdriver.Driver: one command alone with Do, several with
// DoMulti, which rueidis sends in one round trip per node and, on a
// Cluster, routes by each command's slot, following redirections. On a
// Cluster, rueidis sends the commands without a key of a DoMulti to the
// node of its keyed ones, and refuses (panics) when those are in several
// slots: the commands without a key are sent apart, after the others.
func (d *driver) Exec(ctx context.Context, cmds []*redisdriver.Command) {
	if d.self != nil {
		exec(ctx, d.client, cmds)
		return
	}
	var keyed, keyless []*redisdriver.Command
	for _, cmd := range cmds {
		if cmd.Key > 0 {
			keyed = append(keyed, cmd)
		} else {
			keyless = append(keyless, cmd)
		}
	}
	for _, part := range [][]*redisdriver.Command{keyed, keyless} {
		if len(part) > 0 {
			exec(ctx, d.client, part)
		}
	}
}

// Cluster implements redisdriver.Driver.
func (d *driver) Cluster() bool { return d.self == nil }

// ReadOnly implements redisdriver.Driver: false, since the driver builds
// every command as a write (not ReadOnly: a ClientOption.SendToReplicas
// that sends read-only commands to replicas sends none of them) and
// subscribes on primaries only.
func (d *driver) ReadOnly() bool { return false }

// Primaries implements redisdriver.Driver: on a Cluster, it asks a node for
// the map of slots (CLUSTER SLOTS) and keeps it for PrimaryForKey.
func (d *driver) Primaries(ctx context.Context) ([]redisdriver.Node, error) {
	if d.self != nil {
		return []redisdriver.Node{d.self}, nil
	}
	slots, err := d.loadSlots(ctx)
	if err != nil {
		return nil, err
	}
	var addrs []string
	for _, a := range slots {
		if a != "" && !slices.Contains(addrs, a) {
			addrs = append(addrs, a)
		}
	}
	sort.Strings(addrs)
	nodes := make([]redisdriver.Node, 0, len(addrs))
	for _, a := range addrs {
		n, err := d.node(a)
		if err != nil {
			return nil, err
		}
		nodes = append(nodes, n)
	}
	return nodes, nil
}

// PrimaryForKey implements redisdriver.Driver, from the map of slots that
// Primaries loaded last (loaded now if it never was).
func (d *driver) PrimaryForKey(ctx context.Context, key string) (redisdriver.Node, error) {
	if d.self != nil {
		return d.self, nil
	}
	d.mu.Lock()
	slots := d.slots
	d.mu.Unlock()
	if slots == nil {
		var err error
		if slots, err = d.loadSlots(ctx); err != nil {
			return nil, err
		}
	}
	get := d.client.B().Get().Key(key).Build() // never sent: rueidis's own hash of the key
	slot := get.Slot()
	if slots[slot] == "" {
		return nil, fmt.Errorf("lock: no primary serves hash slot %d", slot)
	}
	return d.node(slots[slot])
}

// node returns the node of a Cluster's primary at addr, through the
// connection rueidis keeps to it.
func (d *driver) node(addr string) (*node, error) {
	c, ok := d.client.Nodes()[addr]
	if !ok {
		return nil, fmt.Errorf("lock: the client has no connection to %s", addr)
	}
	return &node{client: c, addr: addr}, nil
}

// loadSlots asks the Cluster which primary serves each slot, keeps the
// answer and returns it.
func (d *driver) loadSlots(ctx context.Context) ([]string, error) {
	cmd := &redisdriver.Command{Args: []any{"cluster", "slots"}}
	d.Exec(ctx, []*redisdriver.Command{cmd})
	if cmd.Err != nil {
		return nil, cmd.Err
	}
	slots := make([]string, 16384)
	ranges, _ := cmd.Reply.([]any)
	for _, r := range ranges {
		// [start, end, [host, port, id...], replicas...]
		f, _ := r.([]any)
		if len(f) < 3 {
			continue
		}
		start, _ := f[0].(int64)
		end, _ := f[1].(int64)
		primary, _ := f[2].([]any)
		if len(primary) < 2 || start < 0 || end >= int64(len(slots)) {
			continue
		}
		host, _ := primary[0].(string)
		port, _ := primary[1].(int64)
		addr := net.JoinHostPort(host, strconv.FormatInt(port, 10))
		for s := start; s <= end; s++ {
			slots[s] = addr
		}
	}
	d.mu.Lock()
	d.slots = slots
	d.mu.Unlock()
	return slots, nil
}

// node is a redisdriver.Node: a Cluster's primary through the client rueidis
// keeps for it, or the client of one server (single or Sentinel).
type node struct {
	client rueidis.Client
	addr   string
}

func (n *node) Addr() string { return n.addr }

// Exec implements redisdriver.Node: rueidis sends a DoMulti on one
// connection.
func (n *node) Exec(ctx context.Context, cmds []*redisdriver.Command) { exec(ctx, n.client, cmds) }

// PubSub implements redisdriver.Node, on a dedicated connection.
func (n *node) PubSub(ctx context.Context) (redisdriver.PubSub, error) {
	return newPubSub(n.client)
}

// exec sends cmds through c and sets their results. It hides ctx's
// deadline from rueidis, which ends the call when ctx ends all the same:
// on a connection not yet pipelining, rueidis sets a call's deadline on the
// connection and closes it when the deadline passes, failing with
// context.DeadlineExceeded the calls of other callers sent on it meanwhile.
// A call without a deadline is pipelined, and a context that ends gives up
// on its reply alone. (With DisableAutoPipelining, a call has a connection
// of its own, which then ends it at ConnWriteTimeout; the provider does not
// wait for it past ctx.)
func exec(ctx context.Context, c rueidis.CommandClient, cmds []*redisdriver.Command) {
	if _, ok := ctx.Deadline(); ok {
		ctx = noDeadline{ctx}
	}
	if len(cmds) == 1 {
		setResult(cmds[0], c.Do(ctx, build(c.B(), cmds[0])))
		return
	}
	multi := make([]rueidis.Completed, len(cmds))
	for i, cmd := range cmds {
		multi[i] = build(c.B(), cmd)
	}
	for i, r := range c.DoMulti(ctx, multi...) {
		setResult(cmds[i], r)
	}
}

// noDeadline is a context without its parent's deadline, ended when its
// parent ends (see exec).
type noDeadline struct{ context.Context }

func (noDeadline) Deadline() (time.Time, bool) { return time.Time{}, false }

// build returns the rueidis command of cmd. Its slot is its first key's
// (the others are in the same slot). A WAIT, which holds its connection
// until the replicas answer, is sent as a blocking command: on a
// connection of its own rather than the one that pipelines every caller's
// commands, with the commands sent along with it.
func build(b rueidis.Builder, cmd *redisdriver.Command) rueidis.Completed {
	var buf [16]string // the provider's commands have fewer: args stays on the stack
	args := buf[:0]
	if len(cmd.Args) > len(buf) {
		args = make([]string, 0, len(cmd.Args))
	}
	args = args[:len(cmd.Args)]
	for i, a := range cmd.Args {
		switch a := a.(type) {
		case string:
			args[i] = a
		case int:
			args[i] = strconv.Itoa(a)
		case int64:
			args[i] = strconv.FormatInt(a, 10)
		default:
			args[i] = fmt.Sprint(a)
		}
	}
	if cmd.Key > 0 && cmd.Key < len(args) {
		return b.Arbitrary(args[:cmd.Key]...).Keys(args[cmd.Key]).Args(args[cmd.Key+1:]...).Build()
	}
	if strings.EqualFold(args[0], "wait") {
		return b.Arbitrary(args...).Blocking()
	}
	return b.Arbitrary(args...).Build()
}

// setResult sets cmd's result from r.
func setResult(cmd *redisdriver.Command, r rueidis.RedisResult) {
	cmd.Reply, cmd.Err = nil, nil
	if err := r.NonRedisError(); err != nil {
		cmd.Err = err
		return
	}
	m, _ := r.ToMessage()
	v := value(&m)
	if err, ok := v.(*redisdriver.Error); ok {
		cmd.Err = err
		return
	}
	cmd.Reply = v
}

// value converts a reply to the driver's plain values (see
// redisdriver.Driver).
func value(m *rueidis.RedisMessage) any {
	switch {
	case m.IsNil():
		return nil
	case m.IsInt64():
		n, _ := m.ToInt64()
		return n
	case m.IsBool():
		if b, _ := m.ToBool(); b {
			return int64(1)
		}
		return nil
	case m.IsArray():
		es, _ := m.ToArray()
		a := make([]any, len(es))
		for i := range es {
			a[i] = value(&es[i])
		}
		return a
	case m.IsMap():
		kv, _ := m.ToMap()
		keys := make([]string, 0, len(kv))
		for k := range kv {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		a := make([]any, 0, 2*len(kv))
		for _, k := range keys {
			e := kv[k]
			a = append(a, k, value(&e))
		}
		return a
	}
	s, _ := m.ToString() // a string, a double, a big number; an error's text as the server sent it
	if err := m.Error(); err != nil {
		return &redisdriver.Error{Msg: s, Err: err}
	}
	return s
}
