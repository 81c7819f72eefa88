// Command bench is `make bench`: it runs every benchmark of the
// repository (`go test -bench -json`, one package at a time), runs the
// demo without its held transaction for the end-to-end latencies, and
// writes BENCHMARKS.md at the repository root: where it ran (machine,
// load, PostgreSQL and its settings), the table of targets with what this
// run measured, every figure, and the fixes with their before and after
// (fixes.md, kept by hand).
//
// The benchmarks report their comparisons themselves (b.ReportMetric:
// ratios of medians of arms run side by side); this command only reads
// them, judges them against the targets (rows.go) and renders.
//
//	go run ./infra/cmd/bench [-benchtime 5x] [-bench REGEXP] [-short] [-demo=false] [-out BENCHMARKS.md]
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/repo"
)

func main() {
	benchtime := flag.String("benchtime", "5x", "repetitions of every benchmark's comparison (go test -benchtime)")
	benchRE := flag.String("bench", ".", "which benchmarks (go test -bench)")
	short := flag.Bool("short", false, "small datasets, as make test runs them (a quick look; the file then says so)")
	withDemo := flag.Bool("demo", true, "run the demo for row 11")
	out := flag.String("out", "", "where to write the report (default BENCHMARKS.md at the repository root)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *benchtime, *benchRE, *short, *withDemo, *out); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, benchtime, benchRE string, short, withDemo bool, out string) error {
	root, err := repo.Root()
	if err != nil {
		return err
	}
	if out == "" {
		out = filepath.Join(root, "BENCHMARKS.md")
	}
	if os.Getenv("DATABASE_URL") == "" {
		return fmt.Errorf("DATABASE_URL is not set: run `bash infra/stack/up.sh` and source .local/stack.env (make bench does both)")
	}
	started := time.Now()
	env := Env{When: started.UTC().Format("2006-01-02 15:04 UTC"), LoadBefore: loadAvg(), Benchtime: benchtime}
	env.Machine, env.Kernel, env.Go = machine()
	if env.Postgres, env.Settings, err = postgres(ctx, os.Getenv("DATABASE_URL")); err != nil {
		return err
	}
	env.PgBouncer = pgbouncerVersion()
	fmt.Fprintf(os.Stderr, "bench: %s; load %s; %s\n", env.Machine, env.LoadBefore, env.Postgres)

	args := []string{"test", "-run", "^$", "-bench", benchRE, "-benchtime", benchtime, "-count", "1", "-p", "1", "-timeout", "90m", "-json"}
	if short {
		args = append(args, "-short")
		env.Benchtime += ", -short (small datasets: not the targets' sizes)"
	}
	args = append(args, "./...")
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir, cmd.Stderr = root, os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	metrics, plans, failed, perr := Parse(stdout, os.Stderr)
	werr := cmd.Wait()
	if perr != nil {
		return perr
	}
	if werr != nil && len(failed) == 0 {
		failed = append(failed, "go test: "+werr.Error())
	}

	var demo *Demo
	if withDemo {
		if demo, err = runDemo(ctx, root); err != nil {
			failed = append(failed, "the demo: "+err.Error())
		}
	}
	env.LoadAfter = loadAvg()
	env.Duration = time.Since(started).Round(time.Second).String()

	var buf bytes.Buffer
	Render(&buf, env, metrics, plans, demo, failed)
	if err := os.WriteFile(out, buf.Bytes(), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "bench: wrote %s (%d benchmarks, %s)\n", out, len(metrics), env.Duration)
	missed := 0
	for _, r := range Rows {
		res := r.Judge(metrics, demo)
		verdict := "met"
		if !res.Met() {
			verdict, missed = "MISSED", missed+1
		}
		fmt.Printf("%2d  %-6s  %s\n", r.N, verdict, r.Work)
	}
	if len(failed) > 0 {
		return fmt.Errorf("failed: %s", strings.Join(failed, "; "))
	}
	return nil
}

// runDemo runs `make demo` on the template's schedules with no held
// transaction, and reads its summary.
func runDemo(ctx context.Context, root string) (*Demo, error) {
	dir, err := os.MkdirTemp("", "outboxkeeper-bench-demo-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "summary.json")
	cmd := exec.CommandContext(ctx, "go", "run", "./infra/cmd/demo")
	cmd.Dir, cmd.Stdout, cmd.Stderr = root, os.Stderr, os.Stderr
	cmd.Env = append(os.Environ(), "DEMO_HOLD=0", "DEMO_SUMMARY="+path, "DEMO_DATABASE=outboxkeeper_bench_demo")
	// The demo judges itself; a failed verdict still leaves its summary.
	runErr := cmd.Run()
	raw, err := os.ReadFile(path)
	if err != nil {
		if runErr != nil {
			return nil, runErr
		}
		return nil, err
	}
	var d Demo
	if err := json.Unmarshal(raw, &d); err != nil {
		return nil, err
	}
	return &d, nil
}

// machine names the CPU, its cores and the memory, the kernel and Go.
func machine() (hw, kernel, goVersion string) {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	mem := "unknown memory"
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
				if kb, err := strconv.ParseFloat(f[1], 64); err == nil {
					mem = fmt.Sprintf("%.1f GiB memory", kb/(1<<20))
				}
			}
		}
	}
	kernel = runtime.GOOS
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		kernel = "Linux " + strings.TrimSpace(string(b))
	}
	return fmt.Sprintf("%s, %d cores, %s (%s/%s)", model, runtime.NumCPU(), mem, runtime.GOOS, runtime.GOARCH), kernel, runtime.Version()
}

// loadAvg is the 1, 5 and 15 minute load averages.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], ", ")
}

// postgres is the test cluster's version and the settings that decide
// what a commit costs.
func postgres(ctx context.Context, url string) (version, settings string, err error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return "", "", fmt.Errorf("connect to DATABASE_URL: %w", err)
	}
	defer conn.Close(context.Background())
	if err := conn.QueryRow(ctx, `SELECT current_setting('server_version')`).Scan(&version); err != nil {
		return "", "", err
	}
	var parts []string
	for _, name := range []string{"fsync", "synchronous_commit", "full_page_writes", "shared_buffers", "max_connections"} {
		var v string
		if err := conn.QueryRow(ctx, `SELECT current_setting($1)`, name).Scan(&v); err != nil {
			return "", "", err
		}
		parts = append(parts, name+" = "+v)
	}
	return "PostgreSQL " + version, strings.Join(parts, ", "), nil
}

func pgbouncerVersion() string {
	for _, bin := range []string{"pgbouncer", "/usr/sbin/pgbouncer"} {
		out, err := exec.Command(bin, "-V").Output()
		if err == nil {
			return strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
		}
	}
	return "PgBouncer"
}
