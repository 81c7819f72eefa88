package fill

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	osexec "os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkeeper/outboxkeeper/internal/metrics"
	"github.com/outboxkeeper/outboxkeeper/internal/pg"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
)

// A fill pass in a process of its own, which a test kills with SIGKILL at
// a chosen step of taking the lease, as Lambda loses an execution
// environment: nothing of the pass runs after the kill, and its server
// connections end with the process.

// helperEnv carries a helperSpec to the test binary started as a pass.
const helperEnv = "OUTBOXKEEPER_FILL_TEST_PASS"

// helperSpec is the pass a helper process runs and where it stops.
type helperSpec struct {
	URL      string `json:"url"`
	Tick     time.Duration
	Grace    time.Duration
	Budget   time.Duration
	LeaseTTL time.Duration
	// StopAt is where the pass stops and waits to be killed: registered
	// (it found the lease held and registered as successor), handed (the
	// holder made it the owner; it has not polled since), taken (it took
	// the lease, before its first renewal); or "" to run on, saying
	// "taken" once it holds the lease.
	StopAt string
}

func TestMain(m *testing.M) {
	if spec := os.Getenv(helperEnv); spec != "" {
		os.Exit(runHelper(spec))
	}
	os.Exit(m.Run())
}

// runHelper runs one watching pass as spec says, printing "at STEP" when
// it reaches spec.StopAt (and stopping there) or, with no StopAt, "at
// taken" when it holds the lease.
func runHelper(raw string) int {
	var spec helperSpec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 2
	}
	ctx := context.Background()
	pc, err := pg.PoolConfig(ctx, pg.Login{URL: spec.URL}, pg.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 2
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 2
	}
	s, err := New(pool, Config{Grace: spec.Grace, PassBudget: spec.Budget, Tick: spec.Tick},
		Options{Options: pass.Options{Logger: slog.New(slog.NewJSONHandler(os.Stderr, nil)), Metrics: &metrics.Emitter{Function: "fill", Out: io.Discard}}, LeaseTTL: spec.LeaseTTL})
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 2
	}
	stop := func(step string) {
		fmt.Println("at " + step)
		if spec.StopAt != "" {
			select {} // until the test kills the process
		}
	}
	s.lease.OnStep = func(ev pass.LeaseStep, owner string) {
		switch {
		case ev == pass.LeaseRegistered && spec.StopAt == "registered":
			stop("registered")
		case ev == pass.LeasePolling && spec.StopAt == "handed":
			var handed bool
			if err := pool.QueryRow(ctx, `SELECT owner IS NOT DISTINCT FROM $1 FROM outbox.leases WHERE name = 'fill'`, owner).Scan(&handed); err == nil && handed {
				stop("handed")
			}
		case ev == pass.LeaseTaken && (spec.StopAt == "taken" || spec.StopAt == ""):
			stop("taken")
		}
	}
	res, err := s.RunOnce(ctx, nil)
	fmt.Println("result", res)
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	return 0
}

// passProcess is a helper process running a pass.
type passProcess struct {
	cmd   *osexec.Cmd
	lines chan string
}

// startPassProcess starts a helper process running spec.
func startPassProcess(t *testing.T, spec helperSpec) *passProcess {
	t.Helper()
	raw, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	cmd := osexec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+string(raw))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &passProcess{cmd: cmd, lines: make(chan string, 16)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("pass process stderr:\n%s", stderr.String())
		}
	})
	return p
}

// awaitStep waits until the process says it is at step.
func (p *passProcess) awaitStep(t *testing.T, step string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case line, ok := <-p.lines:
			if !ok {
				t.Fatalf("the pass process ended before %s", step)
			}
			if line == "at "+step {
				return
			}
		case <-timeout:
			t.Fatalf("the pass process never reached %s in 10s", step)
		}
	}
}

// kill ends the process with SIGKILL and waits for it.
func (p *passProcess) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = p.cmd.Wait()
}
