package rueidis_test

import (
	"context"
	"testing"

	"github.com/redis/rueidis"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/locktest"
	lockrueidis "github.com/seed05627090/lock/rueidis"
)

// TestConformance runs the provider conformance suite on the tests' Redis
// (on Valkey with LOCK_REDIS_SERVER=valkey-server). Each provider New
// returns has a rueidis client of its own, standing in for another process.
func TestConformance(t *testing.T) {
	cleanKeys(t)
	locktest.Run(t, locktest.Backend{
		New:             func(t testing.TB) lock.Provider { return lockrueidis.NewProvider(newRueidis(t)) },
		Fence:           func(t testing.TB) locktest.Fence { return redisFence{newRueidis(t)} },
		Expires:         true,
		SkipsUnlistened: true,  // a single server counts PUBLISH's receivers
		ExclusiveInbox:  false, // two Listens on one inbox are two SUBSCRIBEs
		Remote:          true,
	})
}

// fencedSet is the write of the history check's fenced resource.
var fencedSet = lockrueidis.NewFence(`redis.call('SET', KEYS[1], ARGV[1])`)

// redisFence is the fenced resource of the history check, as
// locktest.RedisFence is on go-redis: the resource called name is the key
// "{name}:value", behind the fence "{name}:fence".
type redisFence struct{ c rueidis.Client }

func (f redisFence) Write(ctx context.Context, name string, token uint64, value string) error {
	_, err := fencedSet.Run(ctx, f.c, "{"+name+"}:fence", token, []string{"{" + name + "}:value"}, value)
	return err
}

func (f redisFence) Read(ctx context.Context, name string) (string, error) {
	v, err := f.c.Do(ctx, f.c.B().Get().Key("{"+name+"}:value").Build()).ToString()
	if rueidis.IsRedisNil(err) {
		return "", nil
	}
	return v, err
}
