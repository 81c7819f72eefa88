package main

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/outboxkeeper/outboxkeeper/internal/store"
)

var deadCommand = &command{
	name:    "dead",
	summary: "list dead deliveries, and put them back to pending",
	help: `A delivery is dead when its recipient received it SWEEP_MAX_REDELIVERIES times
(default 10) without acknowledging: the sweep stops resetting it, and the
SweepDeadLettered alarm fires. The deliver function also makes a delivery dead,
with its reason: unknown_recipient, recipient_disabled, or gone (a webhook
answered 410). Fix the recipient first, then retry: a retried row is pending
again with its redeliveries back at 0, so the relay delivers it and the sweep
gives it every try afresh.`,
	sub: []*command{deadList, deadRetry},
}

type deadListFlags struct {
	dbFlags
	olderThan time.Duration
	limit     int
}

var deadList = &command{
	name:    "list",
	summary: "dead deliveries, newest first",
	help: `Lists dead deliveries, newest first: id, recipient, kind, tenant, how often
they were pushed (attempts) and reset by the sweep (redeliveries), when they
were created, last pushed and declared dead, and why (REASON: the deliver
function's unknown_recipient, recipient_disabled or gone; - for a row the sweep
made dead at SWEEP_MAX_REDELIVERIES, null in --json). Never the payload. Prune
deletes dead rows after PRUNE_DEAD_AFTER (default 168h).`,
	flags: func(fs *flag.FlagSet) any {
		f := &deadListFlags{}
		addDBFlags(fs, &f.dbFlags)
		fs.DurationVar(&f.olderThan, "older-than", 0, "only rows dead at least this long (e.g. 1h)")
		addLimit(fs, &f.limit, 50, 10000, "at most this many rows")
		return f
	},
	run: func(ctx context.Context, e *env, opts any) error {
		f := opts.(*deadListFlags)
		if f.olderThan < 0 {
			return usagef("--older-than %s: must not be negative", f.olderThan)
		}
		return withLogin(ctx, e, f.schema, func(l *login) error {
			rows, err := store.NewDeliveryAdmin(store.MustSchema(l.schema)).ListDead(ctx, l.bounded(&f.dbFlags), f.olderThan, f.limit)
			if err != nil {
				return err
			}
			if f.json {
				return printJSON(e.stdout, listed(rows))
			}
			if len(rows) == 0 {
				_, err := fmt.Fprintln(e.stdout, "no dead deliveries")
				return err
			}
			var out [][]string
			for _, d := range rows {
				var tenant, reason string
				if d.TenantID != nil {
					tenant = *d.TenantID
				}
				if d.DeadReason != nil {
					reason = *d.DeadReason
				}
				out = append(out, []string{strconv.FormatInt(d.ID, 10), d.Recipient, d.Kind, orDash(tenant),
					strconv.Itoa(d.Attempts), strconv.Itoa(d.Redeliveries), stamp(&d.CreatedAt), stamp(d.DeliveredAt), stamp(&d.DeadAt),
					orDash(reason)})
			}
			if err := table(e.stdout, []string{"ID", "RECIPIENT", "KIND", "TENANT", "ATTEMPTS", "REDELIVERIES", "CREATED", "LAST PUSHED", "DEAD SINCE", "REASON"}, out); err != nil {
				return err
			}
			if len(rows) == f.limit {
				_, err = fmt.Fprintf(e.stdout, "(the first %d; --limit shows more)\n", f.limit)
			}
			return err
		})
	},
}

type deadRetryFlags struct {
	dbFlags
	ids       idList
	all       bool
	olderThan time.Duration
	limit     int
}

// idList is a repeatable, comma-separated --id.
type idList []int64

func (l *idList) String() string {
	var s []string
	for _, id := range *l {
		s = append(s, strconv.FormatInt(id, 10))
	}
	return strings.Join(s, ",")
}

