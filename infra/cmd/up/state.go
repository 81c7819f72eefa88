package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// state is the files in .local/up that tie `up`, the background process
// and `down` together.
type state struct {
	root, dir                   string
	pidFile, endpoints, logFile string
}

func newState(root string) state {
	dir := filepath.Join(root, ".local", "up")
	return state{
		root: root, dir: dir,
		pidFile:   filepath.Join(dir, "up.pid"),
		endpoints: filepath.Join(dir, "endpoints.env"),
		logFile:   filepath.Join(dir, "up.log"),
	}
}

// servingPid returns the pid of a running background stack, or 0. A pid
// file whose process is gone, or is some other program that reuses the
// pid, counts as not running.
func (s state) servingPid() int {
	b, err := os.ReadFile(s.pidFile)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !bytes.Contains(cmdline, []byte("-serve")) {
		return 0
	}
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return 0
	}
	return pid
}

// writeAtomic replaces path in one rename, so a reader never sees half a
// file (`up` waits for endpoints.env to appear).
func writeAtomic(path string, body []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, body, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
