package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
)

// TestHoldsParts: ls, show and -json say which locks are a semaphore's
// permits, a read-write lock's readers and writer, and their gates.
func TestHoldsParts(t *testing.T) {
	forEachStore(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		c, err := lock.NewClient(f.provider(), lock.WithPrefix(f.prefix))
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		sem, err := c.Semaphore("pool", 3)
		require.NoError(t, err)
		p, err := sem.Acquire(ctx, 1, lock.Options{})
		require.NoError(t, err)
		defer func() { _ = p.Release(ctx) }()
		m, err := c.RWMutex("doc", 4)
		require.NoError(t, err)
		r, err := m.RLock(ctx, lock.Options{})
		require.NoError(t, err)
		defer func() { _ = r.Release(ctx) }()
		permit := strings.TrimSuffix(strings.TrimPrefix(p.Locks()[0].Key(), f.prefix+"{"), "}")

		stdout, stderr, code := f.lockctl("ls")
		require.Equal(t, exitOK, code, stderr)
		lines := strings.Split(strings.TrimSpace(stdout), "\n")
		require.Len(t, lines, 3, stdout)
		assert.True(t, strings.HasSuffix(strings.TrimSpace(lines[0]), "PART"), "a PART column: %q", lines[0])
		assert.Contains(t, stdout, "reader of doc (at most 4 readers)")
		assert.Contains(t, stdout, "permit of pool (3 permits)")

		stdout, _, code = f.lockctl("show", permit)
		require.Equal(t, exitOK, code)
		assert.Contains(t, stdout, "part of:")
		assert.Contains(t, stdout, "permit of pool (3 permits)")

		stdout, _, code = f.lockctl("-json", "show", permit)
		require.Equal(t, exitOK, code)
		var got map[string]any
		decode(t, stdout, &got)
		assert.Equal(t, "permit", got["kind"])
		assert.Equal(t, "pool", got["of"])
		assert.Equal(t, "3", fmt.Sprint(got["limit"]))
	})
}

// TestRoleShownAsRole (issue 31, item 7): an election's role is shown as
// one in ls (PART), show and -json, not as a plain lock ("-").
func TestRoleShownAsRole(t *testing.T) {
	forEachStore(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		c, err := lock.NewClient(f.provider(), lock.WithPrefix(f.prefix))
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		term, err := c.Campaign(ctx, "scheduler", lock.ElectionOptions{})
		require.NoError(t, err)
		defer func() { _ = term.Resign(ctx) }()

		stdout, stderr, code := f.lockctl("ls")
		require.Equal(t, exitOK, code, stderr)
		lines := strings.Split(strings.TrimSpace(stdout), "\n")
		require.Len(t, lines, 2, stdout)
		assert.True(t, strings.HasSuffix(strings.TrimSpace(lines[0]), "PART"), "a PART column: %q", lines[0])
		assert.True(t, strings.HasSuffix(strings.TrimSpace(lines[1]), "election role"), "the role's row: %q", lines[1])

		stdout, _, code = f.lockctl("show", "scheduler")
		require.Equal(t, exitOK, code)
		assert.Contains(t, stdout, "election role")

		stdout, _, code = f.lockctl("-json", "show", "scheduler")
		require.Equal(t, exitOK, code)
		var got map[string]any
		decode(t, stdout, &got)
		assert.Equal(t, "role", got["kind"])
	})
}
