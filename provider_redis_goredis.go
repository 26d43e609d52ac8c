package lock

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed05627090/lock/redisdriver"
)

// The root module's Redis driver: go-redis (github.com/redis/go-redis/v9),
// through a redis.UniversalClient. Everything the provider asks of Redis
// goes through the methods of [redisdriver.Driver] here; nothing else in the
// provider knows go-redis.

// NewRedisProvider returns a provider that uses client. The client stays the
// caller's to close. go-redis honours context deadlines on the socket only with
// ContextTimeoutEnabled set in its options; without it, a call to an
// unreachable server lasts up to the client's own read and write timeouts.
func NewRedisProvider(client redis.UniversalClient, opts ...RedisOption) *RedisProvider {
	if client == nil {
		return NewRedisProviderWithDriver(nil, opts...)
	}
	return NewRedisProviderWithDriver(newGoRedis(client), opts...)
}

// goRedis is the [redisdriver.Driver] of a go-redis client.
type goRedis struct {
	client  redis.UniversalClient
	cluster clusterClient // client, when it is a Cluster client
	self    *goRedisNode  // the node of a client that is not a Cluster's
}

// clusterClient is what the driver needs of a Redis Cluster client: a
// *redis.ClusterClient, or a type that embeds one (an instrumented wrapper),
// is one.
type clusterClient interface {
	redis.UniversalClient
	ForEachMaster(ctx context.Context, fn func(ctx context.Context, client *redis.Client) error) error
	MasterForKey(ctx context.Context, key string) (*redis.Client, error)
	Options() *redis.ClusterOptions
}

var _ redisdriver.Driver = (*goRedis)(nil)

func newGoRedis(client redis.UniversalClient) *goRedis {
	d := &goRedis{client: client}
	if cc, ok := client.(clusterClient); ok {
		d.cluster = cc
	} else {
		addr := ""
		if rc, ok := client.(*redis.Client); ok && rc != nil {
			addr = rc.Options().Addr
		}
		d.self = &goRedisNode{client: client, addr: addr}
	}
	return d
}

// Exec implements redisdriver.Driver: one command alone is sent as it is, several
// in one pipeline (which go-redis splits by node on a Cluster, following
// redirections).
func (d *goRedis) Exec(ctx context.Context, cmds []*redisdriver.Command) {
	goRedisExec(ctx, d.client, cmds)
}

// Cluster implements redisdriver.Driver.
func (d *goRedis) Cluster() bool { return d.cluster != nil }

// ReadOnly implements redisdriver.Driver: ReadOnly in the Cluster's options (which
// RouteByLatency and RouteRandomly turn on).
func (d *goRedis) ReadOnly() bool { return d.cluster != nil && d.cluster.Options().ReadOnly }

