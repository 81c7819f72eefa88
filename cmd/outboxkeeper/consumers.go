package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxkeeper/outboxkeeper/internal/store"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
)

var consumersCommand = &command{
	name:    "consumers",
	summary: "the registered consumers and relays: list, rewind, retire (on the record)",
	help: `A consumer is a name in <schema>.consumers with the last sequence it took (its
position), moved forward by commit_position; each relay is the consumer
relay:<RELAY_NAME>. The prune never deletes an event a registered consumer has
not passed, so a consumer that stopped holds retention back: its oldest
untaken event is older than the prune's retention (PRUNE_EVENTS_AFTER) and
nothing after it is deleted. The ConsumerHoldsRetention alarm says so.

rewind and retire change a consumer through SECURITY DEFINER functions
(rewind_consumer, retire_consumer) and record who, when, why, from and to in
<schema>.consumer_changes. Both need --reason and --yes. Who may run them: the
schema's owner, or a role set up with SELECT <schema>.grant_operator('oncall');
never the functions' maintainer.`,
	sub: []*command{consumersList, consumersRewind, consumersRetire},
}

type consumersListFlags struct {
	dbFlags
	heldAfter time.Duration
}

var consumersList = &command{
	name:    "list",
	summary: "each consumer and relay: position, lag, last commit, retention held; the last changes",
	help: `Shows every registered consumer (the slowest first): its position, its lag behind
the allocation head, when its position last moved, and whether it holds
retention back and since when; then the last rewinds and retires.

Exit status 3 when a consumer has held retention back longer than --held-after
(default 1h, the template's ConsumerHeldAlarmSeconds): move it on, or retire it.`,
	flags: func(fs *flag.FlagSet) any {
		f := &consumersListFlags{}
		addDBFlags(fs, &f.dbFlags)
		fs.DurationVar(&f.heldAfter, "held-after", time.Hour, "a consumer holding retention back this long needs a person")
		return f
	},
	run: func(ctx context.Context, e *env, opts any) error {
		f := opts.(*consumersListFlags)
		if f.heldAfter <= 0 {
			return usagef("--held-after %s: must be positive", f.heldAfter)
		}
		c, err := openConsumers(ctx, e, &f.dbFlags)
		if err != nil {
			return err
		}
		defer c.l.pool.Close()
		st := c.st
		changes, err := c.ops.Recent(ctx, c.q, 10)
		if err != nil {
			return explainConsumerError(err, c.l.schema)
		}
		findings := consumerFindings(st, f.heldAfter, time.Now())
		if f.json {
			if st == nil {
				st = []store.ConsumerStatus{}
			}
			if changes == nil {
				changes = []store.ConsumerChange{}
			}
			err = printJSON(e.stdout, map[string]any{"consumers": st, "changes": changes, "attention": listed(findings)})
		} else {
			err = printConsumers(e.stdout, st, time.Now())
			if err == nil && len(changes) > 0 {
				fmt.Fprintln(e.stdout, "\nCHANGES (the last rewinds and retires)")
				err = printConsumerChanges(e.stdout, changes)
			}
			for _, f := range findings {
				fmt.Fprintln(e.stdout, "attention: "+f)
			}
		}
		if err != nil {
			return err
		}
		if len(findings) > 0 {
			return errAttention
		}
		return nil
	},
}

type consumerChangeFlags struct {
	dbFlags
	recordFlags
	name string
	to   int64
}

func addConsumerChangeFlags(fs *flag.FlagSet, f *consumerChangeFlags) {
	addDBFlags(fs, &f.dbFlags)
	fs.StringVar(&f.name, "consumer", "", "the consumer's name (required)")
	addRecordFlags(fs, &f.recordFlags)
}

