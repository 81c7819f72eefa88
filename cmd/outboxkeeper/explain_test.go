package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// The database's refusal of an operator's action keeps its own text and
// gains what to do: a login without the operator role is told how to get
// one, a schema without the action's functions (or, for consumers, its
// table) to migrate, a consumer that is not there is said plainly, and
// anything else gets the database's hint.
func TestOperatorActionRefusalsSayWhatToDo(t *testing.T) {
	cases := []struct {
		name    string
		explain func(error, string) error
		pg      *pgconn.PgError
		want    string // the whole text
		refusal bool
	}{
		{"consumers, no operator role", explainConsumerError, &pgconn.PgError{Code: "42501", Message: "permission denied"},
			"ERROR: permission denied (SQLSTATE 42501)\nthis login may not manage consumers: use the schema's owner, or a role set up with SELECT app.grant_operator('<role>')", false},
		{"consumers, no function", explainConsumerError, &pgconn.PgError{Code: "42883", Message: "no function"},
			"ERROR: no function (SQLSTATE 42883)\nthe schema has no consumer functions yet: apply the migrations ('outboxkeeper migrate up')", false},
		{"consumers, no table", explainConsumerError, &pgconn.PgError{Code: "42P01", Message: "no table"},
			"ERROR: no table (SQLSTATE 42P01)\nthe schema has no consumer functions yet: apply the migrations ('outboxkeeper migrate up')", false},
		{"consumers, no such consumer", explainConsumerError, &pgconn.PgError{Code: "P0002", Message: `no consumer "x"`},
			`no consumer "x"`, true},
		{"consumers, a hint", explainConsumerError, &pgconn.PgError{Code: "22023", Message: "bad position", Hint: "rewind to at most 5"},
			"ERROR: bad position (SQLSTATE 22023)\nrewind to at most 5", false},
		{"skip, no operator role", explainSkipError, &pgconn.PgError{Code: "42501", Message: "permission denied"},
			"ERROR: permission denied (SQLSTATE 42501)\nthis login may not skip a stall: use the schema's owner, or a role set up with SELECT app.grant_operator('<role>')", false},
		{"skip, no function", explainSkipError, &pgconn.PgError{Code: "42883", Message: "no function"},
			"ERROR: no function (SQLSTATE 42883)\nthe schema has no skip_stall: apply the migrations ('outboxkeeper migrate up')", false},
		{"skip, no table is only the database's word", explainSkipError, &pgconn.PgError{Code: "42P01", Message: "no table"},
			"ERROR: no table (SQLSTATE 42P01)", false},
		{"skip, a hint", explainSkipError, &pgconn.PgError{Code: "P0001", Message: "above the head", Hint: "skip to at most 9"},
			"ERROR: above the head (SQLSTATE P0001)\nskip to at most 9", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.pg.Severity = "ERROR"
			got := c.explain(c.pg, "app")
			if got.Error() != c.want {
				t.Errorf("text %q, want %q", got.Error(), c.want)
			}
			var r *refusal
			if errors.As(got, &r) != c.refusal {
				t.Errorf("a refusal: %v, want %v", errors.As(got, &r), c.refusal)
			}
			if !c.refusal && !errors.Is(got, c.pg) {
				t.Error("the database's error is not wrapped")
			}
		})
	}
	t.Run("not the database's error", func(t *testing.T) {
		plain := errors.New("connection reset")
		for name, explain := range map[string]func(error, string) error{"consumers": explainConsumerError, "skip": explainSkipError} {
			if got := explain(plain, "app"); got != plain {
				t.Errorf("%s: %v, want the error unchanged", name, got)
			}
		}
		if strings.Contains(explainSkipError(plain, "app").Error(), "\n") {
			t.Error("skip: a plain error gained advice")
		}
	})
}
