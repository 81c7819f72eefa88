// Package stack holds the tests of the local stack's shell scripts.
package stack

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// fakeMachine is a PATH of stand-ins, so need.sh's decisions can be
// tested without touching the real packages: an `id` that answers uid,
// and (with apt) an `apt-get` that records its arguments and "installs" a
// package by writing a stand-in command for it, or fails.
type fakeMachine struct {
	bin, aptLog string
}

const (
	root    = "0"
	notRoot = "1000"
)

func newFakeMachine(t *testing.T, uid string, withApt, aptFails bool) *fakeMachine {
	t.Helper()
	m := &fakeMachine{bin: t.TempDir()}
	m.aptLog = filepath.Join(m.bin, "apt.log")
	write := func(name, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(m.bin, name), []byte("#!/bin/bash\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write("id", `[[ "$1" == -u ]] && echo `+uid)
	if !withApt {
		return m
	}
	fail := "false"
	if aptFails {
		fail = "true"
	}
	pgbin := filepath.Join(m.bin, "pgbin")
	write("apt-get", `echo "$*" >>`+m.aptLog+`
[[ "$1" == install ]] || exit 0
`+fail+` && exit 100
for p in "$@"; do
  case $p in
    pgbouncer|curl) printf '#!/bin/bash\n' >`+m.bin+`/$p; /bin/chmod +x `+m.bin+`/$p ;;
    postgresql)
      /bin/mkdir -p `+pgbin+`
      printf '#!/bin/bash\necho "initdb (PostgreSQL) 16.4"\n' >`+pgbin+`/initdb
      printf '#!/bin/bash\n' >`+pgbin+`/pg_ctl
      printf '#!/bin/bash\necho `+pgbin+`\n' >`+m.bin+`/pg_config
      /bin/chmod +x `+pgbin+`/initdb `+pgbin+`/pg_ctl `+m.bin+`/pg_config ;;
  esac
done`)
	return m
}

// need runs `source need.sh; need NAME` on m's PATH alone, with no
// directory beyond it searched for daemons, and prints what it found.
func (m *fakeMachine) need(t *testing.T, name string) (ok bool, stdout, stderr string, apt []string) {
	t.Helper()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatal(err)
	}
	script, err := filepath.Abs("need.sh")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bash, "-c", `source "$1"; need "$2" && echo "found pgbouncer=${PGBOUNCER_BIN:-} pg=${PG_BIN:-}"`, "bash", script, name)
	cmd.Env = []string{"PATH=" + m.bin, "OUTBOXKEEPER_SBIN_PATH=", "NEED_WHO=up"}
	var out, errs strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errs
	err = cmd.Run()
	if _, exit := err.(*exec.ExitError); err != nil && !exit {
		t.Fatal(err)
	}
	if log, err := os.ReadFile(m.aptLog); err == nil {
		apt = strings.Split(strings.TrimSpace(string(log)), "\n")
	}
	return err == nil, out.String(), errs.String(), apt
}

// The decisions of need.sh for a missing package, each on a machine that
// lacks it: not root, one line naming the package and how to install
// it, and no apt-get; root with apt-get, apt-get update then install,
// and the command found after; root with a failing install, or without
// apt-get, one line and a failure.
func TestNeedInstallsOnlyAsRootWithApt(t *testing.T) {
	for _, c := range []struct {
		name, pkg string
		found     string // what the success line must name
	}{
		{"pgbouncer", "pgbouncer", "pgbouncer=/"},
		{"postgres", "postgresql", "pg=/"},
		{"curl", "curl", ""},
	} {
		t.Run(c.name+"/missing, not root", func(t *testing.T) {
			m := newFakeMachine(t, notRoot, true, false)
			ok, _, stderr, apt := m.need(t, c.name)
			if ok {
				t.Fatal("need succeeded without the package")
			}
			if n := strings.Count(stderr, "\n"); n != 1 {
				t.Errorf("stderr has %d lines, want one:\n%s", n, stderr)
			}
			if !strings.Contains(stderr, "apt-get install "+c.pkg) {
				t.Errorf("stderr %q does not name the package %s and how to install it", stderr, c.pkg)
			}
			if len(apt) != 0 {
				t.Errorf("apt-get was run as a user: %q", apt)
			}
		})
		t.Run(c.name+"/missing, root, apt", func(t *testing.T) {
			m := newFakeMachine(t, root, true, false)
			ok, stdout, stderr, apt := m.need(t, c.name)
			if !ok {
				t.Fatalf("need failed as root with apt-get:\n%s", stderr)
			}
			want := []string{"update -qq", "install -y -qq --no-install-recommends " + c.pkg}
			if strings.Join(apt, "|") != strings.Join(want, "|") {
				t.Errorf("apt-get ran %q, want %q", apt, want)
			}
			if !strings.Contains(stdout, c.found) {
				t.Errorf("after the install need found %q, want %q", stdout, c.found)
			}
		})
		t.Run(c.name+"/missing, root, the install fails", func(t *testing.T) {
			m := newFakeMachine(t, root, true, true)
			ok, _, stderr, _ := m.need(t, c.name)
			if ok {
				t.Fatal("need succeeded though apt-get install failed")
			}
			if !strings.Contains(stderr, "apt-get install "+c.pkg+" failed") {
				t.Errorf("stderr %q does not say the install of %s failed", stderr, c.pkg)
			}
		})
		t.Run(c.name+"/missing, root, no apt-get", func(t *testing.T) {
			m := newFakeMachine(t, root, false, false)
			ok, _, stderr, _ := m.need(t, c.name)
			if ok {
				t.Fatal("need succeeded without the package")
			}
			if n := strings.Count(stderr, "\n"); n != 1 || !strings.Contains(stderr, c.pkg) || !strings.Contains(stderr, "package manager") {
				t.Errorf("stderr %q, want one line naming %s and the package manager", stderr, c.pkg)
			}
		})
	}
}

// What is there already is used as it is: no apt-get, even as root.
func TestNeedInstallsNothingThatIsThere(t *testing.T) {
	m := newFakeMachine(t, root, true, false)
	if err := os.WriteFile(filepath.Join(m.bin, "pgbouncer"), []byte("#!/bin/bash\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ok, stdout, stderr, apt := m.need(t, "pgbouncer")
	if !ok || !strings.Contains(stdout, "pgbouncer="+filepath.Join(m.bin, "pgbouncer")) {
		t.Errorf("need pgbouncer: ok %v, %q %q", ok, stdout, stderr)
	}
	if len(apt) != 0 {
		t.Errorf("apt-get ran for a package that is there: %q", apt)
	}
}

// A daemon outside the user's PATH (pgbouncer in /usr/sbin) is found
// where need.sh looks beyond it.
func TestNeedLooksBeyondPathForDaemons(t *testing.T) {
	m := newFakeMachine(t, notRoot, true, false)
	sbin := t.TempDir()
	if err := os.WriteFile(filepath.Join(sbin, "pgbouncer"), []byte("#!/bin/bash\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	bash, _ := exec.LookPath("bash")
	script, _ := filepath.Abs("need.sh")
	cmd := exec.Command(bash, "-c", `source "$1"; need pgbouncer && echo "$PGBOUNCER_BIN"`, "bash", script)
	cmd.Env = []string{"PATH=" + m.bin, "OUTBOXKEEPER_SBIN_PATH=" + sbin}
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != filepath.Join(sbin, "pgbouncer") {
		t.Errorf("need pgbouncer with it in the daemon path: %v %q", err, out)
	}
}
