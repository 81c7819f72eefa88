package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/outboxkeeper/outboxkeeper/internal/store"
	"github.com/outboxkeeper/outboxkeeper/shared/fill"
)

type skipFlags struct {
	dbFlags
	recordFlags
	to int64
}

var skipStallCommand = &command{
	name:    "skip-stall",
	summary: "the escape hatch: skip a stall the fill cannot prove, on the record",
	help: `Writes a placeholder (filled_by = 'operator') for every missing sequence from
the fill watermark up to --to, so consumers move on, and records who, when and
why in <schema>.stall_skips. The fill's watermark passes them as it passes its
own; its OperatorFilled metric counts them.

Use it only when a stall cannot end on its own soon enough: the fill proves a
gap abandoned once every transaction older than its marker has ended, so a
blocked proof usually ends when you end the session 'outboxkeeper status' shows
under BLOCKED BY. When that session cannot be ended (a replica's hot standby
feedback, a prepared transaction you may not touch, a vendor's job), skip.

What a skip never does:
  - overwrite: the insert is ON CONFLICT DO NOTHING, so nothing committed
    changes. A live writer that still holds a sequence of the range without
    having inserted it will fail with a duplicate key when it does (its
    transaction rolls back, and it must retry), which is why the sessions that
    may hold the range are shown first;
  - wait on one: a sequence a running transaction inserted but has not
    committed makes the whole skip fail after 3 s with nothing written;
  - go above the allocation head, below the watermark, or further than
    1,000,000 sequences at once.

Without --yes it only shows the range and the sessions, and refuses.

Who may run it: the schema's owner (the functions' login with migrations at
deploy), or a role set up for people with SELECT <schema>.grant_operator('oncall');
never the functions' maintainer role, which only writes what it proved.

  outboxkeeper skip-stall --to 1207 --reason "INC-42: pid 4711 idle in transaction on the replica"
  outboxkeeper skip-stall --to 1207 --reason "..." --yes`,
	flags: func(fs *flag.FlagSet) any {
		f := &skipFlags{}
		addDBFlags(fs, &f.dbFlags)
		fs.Int64Var(&f.to, "to", 0, "skip up to and including this sequence (at most the allocation head)")
		addRecordFlags(fs, &f.recordFlags)
		return f
	},
	run: runSkipStall,
}

// skipPlan is what skip-stall shows before it acts.
type skipPlan struct {
	Watermark int64 `json:"watermark"`
	Head      int64 `json:"head"`
	To        int64 `json:"to"`
	// Marker is the xid the sessions were named against: the cycle's
	// marker when it covers the range, else the next xid (every session
	// holding an xid now).
	Marker   uint64         `json:"marker"`
	Sessions []fill.Blocker `json:"sessions"`
	Operator string         `json:"operator"`
	Reason   string         `json:"reason"`
}

func runSkipStall(ctx context.Context, e *env, opts any) error {
	f := opts.(*skipFlags)
	if err := f.check(e); err != nil {
		return err
	}
	return withLogin(ctx, e, f.schema, func(l *login) error {
		q := l.bounded(&f.dbFlags)
		schema := store.MustSchema(l.schema)
		plan, err := planSkip(ctx, q, schema, f)
		if err != nil {
			return err
		}

		if !f.yes {
			if f.json {
				if err := printJSON(e.stdout, map[string]any{"done": false, "plan": plan}); err != nil {
					return err
				}
			} else if err := printPlan(e.stdout, plan); err != nil {
				return err
			}
			return refusef("nothing written: run it again with --yes to skip (%d, %d]", plan.Watermark, plan.To)
		}

		sessions, err := json.Marshal(plan.Sessions)
		if err != nil {
			return err
		}
		skip, err := store.NewSkips(schema).Skip(ctx, q, store.SkipParams{To: f.to, Reason: f.reason, Operator: f.operator, Sessions: sessions})
		if err != nil {
			return explainSkipError(err, l.schema)
		}
		if f.json {
			return printJSON(e.stdout, map[string]any{"done": true, "plan": plan, "skip": skip})
		}
		if err := printPlan(e.stdout, plan); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "\nskipped (%d, %d]: %d operator %s written", skip.FromWatermark, skip.ToSequence, skip.Written, plural(skip.Written, "placeholder", "placeholders"))
		if skip.FirstWritten != nil {
			fmt.Fprintf(e.stdout, " (%d..%d)", *skip.FirstWritten, *skip.LastWritten)
		}
		_, err = fmt.Fprintf(e.stdout, ", the rest was present\nrecorded as stall_skips id %d: %s as %s at %s, %q\nthe fill's watermark passes them at its next tick ('outboxkeeper status')\n",
			skip.ID, skip.Operator, skip.DBUser, stamp(&skip.SkippedAt), skip.Reason)
		return err
	})
}

