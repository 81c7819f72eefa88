package main

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"
)

// startTimeout covers building the three bootstraps on a cold cache.
const startTimeout = 3 * time.Minute

// start launches `up -serve` in its own session (so it outlives make and
// the terminal), waits until it has written its endpoints, and prints them.
func start(st state) error {
	if pid := st.servingPid(); pid != 0 {
		fmt.Printf("outboxkeeper is already up (pid %d); `make down` stops it.\n\n", pid)
		return printEndpoints(st)
	}
	if err := os.MkdirAll(st.dir, 0o755); err != nil {
		return err
	}
	_ = os.Remove(st.endpoints)
	logf, err := os.Create(st.logFile)
	if err != nil {
		return err
	}
	defer logf.Close()
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(self, "-serve")
	cmd.Dir = st.root
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the background stack: %w", err)
	}
	if err := writeAtomic(st.pidFile, []byte(strconv.Itoa(cmd.Process.Pid)+"\n")); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	fmt.Println("starting outboxkeeper: building the functions and starting them under aws-lambda-rie...")
	deadline := time.After(startTimeout)
	for {
		if _, err := os.Stat(st.endpoints); err == nil {
			break
		}
		select {
		case err := <-exited:
			_ = os.Remove(st.pidFile)
			log, _ := os.ReadFile(st.logFile)
			return fmt.Errorf("the background stack exited (%v):\n%s", err, log)
		case <-deadline:
			_ = syscall.Kill(cmd.Process.Pid, syscall.SIGTERM)
			return fmt.Errorf("not ready after %s; see %s", startTimeout, st.logFile)
		case <-time.After(200 * time.Millisecond):
		}
	}
	fmt.Printf("outboxkeeper is up (pid %d). `make down` stops it; its log is %s.\n\n", cmd.Process.Pid, st.logFile)
	return printEndpoints(st)
}

func printEndpoints(st state) error {
	b, err := os.ReadFile(st.endpoints)
	if err != nil {
		return err
	}
	fmt.Print(string(b))
	fmt.Printf("\nPoint an application at it: set -a; source %s; set +a\n", st.endpoints)
	return nil
}

// stop sends SIGTERM to the background stack and waits until it is gone;
// it stops its rie processes itself on the way out.
func stop(st state) error {
	pid := st.servingPid()
	if pid == 0 {
		_ = os.Remove(st.pidFile)
		fmt.Println("outboxkeeper is not up.")
		return nil
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		return fmt.Errorf("stop pid %d: %w", pid, err)
	}
	deadline := time.Now().Add(20 * time.Second)
	// servingPid also reads a zombie (empty cmdline) as gone.
	for st.servingPid() == pid {
		if time.Now().After(deadline) {
			return fmt.Errorf("pid %d still running 20s after SIGTERM", pid)
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = os.Remove(st.pidFile)
	_ = os.Remove(st.endpoints)
	fmt.Printf("outboxkeeper stopped (pid %d).\n", pid)
	return nil
}
