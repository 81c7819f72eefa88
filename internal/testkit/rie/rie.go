// Package rie runs a Lambda function's bootstrap under aws-lambda-rie (the
// Runtime Interface Emulator) and invokes it over rie's HTTP endpoint, as
// Lambda's Invoke API would. It is the one implementation of these mechanics:
// the demo driver (infra/local) and the test harness (internal/testkit/lambdatest)
// are thin layers over it.
//
//	f, err := rie.Start(ctx, rie.Spec{RIE: rieBin, Bootstrap: bin, Env: env})
//	defer f.Stop()
//	out, err := f.Invoke(ctx, []byte(`{}`))
package rie

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"sync"
	"time"
)

// Spec is one function to run under aws-lambda-rie.
type Spec struct {
	// RIE is the aws-lambda-rie binary; Bootstrap the function's binary.
	RIE, Bootstrap string
	// Name is the function's name (AWS_LAMBDA_FUNCTION_NAME); empty means
	// the name of Bootstrap's folder.
	Name string
	// Env is the function's configuration on top of the Lambda-like
	// defaults (see Environment); an empty value removes a default.
	Env map[string]string
	// Output receives rie's and the function's stdout and stderr: rie's
	// START/END/REPORT lines interleaved with the JSON log lines. nil
	// discards them.
	Output io.Writer
	// LogLevel is rie's own (--log-level); default "error". At "info" rie
	// also writes its INIT REPORT lines, with the init's duration
	// (InitDuration reads them).
	LogLevel string
}

// DefaultTimeout is AWS_LAMBDA_FUNCTION_TIMEOUT unless Env sets it: the
// template's Globals Timeout. rie enforces it itself and hands the deadline
// to the function, so budget.For sees the deadline it would see on Lambda.
const DefaultTimeout = 30 * time.Second

// Environment is the whole environment the function gets: what Lambda
// itself would give it, then env (an empty value removes a default), and
// nothing else of the caller's: a variable the caller forgot to pass fails
// here as it would in AWS, instead of leaking in from a developer's shell.
//
// HOME is deliberately absent (Lambda does not set it): with it, the AWS
// SDK could sign with the developer's ~/.aws credentials when the given
// keys are missing. PATH and TMPDIR are the runtime's needs.
func Environment(name string, env map[string]string) []string {
	vars := map[string]string{
		"PATH":                        os.Getenv("PATH"),
		"TMPDIR":                      os.TempDir(),
		"AWS_LAMBDA_FUNCTION_NAME":    name,
		"AWS_LAMBDA_FUNCTION_TIMEOUT": fmt.Sprint(int(DefaultTimeout.Seconds())),
		"AWS_LAMBDA_LOG_FORMAT":       "JSON", // the template's LoggingConfig
	}
	for k, v := range env {
		vars[k] = v
	}
	out := make([]string, 0, len(vars))
	for k, v := range vars {
		if v != "" {
			out = append(out, k+"="+v)
		}
	}
	sort.Strings(out) // stable order: easier to read in a /proc/<pid>/environ
	return out
}

// Function is a running rie with one function behind it: one execution
// environment. Like Lambda's it handles one invocation at a time; Invoke
// queues overlapping calls (rie itself would answer the second with 400).
type Function struct {
	Name string
	// URL is the invoke endpoint: POST an event, read the response.
	URL string

	cmd      *exec.Cmd
	exited   chan struct{} // closed when rie has exited
	turn     chan struct{} // one token: the invocation in progress
	stopOnce sync.Once
}

// Check reports whether path is an executable file, so callers can tell a
// missing emulator (a setup problem) from a failed start.
func Check(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("aws-lambda-rie not found: %w", err)
	}
	if st.IsDir() || st.Mode()&0o111 == 0 {
		return fmt.Errorf("aws-lambda-rie at %s is not an executable file", path)
	}
	return nil
}

// Start runs the bootstrap under rie on two free loopback ports and returns
// once rie listens. The caller must Stop it.
func Start(ctx context.Context, spec Spec) (*Function, error) {
	if err := Check(spec.RIE); err != nil {
		return nil, err
	}
	if spec.Name == "" {
		spec.Name = filepath.Base(filepath.Dir(spec.Bootstrap))
	}
	// A free port can be taken by another process between our probe and
	// rie's bind (parallel test packages do this all the time); a lost race
	// shows up as rie exiting at start, so try again on new ports.
	var err error
	for range 3 {
		var f *Function
		if f, err = start(ctx, spec); err == nil {
			return f, nil
		}
		if ctx.Err() != nil || !errors.Is(err, errExited) {
			break
		}
	}
	return nil, err
}

var errExited = errors.New("rie exited at start")

