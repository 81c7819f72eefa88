package rie

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
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

// listens says whether process pid itself holds the listening TCP socket
// on addr: a free port can be taken by another process between our probe
// and rie's bind, and a connection that succeeds then proves nothing about
// our rie. /proc/net/tcp maps the listening port to a socket inode, and
// /proc/<pid>/fd shows whether pid holds that inode.
func listens(pid int, addr string) bool {
	_, portText, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return false
	}
	table, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return false
	}
	want := fmt.Sprintf(":%04X", port)
	inodes := map[string]bool{}
	for _, line := range strings.Split(string(table), "\n")[1:] {
		f := strings.Fields(line)
		// local_address is field 1, state 3 (0A: LISTEN), inode 9.
		if len(f) > 9 && strings.HasSuffix(f[1], want) && f[3] == "0A" {
			inodes["socket:["+f[9]+"]"] = true
		}
	}
	fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
	for _, fd := range fds {
		if target, err := os.Readlink(fd); err == nil && inodes[target] {
			return true
		}
	}
	return false
}
