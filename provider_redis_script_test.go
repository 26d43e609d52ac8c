package lock

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestScriptsShareOneDefinition: the fencing token is taken, and a caller's
// own record read, by one piece of Lua each (scripts/token.lua,
// scripts/owned.lua), included where it is used; no script writes its own
// copy (issue 21: token issuing was written twice, the owner check four
// times). And every included fragment is expanded in the scripts sent.
func TestScriptsShareOneDefinition(t *testing.T) {
	files, err := filepath.Glob("scripts/*.lua")
	if err != nil || len(files) == 0 {
		t.Fatalf("scripts: %v", err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src, name := string(b), filepath.Base(f)
		if name != "token.lua" && strings.Contains(src, "'INCR', KEYS[2]") {
			t.Errorf("%s takes a fencing token itself: include token.lua", name)
		}
		if name != "owned.lua" && strings.Contains(src, "#o + 2") {
			t.Errorf("%s reads its caller's record itself: include owned.lua", name)
		}
	}
	for name, s := range map[string]*script{
		"acquire": acquireScript, "queue": queueScript, "leave": leaveScript, "release": releaseScript,
		"renew": renewScript, "finish": finishScript, "inspect": inspectScript, "forcerelease": forceReleaseScript,
	} {
		for _, line := range strings.Split(s.src.(string), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "--#include") {
				t.Errorf("the %s script sent still has an include line: %q", name, line)
			}
		}
	}
	if !strings.Contains(acquireScript.src.(string), "'INCR', KEYS[2]") || !strings.Contains(releaseScript.src.(string), "#o + 2") {
		t.Error("the fragments were not expanded into the scripts")
	}
}
