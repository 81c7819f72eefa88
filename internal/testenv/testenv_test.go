package testenv

import (
	"os"
	"path/filepath"
	"testing"
)

func TestParseFile(t *testing.T) {
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
		t.Fatalf("missing file gave %v", m)
	}
}

func TestLookupPrefersEnvironment(t *testing.T) {
	t.Setenv("OUTBOXKEEPER_TESTENV_PROBE", "from-env")
	if got := Lookup("OUTBOXKEEPER_TESTENV_PROBE"); got != "from-env" {
		t.Fatalf("Lookup = %q", got)
	}
}

func TestRepoRoot(t *testing.T) {
	r, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(r, "go.mod")); err != nil {
		t.Fatalf("no go.mod in %s", r)
	}
}