func (l *idList) Set(v string) error {
	for _, part := range strings.Split(v, ",") {
		id, err := strconv.ParseInt(strings.TrimSpace(part), 10, 64)
		if err != nil || id < 1 {
			return fmt.Errorf("%q is not a delivery id", part)
		}
		*l = append(*l, id)
	}
	return nil
}

var deadRetry = &command{
	name:    "retry",
	summary: "put dead deliveries back to pending (state, redeliveries, dead_at)",
	help: `Puts dead deliveries back to pending, in one compare-and-set statement: state
pending, redeliveries 0 (left as it was, the row would be dead again at its next
stuck push), dead_at and delivered_at cleared, as the sweep's own reset does;
attempts stays, as the row's history. Only rows still dead move: one a relay or
another operator revived meanwhile is left alone and named. It says how many.

  outboxkeeper dead retry --id 41,42 --id 57
  outboxkeeper dead retry --all --older-than 30m

Exit status 3 when an --id was not reset (not dead any more, or no such row).`,
	flags: func(fs *flag.FlagSet) any {
		f := &deadRetryFlags{}
		addDBFlags(fs, &f.dbFlags)
		fs.Var(&f.ids, "id", "a dead delivery's id (repeat, or separate with commas)")
		fs.BoolVar(&f.all, "all", false, "every dead delivery (with --older-than: dead at least that long)")
		fs.DurationVar(&f.olderThan, "older-than", 0, "with --all: only rows dead at least this long")
		addLimit(fs, &f.limit, 10000, 100000, "with --all: at most this many rows in this run")
		return f
	},
	run: func(ctx context.Context, e *env, opts any) error {
		f := opts.(*deadRetryFlags)
		if err := listOrAll(len(f.ids), f.all, "--id", "--id ID[,ID...] or --all [--older-than D]"); err != nil {
			return err
		}
		switch {
		case !f.all && f.olderThan != 0:
			return usagef("--older-than goes with --all")
		case f.olderThan < 0:
			return usagef("--older-than %s: must not be negative", f.olderThan)
		}
		return withLogin(ctx, e, f.schema, func(l *login) error {
			admin := store.NewDeliveryAdmin(store.MustSchema(l.schema))
			q := l.bounded(&f.dbFlags)
			if f.all {
				reset, remaining, err := admin.RetryOlderThan(ctx, q, f.olderThan, f.limit)
				if err != nil {
					return err
				}
				if f.json {
					return printJSON(e.stdout, map[string]int64{"reset": reset, "remaining": remaining})
				}
				fmt.Fprintf(e.stdout, "reset %d dead %s to pending\n", reset, plural(reset, "delivery", "deliveries"))
				if remaining > 0 {
					fmt.Fprintf(e.stdout, "%d more match (over --limit, or held by the sweep or a relay this instant): run it again\n", remaining)
				}
				return nil
			}
			ids := slices.Clone([]int64(f.ids))
			slices.Sort(ids)
			outcomes, err := admin.RetryIDs(ctx, q, slices.Compact(ids))
			if err != nil {
				return err
			}
			var reset int64
			var left []store.RetryOutcome
			for _, o := range outcomes {
				if o.Reset {
					reset++
				} else {
					left = append(left, o)
				}
			}
			if f.json {
				if err := printJSON(e.stdout, map[string]any{"reset": reset, "outcomes": outcomes}); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(e.stdout, "reset %d of %d dead %s to pending\n", reset, len(outcomes), plural(int64(len(outcomes)), "delivery", "deliveries"))
				for _, o := range left {
					if o.State == "" {
						fmt.Fprintf(e.stdout, "  %d: no such delivery\n", o.ID)
					} else {
						fmt.Fprintf(e.stdout, "  %d: not dead (it is %s): left alone\n", o.ID, o.State)
					}
				}
			}
			if len(left) > 0 {
				return errAttention
			}
			return nil
		})
	},
}
