// Package lambdatest runs the functions' real bootstrap binaries under
// aws-lambda-rie and invokes them over its HTTP API, exactly as Lambda does.
//
//	bin := lambdatest.Build(t, "fill")             // ./functions/fill
//	fn := lambdatest.Start(t, bin, map[string]string{"DATABASE_URL": url})
//	out, err := fn.Invoke(ctx, []byte(`{}`))
//
// It is the testing.TB face of infra/local/rie, which does the work (the
// demo driver uses the same): here a missing stack ends the test, cleanup is
// automatic, and the function's output is kept for assertions and printed
// when the test fails. The emulator comes from AWS_LAMBDA_RIE (environment,
// else .local/stack.env, both set up by infra/stack/up.sh).
package lambdatest

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/rie"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/syncbuf"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testenv"
)

// ---------------------------------------------------------------- Build

type build struct {
	once sync.Once
	path string
	err  error
}

var builds sync.Map // normalized package path -> *build

// Build compiles a Lambda function for the host as rie.Build does and
// returns the path of its bootstrap. pkg is a function name ("fill" for
// ./functions/fill) or a package path relative to the repository root
// ("./internal/testkit/lambdatest/testdata/echo"). Each package is built once per
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
	// ends, so temp dirs would pile up. rie.Build renames into place
	// atomically, so test packages building the same function at once are
	// safe.
	out := filepath.Join(root, ".local", "lambdatest", strings.ReplaceAll(strings.TrimPrefix(rel, "./"), "/", "_"), "bootstrap")
	// No deadline: go test's -timeout bounds the whole process anyway.
	return out, rie.Build(context.Background(), root, rel, out)
}

// ---------------------------------------------------------------- Start

// Function is one running execution environment: aws-lambda-rie and the
// bootstrap it runs (see rie.Function: URL, Invoke, InvokeJSON). Like one
// Lambda execution environment it handles one invocation at a time (Invoke
// serializes); start several for concurrency.
type Function struct {
	*rie.Function
	logs *syncbuf.Buffer
}

// Start runs bootstrap under aws-lambda-rie on free loopback ports and stops
// it when the test ends. The function sees only the environment Lambda would
// give it (rie.Environment) plus env (an empty value removes a default),
// never the test process's own variables, so a setting a test forgot fails
// here as it would in AWS.
//
// Defaults besides rie's: AWS_REGION, AWS_DEFAULT_REGION, AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY and AWS_ENDPOINT_URL_SQS from the local stack (so
// nothing ever reaches real AWS). AWS_LAMBDA_FUNCTION_NAME is the package
// folder's name.
func Start(t testing.TB, bootstrap string, env map[string]string) *Function {
	t.Helper()
	bin := testenv.Lookup("AWS_LAMBDA_RIE")
	if bin == "" {
		testenv.Missing(t, "AWS_LAMBDA_RIE is not set and not in .local/stack.env")
	}
	// Checked here too so that a missing emulator skips (when asked to)
	// rather than failing like a broken start.
	if err := rie.Check(bin); err != nil {
		testenv.Missing(t, err.Error())
	}
	logs := &syncbuf.Buffer{}
	// context.Background: the start is bounded by rie's own 10s wait, and
	// the function must outlive any context of the test's making.
	f, err := rie.Start(context.Background(), rie.Spec{RIE: bin, Bootstrap: bootstrap, Env: stackEnv(env), Output: logs})
	if err != nil {
		t.Fatalf("lambdatest: start %s: %v\noutput:\n%s", bootstrap, err, logs)
	}
	fn := &Function{Function: f, logs: logs}
	t.Cleanup(func() {
		f.Stop()
		if t.Failed() {
			t.Logf("lambdatest: logs of %s:\n%s", bootstrap, fn.Logs())
		}
	})
	return fn
}

// stackEnv is the local stack's region, keys and SQS endpoint, then extra.
func stackEnv(extra map[string]string) map[string]string {
	region := or(testenv.Lookup("AWS_REGION"), "us-east-1")
	vars := map[string]string{
		"AWS_REGION":            region,
		"AWS_DEFAULT_REGION":    region,
		"AWS_ACCESS_KEY_ID":     or(testenv.Lookup("AWS_ACCESS_KEY_ID"), "test"),
		"AWS_SECRET_ACCESS_KEY": or(testenv.Lookup("AWS_SECRET_ACCESS_KEY"), "test"),
		"AWS_ENDPOINT_URL_SQS":  testenv.Lookup("AWS_ENDPOINT_URL_SQS"),
	}
	for k, v := range extra {
		vars[k] = v
	}
	return vars
}

func or(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// Logs returns everything the emulator and the function wrote so far: the
// function's JSON log lines interleaved with rie's START/END/REPORT lines.
func (f *Function) Logs() string { return f.logs.String() }

// AwaitLogs waits until cond holds for the output so far, or logWait
// passes, and returns the output then (syncbuf.Buffer.Await: a line the
// function wrote before it answered may land after Invoke returns).
func (f *Function) AwaitLogs(cond func(logs string) bool) string {
	return f.logs.Await(cond, logWait)
}

// logWait bounds AwaitLogs: far beyond a pipe's latency, short enough
// that a line that never comes fails the test quickly.
const logWait = 10 * time.Second

// JSONLines returns the lines of logs that parse as JSON objects, i.e. the
// function's structured log records.
func JSONLines(logs string) []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(logs, "\n") {
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
