//go:build !linux

package servers

import (
	"os/exec"
	"syscall"
)

// dieWithParent does nothing here: only Linux has a parent-death signal, so
// a server outlives a test binary that ends without Main's Run stopping it.
func dieWithParent(*exec.Cmd, syscall.Signal) {}
