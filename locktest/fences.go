package locktest

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"

	"github.com/seed05627090/lock"
)

// fencedSet is the write of RedisFence: the value of the resource.
var fencedSet = lock.NewRedisFence(`redis.call('SET', KEYS[1], ARGV[1])`)

// RedisFence returns the Fence of a resource on rdb written through a
// lock.RedisFence: the resource called name is the key "{name}:value",
// behind the fence "{name}:fence" (one hash slot, for a Cluster).
func RedisFence(rdb redis.UniversalClient) Fence { return redisFence{rdb} }

type redisFence struct{ rdb redis.UniversalClient }

func (f redisFence) Write(ctx context.Context, name string, token uint64, value string) error {
	return fencedSet.Run(ctx, f.rdb, "{"+name+"}:fence", token, []string{"{" + name + "}:value"}, value).Err()
}

func (f redisFence) Read(ctx context.Context, name string) (string, error) {
	v, err := f.rdb.Get(ctx, "{"+name+"}:value").Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	return v, err
}