func start(ctx context.Context, spec Spec) (*Function, error) {
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	invokeAddr, runtimeAddr := ports[0], ports[1]
	// --runtime-api-address: the Runtime API the bootstrap polls defaults
	// to 127.0.0.1:9001 in every rie, so two emulators would collide
	// without it. --log-level error: rie's own chatter is noise in the logs
	// (START/END/REPORT still appear).
	cmd := exec.Command(spec.RIE,
		"--log-level", cmp.Or(spec.LogLevel, "error"),
		"--runtime-interface-emulator-address", invokeAddr,
		"--runtime-api-address", runtimeAddr,
		spec.Bootstrap)
	cmd.Env = Environment(spec.Name, spec.Env)
	cmd.Dir = filepath.Dir(spec.Bootstrap) // Lambda runs from the task folder
	// One writer for both: one pipe, so lines stay in order.
	cmd.Stdout, cmd.Stderr = spec.Output, spec.Output
	setProcAttr(cmd)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start rie for %s: %w", spec.Name, err)
	}
	f := &Function{
		Name:   spec.Name,
		URL:    "http://" + invokeAddr + "/2015-03-31/functions/function/invocations",
		cmd:    cmd,
		exited: make(chan struct{}),
		turn:   make(chan struct{}, 1),
	}
	go func() { _ = cmd.Wait(); close(f.exited) }()
	if err := f.waitListening(ctx, invokeAddr); err != nil {
		f.Stop()
		return nil, err
	}
	return f, nil
}

// waitListening: rie binds its HTTP port before it starts the bootstrap
// (that happens on the first invocation), so an accepted connection means
// ready — once we know the listener is this rie's. If another process took
// the port first (our probe released it before rie could bind), rie exits
// and Start tries new ports; a connection to the other process must not be
// mistaken for ours.
func (f *Function) waitListening(ctx context.Context, addr string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			conn.Close()
			if listens(f.cmd.Process.Pid, addr) {
				return nil
			}
		}
		select {
		case <-f.exited:
			return fmt.Errorf("%w: %s: %v", errExited, f.Name, f.cmd.ProcessState)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("rie for %s not listening on %s after 10s", f.Name, addr)
		}
	}
}

// freePorts asks the kernel for n free loopback addresses. Each listener
// stays open until all are chosen, so the n differ; they are released
// before rie binds them, a small race that Start's retry covers.
func freePorts(n int) ([]string, error) {
	addrs := make([]string, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		defer l.Close()
		addrs = append(addrs, l.Addr().String())
	}
	return addrs, nil
}

// Stop ends rie and the bootstrap it started: SIGTERM, then SIGKILL if
// they are still there after 3s. rie puts the bootstrap in a process group
// of its own, so the bootstrap is signalled by its pid, found as rie's
// child; killing rie alone would leave the bootstrap to notice the lost
// Runtime API connection by itself. Safe to call more than once.
func (f *Function) Stop() { f.end(terminate) }

// Kill ends the bootstrap and rie at once with SIGKILL, as Lambda loses an
// execution environment mid-invocation: nothing of the pass runs after it,
// and its server connections end with the process.
func (f *Function) Kill() { f.end(os.Kill) }

// end signals rie and its bootstrap with first, then SIGKILL if they are
// still there after 3s, and waits for them.
func (f *Function) end(first os.Signal) {
	f.stopOnce.Do(func() {
		select {
		case <-f.exited:
			return
		default:
		}
		procs := []*os.Process{f.cmd.Process}
		for _, pid := range childPids(f.cmd.Process.Pid) {
			if p, err := os.FindProcess(pid); err == nil {
				procs = append(procs, p)
			}
		}
		signal := func(sig os.Signal) {
			for _, p := range procs {
				_ = p.Signal(sig)
			}
		}
		signal(first)
		select {
		case <-f.exited:
		case <-time.After(3 * time.Second):
			signal(os.Kill)
			<-f.exited
		}
	})
}

// Pid is rie's process id.
func (f *Function) Pid() int { return f.cmd.Process.Pid }

// initReport is rie's line for a finished init at --log-level info:
// "INIT REPORT(durationMs: 12.345000)" (the invoke phase's, for an init
// that already happened, follows with a duration near zero).
var initReport = regexp.MustCompile(`INIT REPORT\(durationMs: ([0-9.]+)\)`)

// InitDuration is the first init's duration in rie's output (at
// --log-level info): from the bootstrap's start to its first request for
// an event, what Lambda reports as Init Duration.
func InitDuration(output string) (time.Duration, bool) {
	m := initReport.FindStringSubmatch(output)
	if m == nil {
		return 0, false
	}
	ms, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, false
	}
	return time.Duration(ms * float64(time.Millisecond)), true
}
