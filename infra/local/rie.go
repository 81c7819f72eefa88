package local

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// FunctionSpec is one function to run under aws-lambda-rie.
type FunctionSpec struct {
	// Name is the function's name (AWS_LAMBDA_FUNCTION_NAME).
	Name string
	// RIE is the aws-lambda-rie binary; Bootstrap the function's binary.
	RIE, Bootstrap string
	// Env is the function's configuration, KEY=VALUE, as the template's
	// Environment would give it. Nothing else of the caller's environment
	// is passed on except PATH and HOME, as in Lambda.
	Env []string
	// Output receives rie's and the function's stdout and stderr (the
	// START/END/REPORT lines and the JSON log lines).
	Output io.Writer
}

// Function is a running rie with one function behind it. Invoke is not safe
// for overlapping use: rie serves one invocation at a time, like a function
// with reserved concurrency 1, and answers a second one with 400.
type Function struct {
	Name string
	// URL is the invoke endpoint: POST an event, read the response.
	URL string

	cmd    *exec.Cmd
	exited chan struct{}
	client *http.Client
}

// StartFunction starts rie on two free loopback ports: rie's own HTTP
// address and the Runtime API address the bootstrap talks to. The second
// is needed because every rie defaults to 127.0.0.1:9001 and three would
// clash.
func StartFunction(ctx context.Context, spec FunctionSpec) (*Function, error) {
	invokeAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	runtimeAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(spec.RIE,
		"--runtime-interface-emulator-address", invokeAddr,
		"--runtime-api-address", runtimeAddr,
		spec.Bootstrap)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"),
		"AWS_LAMBDA_FUNCTION_NAME=" + spec.Name}, spec.Env...)
	cmd.Dir = filepath.Dir(spec.Bootstrap) // Lambda runs from the task folder
	cmd.Stdout, cmd.Stderr = spec.Output, spec.Output
	// Own process group: a Ctrl-C at the terminal reaches only the
	// driver, which then stops each function in order instead of rie
	// dying mid-invocation. Pdeathsig: if the driver dies without running
	// Stop (kill -9), rie dies with it instead of holding its ports.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start rie for %s: %w", spec.Name, err)
	}
	f := &Function{
		Name:   spec.Name,
		URL:    "http://" + invokeAddr + "/2015-03-31/functions/function/invocations",
		cmd:    cmd,
		exited: make(chan struct{}),
		// No client timeout: rie enforces AWS_LAMBDA_FUNCTION_TIMEOUT
		// itself, and the caller's context bounds the wait.
		client: &http.Client{},
	}
	go func() { _ = cmd.Wait(); close(f.exited) }()
	if err := f.waitListening(ctx, invokeAddr); err != nil {
		f.Stop()
		return nil, err
	}
	return f, nil
}

func (f *Function) waitListening(ctx context.Context, addr string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			conn.Close()
			return nil
		}
		select {
		case <-f.exited:
			return fmt.Errorf("rie for %s exited at start: %v", f.Name, f.cmd.ProcessState)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("rie for %s not listening on %s after 10s", f.Name, addr)
		}
	}
}

// FunctionError is an invocation that returned an error document
// ({"errorMessage", "errorType"}) or a non-200 status: a handler error, a
// crash, a failed init or a timeout.
type FunctionError struct {
	Function string
	Status   int
	Body     string
}

func (e *FunctionError) Error() string {
	return fmt.Sprintf("%s: invocation failed (HTTP %d): %s", e.Function, e.Status, e.Body)
}

// Invoke sends one event and returns the function's response document.
func (f *Function) Invoke(ctx context.Context, event []byte) (json.RawMessage, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.URL, bytes.NewReader(event))
	if err != nil {
		return nil, err
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s: invoke: %w", f.Name, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s: read response: %w", f.Name, err)
	}
	if resp.StatusCode != http.StatusOK || isErrorDocument(body) {
		return nil, &FunctionError{Function: f.Name, Status: resp.StatusCode, Body: string(body)}
	}
	return body, nil
}

// isErrorDocument: rie answers a handler error with 200 and the runtime's
// error document, where Lambda's Invoke API would add X-Amz-Function-Error.
func isErrorDocument(body []byte) bool {
	var doc struct {
		ErrorType    *string `json:"errorType"`
		ErrorMessage *string `json:"errorMessage"`
	}
	return json.Unmarshal(body, &doc) == nil && doc.ErrorType != nil && doc.ErrorMessage != nil
}

// Stop ends rie and the bootstrap it started: SIGTERM, then SIGKILL if
// they are still there after 3s. rie puts the bootstrap in a process group
// of its own, so the bootstrap is signalled by its pid, found as rie's
// child.
func (f *Function) Stop() {
	pids := append([]int{f.cmd.Process.Pid}, childPids(f.cmd.Process.Pid)...)
	signal := func(sig syscall.Signal) {
		for _, pid := range pids {
			_ = syscall.Kill(pid, sig)
		}
	}
	signal(syscall.SIGTERM)
	select {
	case <-f.exited:
	case <-time.After(3 * time.Second):
		signal(syscall.SIGKILL)
		<-f.exited
	}
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

// Pid is rie's process id.
func (f *Function) Pid() int { return f.cmd.Process.Pid }

// freeAddr asks the kernel for a free loopback port. It is released before
// rie binds it, a small race that a local run accepts.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}
