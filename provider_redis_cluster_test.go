package lock

import (
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestWrappedClusterClientIsACluster: a type that embeds a
// *redis.ClusterClient (an instrumented wrapper) is taken for the Cluster
// client it is, once, in NewRedisProvider, so that List scans every primary,
// WAIT goes to the key's primary and grants use sharded pub/sub (issue 21:
// each of those asserted *redis.ClusterClient itself, and a wrapper lost
// them silently); a single-node client is not.
func TestWrappedClusterClientIsACluster(t *testing.T) {
	type wrapped struct{ *redis.ClusterClient }
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	defer cc.Close()
	for name, c := range map[string]redis.UniversalClient{"cluster": cc, "wrapped cluster": wrapped{cc}} {
		if p := NewRedisProvider(c); p.cluster == nil {
			t.Errorf("a %s client is not taken for a Cluster", name)
		}
	}
	single := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer single.Close()
	if p := NewRedisProvider(single); p.cluster != nil {
		t.Error("a single-node client is taken for a Cluster")
	}
}
