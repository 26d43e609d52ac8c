package testenv

import (
	"flag"
	"fmt"
	"os"
	"testing"
)

// The quick tier: `go test -short ./...` is the everyday command, and skips
// or shrinks the tests that take long (the fault suite, Sentinel, Cluster,
// footprints, the long conformance checks, tests that wait out leases of
// seconds); CI runs everything, without -short. Every such place goes
// through SkipShort, ShortSize or SkipShortMain, so that
//
//	grep -rn 'SkipShort\|ShortSize' --include='*.go' .
//
// lists what the quick tier leaves out, each with its reason.

// SkipShort skips t under -short, saying why ("a fault test of 20 s") and
// that a run without -short runs it. Without -short it does nothing.
func SkipShort(t testing.TB, why string) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: " + why + "; run it without -short")
	}
}

// ShortSize returns short under -short, and full otherwise: the size of a
// check (rounds, samples, workers) that the quick tier runs smaller. Under
// -short it logs the reduction and why, so that a failure's log says which
// size ran.
func ShortSize(t testing.TB, full, short int, why string) int {
	t.Helper()
	if !testing.Short() {
		return full
	}
	t.Logf("-short: %d rather than %d: %s; run without -short for the full size", short, full, why)
	return short
}

// SkipShortMain ends a test binary at once, without running its tests,
// under -short: for a package all of whose tests are long (the fault suite).
// It is called from TestMain before m.Run, and parses the command line
// (m.Run would) to read -short. It prints the package's name and why.
func SkipShortMain(pkg, why string) {
	if !flag.Parsed() {
		flag.Parse()
	}
	if testing.Short() {
		fmt.Printf("%s: -short: %s; run it without -short\n", pkg, why)
		os.Exit(0)
	}
}
