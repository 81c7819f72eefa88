package main

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/outboxkeeper/outboxkeeper/shared/relay/parked"
)

var relayCommand = &command{
	name:    "relay",
	summary: "the relays: where each stands, and their parked events",
	help: `A relay (functions/relay) sends the committed events of its topics to its target,
in order within each group, and moves its position, the consumer relay:<RELAY_NAME>.
An event the target refuses for itself (too large, invalid characters) is tried
RELAY_MAX_ATTEMPTS times, then parked in <schema>.relay_parked, and the stream
goes on; the RelayParked alarm fires. Fix the cause, then re-send it.`,
	sub: []*command{relayStatus, relayParked},
}

type relayStatusFlags struct {
	dbFlags
	stale time.Duration
}

var relayStatus = &command{
	name:    "status",
	summary: "each relay's position, lag, last commit and parked events",
	help: `Shows every relay of the schema: its position, the allocation head and the lag
between them, when its position last moved, and its parked events (PARKED), the
refused events it still tries (FAILING: each holds its position back; with
RELAY_MAX_ATTEMPTS=0 the relay stops there until you act) and those asked to be
re-sent (RESEND).

Exit status 3 when a person is needed: a relay with parked or failing events, or
one behind the head whose position has not moved for --stale (default 5m: the
relay is silent, or its target refuses everything for a transient reason, such as
a missing permission).`,
	flags: func(fs *flag.FlagSet) any {
		f := &relayStatusFlags{}
		addDBFlags(fs, &f.dbFlags)
		fs.DurationVar(&f.stale, "stale", 5*time.Minute, "a relay behind the head whose position has not moved this long needs a person")
		return f
	},
	run: func(ctx context.Context, e *env, opts any) error {
		f := opts.(*relayStatusFlags)
		if f.stale <= 0 {
			return usagef("--stale %s: must be positive", f.stale)
		}
		return withLogin(ctx, e, f.schema, func(l *login) error {
			st, err := parked.ReadStatus(ctx, l.bounded(&f.dbFlags), l.schema)
			if err != nil {
				return err
			}
			findings := relayFindings(st, f.stale, time.Now())
			if f.json {
				if err := printJSON(e.stdout, map[string]any{"relays": listed(st), "attention": listed(findings)}); err != nil {
					return err
				}
			} else {
				if err := tableOf(e.stdout, st, "no relay has run on this schema",
					[]string{"RELAY", "POSITION", "HEAD", "LAG", "LAST COMMIT", "PARKED", "FAILING", "RESEND"},
					func(s parked.Status) []string {
						return []string{s.Relay, optInt(s.Position), strconv.FormatInt(s.Head, 10), optInt(s.Lag),
							stamp(s.LastCommit), strconv.FormatInt(s.Parked, 10), strconv.FormatInt(s.Failing, 10), strconv.FormatInt(s.Resend, 10)}
					}); err != nil {
					return err
				}
				for _, f := range findings {
					fmt.Fprintln(e.stdout, "attention: "+f)
				}
			}
			if len(findings) > 0 {
				return errAttention
			}
			return nil
		})
	},
}

// relayFindings are what needs a person in st, one line each.
func relayFindings(st []parked.Status, stale time.Duration, now time.Time) []string {
	var out []string
	for _, s := range st {
		if s.Parked > 0 {
			out = append(out, fmt.Sprintf("relay %s has %d parked %s: outboxkeeper relay parked list --relay %s", s.Relay, s.Parked, plural(s.Parked, "event", "events"), s.Relay))
		}
		if s.Failing > 0 {
			out = append(out, fmt.Sprintf("relay %s stands at %d refused %s it still tries: outboxkeeper relay parked list --all --relay %s", s.Relay, s.Failing, plural(s.Failing, "event", "events"), s.Relay))
		}
		if s.Lag != nil && *s.Lag > 0 && s.LastCommit != nil && now.Sub(*s.LastCommit) >= stale {
			out = append(out, fmt.Sprintf("relay %s is %d behind the head and its position has not moved for %s", s.Relay, *s.Lag, age(now.Sub(*s.LastCommit))))
		}
	}
	return out
}

func optInt(v *int64) string {
	if v == nil {
		return "-"
	}
	return strconv.FormatInt(*v, 10)
}

var relayParked = &command{
	name:    "parked",
	summary: "list parked events, and re-send them",
	help: `A parked event is one the relay's target refused for the event itself
RELAY_MAX_ATTEMPTS times: the relay recorded it in <schema>.relay_parked with the
target's error and went on. It was never sent. Find the cause in ERROR (a body
too large for the target, characters the target refuses, a FIFO group id the
target refuses), fix what can be fixed on the target's side, then re-send.`,
	sub: []*command{relayParkedList, relayParkedResend},
}

type relayParkedListFlags struct {
	dbFlags
	relay string
	all   bool
	limit int
}