// Primaries implements redisdriver.Driver with ForEachMaster, which loads the
// Cluster's slots anew.
func (d *goRedis) Primaries(ctx context.Context) ([]redisdriver.Node, error) {
	if d.cluster == nil {
		return []redisdriver.Node{d.self}, nil
	}
	var mu sync.Mutex
	var nodes []*goRedisNode
	err := d.cluster.ForEachMaster(ctx, func(_ context.Context, c *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		nodes = append(nodes, &goRedisNode{client: c, addr: c.Options().Addr})
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(nodes, func(a, b *goRedisNode) int { return strings.Compare(a.addr, b.addr) })
	out := make([]redisdriver.Node, len(nodes))
	for i, n := range nodes {
		out[i] = n
	}
	return out, nil
}

// PrimaryForKey implements redisdriver.Driver with MasterForKey.
func (d *goRedis) PrimaryForKey(ctx context.Context, key string) (redisdriver.Node, error) {
	if d.cluster == nil {
		return d.self, nil
	}
	c, err := d.cluster.MasterForKey(ctx, key)
	if err != nil {
		return nil, err
	}
	return &goRedisNode{client: c, addr: c.Options().Addr}, nil
}

// goRedisNode is a [redisdriver.Node]: a Cluster's primary, through its own
// *redis.Client, or the client of one server (single or Sentinel).
type goRedisNode struct {
	client redis.UniversalClient
	addr   string
}

func (n *goRedisNode) Addr() string { return n.addr }

// Exec implements redisdriver.Node: on a client of one server, a pipeline runs on
// one connection.
func (n *goRedisNode) Exec(ctx context.Context, cmds []*redisdriver.Command) {
	goRedisExec(ctx, n.client, cmds)
}

// PubSub implements redisdriver.Node. go-redis dials at the first command.
func (n *goRedisNode) PubSub(ctx context.Context) (redisdriver.PubSub, error) {
	return &goRedisPubSub{ps: n.client.Subscribe(ctx)}, nil
}

// goRedisExec sends cmds on c, and sets their results.
func goRedisExec(ctx context.Context, c redis.UniversalClient, cmds []*redisdriver.Command) {
	if len(cmds) == 1 {
		rc := goRedisCmds.Get().(*redis.Cmd)
		goRedisCmd(ctx, rc, cmds[0])
		_ = c.Process(ctx, rc)
		goRedisResult(rc, cmds[0], nil)
		*rc = redis.Cmd{}
		goRedisCmds.Put(rc)
		return
	}
	rcs := make([]redis.Cmd, len(cmds))
	pipe := c.Pipeline()
	for i, cmd := range cmds {
		goRedisCmd(ctx, &rcs[i], cmd)
		_ = pipe.Process(ctx, &rcs[i])
	}
	_, err := pipe.Exec(ctx) // each command's error is its own
	for i, cmd := range cmds {
		goRedisResult(&rcs[i], cmd, err)
	}
}

// goRedisCmds holds go-redis commands for goRedisExec to reuse: a command
// sent alone costs no allocation of its own.
var goRedisCmds = sync.Pool{New: func() any { return new(redis.Cmd) }}

// goRedisCmd makes rc the go-redis command of cmd.
func goRedisCmd(ctx context.Context, rc *redis.Cmd, cmd *redisdriver.Command) {
	*rc = *redis.NewCmd(ctx, cmd.Args...)
	if cmd.Key > 0 {
		rc.SetFirstKeyPos(int8(cmd.Key)) // routes it on a Cluster
	}
}

// goRedisResult sets cmd's result from rc's; err is its pipeline's, for a
// command whose reply was not read (go-redis does not always say so on the
// command).
func goRedisResult(rc *redis.Cmd, cmd *redisdriver.Command, err error) {
	cmd.Reply, cmd.Err = nil, nil
	switch val, rerr := rc.Val(), rc.Err(); {
	case rerr == redis.Nil:
	case rerr != nil:
		cmd.Err = goRedisError(rerr)
	case val == nil:
		if err == nil {
			err = errors.New("redis: no reply read")
		}
		cmd.Err = err
	default:
		cmd.Reply = goRedisValue(val)
	}
}

// goRedisError returns err, as a *redisdriver.Error when it is an error reply of the
// server's.
func goRedisError(err error) error {
	var rerr redis.Error
	if errors.As(err, &rerr) && err != redis.Nil {
		return &redisdriver.Error{Msg: rerr.Error(), Err: err}
	}
	return err
}

// goRedisValue converts a reply as go-redis reads it to the driver's plain
// values (see [redisdriver.Driver]): RESP2's need nothing but their arrays' error
// elements; RESP3's maps, sets, booleans and numbers do.
func goRedisValue(v any) any {
	switch x := v.(type) {
	case []any:
		for i, e := range x {
			x[i] = goRedisValue(e)
		}
	case map[any]any: // its pairs in the order of their keys, as every driver gives them
		keys := make([]any, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, func(a, b any) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(b)) })
		a := make([]any, 0, 2*len(x))
		for _, k := range keys {
			a = append(a, goRedisValue(k), goRedisValue(x[k]))
		}
		return a
	case map[string]string:
		a := make([]any, 0, 2*len(x))
		for _, k := range slices.Sorted(maps.Keys(x)) {
			a = append(a, k, x[k])
		}
		return a
	case bool:
		if x {
			return int64(1)
		}
		return nil
	case error:
		if x == redis.Nil {
			return nil
		}
		return goRedisError(x)
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	}
	return v // as it came (int64, string, nil, or an array converted in place): no allocation
}

// goRedisPubSub is a [redisdriver.PubSub]: a go-redis PubSub.
type goRedisPubSub struct {
	ps *redis.PubSub
}

func (s *goRedisPubSub) Subscribe(ctx context.Context, channel string) error {
	return s.ps.Subscribe(ctx, channel)
}

func (s *goRedisPubSub) SSubscribe(ctx context.Context, channel string) error {
	return s.ps.SSubscribe(ctx, channel)
}

func (s *goRedisPubSub) SUnsubscribe(ctx context.Context, channel string) error {
	return s.ps.SUnsubscribe(ctx, channel)
}

func (s *goRedisPubSub) Ping(ctx context.Context) error { return s.ps.Ping(ctx) }

func (s *goRedisPubSub) Close() error { return s.ps.Close() }

// Receive implements redisdriver.PubSub.
func (s *goRedisPubSub) Receive(ctx context.Context, timeout time.Duration) (redisdriver.Message, error) {
	for {
		m, err := s.ps.ReceiveTimeout(ctx, timeout)
		if err != nil {
			return redisdriver.Message{}, goRedisError(err)
		}
		switch m := m.(type) {
		case *redis.Message:
			return redisdriver.Message{Kind: "message", Channel: m.Channel, Payload: m.Payload}, nil
		case *redis.Subscription:
			return redisdriver.Message{Kind: m.Kind, Channel: m.Channel, Count: m.Count}, nil
		case *redis.Pong:
			return redisdriver.Message{Kind: "pong"}, nil
		}
		// Anything else (a pattern's confirmation) is none of the
		// provider's.
	}
}
