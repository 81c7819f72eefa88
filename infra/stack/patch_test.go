package stack

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// publishJS is the unpatched loop of fauxqs 2.4.1's
// dist/sns/actions/publish.js that patch-fauxqs.mjs replaces.
const publishJS = "function parseBatchEntries(params) {\n" +
	"    for (const idx of indices) {\n" +
	"        const prefix = `PublishBatchRequestEntries.member.${idx}`;\n" +
	"    }\n}\n"

// patchFauxqs runs patch-fauxqs.mjs over a node_modules dir holding only
// fauxqs's publish.js with body.
func patchFauxqs(t *testing.T, dir, body string) (after string, out string, err error) {
	t.Helper()
	node, lerr := exec.LookPath("node")
	if lerr != nil {
		t.Fatalf("node is not installed (the local stack needs it): %v", lerr)
	}
	file := filepath.Join(dir, "fauxqs", "dist", "sns", "actions", "publish.js")
	if body != "" {
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(node, "patch-fauxqs.mjs", dir)
	b, err := cmd.CombinedOutput()
	got, rerr := os.ReadFile(file)
	if rerr != nil {
		t.Fatal(rerr)
	}
	return string(got), string(b), err
}

// The patch makes fauxqs publish PublishBatch's entries by member number
// (the SDK sends member.10 before member.2), and applying it again, as
// every start of the stack does, changes nothing.
func TestFauxqsPatchOrdersBatchEntriesByMemberNumberOnce(t *testing.T) {
	dir := t.TempDir()
	once, out, err := patchFauxqs(t, dir, publishJS)
	if err != nil {
		t.Fatalf("patch failed: %v\n%s", err, out)
	}
	if !strings.Contains(once, "[...indices].sort((a, b) => Number(a) - Number(b))") {
		t.Fatalf("publish.js not patched:\n%s", once)
	}
	twice, out, err := patchFauxqs(t, dir, "")
	if err != nil {
		t.Fatalf("second run failed: %v\n%s", err, out)
	}
	if twice != once {
		t.Errorf("a second run changed the file:\n%s\nwant\n%s", twice, once)
	}
}

// A fauxqs whose code no longer holds the text a patch replaces (another
// release) stops the stack's start naming the patch, rather than run
// unpatched.
func TestFauxqsPatchRefusesCodeItDoesNotKnow(t *testing.T) {
	dir := t.TempDir()
	changed := strings.Replace(publishJS, "for (const idx of indices)", "for (const i of indices)", 1)
	after, out, err := patchFauxqs(t, dir, changed)
	if err == nil {
		t.Fatalf("patch succeeded on unknown code:\n%s", out)
	}
	if !strings.Contains(out, "sns-publish-batch-entry-order") {
		t.Errorf("the refusal does not name the patch: %s", out)
	}
	if after != changed {
		t.Errorf("the refused file was changed:\n%s", after)
	}
}
