package main

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/valkey-io/valkey-go"
)

// The clients the columns get, one per column (and per cell), each counting
// the commands it sends (the row "client round trips per section"). Every
// go-redis column gets newRedisClient, with the same settings; the rueidis
// and valkey-go columns get their client's defaults, rueidislock's and
// valkeylock's with the options their lock package sets.

// newRedisClient returns the go-redis client every library gets: the same
// settings for all, with a hook that counts the commands it sends.
func newRedisClient(addr string, sent *atomic.Int64) *redis.Client {
	rc := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 64})
	rc.AddHook(countHook{sent})
	return rc
}

// countHook counts the commands a client sends (round trips; a pipeline
// counts once per command).
type countHook struct{ n *atomic.Int64 }

func (h countHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// newRueidisClient returns rueidis.NewClient(o), counting the commands sent
// through it in sent.
func newRueidisClient(o rueidis.ClientOption, sent *atomic.Int64) (rueidis.Client, error) {
	c, err := rueidis.NewClient(o)
	if err != nil {
		return nil, err
	}
	return countedRueidis{c, sent}, nil
}

// countedRueidis counts the commands sent through a rueidis client; an
// auto-pipelined write of several commands counts each, and so do those
// sent on a connection that Dedicate returns (this library's pub/sub
// connections). Commands sent by DoStream or DoMultiStream, on a Dedicated
// connection or through Nodes are not counted: neither rueidislock nor
// this library on a single server uses them (a column that does must
// count them too).
type countedRueidis struct {
	rueidis.Client
	n *atomic.Int64
}

func (c countedRueidis) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	c.n.Add(1)
	return c.Client.Do(ctx, cmd)
}

func (c countedRueidis) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	c.n.Add(int64(len(cmds)))
	return c.Client.DoMulti(ctx, cmds...)
}

func (c countedRueidis) DoCache(ctx context.Context, cmd rueidis.Cacheable, ttl time.Duration) rueidis.RedisResult {
	c.n.Add(1)
	return c.Client.DoCache(ctx, cmd, ttl)
}

func (c countedRueidis) DoMultiCache(ctx context.Context, cmds ...rueidis.CacheableTTL) []rueidis.RedisResult {
	c.n.Add(int64(len(cmds)))
	return c.Client.DoMultiCache(ctx, cmds...)
}

func (c countedRueidis) Receive(ctx context.Context, subscribe rueidis.Completed, fn func(rueidis.PubSubMessage)) error {
	c.n.Add(1)
	return c.Client.Receive(ctx, subscribe, fn)
}

func (c countedRueidis) Dedicate() (rueidis.DedicatedClient, func()) {
	dc, cancel := c.Client.Dedicate()
	return countedRueidisDedicated{dc, c.n}, cancel
}

// countedRueidisDedicated counts the commands sent on a dedicated
// connection.
type countedRueidisDedicated struct {
	rueidis.DedicatedClient
	n *atomic.Int64
}

func (c countedRueidisDedicated) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	c.n.Add(1)
	return c.DedicatedClient.Do(ctx, cmd)
}

func (c countedRueidisDedicated) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	c.n.Add(int64(len(cmds)))
	return c.DedicatedClient.DoMulti(ctx, cmds...)
}

// newValkeyClient is newRueidisClient for valkey-go.
func newValkeyClient(o valkey.ClientOption, sent *atomic.Int64) (valkey.Client, error) {
	c, err := valkey.NewClient(o)
	if err != nil {
		return nil, err
	}
	return countedValkey{c, sent}, nil
}

// countedValkey is countedRueidis for valkey-go.
type countedValkey struct {
	valkey.Client
	n *atomic.Int64
}

func (c countedValkey) Do(ctx context.Context, cmd valkey.Completed) valkey.ValkeyResult {
	c.n.Add(1)
	return c.Client.Do(ctx, cmd)
}

func (c countedValkey) DoMulti(ctx context.Context, cmds ...valkey.Completed) []valkey.ValkeyResult {
	c.n.Add(int64(len(cmds)))
	return c.Client.DoMulti(ctx, cmds...)
}

func (c countedValkey) DoCache(ctx context.Context, cmd valkey.Cacheable, ttl time.Duration) valkey.ValkeyResult {
	c.n.Add(1)
	return c.Client.DoCache(ctx, cmd, ttl)
}

func (c countedValkey) DoMultiCache(ctx context.Context, cmds ...valkey.CacheableTTL) []valkey.ValkeyResult {
	c.n.Add(int64(len(cmds)))
	return c.Client.DoMultiCache(ctx, cmds...)
}

func (c countedValkey) Receive(ctx context.Context, subscribe valkey.Completed, fn func(valkey.PubSubMessage)) error {
	c.n.Add(1)
	return c.Client.Receive(ctx, subscribe, fn)
}

func (c countedValkey) Dedicate() (valkey.DedicatedClient, func()) {
	dc, cancel := c.Client.Dedicate()
	return countedValkeyDedicated{dc, c.n}, cancel
}

// countedValkeyDedicated is countedRueidisDedicated for valkey-go.
type countedValkeyDedicated struct {
	valkey.DedicatedClient
	n *atomic.Int64
}

func (c countedValkeyDedicated) Do(ctx context.Context, cmd valkey.Completed) valkey.ValkeyResult {
	c.n.Add(1)
	return c.DedicatedClient.Do(ctx, cmd)
}

func (c countedValkeyDedicated) DoMulti(ctx context.Context, cmds ...valkey.Completed) []valkey.ValkeyResult {
	c.n.Add(int64(len(cmds)))
	return c.DedicatedClient.DoMulti(ctx, cmds...)
}
