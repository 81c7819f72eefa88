package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/cfn"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/lambdatest"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/stall"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testenv"
	migrate "github.com/outboxkeeper/outboxkeeper/shared/migrations"
)

// put is one request that reached the stand-in for the pre-signed URL.
type put struct {
	Method, Path, RawQuery string
	ContentType            []string // the header's values; none is what S3's signature wants
	ContentLength          int64
	Body                   string
}

// responseURL stands in for the pre-signed S3 URL CloudFormation sends:
// it keeps every request and answers 200, as S3 does.
type responseURL struct {
	srv  *httptest.Server
	mu   sync.Mutex
	puts []put
}

func newResponseURL(t *testing.T) *responseURL {
	r := &responseURL{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.puts = append(r.puts, put{Method: req.Method, Path: req.URL.EscapedPath(), RawQuery: req.URL.RawQuery,
			ContentType: req.Header.Values("Content-Type"), ContentLength: req.ContentLength, Body: string(body)})
		r.mu.Unlock()
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *responseURL) all() []put {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]put(nil), r.puts...)
}

// event reads a sample event from events/ (what CloudFormation sends),
// points its ResponseURL at r — same path and signed query — and sets the
// schema it names.
func (r *responseURL) event(t *testing.T, kind, schema string) (cfn.Event, []byte) {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "events", "custom-resource-"+kind+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	signed, err := url.Parse(doc["ResponseURL"].(string))
	if err != nil {
		t.Fatal(err)
	}
	local, _ := url.Parse(r.srv.URL)
	signed.Scheme, signed.Host = local.Scheme, local.Host
	doc["ResponseURL"] = signed.String()
	doc["ResourceProperties"].(map[string]any)["OutboxSchema"] = schema
	payload, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	var ev cfn.Event
	if err := json.Unmarshal(payload, &ev); err != nil {
		t.Fatal(err)
	}
	return ev, payload
}

// logStream is what Lambda sets AWS_LAMBDA_LOG_STREAM_NAME to; a failure's
// Reason points there.
const logStream = "2026/01/01/[$LATEST]0123456789abcdef0123456789abcdef"

// start runs the real bootstrap under aws-lambda-rie with env.
func start(t *testing.T, env map[string]string) *lambdatest.Function {
	t.Helper()
	env["AWS_LAMBDA_LOG_STREAM_NAME"] = logStream
	// The template's timeout for this function.
	env["AWS_LAMBDA_FUNCTION_TIMEOUT"] = "300"
	return lambdatest.Start(t, lambdatest.Build(t, "migrate"), env)
}

// invoke sends payload as CloudFormation's asynchronous invocation would
// and returns the one PUT it caused.
func invoke(t *testing.T, fn *lambdatest.Function, r *responseURL, payload []byte) put {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	before := len(r.all())
	out, err := fn.Invoke(ctx, payload)
	if err != nil {
		t.Fatalf("invoke: %v\n%s", err, out)
	}
	puts := r.all()[before:]
	if len(puts) != 1 {
		t.Fatalf("%d PUTs to the response URL, want 1", len(puts))
	}
	return puts[0]
}

// want is the exact body CloudFormation expects, field for field.
func want(ev cfn.Event, status, physicalID, reason string, data map[string]string) string {
	b := fmt.Sprintf(`{"Status":%q,"RequestId":%q,"LogicalResourceId":%q,"StackId":%q,"PhysicalResourceId":%q`,
		status, ev.RequestID, ev.LogicalResourceID, ev.StackID, physicalID)
	if reason != "" {
		reason, _ := json.Marshal(reason)
		b += `,"Reason":` + string(reason)
	}
	if data != nil {
		d, _ := json.Marshal(data)
		b += `,"Data":` + string(d)
	}
	return b + "}"
}

