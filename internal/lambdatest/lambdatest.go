// Package lambdatest runs the functions' real bootstrap binaries under
// aws-lambda-rie and invokes them over its HTTP API, exactly as Lambda does.
//
//	bin := lambdatest.Build(t, "fill")             // ./functions/fill
//	fn := lambdatest.Start(t, bin, map[string]string{"DATABASE_URL": url})
//	out, err := fn.Invoke(ctx, []byte(`{}`))
//
// The emulator comes from AWS_LAMBDA_RIE (environment, else .local/stack.env,
// both set up by infra/stack/up.sh).
package lambdatest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxkeeper/outboxkeeper/internal/testenv"
)

// ---------------------------------------------------------------- Build

type build struct {
	once sync.Once
	path string
	err  error
}

var builds sync.Map // normalized package path -> *build

// Build compiles a Lambda function for the host (tests run the binary here,
// not on arm64 as deployed) with the deploy build's lambda.norpc tag, and
// returns the path of
// its bootstrap. pkg is a function name ("fill" for ./functions/fill) or a
// package path relative to the repository root
// ("./internal/lambdatest/testdata/echo"). Each package is built once per
// test process and shared by every test that asks for it.
func Build(t testing.TB, pkg string) string {
	t.Helper()
	rel := normalize(pkg)
	v, _ := builds.LoadOrStore(rel, &build{})
	b := v.(*build)
	b.once.Do(func() { b.path, b.err = goBuild(rel) })
	if b.err != nil {
		t.Fatalf("lambdatest: build %s: %v", rel, b.err)
	}
	return b.path
}

func normalize(pkg string) string {
	pkg = strings.TrimSuffix(filepath.ToSlash(pkg), "/")
	switch {
	case !strings.Contains(pkg, "/"):
		return "./functions/" + pkg
	case strings.HasPrefix(pkg, "./"):
		return pkg
	default:
		return "./" + pkg
	}
}

func goBuild(rel string) (string, error) {
	root, err := testenv.RepoRoot()
	if err != nil {
		return "", err
	}
	// Binaries go to .local/lambdatest/<pkg>/ rather than a temp dir: a build
	// is shared by all tests of a process and no hook runs when the process
	// ends, so temp dirs would pile up. Each process links to its own temp
	// name and renames it into place; rename is atomic, so test packages
	// building the same function in parallel never see a half-written file.
	dir := filepath.Join(root, ".local", "lambdatest", strings.ReplaceAll(strings.TrimPrefix(rel, "./"), "/", "_"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(dir, "bootstrap-*")
	if err != nil {
		return "", err
	}
	tmp.Close()
	defer os.Remove(tmp.Name()) // no-op after the rename
	cmd := exec.Command("go", "build", "-tags", "lambda.norpc", "-o", tmp.Name(), rel)
	cmd.Dir = root
	// Host OS/arch whatever the caller's GOOS/GOARCH say: the binary runs
	// here. CGO off as in the deployed build, so both link the same way.
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+runtime.GOOS, "GOARCH="+runtime.GOARCH)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("%v\n%s", err, out)
	}
	final := filepath.Join(dir, "bootstrap")
	if err := os.Rename(tmp.Name(), final); err != nil {
		return "", err
	}
	return final, nil
}

// ---------------------------------------------------------------- Start

// Function is one running execution environment: aws-lambda-rie and the
// bootstrap it runs. Like one Lambda execution environment it handles one
// invocation at a time (Invoke serializes); start several for concurrency.
type Function struct {
	// URL is the invocation endpoint.
	URL string

	cmd  *exec.Cmd
	logs *syncBuffer
	done chan struct{} // closed when the emulator exits
	mu   sync.Mutex    // one invocation at a time, as rie demands
}

// Start runs bootstrap under aws-lambda-rie on free loopback ports and stops
// it when the test ends. The function sees only the environment Lambda would
// give it: the defaults below plus env (an empty value removes a default),
// never the test process's own variables, so a setting a test forgot fails
// here as it would in AWS.
//
// Defaults: AWS_REGION, AWS_DEFAULT_REGION, AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY and AWS_ENDPOINT_URL_SQS from the local stack (so
// nothing ever reaches real AWS), AWS_LAMBDA_LOG_FORMAT=JSON (the template's
// LoggingConfig), AWS_LAMBDA_FUNCTION_TIMEOUT=30 (seconds; sets the
// context deadline), AWS_LAMBDA_FUNCTION_NAME from the package folder.
func Start(t testing.TB, bootstrap string, env map[string]string) *Function {
	t.Helper()
	rie := testenv.Lookup("AWS_LAMBDA_RIE")
	if rie == "" {
		testenv.Missing(t, "AWS_LAMBDA_RIE is not set and not in .local/stack.env")
	}
	if st, err := os.Stat(rie); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		testenv.Missing(t, fmt.Sprintf("aws-lambda-rie not found at %s", rie))
	}

	// Free ports can be taken between our probe and rie's bind by another
	// test process; a lost race shows up as an early exit, so retry.
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		f, err := start(rie, bootstrap, buildEnv(bootstrap, env))
		if err == nil {
			t.Cleanup(func() {
				f.stop()
				if t.Failed() {
					t.Logf("lambdatest: logs of %s:\n%s", bootstrap, f.Logs())
				}
			})
			return f
		}
		lastErr = err
	}
	t.Fatalf("lambdatest: start %s: %v", bootstrap, lastErr)
	return nil
}

