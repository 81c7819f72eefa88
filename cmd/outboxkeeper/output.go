package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/outboxkeeper/outboxkeeper/shared/pass"
)

// dbFlags are the flags of every command that reads the database: the
// schema, JSON for scripts, and how long any one statement may take.
type dbFlags struct {
	schemaFlags
	json    bool
	timeout time.Duration
}

// defaultTimeout bounds the statements of one command: one that waits on
// a lock another session holds is cancelled by the server when it runs
// out, so a command never hangs on a busy database.
const defaultTimeout = 30 * time.Second

func addDBFlags(fs *flag.FlagSet, f *dbFlags) {
	addSchema(fs, &f.schemaFlags)
	fs.BoolVar(&f.json, "json", false, "print JSON for scripts instead of tables")
	addTimeout(fs, &f.timeout, defaultTimeout, "how long the command's statements may take in all (the server cancels one still running then)")
}

// The bounds of --timeout: the server takes a statement_timeout of at
// most 2^31-1 ms (24 days), and a command meant to wait longer than an
// hour on a busy database is better run again.
const (
	minTimeout = time.Second
	maxTimeout = time.Hour
)

// addTimeout declares --timeout, refused at parse time outside
// [minTimeout, maxTimeout], so a typo (720h) is a usage error naming the
// flag rather than the server's refusal of the setting.
func addTimeout(fs *flag.FlagSet, d *time.Duration, def time.Duration, usage string) {
	*d = def
	fs.Var((*timeoutValue)(d), "timeout", usage+": a `duration` from 1s to 1h")
}

type timeoutValue time.Duration

func (v *timeoutValue) String() string { return time.Duration(*v).String() }

func (v *timeoutValue) Set(s string) error {
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		return errors.New(`want a Go duration such as "30s" or "5m"`)
	case d < minTimeout || d > maxTimeout:
		return fmt.Errorf("must be between %s and %s", minTimeout, shortDuration(maxTimeout))
	}
	*v = timeoutValue(d)
	return nil
}

// addLimit adds --limit: a count of rows from 1 to max (the statement
// reads or changes at most that many), def by default; any other is
// refused as the command line is parsed.
func addLimit(fs *flag.FlagSet, n *int, def, max int, usage string) {
	*n = def
	fs.Var(&limitValue{n: n, max: max}, "limit", fmt.Sprintf("%s: a `count` from 1 to %d", usage, max))
}

type limitValue struct {
	n   *int
	max int
}

func (v *limitValue) String() string {
	if v.n == nil {
		return "0" // flag's zero value, for the help text
	}
	return strconv.Itoa(*v.n)
}

func (v *limitValue) Set(s string) error {
	n, err := strconv.Atoi(s)
	switch {
	case err != nil:
		return errors.New("want a whole number")
	case n < 1 || n > v.max:
		return fmt.Errorf("must be between 1 and %d", v.max)
	}
	*v.n = n
	return nil
}

// shortDuration is d without Go's trailing zero units (1h, not 1h0m0s).
func shortDuration(d time.Duration) string {
	s := d.String()
	s = strings.TrimSuffix(s, "0s")
	return strings.TrimSuffix(s, "0m")
}

// bounded is the login's pool with every statement behind a
// transaction-local statement_timeout of what is left of f.timeout from
// now (pass.Bounded, as the functions run theirs).
func (l *login) bounded(f *dbFlags) *pass.Bounded {
	return &pass.Bounded{DB: l.pool, Deadline: time.Now().Add(f.timeout)}
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// tableOf writes rows under header, aligned, each row's cells by line; or,
// when there are none, the line none alone.
func tableOf[T any](w io.Writer, rows []T, none string, header []string, line func(T) []string) error {
	if len(rows) == 0 {
		_, err := fmt.Fprintln(w, none)
		return err
	}
	out := make([][]string, len(rows))
	for i, r := range rows {
		out[i] = line(r)
	}
	return table(w, header, out)
}

// table writes rows under a header, aligned.
func table(w io.Writer, header []string, rows [][]string) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

// age is a duration for people: 850ms, 42.1s, 4m12s, 3h05m, 2d04h.
func age(d time.Duration) string {
	switch {
	case d < 0:
		return "-" + age(-d)
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
}

// seconds is age for a figure in seconds, "-" for none.
func seconds(s *float64) string {
	if s == nil {
		return "-"
	}
	return age(time.Duration(*s * float64(time.Second)))
}

// stamp is a time in UTC, to the second, "-" for none.
func stamp(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(time.DateTime + "Z")
}

// orDash is s, or "-" when empty.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// listed is s as a JSON list: [] for none, where a nil slice would print
// null and a script would have to tell the two apart.
func listed[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
