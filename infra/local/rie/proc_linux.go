package rie

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
)

var terminate os.Signal = syscall.SIGTERM

// setProcAttr: own process group, so a Ctrl-C at the terminal reaches only
// the driver (or go test), which then stops each function in order instead
// of rie dying mid-invocation. Pdeathsig: if the parent dies without running
// Stop (kill -9, a `go test -timeout` panic), the kernel kills rie instead
// of leaving it holding its ports.
func setProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// childPids lists the processes whose parent is pid, from /proc.
func childPids(pid int) []int {
	var out []int
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		// The command name (field 2) may hold spaces; fields resume after
		// its closing parenthesis: state, then ppid.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		var state string
		var ppid int
		if _, err := fmt.Sscan(string(b[i+1:]), &state, &ppid); err == nil && ppid == pid {
			if child, err := strconv.Atoi(filepath.Base(filepath.Dir(p))); err == nil {
				out = append(out, child)
			}
		}
	}
	return out
}
