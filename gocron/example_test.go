package gocronlock_test

import (
	"context"
	"fmt"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/redis/go-redis/v9"

	"github.com/seed05627090/lock"
	gocronlock "github.com/seed05627090/lock/gocron"
)

// Every replica runs this: its scheduler asks the Locker before each run, and
// one replica runs each hourly run.
func ExampleLocker() {
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{"127.0.0.1:6379"}, ContextTimeoutEnabled: true})
	c, err := lock.NewClient(lock.NewRedisProvider(rdb))
	if err != nil {
		panic(err)
	}
	defer c.Close()

	// A cron spec's times are whole minutes: key each run by its minute.
	locker := &gocronlock.Locker{Client: c, Every: time.Minute, Options: lock.Options{MaxDuration: time.Hour}}
	s, err := gocron.NewScheduler(gocron.WithDistributedLocker(locker))
	if err != nil {
		panic(err)
	}
	_, err = s.NewJob(
		gocron.CronJob("0 * * * *", false),
		gocron.NewTask(func(ctx context.Context) error {
			l, ok := locker.Held(ctx)
			if !ok {
				return fmt.Errorf("no lock for this run")
			}
			fmt.Println("sending the hourly report with fencing token", l.Token())
			return nil
		}),
		gocron.WithName("hourly-report"),
	)
	if err != nil {
		panic(err)
	}
	s.Start()
	defer func() { _ = s.Shutdown() }()
	// ... the service runs ...
}
