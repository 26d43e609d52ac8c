//go:build go1.24

package testenv

import (
	"crypto/fips140"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// FIPS140Only runs the top-level test t again in a process of its own, the
// test binary with GODEBUG=fips140=only (Go's FIPS 140-3 mode, enforced:
// SHA-1, MD5 and other algorithms it does not approve panic or fail), and
// reports whether the caller is that process. The caller returns when it is
// not, and otherwise does what must work in that mode:
//
//	if !testenv.FIPS140Only(t) {
//		return // the test ran in a process of its own
//	}
//
// The test fails when that process fails, a panic of a package's
// initialization included, and is skipped where the toolchain cannot run
// the mode (purego, ASAN, boringcrypto, a platform without it). No
// GOFIPS140 is needed: GODEBUG enables the module the binary was built with.
func FIPS140Only(t *testing.T) bool {
	t.Helper()
	if fips140.Enforced() {
		return true
	}
	godebug := "fips140=only"
	if v := os.Getenv("GODEBUG"); v != "" {
		godebug = v + "," + godebug
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "GODEBUG="+godebug)
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