// check trims and checks the flags, defaulting the operator to $USER.
func (f *skipFlags) check(e *env) error {
	if f.to < 1 {
		return usagef("--to: the sequence to skip up to (a positive number) is required")
	}
	return f.checkRecord(e)
}

// recordFlags are an operator action's flags for the record (why and
// who) and --yes, without which it only shows what it would do.
type recordFlags struct {
	reason, operator string
	yes              bool
}

func addRecordFlags(fs *flag.FlagSet, f *recordFlags) {
	fs.StringVar(&f.reason, "reason", "", "why, for the record (required)")
	fs.StringVar(&f.operator, "operator", "", "who, for the record (default: $USER@host; required when $USER is not set)")
	fs.BoolVar(&f.yes, "yes", false, "do it (without: show what it would do, and refuse)")
}

// checkRecord trims the flags for the record and requires a reason,
// defaulting the operator to $USER@host.
func (f *recordFlags) checkRecord(e *env) error {
	f.reason, f.operator = strings.TrimSpace(f.reason), strings.TrimSpace(f.operator)
	if f.reason == "" {
		return usagef("--reason: why, for the record, is required")
	}
	if f.operator == "" {
		if f.operator = defaultOperator(e); f.operator == "" {
			return usagef("--operator: who, for the record, is required when $USER is not set")
		}
	}
	return nil
}

// planSkip is what a skip to f.to would do, with the sessions that may
// still hold a sequence of the range, or a refusal.
func planSkip(ctx context.Context, q store.Querier, schema store.Schema, f *skipFlags) (skipPlan, error) {
	st, err := fill.ReadStatus(ctx, q, schema)
	if err != nil {
		return skipPlan{}, err
	}
	plan := skipPlan{Watermark: st.Watermark, Head: st.Head, To: f.to, Operator: f.operator, Reason: f.reason}
	switch {
	case !st.Started:
		return skipPlan{}, refusef("the fill has not anchored its watermark yet: there is no stall to skip")
	case f.to > st.Head:
		return skipPlan{}, refusef("--to %d is above the allocation head %d: it was never allocated", f.to, st.Head)
	case f.to <= st.Watermark:
		return skipPlan{}, refusef("nothing to skip: the fill watermark is already at %d", st.Watermark)
	}
	// Every writer of a sequence at or below the cycle's marker head has an
	// xid older than its marker (§3.1, §3.2); beyond it, any session with
	// an xid now may hold one.
	if c := st.Cycle; c != nil && c.Marker != nil && f.to <= c.MarkerHead {
		plan.Marker = *c.Marker
	} else if plan.Marker, err = fill.NextXID(ctx, q); err != nil {
		return skipPlan{}, err
	}
	if plan.Sessions, err = fill.Blockers(ctx, q, plan.Marker); err != nil {
		return skipPlan{}, err
	}
	return plan, nil
}

func printPlan(w io.Writer, p skipPlan) error {
	fmt.Fprintf(w, "skip (%d, %d]: an operator placeholder for every sequence in it still missing\n", p.Watermark, p.To)
	fmt.Fprintf(w, "  watermark %d, allocation head %d; for the record: %s, %q\n", p.Watermark, p.Head, p.Operator, p.Reason)
	fmt.Fprintf(w, "\nSESSIONS THAT MAY STILL HOLD THESE SEQUENCES (an xid or snapshot at or before xid %d)\n", p.Marker)
	if len(p.Sessions) == 0 {
		_, err := fmt.Fprintln(w, "  none: no running transaction can still write a sequence of the range")
		return err
	}
	if err := blockerTable(w, p.Sessions); err != nil {
		return err
	}
	_, err := fmt.Fprintln(w, "  A writer among them that later inserts a skipped sequence fails with a duplicate key\n"+
		"  (nothing committed is ever overwritten); one that already inserted one makes the skip fail.")
	return err
}

// defaultOperator is $USER@host, as the record's "who"; "" when $USER is
// not set (a container, cron, CI), where it would record nobody in
// particular.
func defaultOperator(e *env) string {
	user := strings.TrimSpace(lookup(e, "USER"))
	if user == "" {
		return ""
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		return user
	}
	return user + "@" + host
}

// explainSkipError adds what to do to the database's refusal.
func explainSkipError(err error, schema string) error {
	return explainOperatorError(err, schema, "skip a stall", "no skip_stall", "42883")
}
