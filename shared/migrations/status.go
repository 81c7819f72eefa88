package migrations

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxkeeper/outboxkeeper/internal/store"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
)

// State is where one migration stands in a schema.
type State string

const (
	// Applied: recorded, with this build's checksum (or none recorded yet).
	Applied State = "applied"
	// Pending: in this build, not applied.
	Pending State = "pending"
	// Changed: applied, but this build's file differs from the one applied.
	Changed State = "changed"
	// Unknown: applied, but not in this build (a newer build applied it).
	Unknown State = "unknown"
)

// Entry is one migration of a Status.
type Entry struct {
	Name  string
	State State
	// Checksum is this build's file's; for an Unknown migration, the one
	// recorded when it was applied.
	Checksum string
	// Recorded is the checksum recorded when it was applied, "" when
	// pending or applied before checksums were recorded.
	Recorded  string
	AppliedAt *time.Time
	// Compatible: marked CompatibleMarker (for an Unknown migration, as
	// recorded when a newer build applied it).
	Compatible bool
}

// Status compares a schema's recorded migrations with this build's.
type Status struct {
	Schema string
	// Entries are this build's migrations in order, then the Unknown ones
	// in name order.
	Entries []Entry
}

// Latest is the build's last migration: the version it requires.
func (s *Status) Latest() Entry {
	var last Entry
	for _, e := range s.Entries {
		if e.State != Unknown {
			last = e
		}
	}
	return last
}

// Current is the highest migration applied (Unknown ones included), and
// false when none is.
func (s *Status) Current() (Entry, bool) {
	var cur Entry
	found := false
	for _, e := range s.Entries {
		if e.State != Pending && (!found || e.Name > cur.Name) {
			cur, found = e, true
		}
	}
	return cur, found
}

// In returns the entries in state st.
func (s *Status) In(st State) []Entry {
	var out []Entry
	for _, e := range s.Entries {
		if e.State == st {
			out = append(out, e)
		}
	}
	return out
}

// recordedRow is a schema_migrations row read through to_jsonb, so the
// status of a table made before checksums were recorded (no checksum or
// compatible column) reads the same way.
type recordedRow struct {
	Name       string     `json:"name"`
	AppliedAt  *time.Time `json:"applied_at"`
	Checksum   *string    `json:"checksum"`
	Compatible bool       `json:"compatible"`
}

// ReadStatus reads what schema has applied and compares it with this
// build. A schema, or a schema_migrations table, that does not exist has
// nothing applied.
func ReadStatus(ctx context.Context, q store.Querier, schema string) (*Status, error) {
	list, err := Load(schema)
	if err != nil {
		return nil, err
	}
	return readStatus(ctx, q, schema, list)
}

// readStatus is ReadStatus for a build whose migrations are list.
func readStatus(ctx context.Context, q store.Querier, schema string, list []Migration) (*Status, error) {
	table := pgx.Identifier{schema, "schema_migrations"}.Sanitize()
	recorded := map[string]recordedRow{}
	rows, err := q.Query(ctx, schemaMigrationsSQL.Statement("status", schema))
	var raws [][]byte
	if err == nil {
		raws, err = pgx.CollectRows(rows, pgx.RowTo[[]byte])
	}
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "3F000"):
		// undefined_table, invalid_schema_name: never migrated.
	case errors.As(err, &pgErr) && pgErr.Code == "42501":
		return nil, fmt.Errorf("read %s: %w (the role needs SELECT %s.grant_maintainer('<role>'), run by the schema's owner)",
			table, err, pgx.Identifier{schema}.Sanitize())
	case err != nil:
		return nil, fmt.Errorf("read %s: %w", table, err)
	}
	for _, raw := range raws {
		var r recordedRow
		if err := json.Unmarshal(raw, &r); err != nil {
			return nil, fmt.Errorf("read %s: %w", table, err)
		}
		recorded[r.Name] = r
	}

	st := &Status{Schema: schema}
	for _, m := range list {
		e := Entry{Name: m.Name, State: Pending, Checksum: m.Checksum, Compatible: m.Compatible}
		if r, ok := recorded[m.Name]; ok {
			e.State, e.AppliedAt = Applied, r.AppliedAt
			if r.Checksum != nil {
				e.Recorded = *r.Checksum
				if e.Recorded != m.Checksum {
					e.State = Changed
				}
			}
			delete(recorded, m.Name)
		}
		st.Entries = append(st.Entries, e)
	}
	var unknown []Entry
	for _, r := range recorded {
		e := Entry{Name: r.Name, State: Unknown, AppliedAt: r.AppliedAt, Compatible: r.Compatible}
		if r.Checksum != nil {
			e.Checksum, e.Recorded = *r.Checksum, *r.Checksum
		}
		unknown = append(unknown, e)
	}
	sort.Slice(unknown, func(i, j int) bool { return unknown[i].Name < unknown[j].Name })
	st.Entries = append(st.Entries, unknown...)
	return st, nil
}

