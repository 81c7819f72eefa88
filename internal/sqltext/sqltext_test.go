package sqltext

import (
	"strings"
	"sync"
	"testing"
	"testing/fstest"
)

func TestRenderQuotesTheSchemaAndMakesItsNameALiteral(t *testing.T) {
	got := Render(`SELECT {{schema}}.f({{schema_name}})`, "outbox")
	if want := `SELECT "outbox".f('outbox')`; got != want {
		t.Fatalf("Render = %q, want %q", got, want)
	}
}

func TestParseSplitsNamedStatementsAndStripsComments(t *testing.T) {
	fsys := fstest.MapFS{"events.sql": {Data: []byte(`-- The file's opening comment.

-- name: head
-- Why the head is read alone.
SELECT {{schema}}.allocation_head();

-- name: page
SELECT sequence FROM {{schema}}.events
-- the clause below
WHERE sequence > @after
ORDER BY sequence LIMIT @n
`)}}
	f, err := Parse(fsys, "events.sql")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := f.Statement("head", "o"), `/* outboxkeeper events.head */ SELECT "o".allocation_head()`; got != want {
		t.Errorf("head = %q, want %q", got, want)
	}
	page := f.Statement("page", "o")
	if strings.Contains(page, "--") {
		t.Errorf("page keeps a comment: %q", page)
	}
	if !strings.HasPrefix(page, "/* outboxkeeper events.page */ SELECT sequence") || !strings.HasSuffix(page, "LIMIT @n") {
		t.Errorf("page = %q", page)
	}
	if n := len(f.Names()); n != 2 {
		t.Errorf("Names = %v, want 2 statements", f.Names())
	}
}

// Statements are looked up where they run, from goroutines at once: each
// schema gets its own rendering, the same on every lookup, and a render
// kept for one schema is never served for another.
func TestStatementIsRenderedForEachSchemaAndKept(t *testing.T) {
	f, err := Parse(fstest.MapFS{"t.sql": {Data: []byte("-- name: head\nSELECT {{schema}}.allocation_head()\n")}}, "t.sql")
	if err != nil {
		t.Fatal(err)
	}
	schemas := []string{"a", "b", "c"}
	var wg sync.WaitGroup
	got := make([][]string, 8)
	for g := range got {
		wg.Go(func() {
			for _, s := range schemas {
				got[g] = append(got[g], f.Statement("head", s))
			}
		})
	}
	wg.Wait()
	for g := range got {
		for i, s := range schemas {
			if want := `/* outboxkeeper t.head */ SELECT "` + s + `".allocation_head()`; got[g][i] != want {
				t.Errorf("goroutine %d, schema %s: %q, want %q", g, s, got[g][i], want)
			}
		}
	}
}

// A malformed file is refused at load, naming what is wrong.
func TestParseRefusesAMalformedFile(t *testing.T) {
	for _, c := range []struct{ name, body, want string }{
		{"a positional argument", "-- name: bad\nSELECT $1\n", "positional"},
		{"a name given twice", "-- name: a\nSELECT 1\n-- name: a\nSELECT 2\n", "twice"},
		{"an empty statement", "-- name: a\n-- only a comment\n", "empty"},
	} {
		t.Run(c.name, func(t *testing.T) {
			fsys := fstest.MapFS{"x.sql": {Data: []byte(c.body)}}
			if _, err := Parse(fsys, "x.sql"); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Parse = %v, want a refusal saying %q", err, c.want)
			}
		})
	}
}

func TestStatementPanicsOnAnUnknownName(t *testing.T) {
	fsys := fstest.MapFS{"x.sql": {Data: []byte("-- name: a\nSELECT 1\n")}}
	f := MustParse(fsys, "x.sql")
	defer func() {
		if recover() == nil {
			t.Fatal("Statement of an unknown name did not panic")
		}
	}()
	f.Statement("b", "o")
}

func TestTagStartsTheStatementItNames(t *testing.T) {
	fsys := fstest.MapFS{"deliveries.sql": {Data: []byte("-- name: sweep_reset\nSELECT 1\n")}}
	f := MustParse(fsys, "deliveries.sql")
	if got, want := f.Tag("sweep_reset"), "/* outboxkeeper deliveries.sweep_reset */"; got != want {
		t.Errorf("Tag = %q, want %q", got, want)
	}
	if !strings.HasPrefix(f.Statement("sweep_reset", "o"), f.Tag("sweep_reset")) {
		t.Errorf("the statement %q does not start with its tag", f.Statement("sweep_reset", "o"))
	}
}

// Positional numbers each name once, in order of first use, and leaves an
// @ alone inside literals, identifiers, comments, dollar quotes and the
// jsonb operators.
func TestPositionalNumbersNamesAndPassesOverQuotedText(t *testing.T) {
	for _, c := range []struct {
		name, in, want string
		names          []string
	}{
		{"names in order, a repeat reused", `SELECT @b, @a, @b`, `SELECT $1, $2, $1`, []string{"b", "a"}},
		{"a cast after the name", `SELECT @payloads::jsonb[]`, `SELECT $1::jsonb[]`, []string{"payloads"}},
		{"a string literal", `SELECT '@no', 'it''s @no', @yes`, `SELECT '@no', 'it''s @no', $1`, []string{"yes"}},
		{"a quoted identifier", `SELECT "@no" FROM t WHERE x = @yes`, `SELECT "@no" FROM t WHERE x = $1`, []string{"yes"}},
		{"comments", "/* @no */ SELECT @yes -- @no\n, 1", "/* @no */ SELECT $1 -- @no\n, 1", []string{"yes"}},
		{"a dollar quote", `SELECT $f$ @no $f$, $$@no$$, @yes`, `SELECT $f$ @no $f$, $$@no$$, $1`, []string{"yes"}},
		{"jsonb operators", `SELECT h @> @want, h @? '$.a'`, `SELECT h @> $1, h @? '$.a'`, []string{"want"}},
		{"an address in a word", `SELECT x@y`, `SELECT x@y`, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, names := Positional(c.in)
			if got != c.want {
				t.Errorf("Positional(%q) = %q, want %q", c.in, got, c.want)
			}
			if strings.Join(names, ",") != strings.Join(c.names, ",") {
				t.Errorf("Positional(%q) names = %q, want %q", c.in, names, c.names)
			}
		})
	}
}
