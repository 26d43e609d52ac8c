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
	got := make(chan lock.Notice, 64)
	stop, err := p.Listen(ctx, inbox, func(g lock.Notice) {
		select {
		case got <- g:
		default:
		}
	})
	require.NoError(t, err)
	t.Cleanup(stop)
	return got
}
