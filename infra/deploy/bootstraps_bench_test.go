package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/benchkit"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/lambdatest"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/rie"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/syncbuf"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testenv"
)

// functions are the template's functions by their folder under
// functions/, with the Makefile target sam build runs for each.
var functions = []struct{ name, target string }{
	{"fill", "build-FillFunction"},
	{"sweep", "build-SweepFunction"},
	{"compensate", "build-CompensateFunction"},
	{"prune", "build-PruneFunction"},
	{"deliver", "build-DeliverFunction"},
	{"relay", "build-RelayFunction"},
	{"migrate", "build-MigrateFunction"},
}

// BenchmarkBinarySize builds every function as `sam build` does — the
// Makefile's build-<Function> target into an ARTIFACTS_DIR of its own
// (linux/arm64, stripped, LAMBDA_FLAGS) — and reports each bootstrap's
// size. Target: each at most 12 MB.
func BenchmarkBinarySize(b *testing.B) {
	root, err := testenv.RepoRoot()
	if err != nil {
		b.Fatal(err)
	}
	// Once: a build is deterministic, and the loop below only satisfies
	// the benchmark protocol.
	sizes := map[string]int64{}
	{
		for _, f := range functions {
			dir := b.TempDir()
			cmd := exec.Command("make", "--no-print-directory", "-C", root, f.target, "ARTIFACTS_DIR="+dir)
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("make %s: %v\n%s", f.target, err, out)
			}
			st, err := os.Stat(filepath.Join(dir, "bootstrap"))
			if err != nil {
				b.Fatal(err)
			}
			sizes[f.name] = st.Size()
		}
	}
	for b.Loop() {
	}
	var largest int64
	for _, f := range functions {
		b.ReportMetric(float64(sizes[f.name]), f.name+"-bytes")
		largest = max(largest, sizes[f.name])
	}
	b.ReportMetric(float64(largest), "largest-bytes")
}

// BenchmarkColdStart starts each function's real bootstrap (built for this
// machine with the Lambda build tag) under aws-lambda-rie, in a new
// process every time, and sends it one invocation that has little to do:
// bounded fill, sweep, prune, deliver and relay passes on an empty outbox, an
// empty SQS batch, a migrations Update that finds nothing to apply. Each
// init connects to PostgreSQL and checks the schema version, as on
// Lambda. Reported per function: the init as rie reports it (process start
// to the first request for an event: Lambda's Init Duration) and process
// start to the first response, medians; the functions alternate. Target:
// init ≤ 30 ms.
func BenchmarkColdStart(b *testing.B) {
	rieBin := testenv.Lookup("AWS_LAMBDA_RIE")
	if rieBin == "" {
		testenv.Missing(b, "AWS_LAMBDA_RIE is not set and not in .local/stack.env")
	}
	db := testdb.New(b)
	// Where the migrate function's answer goes (CloudFormation's S3 URL).
	answers := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	b.Cleanup(answers.Close)
	events := map[string][]byte{
		"fill": []byte(`{}`), "sweep": []byte(`{}`), "prune": []byte(`{}`), "deliver": []byte(`{}`), "relay": []byte(`{}`),
		"compensate": []byte(`{"Records":[]}`),
		"migrate":    updateEvent(b, answers.URL),
	}
	env := map[string]string{
		"DATABASE_URL": db.URL, "FILL_WATCH": "false", "DELIVER_WATCH": "false", "RELAY_WATCH": "false",
		// The relay's target is only parsed at init: an empty outbox sends nothing.
		"RELAY_TARGET": "https://sqs.us-east-1.amazonaws.com/123456789012/cold-start",
		"AWS_REGION":   "us-east-1", "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
		"AWS_ENDPOINT_URL_SQS": testenv.Lookup("AWS_ENDPOINT_URL_SQS"),
	}
	initMS, firstMS := map[string][]float64{}, map[string][]float64{}
	var arms []benchkit.Arm
	for _, f := range functions {
		bin := lambdatest.Build(b, f.name)
		arms = append(arms, benchkit.Arm{Name: f.name, Run: func() time.Duration {
			out := &syncbuf.Buffer{}
			fn, err := rie.Start(context.Background(), rie.Spec{RIE: rieBin, Bootstrap: bin, Name: f.name, Env: env, Output: out, LogLevel: "info"})
			if err != nil {
				b.Fatalf("start %s: %v", f.name, err)
			}
			defer fn.Stop()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var invokeErr error
			first := benchkit.Timed(func() { _, invokeErr = fn.Invoke(ctx, events[f.name]) })
			if invokeErr != nil {
				b.Fatalf("%s: first invocation: %v\n%s", f.name, invokeErr, out)
			}
			logs := out.Await(func(s string) bool { _, ok := rie.InitDuration(s); return ok }, 10*time.Second)
			init, ok := rie.InitDuration(logs)
			if !ok {
				b.Fatalf("%s: rie reported no init duration within 10 s of the answer:\n%s", f.name, logs)
			}
			initMS[f.name] = append(initMS[f.name], float64(init)/1e6)
			firstMS[f.name] = append(firstMS[f.name], float64(first)/1e6)
			return init
		}})
	}
	benchkit.Repeat(b, arms...)
	var slowest float64
	for _, f := range functions {
		b.ReportMetric(benchkit.Median(initMS[f.name]), f.name+"-init-ms")
		b.ReportMetric(benchkit.Median(firstMS[f.name]), f.name+"-first-response-ms")
		slowest = max(slowest, benchkit.Median(initMS[f.name]))
	}
	b.ReportMetric(slowest, "slowest-init-ms")
}

// updateEvent is the sample Update from events/, answered at base.
func updateEvent(b *testing.B, base string) []byte {
	root, err := testenv.RepoRoot()
	if err != nil {
		b.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "events", "custom-resource-update.json"))
	if err != nil {
		b.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		b.Fatal(err)
	}
	u, err := url.Parse(fmt.Sprint(doc["ResponseURL"]))
	if err != nil {
		b.Fatal(err)
	}
	local, _ := url.Parse(base)
	u.Scheme, u.Host = local.Scheme, local.Host
	doc["ResponseURL"] = u.String()
	out, err := json.Marshal(doc)
	if err != nil {
		b.Fatal(err)
	}
	return out
}