var consumersRewind = &command{
	name:    "rewind",
	summary: "move a consumer's position back, so it reads the events after --to again",
	help: `Moves the consumer back to --to (below its position), so its next read_events
starts after it; recorded in <schema>.consumer_changes. It refuses, changing
nothing, when an event of the range is no longer kept (the prune deleted it), the
range is longer than 1,000,000, or the prune has not recorded its retention yet.
A rewind never moves a consumer forward: that would skip events it never took.

  outboxkeeper consumers rewind --consumer billing --to 1200 --reason "INC-7: replay after the bad deploy" --yes`,
	flags: func(fs *flag.FlagSet) any {
		f := &consumerChangeFlags{to: -1}
		addConsumerChangeFlags(fs, f)
		fs.Int64Var(&f.to, "to", -1, "the new position: the consumer reads the events after it again (required)")
		return f
	},
	run: func(ctx context.Context, e *env, opts any) error {
		f := opts.(*consumerChangeFlags)
		if f.to < 0 {
			return usagef("--to: the position to rewind to (0 or more) is required")
		}
		return runConsumerChange(ctx, e, f, "rewind")
	},
}

var consumersRetire = &command{
	name:    "retire",
	summary: "delete a consumer that stopped for good, so it no longer holds retention back",
	help: `Deletes the consumer from <schema>.consumers, recording its last position in
<schema>.consumer_changes. The prune then no longer keeps events for it. If the
consumer commits a position again it is registered anew from there.

  outboxkeeper consumers retire --consumer legacy-search --reason "service decommissioned" --yes`,
	flags: func(fs *flag.FlagSet) any {
		f := &consumerChangeFlags{}
		addConsumerChangeFlags(fs, f)
		return f
	},
	run: func(ctx context.Context, e *env, opts any) error {
		return runConsumerChange(ctx, e, opts.(*consumerChangeFlags), "retire")
	},
}

func runConsumerChange(ctx context.Context, e *env, f *consumerChangeFlags, action string) error {
	if f.name = strings.TrimSpace(f.name); f.name == "" {
		return usagef("--consumer: the consumer's name is required")
	}
	if err := f.checkRecord(e); err != nil {
		return err
	}
	s, err := openConsumers(ctx, e, &f.dbFlags)
	if err != nil {
		return err
	}
	defer s.l.pool.Close()
	l, q, ops, st := s.l, s.q, s.ops, s.st
	var cur *store.ConsumerStatus
	for i := range st {
		if st[i].Name == f.name {
			cur = &st[i]
		}
	}
	if cur == nil {
		return refusef("no consumer named %q is registered ('outboxkeeper consumers list')", f.name)
	}
	plan := consumerPlan(action, cur, f.to)
	if !f.yes {
		if f.json {
			if err := printJSON(e.stdout, map[string]any{"done": false, "plan": plan, "consumer": cur}); err != nil {
				return err
			}
		} else {
			fmt.Fprintln(e.stdout, plan)
		}
		return refusef("nothing changed: run it again with --yes to %s %s", action, f.name)
	}
	var c store.ConsumerChange
	if action == "rewind" {
		c, err = ops.Rewind(ctx, q, f.name, f.to, f.reason, f.operator)
	} else {
		c, err = ops.Retire(ctx, q, f.name, f.reason, f.operator)
	}
	if err != nil {
		return explainConsumerError(err, l.schema)
	}
	if f.json {
		return printJSON(e.stdout, map[string]any{"done": true, "plan": plan, "change": c})
	}
	fmt.Fprintln(e.stdout, plan)
	_, err = fmt.Fprintf(e.stdout, "done: recorded as consumer_changes id %d: %s as %s at %s, %q\n",
		c.ID, c.Operator, c.DBUser, stamp(&c.ChangedAt), c.Reason)
	return err
}

// consumerSession is a consumers command's connection, bounded by its
// --timeout, with every consumer's status read through it.
type consumerSession struct {
	l   *login
	q   *pass.Bounded
	ops *store.ConsumerOps
	st  []store.ConsumerStatus
}

// openConsumers connects and reads every consumer's status; the caller
// closes s.l.pool.
func openConsumers(ctx context.Context, e *env, f *dbFlags) (*consumerSession, error) {
	l, err := connect(ctx, e, f.schema)
	if err != nil {
		return nil, err
	}
	s := &consumerSession{l: l, q: l.bounded(f), ops: store.NewConsumerOps(store.MustSchema(l.schema))}
	if s.st, err = s.ops.Status(ctx, s.q); err != nil {
		l.pool.Close()
		return nil, explainConsumerError(err, l.schema)
	}
	return s, nil
}