// checkPUT asserts how the response was sent: a PUT to the pre-signed
// URL's own path and query, no Content-Type (the signature covers none),
// and a Content-Length.
func checkPUT(t *testing.T, p put, ev cfn.Event) {
	t.Helper()
	signed, _ := url.Parse(ev.ResponseURL)
	if p.Method != http.MethodPut {
		t.Errorf("method %s, want PUT", p.Method)
	}
	if p.Path != signed.EscapedPath() {
		t.Errorf("path %s, want the pre-signed %s", p.Path, signed.EscapedPath())
	}
	if p.RawQuery != signed.RawQuery {
		t.Errorf("query %s, want the pre-signed %s", p.RawQuery, signed.RawQuery)
	}
	if len(p.ContentType) != 0 {
		t.Errorf("Content-Type %q sent; the pre-signed URL's signature covers none", p.ContentType)
	}
	if p.ContentLength != int64(len(p.Body)) {
		t.Errorf("Content-Length %d, body %d bytes", p.ContentLength, len(p.Body))
	}
}

// Create applies every migration and answers SUCCESS; Update (a new
// build) applies what is new, here nothing; Delete answers SUCCESS and
// leaves every table where it was.
func TestCreateUpdateDeleteUnderRIE(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	r := newResponseURL(t)
	fn := start(t, map[string]string{"DATABASE_URL": db.URL, "OUTBOX_SCHEMA": "deployed"})
	latest := migrate.Latest()
	all, err := migrate.Load("deployed")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	ev, payload := r.event(t, "create", "deployed")
	p := invoke(t, fn, r, payload)
	checkPUT(t, p, ev)
	if w := want(ev, "SUCCESS", "outboxkeeper-migrations-deployed", "", map[string]string{"Applied": fmt.Sprint(len(all)), "SchemaVersion": latest.Name}); p.Body != w {
		t.Errorf("Create's response:\n got %s\nwant %s", p.Body, w)
	}
	if err := migrate.Check(ctx, db.Pool, "deployed"); err != nil {
		t.Errorf("the schema after Create: %v", err)
	}

	ev, payload = r.event(t, "update", "deployed")
	p = invoke(t, fn, r, payload)
	checkPUT(t, p, ev)
	if w := want(ev, "SUCCESS", ev.PhysicalResourceID, "", map[string]string{"Applied": "0", "SchemaVersion": latest.Name}); p.Body != w {
		t.Errorf("Update's response:\n got %s\nwant %s", p.Body, w)
	}

	if _, err := db.Pool.Exec(ctx, `SELECT deployed.publish('kept', '{}')`); err != nil {
		t.Fatal(err)
	}
	ev, payload = r.event(t, "delete", "deployed")
	p = invoke(t, fn, r, payload)
	checkPUT(t, p, ev)
	if w := want(ev, "SUCCESS", ev.PhysicalResourceID, "", nil); p.Body != w {
		t.Errorf("Delete's response:\n got %s\nwant %s", p.Body, w)
	}
	var events int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM deployed.events`).Scan(&events); err != nil || events != 1 {
		t.Errorf("after Delete: deployed.events has %d rows (%v), want the 1 published before", events, err)
	}
}

// A failure is FAILED with the database's own error as the Reason, which
// fails the deployment; the migrations' one transaction rolled back.
func TestDatabaseErrorFailsTheDeployment(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	// Someone's table where 0001 creates events.
	if _, err := db.Pool.Exec(ctx, `CREATE SCHEMA taken; CREATE TABLE taken.events (id int)`); err != nil {
		t.Fatal(err)
	}
	r := newResponseURL(t)
	fn := start(t, map[string]string{"DATABASE_URL": db.URL, "OUTBOX_SCHEMA": "taken"})
	ev, payload := r.event(t, "create", "taken")
	p := invoke(t, fn, r, payload)
	checkPUT(t, p, ev)
	reason := `outboxkeeper could not migrate schema taken: migrate: schema taken already exists in database ` + db.Name +
		` and is not an outboxkeeper schema: it holds 1 object(s) (table events), and no taken.schema_migrations of ours; nothing was changed. ` +
		`Choose another outbox schema (OUTBOX_SCHEMA, or --schema), or move what that schema holds elsewhere. (log stream ` + logStream + `)`
	if w := want(ev, "FAILED", "outboxkeeper-migrations-taken", reason, nil); p.Body != w {
		t.Errorf("response:\n got %s\nwant %s", p.Body, w)
	}
	var recorded bool
	if err := db.Pool.QueryRow(ctx, `SELECT to_regclass('taken.schema_migrations') IS NOT NULL`).Scan(&recorded); err != nil || recorded {
		t.Errorf("taken.schema_migrations exists after the failure (%v): the transaction did not roll back", err)
	}
}

// A bad setting fails Create naming the variable, and a Delete — the
// rollback of that failed Create — still succeeds, without a database.
func TestMisconfiguredCreateFailsAndDeleteSucceeds(t *testing.T) {
	t.Parallel()
	r := newResponseURL(t)
	fn := start(t, map[string]string{"DATABASE_URL": "postgres://nobody@127.0.0.1:1/nowhere", "OUTBOX_SCHEMA": "Not-A-Schema"})
	ev, payload := r.event(t, "create", "Not-A-Schema")
	p := invoke(t, fn, r, payload)
	checkPUT(t, p, ev)
	var body cfn.Response
	if err := json.Unmarshal([]byte(p.Body), &body); err != nil {
		t.Fatal(err)
	}
	if body.Status != cfn.StatusFailed {
		t.Errorf("Status %s, want FAILED", body.Status)
	}
	if !strings.Contains(body.Reason, `OUTBOX_SCHEMA="Not-A-Schema"`) {
		t.Errorf("Reason %q does not name the variable", body.Reason)
	}

	ev, payload = r.event(t, "delete", "Not-A-Schema")
	p = invoke(t, fn, r, payload)
	if w := want(ev, "SUCCESS", ev.PhysicalResourceID, "", nil); p.Body != w {
		t.Errorf("Delete's response:\n got %s\nwant %s", p.Body, w)
	}
}

// Delete never logs in: a stack whose database is gone still deletes.
func TestDeleteNeedsNoDatabase(t *testing.T) {
	t.Parallel()
	r := newResponseURL(t)
	fn := start(t, map[string]string{"DATABASE_URL": "postgres://nobody@127.0.0.1:1/nowhere"})
	ev, payload := r.event(t, "delete", "outbox")
	p := invoke(t, fn, r, payload)
	if w := want(ev, "SUCCESS", ev.PhysicalResourceID, "", nil); p.Body != w {
		t.Errorf("Delete's response:\n got %s\nwant %s", p.Body, w)
	}
}

// A ResponseURL that accepts and never answers, under the real runtime
// with a short timeout: the PUT gives up before the deadline, so the
// invocation fails on its own (Lambda retries it) with its log line
// written, instead of being cut off at the deadline with none.
func TestSilentResponseURLUnderRIEStillLogs(t *testing.T) {
	t.Parallel()
	r := &responseURL{srv: stall.Server(t)}
	env := map[string]string{"DATABASE_URL": "postgres://nobody@127.0.0.1:1/nowhere"}
	env["AWS_LAMBDA_LOG_STREAM_NAME"] = logStream
	env["AWS_LAMBDA_FUNCTION_TIMEOUT"] = "4"
	fn := lambdatest.Start(t, lambdatest.Build(t, "migrate"), env)
	_, payload := r.event(t, "delete", "outbox")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := fn.Invoke(ctx, payload)
	if err == nil {
		t.Fatalf("the invocation succeeded without an answer reaching CloudFormation: %s", out)
	}
	if strings.Contains(err.Error()+string(out), "timed out") {
		t.Errorf("the invocation ran into its timeout: %v %s", err, out)
	}
	logs := fn.AwaitLogs(func(l string) bool { return strings.Contains(l, `"message":"migrate Delete"`) })
	var line map[string]any
	for _, l := range lambdatest.JSONLines(logs) {
		if l["message"] == "migrate Delete" {
			line = l
		}
	}
	if line == nil {
		t.Fatalf("no log line for the request:\n%s", logs)
	}
	if line["responded"] != false || !strings.Contains(fmt.Sprint(line["response_error"]), "no answer within") {
		t.Errorf("log line responded=%v response_error=%v, want false and no answer within ...", line["responded"], line["response_error"])
	}
}

// rollbackEvent is the Update CloudFormation sends when it rolls a failed
// deployment back: the previous build's properties (CodeVersion :2) as
// ResourceProperties, the failed one's (:3) as OldResourceProperties.
func (r *responseURL) rollbackEvent(t *testing.T, schema string) (cfn.Event, []byte) {
	t.Helper()
	ev, _ := r.event(t, "update", schema)
	ev.ResourceProperties, ev.OldResourceProperties = ev.OldResourceProperties, ev.ResourceProperties
	ev.OldResourceProperties["OutboxSchema"] = schema
	payload, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	return ev, payload
}

// schemaMigrations is the schema's record, row for row.
func schemaMigrations(t *testing.T, db *testdb.DB, schema string) string {
	t.Helper()
	return testdb.Scalar[string](t, db.Pool, `SELECT coalesce(string_agg(name || ' ' || checksum || ' ' || applied_at, E'\n' ORDER BY name), '') FROM `+schema+`.schema_migrations`)
}

// A rollback Update applies nothing and answers SUCCESS with the version
// the schema is at: after a later resource failed, the schema stays at the
// newer version; after the migration itself failed (here: the newest
// migration not recorded), it stays behind rather than being tried again.
func TestRollbackUpdateAppliesNothingUnderRIE(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	r := newResponseURL(t)
	fn := start(t, map[string]string{"DATABASE_URL": db.URL, "OUTBOX_SCHEMA": "rolled"})
	all, err := migrate.Load("rolled")
	if err != nil {
		t.Fatal(err)
	}
	latest, previous := all[len(all)-1], all[len(all)-2]
	_, payload := r.event(t, "create", "rolled")
	if p := invoke(t, fn, r, payload); !strings.Contains(p.Body, `"Status":"SUCCESS"`) {
		t.Fatalf("Create: %s", p.Body)
	}

	t.Run("after a later failure", func(t *testing.T) {
		before := schemaMigrations(t, db, "rolled")
		ev, payload := r.rollbackEvent(t, "rolled")
		p := invoke(t, fn, r, payload)
		checkPUT(t, p, ev)
		if w := want(ev, "SUCCESS", ev.PhysicalResourceID, "", map[string]string{"Applied": "0", "SchemaVersion": latest.Name}); p.Body != w {
			t.Errorf("the rollback's response:\n got %s\nwant %s", p.Body, w)
		}
		if after := schemaMigrations(t, db, "rolled"); after != before {
			t.Errorf("the rollback changed schema_migrations:\nbefore %s\nafter  %s", before, after)
		}
	})

	t.Run("after the migration failed", func(t *testing.T) {
		if _, err := db.Pool.Exec(context.Background(), `DELETE FROM rolled.schema_migrations WHERE name = $1`, latest.Name); err != nil {
			t.Fatal(err)
		}
		before := schemaMigrations(t, db, "rolled")
		ev, payload := r.rollbackEvent(t, "rolled")
		p := invoke(t, fn, r, payload)
		if w := want(ev, "SUCCESS", ev.PhysicalResourceID, "", map[string]string{"Applied": "0", "SchemaVersion": previous.Name}); p.Body != w {
			t.Errorf("the rollback's response:\n got %s\nwant %s", p.Body, w)
		}
		if after := schemaMigrations(t, db, "rolled"); after != before {
			t.Errorf("the rollback applied a migration:\nbefore %s\nafter  %s", before, after)
		}
	})
}
