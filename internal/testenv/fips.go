//go:build go1.24

package testenv

import (
	"context"
	"crypto/fips140"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
)

// FIPS140Only runs the top-level test t again in a process of its own, the
// test binary with GODEBUG=fips140=only (Go's FIPS 140-3 mode, enforced:
// SHA-1, MD5 and other algorithms it does not approve panic or fail) and
// env added to its environment ("NAME=value": what the process needs to
// know of the caller's, such as the address of a server that cannot run in
// that mode), and reports whether the caller is that process. The caller
// returns when it is not, and otherwise does what must work in that mode:
//
//	if !testenv.FIPS140Only(t) {
//		return // the test ran in a process of its own
//	}
//
// The test fails when that process fails, a panic of a package's
// initialization included, and is skipped where the toolchain cannot run
// the mode (purego, ASAN, boringcrypto, a platform without it). No
// GOFIPS140 is needed: GODEBUG enables the module the binary was built with.
func FIPS140Only(t *testing.T, env ...string) bool {
	t.Helper()
	if fips140.Enforced() {
		return true
	}
	godebug := "fips140=only"
	if v := os.Getenv("GODEBUG"); v != "" {
		godebug = v + "," + godebug
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Env = append(append(os.Environ(), env...), "GODEBUG="+godebug)
	out, err := cmd.CombinedOutput()
	switch {
	case err != nil && strings.Contains(string(out), "panic: fips140: FIPS 140-3 mode is"):
		t.Skipf("this build cannot run FIPS 140-3 mode:\n%s", out)
	case err != nil:
		t.Fatalf("under GODEBUG=%s: %v\n%s", godebug, err, out)
	case strings.Contains(string(out), "--- SKIP: "+t.Name()+" "):
		t.Skipf("skipped under GODEBUG=%s:\n%s", godebug, out)
	}
	t.Logf("under GODEBUG=%s:\n%s", godebug, out)
	return false
}

// HandOn is what the FIPS 140-3 tests do on every provider: c takes the lock
// called name, a waiter of c queues for it, and the release hands it to the
// waiter, with a greater token. It returns both locks, the first released
// and the second held.
func HandOn(t *testing.T, ctx context.Context, c *lock.Client, name string) (first, second *lock.Lock) {
	t.Helper()
	first, err := c.Acquire(ctx, name, lock.Options{})
	require.NoError(t, err)
	got := make(chan *lock.Lock)
	go func() {
		l, err := c.Acquire(ctx, name, lock.Options{Wait: true, MaxWait: 10 * time.Second})
		assert.NoError(t, err, "the waiter")
		got <- l
	}()
	require.Eventually(t, func() bool {
		info, err := c.Inspect(ctx, name)
		return err == nil && info.Waiters == 1
	}, 10*time.Second, 5*time.Millisecond, "the waiter queues")
	require.NoError(t, first.Release(ctx))
	second = <-got
	require.NotNil(t, second, "the lock handed to the waiter")
	assert.Greater(t, second.Token(), first.Token())
	return first, second
}
