package lock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/seed05627090/lock/redisdriver"
)

// UnknownSetting is the value of a [ServerReport] field that the server would not
// tell: CONFIG GET is refused by an ACL or renamed away by a managed Redis, or
// INFO lacks the field.
const UnknownSetting = "unknown"

// ServerReport is what CheckServer found on a Redis (or Valkey) server: the
// settings on which the guarantees of the Redis provider depend, and a
// warning for each one that weakens them.
type ServerReport struct {
	// Addr is the server's address as the client knows it; "" when the client
	// does not say (a Sentinel or Ring client).
	Addr string
	// Server is the server's name: server_name from INFO ("valkey" on
	// Valkey), or "redis" when INFO has none, as on Redis.
	Server string
	// Version is the server's own version from INFO: redis_version on
	// Redis, such as "7.0.15"; valkey_version on Valkey, such as "8.0.1"
	// (Valkey's redis_version, 7.2.4 on Valkey 8, is the Redis version it
	// is compatible with, which decides the version warning); redis_version
	// when the server names no version of its own.
	Version string
	// Mode is redis_mode from INFO (server_mode on Valkey 8): "standalone"
	// or "cluster" ("sentinel" when the client talks to a Sentinel itself).
	// A primary managed by Sentinel reports "standalone".
	Mode string
	// MaxmemoryPolicy is maxmemory-policy; only "noeviction" keeps lock
	// records from being evicted.
	MaxmemoryPolicy string
	// Maxmemory is the memory limit in bytes; 0 means no limit.
	Maxmemory int64
	// AOF reports whether the append-only file is on (appendonly yes).
	AOF bool
	// Appendfsync is how often the AOF is flushed to disk: "always",
	// "everysec" or "no"; [UnknownSetting] when CONFIG GET is refused.
	Appendfsync string
	// Save is the RDB snapshot schedule ("3600 1 300 100", say); "" means no
	// snapshots; [UnknownSetting] when CONFIG GET is refused.
	Save string
	// Warnings say, one sentence each, what in this setup can break mutual
	// exclusion and what to change; none means nothing was found. On a
	// Cluster each warning starts with the address of the master it is about.
	Warnings []string
	// Nodes holds the report of each master of a Cluster, by address; the
	// fields above are then those of the first one, and Warnings those of
	// all. It is nil for a single server.
	Nodes []ServerReport
}

// CheckServer reads the settings of the Redis server behind the provider's
// client with INFO and CONFIG GET, and reports what it found, with a warning
// for each setting that can give a lock two holders or that this library does
// not support. On a Cluster client it checks every master. It changes nothing
// on the server. Settings that CONFIG GET may not read are reported as
// [UnknownSetting]; an error (a failed INFO, an unreachable server, ctx ending) is
// returned wrapped, with no report.
func (p *RedisProvider) CheckServer(ctx context.Context) (ServerReport, error) {
	if err := p.check(); err != nil {
		return ServerReport{}, err
	}
	var r ServerReport
	var cerr error // the call's own: read once await returned nil
	if err := await(ctx, func() { r, cerr = p.checkServer(ctx) }, nil); err != nil {
		return ServerReport{}, fmt.Errorf("lock: check server: %w", err)
	}
	return r, cerr
}

// checkServer is CheckServer, once the provider is checked.
func (p *RedisProvider) checkServer(ctx context.Context) (ServerReport, error) {
	if !p.cluster {
		nodes, err := p.driver.Primaries(ctx)
		if err == nil && len(nodes) != 1 {
			err = fmt.Errorf("the driver gave %d nodes, not 1", len(nodes))
		}
		var r ServerReport
		if err == nil {
			r, err = checkNode(ctx, nodes[0])
		}
		if err != nil {
			return ServerReport{}, fmt.Errorf("lock: check server: %w", err)
		}
		if r.Mode == "cluster" {
			r.Warnings = append(r.Warnings, "the server runs in cluster mode but the client is "+
				"not a Cluster client: locks whose keys live on another node fail with MOVED; "+
				"use a ClusterClient")
		}
		return r, nil
	}
	var mu sync.Mutex
	var nodes []ServerReport
	err := eachPrimary(ctx, p.driver, func(ctx context.Context, node redisdriver.Node) error {
		r, err := checkNode(ctx, node)
		if err != nil {
			return fmt.Errorf("%s: %w", node.Addr(), err)
		}
		mu.Lock()
		defer mu.Unlock()
		nodes = append(nodes, r)
		return nil
	})
	if err != nil {
		return ServerReport{}, fmt.Errorf("lock: check server: %w", err)
	}
	if len(nodes) == 0 {
		return ServerReport{}, errors.New("lock: check server: the cluster has no masters")
	}
	slices.SortFunc(nodes, func(a, b ServerReport) int { return strings.Compare(a.Addr, b.Addr) })
	r := nodes[0]
	r.Warnings, r.Nodes = nil, nodes
	for _, n := range nodes {
		for _, w := range n.Warnings {
			r.Warnings = append(r.Warnings, n.Addr+": "+w)
		}
	}
	return r, nil
}

