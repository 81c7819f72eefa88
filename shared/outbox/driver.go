package outbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/sqltext"
	"github.com/outboxkeeper/outboxkeeper/internal/store"
)

// executor is the seam between the library and a database library, the
// one thing every statement of the Outbox needs (River's riverdriver
// shape, cut to what this library uses): run a statement of the tables'
// files with its named arguments, and hand each row it returns to row.
// pgxExecutor (a pool, a connection or a pgx.Tx) and sqlExecutor
// (database/sql's *sql.DB, *sql.Conn or *sql.Tx) are the two.
type executor interface {
	query(ctx context.Context, sql string, args pgx.StrictNamedArgs, row func(scan func(dest ...any) error) error) error
	exec(ctx context.Context, sql string, args pgx.StrictNamedArgs) (rowsAffected int64, err error)
}

// pgxExecutor runs statements through pgx, which takes the named
// arguments itself (and refuses a missing or an extra one).
type pgxExecutor struct{ q store.Querier }

func (p pgxExecutor) query(ctx context.Context, sql string, args pgx.StrictNamedArgs, row func(scan func(dest ...any) error) error) error {
	rows, err := p.q.Query(ctx, sql, args)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := row(rows.Scan); err != nil {
			return err
		}
	}
	return rows.Err()
}

func (p pgxExecutor) exec(ctx context.Context, sql string, args pgx.StrictNamedArgs) (int64, error) {
	tag, err := p.q.Exec(ctx, sql, args)
	return tag.RowsAffected(), err
}

// sqlQuerier is what database/sql's *sql.DB, *sql.Conn and *sql.Tx share.
type sqlQuerier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// sqlExecutor runs statements through database/sql, whatever its driver
// (pgx's stdlib, lib/pq): the named arguments become positional ($1 …),
// and the values it sends and scans are the ones every driver takes.
type sqlExecutor struct {
	q     sqlQuerier
	cache *positionalCache
}

// positionalCache keeps each statement's positional form, made once.
type positionalCache struct{ m sync.Map } // sql -> positional

type positional struct {
	sql   string
	names []string
}

func (c *positionalCache) get(stmt string) positional {
	if p, ok := c.m.Load(stmt); ok {
		return p.(positional)
	}
	text, names := sqltext.Positional(stmt)
	p := positional{sql: text, names: names}
	c.m.Store(stmt, p)
	return p
}

// bind orders args as the statement's names, refusing a missing or an
// extra one as pgx.StrictNamedArgs does.
func (s sqlExecutor) bind(stmt string, args pgx.StrictNamedArgs) (string, []any, error) {
	p := s.cache.get(stmt)
	if len(args) != len(p.names) {
		return "", nil, fmt.Errorf("outbox: statement takes %v, given %d arguments", p.names, len(args))
	}
	out := make([]any, len(p.names))
	for i, n := range p.names {
		v, ok := args[n]
		if !ok {
			return "", nil, fmt.Errorf("outbox: statement needs argument %q", n)
		}
		out[i] = sqlValue(v)
	}
	return p.sql, out, nil
}

// sqlValue is v as every database/sql driver takes it: a text array
// literal for a []string (the statements cast it, @payloads::jsonb[]).
func sqlValue(v any) any {
	if ss, ok := v.([]string); ok {
		return arrayLiteral(ss)
	}
	return v
}

// arrayLiteral is PostgreSQL's text form of a one-dimensional array of
// strings, every element quoted.
func arrayLiteral(ss []string) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, s := range ss {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		b.WriteString(strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s))
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

func (s sqlExecutor) query(ctx context.Context, stmt string, args pgx.StrictNamedArgs, row func(scan func(dest ...any) error) error) error {
	text, values, err := s.bind(stmt, args)
	if err != nil {
		return err
	}
	rows, err := s.q.QueryContext(ctx, text, values...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := row(func(dest ...any) error { return scanSQL(rows, dest) }); err != nil {
			return err
		}
	}
	return rows.Err()
}

func (s sqlExecutor) exec(ctx context.Context, stmt string, args pgx.StrictNamedArgs) (int64, error) {
	text, values, err := s.bind(stmt, args)
	if err != nil {
		return 0, err
	}
	res, err := s.q.ExecContext(ctx, text, values...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// scanSQL scans one row into dest, the library's own types, through
// values every driver produces: JSON arrives as text or bytes and is
// copied (a driver may reuse its buffer), an xid8 as a number or its
// text.
func scanSQL(rows *sql.Rows, dest []any) error {
	through := slices.Clone(dest)
	var after []func() error
	for i, d := range dest {
		switch d := d.(type) {
		case *json.RawMessage:
			var b []byte // database/sql copies into a *[]byte
			through[i] = &b
			after = append(after, func() error { *d = b; return nil })
		case **uint64:
			var s sql.NullString
			through[i] = &s
			after = append(after, func() error {
				if !s.Valid {
					*d = nil
					return nil
				}
				v, err := strconv.ParseUint(s.String, 10, 64)
				if err != nil {
					return fmt.Errorf("outbox: xid %q: %w", s.String, err)
				}
				*d = &v
				return nil
			})
		case *uint64:
			var s string
			through[i] = &s
			after = append(after, func() error {
				v, err := strconv.ParseUint(s, 10, 64)
				if err != nil {
					return fmt.Errorf("outbox: xid %q: %w", s, err)
				}
				*d = v
				return nil
			})
		}
	}
	if err := rows.Scan(through...); err != nil {
		return err
	}
	for _, f := range after {
		if err := f(); err != nil {
			return err
		}
	}
	return nil
}

// errNoTx: a statement that needs the application's transaction got none.
var errNoTx = errors.New("outbox: a transaction is needed")
