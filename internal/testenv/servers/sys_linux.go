package servers

import (
	"os/exec"
	"syscall"
)

// dieWithParent has cmd's process sent sig when this process ends (Linux's
// parent-death signal), keeping cmd's other attributes.
func dieWithParent(cmd *exec.Cmd, sig syscall.Signal) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = sig
}