// checkNode reports on node, in one round trip: INFO (the default
// sections: server, memory, persistence, cluster) and the CONFIG GETs.
func checkNode(ctx context.Context, node redisdriver.Node) (ServerReport, error) {
	info := &redisdriver.Command{Args: []any{"info"}}
	fsync := &redisdriver.Command{Args: []any{"config", "get", "appendfsync"}}
	save := &redisdriver.Command{Args: []any{"config", "get", "save"}}
	node.Exec(ctx, []*redisdriver.Command{info, fsync, save})
	if info.Err != nil {
		return ServerReport{}, info.Err
	}
	text, ok := info.Reply.(string)
	if !ok {
		return ServerReport{}, fmt.Errorf("unexpected reply to INFO %v", info.Reply)
	}
	fields := parseInfo(text)
	r := infoReport(node.Addr(), fields)
	var err error
	if r.Appendfsync, err = configValue(ctx, fsync); err != nil {
		return ServerReport{}, err
	}
	if r.Save, err = configValue(ctx, save); err != nil {
		return ServerReport{}, err
	}
	r.Warnings = r.warnings(infoValue(fields, "redis_version"))
	return r, nil
}

// infoReport returns the fields of a report that INFO tells.
func infoReport(addr string, info map[string]string) ServerReport {
	r := ServerReport{
		Addr:            addr,
		Server:          "redis",
		MaxmemoryPolicy: infoValue(info, "maxmemory_policy"),
		AOF:             info["aof_enabled"] == "1",
	}
	if name := info["server_name"]; name != "" {
		r.Server = name
	}
	if r.Version = infoValue(info, r.Server+"_version"); r.Version == UnknownSetting {
		r.Version = infoValue(info, "redis_version")
	}
	if r.Mode = infoValue(info, "redis_mode"); r.Mode == UnknownSetting {
		r.Mode = infoValue(info, "server_mode")
	}
	if r.Mode == UnknownSetting && info["cluster_enabled"] == "1" {
		r.Mode = "cluster"
	}
	r.Maxmemory, _ = strconv.ParseInt(info["maxmemory"], 10, 64)
	return r
}

// warnings returns the warnings for the settings in r, on a server
// compatible with Redis version compat (its redis_version).
func (r ServerReport) warnings(compat string) []string {
	var ws []string
	if maj, min, ok := parseVersion(compat); !ok {
		ws = append(ws, fmt.Sprintf("could not read the Redis version (%q): this library needs Redis 6.2 or later, or Valkey", compat))
	} else if maj < 6 || maj == 6 && min < 2 {
		ws = append(ws, fmt.Sprintf("Redis %s is older than 6.2 and not supported: the lock scripts need 6.2 or later; upgrade", compat))
	}
	switch {
	case r.MaxmemoryPolicy == UnknownSetting:
		ws = append(ws, "could not read maxmemory-policy: make sure it is noeviction, as any other policy can evict lock records and give a lock two holders")
	case r.MaxmemoryPolicy != "noeviction":
		limit := fmt.Sprintf("maxmemory is %d bytes", r.Maxmemory)
		if r.Maxmemory == 0 {
			limit = "no maxmemory is set now, but once one is"
		}
		ws = append(ws, fmt.Sprintf("maxmemory-policy is %s, not noeviction: %s, a full Redis can evict a lock record "+
			"(records carry a TTL, so volatile-* policies evict them too) and grant the lock to a second holder "+
			"while the first still believes it holds it, until the first holder's next renewal (up to a third of a lease); "+
			"set maxmemory-policy noeviction", r.MaxmemoryPolicy, limit))
	}
	switch {
	case !r.AOF:
		snapshots := "no RDB snapshots either"
		if r.Save == UnknownSetting {
			snapshots = "the RDB schedule could not be read"
		} else if r.Save != "" {
			snapshots = fmt.Sprintf("RDB snapshots (save %q) keep only the locks of the last snapshot", r.Save)
		}
		ws = append(ws, "AOF is off and "+snapshots+": a restart forgets the locks, so a new client can be "+
			"granted a lock at once while its old holder learns of the loss only at its next renewal "+
			"(normally within a third of a lease); set appendonly yes with appendfsync everysec")
	case r.Appendfsync == "no":
		ws = append(ws, "appendfsync is no: a crash of the machine (not only of Redis) can lose the writes the "+
			"operating system had not flushed, lock grants included; set appendfsync everysec")
	}
	return ws
}

// configValue returns the value of the setting that cmd, a CONFIG GET,
// asked for, or [UnknownSetting] when the server refused CONFIG GET.
func configValue(ctx context.Context, cmd *redisdriver.Command) (string, error) {
	var rerr *redisdriver.Error
	switch err := cmd.Err; {
	case err != nil && ctx.Err() == nil && errors.As(err, &rerr):
		return UnknownSetting, nil // NOPERM, or an unknown (renamed) command
	case err != nil:
		return "", err
	}
	name := cmd.Args[2]
	a, _ := cmd.Reply.([]any)
	for i := 0; i+1 < len(a); i += 2 {
		if a[i] == name {
			if v, ok := a[i+1].(string); ok {
				return v, nil
			}
		}
	}
	return UnknownSetting, nil
}

// parseInfo turns the text of INFO into its fields.
func parseInfo(text string) map[string]string {
	m := make(map[string]string)
	for _, line := range strings.Split(text, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && !strings.HasPrefix(k, "#") {
			m[k] = v
		}
	}
	return m
}

// infoValue returns an INFO field, or [UnknownSetting] when it is missing.
func infoValue(info map[string]string, name string) string {
	if v, ok := info[name]; ok && v != "" {
		return v
	}
	return UnknownSetting
}

// parseVersion returns the major and minor numbers of a version "7.0.15".
func parseVersion(v string) (major, minor int, ok bool) {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	return major, minor, err1 == nil && err2 == nil
}
