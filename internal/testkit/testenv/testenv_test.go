package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseFileReadsShellAssignments(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stack.env")
	content := "# comment\n\nDATABASE_URL=postgres://u@h:1/db?sslmode=disable\nexport A=\"quoted\"\nB='single'\nnot a pair\n C = spaced \n"
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	got := parseFile(path)
	want := map[string]string{
		"DATABASE_URL": "postgres://u@h:1/db?sslmode=disable",
		"A":            "quoted",
		"B":            "single",
		"C":            "spaced",
	}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if m := parseFile(filepath.Join(t.TempDir(), "missing")); len(m) != 0 {
		t.Errorf("a missing file gave %v, want nothing", m)
	}
}

func TestLookupPrefersEnvironment(t *testing.T) {
	t.Setenv("OUTBOXKEEPER_TESTENV_PROBE", "from-env")
	if got := Lookup("OUTBOXKEEPER_TESTENV_PROBE"); got != "from-env" {
		t.Fatalf("Lookup = %q, want the environment's from-env", got)
	}
}

func TestRepoRootHoldsGoMod(t *testing.T) {
	r, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(r, "go.mod")); err != nil {
		t.Fatalf("no go.mod in %s", r)
	}
}

// skipRecorder records what Skip asked of the test instead of ending it.
type skipRecorder struct {
	testing.TB
	fatal, skipped string
}

func (r *skipRecorder) Helper()           {}
func (r *skipRecorder) Fatal(args ...any) { r.fatal = fmt.Sprint(args...) }
func (r *skipRecorder) Skip(args ...any)  { r.skipped = fmt.Sprint(args...) }

func TestSkipFailsUnderCI(t *testing.T) {
	t.Setenv("CI", "true")
	r := &skipRecorder{TB: t}
	Skip(r, "slow")
	if !strings.Contains(r.fatal, "would skip: slow") {
		t.Errorf("under CI: Fatal(%q), want it to say it would skip: slow", r.fatal)
	}
	if r.skipped != "" {
		t.Errorf("under CI: Skip(%q), want no skip", r.skipped)
	}
	t.Setenv("CI", "")
	r = &skipRecorder{TB: t}
	Skip(r, "slow")
	if r.fatal != "" {
		t.Errorf("outside CI: Fatal(%q), want no failure", r.fatal)
	}
	if r.skipped != "slow" {
		t.Errorf("outside CI: Skip(%q), want Skip(slow)", r.skipped)
	}
}