func buildEnv(bootstrap string, extra map[string]string) []string {
	vars := map[string]string{
		// PATH and TMPDIR only: the runtime needs them, nothing else leaks.
		"PATH":                        os.Getenv("PATH"),
		"TMPDIR":                      os.TempDir(),
		"AWS_REGION":                  or(testenv.Lookup("AWS_REGION"), "us-east-1"),
		"AWS_DEFAULT_REGION":          or(testenv.Lookup("AWS_REGION"), "us-east-1"),
		"AWS_ACCESS_KEY_ID":           or(testenv.Lookup("AWS_ACCESS_KEY_ID"), "test"),
		"AWS_SECRET_ACCESS_KEY":       or(testenv.Lookup("AWS_SECRET_ACCESS_KEY"), "test"),
		"AWS_ENDPOINT_URL_SQS":        testenv.Lookup("AWS_ENDPOINT_URL_SQS"),
		"AWS_LAMBDA_LOG_FORMAT":       "JSON",
		"AWS_LAMBDA_FUNCTION_TIMEOUT": "30",
		"AWS_LAMBDA_FUNCTION_NAME":    filepath.Base(filepath.Dir(bootstrap)),
	}
	for k, v := range extra {
		vars[k] = v
	}
	out := make([]string, 0, len(vars))
	for k, v := range vars {
		if v != "" {
			out = append(out, k+"="+v)
		}
	}
	return out
}

func or(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

func start(rie, bootstrap string, env []string) (*Function, error) {
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	f := &Function{
		URL:  "http://" + addr + "/2015-03-31/functions/function/invocations",
		logs: &syncBuffer{},
		done: make(chan struct{}),
	}
	// --runtime-api-address: rie's Runtime API (which the bootstrap polls)
	// defaults to 127.0.0.1:9001, so two emulators would collide without it.
	f.cmd = exec.Command(rie,
		"--log-level", "error",
		"--runtime-interface-emulator-address", addr,
		"--runtime-api-address", fmt.Sprintf("127.0.0.1:%d", ports[1]),
		bootstrap)
	f.cmd.Env = env
	f.cmd.Dir = filepath.Dir(bootstrap) // Lambda runs from the task folder
	f.cmd.Stdout = f.logs               // one writer: one pipe, lines stay in order
	f.cmd.Stderr = f.logs
	setProcAttr(f.cmd)
	if err := f.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _ = f.cmd.Wait(); close(f.done) }()

	// rie binds its HTTP port before it starts the bootstrap (that happens on
	// the first invocation), so an accepted connection means ready.
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-f.done:
			return nil, fmt.Errorf("aws-lambda-rie exited at start: %s", f.Logs())
		default:
		}
		if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
			c.Close()
			return f, nil
		}
		if time.Now().After(deadline) {
			f.stop()
			return nil, fmt.Errorf("aws-lambda-rie not listening on %s after 10s: %s", addr, f.Logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		// Held open until all are chosen so the n ports differ.
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// stop kills the emulator. The bootstrap (rie puts it in a process group of
// its own) exits by itself once its Runtime API connection drops.
func (f *Function) stop() {
	select {
	case <-f.done:
		return
	default:
	}
	_ = f.cmd.Process.Kill()
	select {
	case <-f.done:
	case <-time.After(5 * time.Second):
	}
}

// Logs returns everything the emulator and the function wrote so far: the
// function's JSON log lines interleaved with rie's START/END/REPORT lines.
func (f *Function) Logs() string { return f.logs.String() }

// JSONLogs returns the lines of Logs that parse as JSON objects, i.e. the
// function's structured log records.
func (f *Function) JSONLogs() []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(f.Logs(), "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// ---------------------------------------------------------------- Invoke

// Error is a function error: the Lambda error object the runtime reported.
type Error struct {
	Message string   `json:"errorMessage"`
	Type    string   `json:"errorType"`
	Trace   []string `json:"stackTrace,omitempty"`
}

func (e *Error) Error() string { return fmt.Sprintf("lambda function error %s: %s", e.Type, e.Message) }

// Invoke sends one synchronous invocation and returns the response body. It
// fails on a non-200 status, a timed-out invocation, or a Lambda error object
// (then the error is an *Error and the body is returned too).
func (f *Function) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.URL, bytes.NewReader(payload))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("invoke: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("invoke: read response: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return body, fmt.Errorf("invoke: HTTP %d: %s", resp.StatusCode, body)
	}
	// rie answers a timeout with 200 and this plain text, not an error object.
	if bytes.HasPrefix(body, []byte("Task timed out")) {
		return body, fmt.Errorf("invoke: %s", body)
	}
	if fe := asLambdaError(body); fe != nil {
		return body, fe
	}
	return body, nil
}

// InvokeJSON marshals in, invokes, and unmarshals the response into out
// (skipped when out is nil).
func (f *Function) InvokeJSON(ctx context.Context, in, out any) error {
	payload, err := json.Marshal(in)
	if err != nil {
		return err
	}
	body, err := f.Invoke(ctx, payload)
	if err != nil {
		return err
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("invoke: decode response %s: %w", body, err)
	}
	return nil
}

// asLambdaError recognizes the runtime's error object. Both keys must be
// present: a handler's own output may legitimately carry one of them.
func asLambdaError(body []byte) *Error {
	var probe map[string]json.RawMessage
	if json.Unmarshal(body, &probe) != nil {
		return nil
	}
	_, hasMsg := probe["errorMessage"]
	_, hasType := probe["errorType"]
	if !hasMsg || !hasType {
		return nil
	}
	var e Error
	if json.Unmarshal(body, &e) != nil {
		return nil
	}
	return &e
}

// IsFunctionError reports whether err is a Lambda function error.
func IsFunctionError(err error) bool {
	var fe *Error
	return errors.As(err, &fe)
}

// syncBuffer is a bytes.Buffer safe for the exec pipe goroutine and readers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
