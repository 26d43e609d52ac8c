package testenv

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
)

// Notices listens to inbox on p until the end of the test, and returns the
// channel of the notices it delivers; a notice that finds 64 waiting there
// is dropped.
func Notices(t testing.TB, ctx context.Context, p lock.Provider, inbox string) <-chan lock.Notice {
	t.Helper()
	return notices(t, func(deliver func(lock.Notice)) (func(), error) { return p.Listen(ctx, inbox, deliver) })
}

// WatchNotices is Notices for a Watch of key on p.
func WatchNotices(t testing.TB, ctx context.Context, p lock.Provider, key string) <-chan lock.Notice {
	t.Helper()
	return notices(t, func(deliver func(lock.Notice)) (func(), error) { return p.Watch(ctx, key, deliver) })
}

// notices opens a Listen or a Watch with a deliver function that sends to
// the channel it returns, and stops it at the end of the test.
func notices(t testing.TB, open func(deliver func(lock.Notice)) (func(), error)) <-chan lock.Notice {
	t.Helper()
	got := make(chan lock.Notice, 64)
	stop, err := open(func(g lock.Notice) {
		select {
		case got <- g:
		default:
		}
	})
	require.NoError(t, err)
	t.Cleanup(stop)
	return got
}
