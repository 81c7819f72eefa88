package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testenv"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/webhooktest"
	"github.com/outboxkeeper/outboxkeeper/shared/deliver"
)

// readmeVerifier is one of the README's receiver snippets and the
// program that feeds it a request: a JSON document on stdin with the key,
// timestamp, signature and base64 body, answering true or false.
type readmeVerifier struct {
	lang, fence, interpreter, harness string
}

var readmeVerifiers = []readmeVerifier{
	{"python", "```python", "python3", `
import base64, json, sys
req = json.load(sys.stdin)
print(json.dumps(verify(req["key"].encode(), req["timestamp"], req["signature"], base64.b64decode(req["body"]))))
`},
	{"node", "```js", "node", `
const req = JSON.parse(require("node:fs").readFileSync(0, "utf8"));
console.log(JSON.stringify(verify(req.key, req.timestamp, req.signature, Buffer.from(req.body, "base64"))));
`},
}

// readmeSnippet is the first block fenced by fence after the README's
// "Verifying a webhook" paragraph: the code a receiver copies.
func readmeSnippet(t *testing.T, fence string) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "**Verifying a webhook.**")
	if !ok {
		t.Fatal("the README has no \"Verifying a webhook\" paragraph")
	}
	_, block, ok := strings.Cut(section, fence+"\n")
	if !ok {
		t.Fatalf("the README's webhook section has no %s block", fence)
	}
	code, _, ok := strings.Cut(block, "\n```")
	if !ok {
		t.Fatalf("the README's %s block is not closed", fence)
	}
	return code
}

// verifies runs v's README snippet on one request.
func (v readmeVerifier) verifies(t *testing.T, program, key, timestamp, signature string, body []byte) bool {
	t.Helper()
	in, err := json.Marshal(map[string]string{
		"key": key, "timestamp": timestamp, "signature": signature, "body": base64.StdEncoding.EncodeToString(body),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, v.interpreter, program)
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", v.lang, err, stderr.String())
	}
	var ok bool
	if err := json.Unmarshal(out, &ok); err != nil {
		t.Fatalf("%s printed %q, want true or false", v.lang, out)
	}
	return ok
}

// The README's Python and Node.js verifiers, run as written on a request
// the function really sent during a key rotation, accept it with either
// key and refuse a wrong key, a changed body and a stale timestamp.
func TestREADMEVerifiersCheckARealWebhookSignature(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	rcv := webhooktest.Start(t)
	id := hookDelivery(t, db, rcv)
	invoke(t, hookFn(t, db, rcv, secret(t, `{"current":"new-key","previous":"old-key"}`), nil))
	reqs := rcv.Requests()
	if len(reqs) != 1 {
		t.Fatalf("the receiver got %d requests, want 1", len(reqs))
	}
	req := reqs[0]
	ts, sig := req.Header.Get(deliver.HeaderTimestamp), req.Header.Get(deliver.HeaderSignature)
	t.Logf("delivery %d arrived: %s %s, %s: %s, %s: %s, body %s", id,
		deliver.HeaderDeliveryID, req.Header.Get(deliver.HeaderDeliveryID), deliver.HeaderTimestamp, ts, deliver.HeaderSignature, sig, req.Body)

	// Signed by the product's own code ten minutes ago: only the README's
	// five-minute tolerance refuses it.
	staleTS := deliver.Timestamp(time.Now().Add(-10 * time.Minute))
	staleSig := deliver.SignatureVersion + "=" + deliver.Signature([]byte("new-key"), staleTS, req.Body)
	cases := []struct {
		name, key, timestamp, signature string
		body                            []byte
		want                            bool
	}{
		{"the new key", "new-key", ts, sig, req.Body, true},
		{"the previous key", "old-key", ts, sig, req.Body, true},
		{"a wrong key", "other-key", ts, sig, req.Body, false},
		{"a changed body", "new-key", ts, sig, append(bytes.Clone(req.Body), ' '), false},
		{"a stale timestamp", "new-key", staleTS, staleSig, req.Body, false},
	}
	for _, v := range readmeVerifiers {
		t.Run(v.lang, func(t *testing.T) {
			if _, err := exec.LookPath(v.interpreter); err != nil {
				testenv.Skip(t, v.interpreter+" is not installed")
			}
			program := filepath.Join(t.TempDir(), "verify")
			if err := os.WriteFile(program, []byte(readmeSnippet(t, v.fence)+"\n"+v.harness), 0o600); err != nil {
				t.Fatal(err)
			}
			for _, c := range cases {
				got := v.verifies(t, program, c.key, c.timestamp, c.signature, c.body)
				t.Logf("%s verify() with %s: %v", v.lang, c.name, got)
				if got != c.want {
					t.Errorf("%s verify() with %s = %v, want %v", v.lang, c.name, got, c.want)
				}
			}
		})
	}
}
