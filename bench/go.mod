module github.com/seed05627090/lock/bench

go 1.26.0

replace github.com/seed05627090/lock => ../

require (
	github.com/bsm/redislock v0.9.4
	github.com/go-redsync/redsync/v4 v4.18.1
	github.com/redis/go-redis/v9 v9.23.0
	github.com/redis/rueidis v1.0.80
	github.com/seed05627090/lock v0.1.2
	github.com/seed05627090/lock/rueidis v0.0.0-00010101000000-000000000000
	github.com/seed05627090/lock/valkey v0.0.0-00010101000000-000000000000
	github.com/valkey-io/valkey-go v1.0.80
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
)

replace github.com/seed05627090/lock/rueidis => ../rueidis

replace github.com/seed05627090/lock/valkey => ../valkey