// AppliedAt is when the migration name was applied to schema, nil if it
// was not.
func AppliedAt(ctx context.Context, q store.Querier, schema store.Schema, name string) (*time.Time, error) {
	var at *time.Time
	err := q.QueryRow(ctx, schemaMigrationsSQL.Statement("applied_at", schema.Name()), pgx.StrictNamedArgs{"name": name}).Scan(&at)
	if err != nil {
		return nil, fmt.Errorf("read schema_migrations: %w", err)
	}
	return at, nil
}

// AppliedIn says whether a migration of schema was applied in the
// transaction whose now() was at: whether a row stamped at was written by
// a migration, not by a pass.
func AppliedIn(ctx context.Context, q store.Querier, schema store.Schema, at time.Time) (bool, error) {
	var in bool
	err := q.QueryRow(ctx, schemaMigrationsSQL.Statement("applied_in", schema.Name()), pgx.StrictNamedArgs{"at": at}).Scan(&in)
	if err != nil {
		return false, fmt.Errorf("read schema_migrations: %w", err)
	}
	return in, nil
}

// VersionError is a schema this build cannot run on: behind it (Pending
// names what is missing) or ahead of it with migrations not marked
// compatible (Newer).
type VersionError struct {
	Schema string
	// Current is the highest migration applied; empty when none is.
	Current string
	// Required is this build's last migration.
	Required string
	Pending  []string
	Newer    []string
}

func (e *VersionError) Error() string {
	current := "has no outboxkeeper migrations applied (version 0)"
	if e.Current != "" {
		current = fmt.Sprintf("is at version %d (%s)", Version(e.Current), e.Current)
	}
	if len(e.Pending) > 0 {
		by := ""
		if e.Current != "" {
			by = " --after " + e.Current
		}
		return fmt.Sprintf("schema %s %s, and this build requires version %d (%s); pending: %s. "+
			"Migrate it: deploy the stack with MigrationsEnabled=true (the default), "+
			"or run `outboxkeeper migrate up` with this database's login, "+
			"or have the owner apply `outboxkeeper migrate print%s`",
			e.Schema, current, Version(e.Required), e.Required, strings.Join(e.Pending, ", "), by)
	}
	return fmt.Sprintf("schema %s %s, newer than this build's version %d (%s), and %s %s not marked compatible with older builds: "+
		"deploy the build that migrated it, or a newer one",
		e.Schema, current, Version(e.Required), e.Required, strings.Join(e.Newer, ", "), isAre(len(e.Newer)))
}

func isAre(n int) string {
	if n == 1 {
		return "is"
	}
	return "are"
}

// Check says whether this build can run on the schema: nil when every
// migration of the build is applied as it is in the build, and anything
// applied beyond it is marked compatible; a *ChangedError when an applied
// file changed; a *VersionError when the schema is behind or ahead.
func (s *Status) Check() error {
	for _, e := range s.Entries {
		if e.State == Changed {
			return &ChangedError{Schema: s.Schema, Name: e.Name, Recorded: e.Recorded, Build: e.Checksum}
		}
	}
	verr := &VersionError{Schema: s.Schema, Required: s.Latest().Name}
	if cur, ok := s.Current(); ok {
		verr.Current = cur.Name
	}
	for _, e := range s.In(Pending) {
		verr.Pending = append(verr.Pending, e.Name)
	}
	for _, e := range s.In(Unknown) {
		if !e.Compatible {
			verr.Newer = append(verr.Newer, e.Name)
		}
	}
	if len(verr.Pending) > 0 || len(verr.Newer) > 0 {
		return verr
	}
	return nil
}

// CheckTimeout bounds Check: it runs in a function's init, which Lambda
// gives 10 s, and a database that does not answer in this time fails the
// init rather than the invocation's whole timeout.
const CheckTimeout = 5 * time.Second

// Check is the schema version check every function but migrate runs at
// init: ReadStatus and Status.Check, in one bounded statement.
func Check(ctx context.Context, db pass.Batcher, schema string) error {
	st, err := ReadStatus(ctx, &pass.Bounded{DB: db, Deadline: time.Now().Add(CheckTimeout)}, schema)
	if err != nil {
		return fmt.Errorf("schema version check: %w", err)
	}
	return st.Check()
}
