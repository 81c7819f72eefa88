// Package sqltext is how statements live in .sql files: the one templating
// rule for the schema name (shared with the migrations) and the loader of
// named statements a package embeds beside the code that runs them.
//
// A file holds statements, each started by a line `-- name: <name>` and
// running to the next such line. Full-line comments explain the clause
// below them and are stripped at load, so the server never parses them;
// each statement is sent prefixed with `/* outboxkeeper <file>.<name> */`,
// which names it in pg_stat_activity and pg_stat_statements. Arguments are
// named (@name, pgx.NamedArgs); a positional $1 is refused at load.
package sqltext

import (
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
)

// Render fills the schema template of sql: {{schema}} becomes the quoted
// identifier and {{schema_name}} its text as a string literal. A valid
// outbox schema name (store.ValidSchema) holds no quote, so pasting it into
// the literal is safe; callers validate it first.
func Render(sql, schema string) string {
	return strings.NewReplacer(
		"{{schema}}", pgx.Identifier{schema}.Sanitize(),
		"{{schema_name}}", "'"+schema+"'",
	).Replace(sql)
}

// File is one .sql file's statements, by name, still templated, and the
// ones rendered so far.
type File struct {
	name       string
	statements map[string]string
	rendered   *renders
}

// renders caches a file's statements by name and schema: a process runs
// on a handful of schemas, so it stays small, and a statement is rendered
// once however often it runs.
type renders struct {
	mu sync.RWMutex
	by map[[2]string]string
}

var (
	nameLine   = regexp.MustCompile(`^--\s*name:\s*([a-z][a-z0-9_]*)\s*$`)
	positional = regexp.MustCompile(`\$[0-9]+`)
)

// Parse reads the statements of the file at name in fsys.
func Parse(fsys fs.FS, name string) (File, error) {
	body, err := fs.ReadFile(fsys, name)
	if err != nil {
		return File{}, err
	}
	base := strings.TrimSuffix(path.Base(name), ".sql")
	f := File{name: base, statements: map[string]string{}, rendered: &renders{by: map[[2]string]string{}}}
	var current string
	var lines []string
	flush := func() error {
		if current == "" {
			return nil
		}
		text := strings.TrimSuffix(strings.TrimSpace(strings.Join(lines, "\n")), ";")
		if text == "" {
			return fmt.Errorf("sqltext: %s: statement %q is empty", name, current)
		}
		if loc := positional.FindString(text); loc != "" {
			return fmt.Errorf("sqltext: %s: statement %q uses the positional argument %s: name it (@name)", name, current, loc)
		}
		f.statements[current] = tag(base, current) + " " + text
		return nil
	}
	for i, line := range strings.Split(string(body), "\n") {
		if m := nameLine.FindStringSubmatch(strings.TrimSpace(line)); m != nil {
			if err := flush(); err != nil {
				return File{}, err
			}
			if _, dup := f.statements[m[1]]; dup {
				return File{}, fmt.Errorf("sqltext: %s:%d: statement %q is named twice", name, i+1, m[1])
			}
			current, lines = m[1], nil
			continue
		}
		if strings.HasPrefix(strings.TrimSpace(line), "--") || current == "" {
			continue // an explanation, or the file's opening comment
		}
		lines = append(lines, strings.TrimRight(line, " \t"))
	}
	if err := flush(); err != nil {
		return File{}, err
	}
	return f, nil
}

// tag is the comment a statement is sent with.
func tag(file, name string) string { return "/* outboxkeeper " + file + "." + name + " */" }

// MustParse is Parse for embedded files: a malformed one is a programming
// error, caught by any test that builds the package's statements.
func MustParse(fsys fs.FS, name string) File {
	f, err := Parse(fsys, name)
	if err != nil {
		panic(err)
	}
	return f
}

// Names lists the file's statements.
func (f File) Names() []string {
	out := make([]string, 0, len(f.statements))
	for n := range f.statements {
		out = append(out, n)
	}
	return out
}

