package lambdatest

import (
	"os/exec"
	"syscall"
)

// setProcAttr makes the kernel kill rie if the test binary dies without
// running cleanups (a `go test -timeout` panic), so no emulator outlives it.
func setProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
