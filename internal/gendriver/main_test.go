package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestValkeyModuleIsGenerated fails while a Go file of the valkey module
// differs from what gendriver makes of the rueidis module's: the fix is
// `go run ./internal/gendriver` from the repository's root.
func TestValkeyModuleIsGenerated(t *testing.T) {
	root := filepath.Join("..", "..")
	for _, f := range files {
		src, err := os.ReadFile(filepath.Join(root, "rueidis", f))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(root, "valkey", f))
		if err != nil {
			t.Fatal(err)
		}
		want, err := translate(string(src))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Errorf("valkey/%s is not what internal/gendriver makes of rueidis/%s: run `go run ./internal/gendriver`", f, f)
		}
	}
}