// Statement is the named statement rendered for schema, rendered once and
// kept, so code may look a statement up where it runs it. A name the file
// does not hold panics; every literal name the code looks up is checked
// against its file by this package's module test.
func (f File) Statement(name, schema string) string {
	key := [2]string{name, schema}
	f.rendered.mu.RLock()
	out, ok := f.rendered.by[key]
	f.rendered.mu.RUnlock()
	if ok {
		return out
	}
	s, ok := f.statements[name]
	if !ok {
		panic(fmt.Sprintf("sqltext: %s.sql has no statement %q", f.name, name))
	}
	out = Render(s, schema)
	f.rendered.mu.Lock()
	f.rendered.by[key] = out
	f.rendered.mu.Unlock()
	return out
}

// Tag is the comment the named statement starts with, which names it in
// pg_stat_activity and pg_stat_statements: what a test looks for there.
// A name the file does not hold panics, as Statement does.
func (f File) Tag(name string) string {
	if _, ok := f.statements[name]; !ok {
		panic(fmt.Sprintf("sqltext: %s.sql has no statement %q", f.name, name))
	}
	return tag(f.name, name)
}

// Positional rewrites a statement's named arguments (@name) as $1, $2, …
// for a driver that takes positional ones only (database/sql's), and
// returns the names in their order: the same name is the same $n. String
// literals, quoted identifiers, comments and dollar-quoted bodies are
// passed over, so an @ inside them is never taken for an argument; an @
// not followed by a letter or _ (the jsonb operators @>, @?, @@) is an
// operator.
func Positional(sql string) (string, []string) {
	var out strings.Builder
	var names []string
	index := map[string]int{}
	for i := 0; i < len(sql); {
		if end := passOver(sql, i); end > i {
			out.WriteString(sql[i:end])
			i = end
			continue
		}
		if end := argumentEnd(sql, i); end > i {
			name := sql[i+1 : end]
			n, ok := index[name]
			if !ok {
				names = append(names, name)
				n = len(names)
				index[name] = n
			}
			fmt.Fprintf(&out, "$%d", n)
			i = end
			continue
		}
		out.WriteByte(sql[i])
		i++
	}
	return out.String(), names
}

// passOver is the end of the string literal, quoted identifier, comment or
// dollar-quoted body that starts at i, or i when none does. An unclosed
// one runs to the end of sql.
func passOver(sql string, i int) int {
	rest := sql[i:]
	switch {
	case rest[0] == '\'' || rest[0] == '"':
		return quotedEnd(sql, i)
	case strings.HasPrefix(rest, "--"):
		if end := strings.IndexByte(rest, '\n'); end >= 0 {
			return i + end
		}
		return len(sql)
	case strings.HasPrefix(rest, "/*"):
		if end := strings.Index(rest[2:], "*/"); end >= 0 {
			return i + 2 + end + 2
		}
		return len(sql)
	case rest[0] == '$':
		return dollarQuotedEnd(sql, i)
	}
	return i
}

// quotedEnd is the end of the '…' or "…" at i; a doubled quote inside is
// the quote itself.
func quotedEnd(sql string, i int) int {
	q := sql[i]
	for end := i + 1; end < len(sql); end++ {
		if sql[end] != q {
			continue
		}
		if end+1 < len(sql) && sql[end+1] == q {
			end++
			continue
		}
		return end + 1
	}
	return len(sql)
}

// dollarQuotedEnd is the end of the $$…$$ or $tag$…$tag$ at i, or i when
// the $ at i opens none (a $1 parameter, say).
func dollarQuotedEnd(sql string, i int) int {
	j := i + 1
	for j < len(sql) && identByte(sql[j], j == i+1) {
		j++
	}
	if j >= len(sql) || sql[j] != '$' {
		return i
	}
	tag := sql[i : j+1]
	if end := strings.Index(sql[j+1:], tag); end >= 0 {
		return j + 1 + end + len(tag)
	}
	return len(sql)
}

// argumentEnd is the end of the @name at i, or i when there is none: an @
// not followed by a letter or _, or one inside a name, is an operator or
// part of the name.
func argumentEnd(sql string, i int) int {
	if sql[i] != '@' || i+1 >= len(sql) || !identByte(sql[i+1], true) || (i > 0 && identByte(sql[i-1], false)) {
		return i
	}
	j := i + 1
	for j < len(sql) && identByte(sql[j], false) {
		j++
	}
	return j
}

// identByte: c may stand in an identifier, first or after the first.
func identByte(c byte, first bool) bool {
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (!first && c >= '0' && c <= '9')
}