// consumerPlan says what a rewind or retire of c does, in one line.
func consumerPlan(action string, c *store.ConsumerStatus, to int64) string {
	if action == "rewind" {
		return fmt.Sprintf("rewind %s from %d to %d: it reads (%d, %d] again (%d %s)",
			c.Name, c.Position, to, to, c.Position, c.Position-to, plural(c.Position-to, "event", "events"))
	}
	return fmt.Sprintf("retire %s at position %d (lag %d): the prune no longer keeps events for it", c.Name, c.Position, c.Lag)
}

// consumerFindings are the consumers that held retention back longer than
// heldAfter, one line each.
func consumerFindings(st []store.ConsumerStatus, heldAfter time.Duration, now time.Time) []string {
	var out []string
	for _, c := range st {
		if c.HoldsRetention && c.HeldSince != nil && now.Sub(*c.HeldSince) >= heldAfter {
			out = append(out, fmt.Sprintf("%s %s has held retention back for %s (at %d, %d behind the head): move it on, or 'outboxkeeper consumers retire --consumer %s'",
				consumerKind(c.Name), c.Name, age(now.Sub(*c.HeldSince)), c.Position, c.Lag, c.Name))
		}
	}
	return out
}

// consumerKind says whether name is a relay's position or a consumer's.
func consumerKind(name string) string {
	if strings.HasPrefix(name, "relay:") {
		return "relay"
	}
	return "consumer"
}

// printConsumers is the CONSUMERS table of status and consumers list.
func printConsumers(w io.Writer, st []store.ConsumerStatus, now time.Time) error {
	if len(st) == 0 {
		_, err := fmt.Fprintln(w, "  no consumer is registered: the prune is bounded by the fill watermark only")
		return err
	}
	var rows [][]string
	for _, c := range st {
		held := "no"
		if c.HoldsRetention && c.HeldSince != nil {
			held = "yes, for " + age(now.Sub(*c.HeldSince))
		}
		rows = append(rows, []string{c.Name, consumerKind(c.Name), strconv.FormatInt(c.Position, 10), strconv.FormatInt(c.Lag, 10),
			stamp(&c.UpdatedAt), held})
	}
	return indent(w, []string{"NAME", "KIND", "POSITION", "LAG", "LAST COMMIT", "HOLDS RETENTION"}, rows)
}

func printConsumerChanges(w io.Writer, cs []store.ConsumerChange) error {
	var rows [][]string
	for _, c := range cs {
		to := "-"
		if c.ToPosition != nil {
			to = strconv.FormatInt(*c.ToPosition, 10)
		}
		rows = append(rows, []string{strconv.FormatInt(c.ID, 10), stamp(&c.ChangedAt), c.Operator + " as " + c.DBUser,
			c.Action, c.Consumer, strconv.FormatInt(c.FromPosition, 10), to, c.Reason})
	}
	return indent(w, []string{"ID", "AT", "WHO", "ACTION", "CONSUMER", "FROM", "TO", "REASON"}, rows)
}

// explainConsumerError adds what to do to the database's refusal; a
// consumer that is not there (P0002) is the operator's mistake, said
// plainly.
func explainConsumerError(err error, schema string) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "P0002" {
		return refusef("%s", pgErr.Message)
	}
	return explainOperatorError(err, schema, "manage consumers", "no consumer functions yet", "42883", "42P01")
}

// explainOperatorError adds what to do to the database's refusal of an
// operator's action: a login without the operator role (42501) is told how
// to get one, a schema without the action's objects (missingCodes) to
// migrate, and any other refusal gets the database's hint.
func explainOperatorError(err error, schema, action, missing string, missingCodes ...string) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return err
	}
	switch {
	case pgErr.Code == "42501":
		return fmt.Errorf("%w\nthis login may not %s: use the schema's owner, or a role set up with SELECT %s.grant_operator('<role>')", err, action, schema)
	case slices.Contains(missingCodes, pgErr.Code):
		return fmt.Errorf("%w\nthe schema has %s: apply the migrations ('outboxkeeper migrate up')", err, missing)
	}
	if pgErr.Hint != "" {
		return fmt.Errorf("%w\n%s", err, pgErr.Hint)
	}
	return err
}
