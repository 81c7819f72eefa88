// Package testenv gives tests the local stack's settings: DATABASE_URL,
// AWS_ENDPOINT_URL_SQS, AWS_LAMBDA_RIE and friends.
//
// A variable set in the environment wins; otherwise the value comes from
// .local/stack.env at the repository root, which infra/stack/up.sh writes.
// That way `go test ./...` works from an IDE or a plain shell once the stack
// is up, without anyone sourcing the file first.
package testenv

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/repo"
)

// SkipVar names the variable that turns a missing stack into skipped tests
// instead of failures. CI never sets it: there a missing stack is a bug.
const SkipVar = "OUTBOXKEEPER_SKIP_STACK"

var (
	rootOnce sync.Once
	root     string
	rootErr  error

	fileOnce sync.Once
	fileVars map[string]string
)

// RepoRoot is repo.Root, found once per test process.
func RepoRoot() (string, error) {
	rootOnce.Do(func() { root, rootErr = repo.Root() })
	return root, rootErr
}

// StackFile is the path of the file that infra/stack/up.sh writes.
func StackFile() string {
	r, err := RepoRoot()
	if err != nil {
		return ""
	}
	return filepath.Join(r, ".local", "stack.env")
}

// Lookup returns the named variable from the environment, or else from
// .local/stack.env (read once per process), or "" when neither has it.
func Lookup(name string) string {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v
	}
	fileOnce.Do(func() { fileVars = parseFile(StackFile()) })
	return fileVars[name]
}

// Require returns Lookup(name) and ends the test when it is empty: t.Fatal
// naming up.sh, or t.Skip when OUTBOXKEEPER_SKIP_STACK=1.
func Require(t testing.TB, name string) string {
	t.Helper()
	v := Lookup(name)
	if v == "" {
		Missing(t, name+" is not set and not in .local/stack.env")
	}
	return v
}

// Missing ends the test because part of the local stack is absent.
func Missing(t testing.TB, what string) {
	t.Helper()
	msg := what + "; run infra/stack/up.sh (or set " + SkipVar + "=1 to skip tests that need the local stack)"
	if os.Getenv(SkipVar) == "1" {
		Skip(t, msg)
		return
	}
	t.Fatal(msg)
}

// InCI reports whether the tests run under CI: CI is set, as .ci/run
// exports it (and CI services do).
func InCI() bool { return os.Getenv("CI") != "" }

// Skip is the only way a test here skips: with reason, outside CI. Under
// CI every test must run, so a skip (from -short, OUTBOXKEEPER_SKIP_STACK
// or a cluster without prepared transactions) fails the test instead,
// naming what it would have skipped.
func Skip(t testing.TB, reason string) {
	t.Helper()
	if InCI() {
		t.Fatal("CI runs every test, but this one would skip: " + reason)
		return
	}
	t.Skip(reason)
}

// parseFile reads KEY=value lines; blank lines and # comments are ignored,
// and one pair of surrounding quotes is dropped for hand-edited files.
func parseFile(path string) map[string]string {
	vars := map[string]string{}
	f, err := os.Open(path)
	if err != nil {
		return vars
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		line = strings.TrimPrefix(line, "export ")
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
			v = v[1 : len(v)-1]
		}
		vars[k] = v
	}
	return vars
}

// Context is the test's context bounded by d: what a test that talks to
// the stack waits on, so a hung statement or invocation fails it in time
// rather than at go test's -timeout. It is cancelled when the test ends.
func Context(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}