var relayParkedList = &command{
	name:    "list",
	summary: "parked events: relay, sequence, topic, attempts, error",
	help: `Lists parked events, by relay and sequence: the topic, the attempts, the target's
last error, when the event was first refused and when it was parked. Never the
payload. With --all, also the events re-sent since, and those the relay still
tries (STATE failing: not parked yet, or never with RELAY_MAX_ATTEMPTS=0).`,
	flags: func(fs *flag.FlagSet) any {
		f := &relayParkedListFlags{}
		addDBFlags(fs, &f.dbFlags)
		fs.StringVar(&f.relay, "relay", "", "only this relay (RELAY_NAME; default: every relay)")
		fs.BoolVar(&f.all, "all", false, "also re-sent events and those still tried")
		addLimit(fs, &f.limit, 50, 10000, "at most this many rows")
		return f
	},
	run: func(ctx context.Context, e *env, opts any) error {
		f := opts.(*relayParkedListFlags)
		return withLogin(ctx, e, f.schema, func(l *login) error {
			rows, err := parked.ListParked(ctx, l.bounded(&f.dbFlags), l.schema, f.relay, f.all, f.limit)
			if err != nil {
				return err
			}
			if f.json {
				return printJSON(e.stdout, listed(rows))
			}
			return printParked(e, rows, f.limit)
		})
	},
}

func printParked(e *env, rows []parked.Parked, limit int) error {
	if err := tableOf(e.stdout, rows, "no parked events",
		[]string{"RELAY", "SEQUENCE", "TOPIC", "STATE", "ATTEMPTS", "FIRST REFUSED", "PARKED", "ERROR"},
		func(p parked.Parked) []string {
			return []string{p.Relay, strconv.FormatInt(p.Sequence, 10), p.Topic, p.State(), strconv.Itoa(p.Attempts),
				stamp(&p.FirstFailedAt), stamp(p.ParkedAt), p.Error}
		}); err != nil || len(rows) == 0 {
		return err
	}
	if len(rows) == limit {
		_, err := fmt.Fprintf(e.stdout, "(the first %d; --limit shows more)\n", limit)
		return err
	}
	return nil
}

type relayResendFlags struct {
	dbFlags
	relay     string
	sequences idList
	all       bool
	yes       bool
}

var relayParkedResend = &command{
	name:    "resend",
	summary: "ask the relay to send parked events again at its next pass",
	help: `Marks parked events to be re-sent: the relay sends them at its next pass (within
a minute, as its schedule runs), with their dedup ids, OUT OF ORDER: after the
events of their group it sent past them. Re-sent ones are marked RESENT in
'relay parked list --all'; one the target refuses again stays parked with the
new error, and its request is cleared.

Without --yes it only shows the events it would mark, and refuses.

  outboxkeeper relay parked resend --relay orders --sequence 4711,4712
  outboxkeeper relay parked resend --all --yes`,
	flags: func(fs *flag.FlagSet) any {
		f := &relayResendFlags{}
		addDBFlags(fs, &f.dbFlags)
		fs.StringVar(&f.relay, "relay", "", "only this relay's (RELAY_NAME; default: every relay)")
		fs.Var(&f.sequences, "sequence", "a parked event's sequence (repeat, or separate with commas)")
		fs.BoolVar(&f.all, "all", false, "every parked event (of --relay)")
		fs.BoolVar(&f.yes, "yes", false, "do it (without: show what it would do, and refuse)")
		return f
	},
	run: func(ctx context.Context, e *env, opts any) error {
		f := opts.(*relayResendFlags)
		if err := listOrAll(len(f.sequences), f.all, "--sequence", "--sequence S[,S...] or --all"); err != nil {
			return err
		}
		return withLogin(ctx, e, f.schema, func(l *login) error {
			q := l.bounded(&f.dbFlags)
			if !f.yes {
				rows, err := parked.ListParked(ctx, q, l.schema, f.relay, false, 10000)
				if err != nil {
					return err
				}
				if !f.all {
					rows = slices.DeleteFunc(rows, func(p parked.Parked) bool { return !slices.Contains(f.sequences, p.Sequence) })
				}
				if !f.json {
					if err := printParked(e, rows, 10000); err != nil {
						return err
					}
				}
				return refusef("nothing marked: %d parked %s would be re-sent, out of order; add --yes to mark %s",
					len(rows), plural(int64(len(rows)), "event", "events"), plural(int64(len(rows)), "it", "them"))
			}
			marked, err := parked.RequestResend(ctx, q, l.schema, f.relay, []int64(f.sequences), f.all)
			if err != nil {
				return err
			}
			var missing []int64
			for _, s := range f.sequences {
				if !slices.ContainsFunc(marked, func(r parked.Requested) bool { return r.Sequence == s }) {
					missing = append(missing, s)
				}
			}
			if f.json {
				if err := printJSON(e.stdout, map[string]any{"marked": listed(marked), "not_parked": listed(missing)}); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(e.stdout, "marked %d parked %s to be re-sent at the relay's next pass, out of order (after the events sent past %s)\n",
					len(marked), plural(int64(len(marked)), "event", "events"), plural(int64(len(marked)), "it", "them"))
				for _, s := range missing {
					fmt.Fprintf(e.stdout, "  %d: not a parked event (never parked, re-sent already, or another relay's): left alone\n", s)
				}
			}
			if len(missing) > 0 {
				return errAttention
			}
			return nil
		})
	},
}
