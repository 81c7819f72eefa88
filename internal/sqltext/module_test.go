package sqltext_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/outboxkeeper/outboxkeeper/internal/sqltext"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/repo"
)

const module = "github.com/outboxkeeper/outboxkeeper"

// migration is a file the migrator applies, not a file of named statements.
var migration = regexp.MustCompile(`^shared/migrations/[0-9]+_[^/]*\.sql$`)

// loaded is one package-level `var X = sqltext.MustParse(fsys, "file.sql")`.
type loaded struct {
	at   string // the file and line of the var
	file sqltext.File
	used map[string]bool
}

// goFile is one parsed Go file of the module.
type goFile struct {
	pkg  string // import path of its directory
	path string
	ast  *ast.File
}

// Every .sql file of named statements in the module parses (no positional
// argument, no empty or twice-named statement), is loaded by a
// package-level sqltext.MustParse (or pass.MustParseStateFile), and every statement name the code looks
// up (File.Statement, File.Tag) exists in it; every statement is looked up
// somewhere. The lookups are read from the source, so a wrong name fails
// here even in code no other test runs.
func TestEveryStatementFileParsesAndEveryLookupExists(t *testing.T) {
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	files, sqlFiles := moduleFiles(t, root)
	vars := map[string]*loaded{} // "importpath.Var"
	loadedFiles := map[string]bool{}
	for _, f := range files {
		for name, load := range mustParseVars(f) {
			dir := filepath.Dir(f.path)
			loadedFiles[rel(root, filepath.Join(dir, load.sqlPath))] = true
			parsed, err := sqltext.Parse(os.DirFS(dir), load.sqlPath)
			if err != nil {
				t.Errorf("%s: %v", rel(root, f.path), err)
				continue
			}
			l := &loaded{at: rel(root, f.path), file: parsed, used: map[string]bool{}}
			for _, stmt := range load.looksUp {
				if !slices.Contains(parsed.Names(), stmt) {
					t.Errorf("%s: %s has no statement %q, which its loader looks up", l.at, load.sqlPath, stmt)
				}
				l.used[stmt] = true
			}
			vars[f.pkg+"."+name] = l
		}
	}
	for _, s := range sqlFiles {
		if !loadedFiles[s] {
			t.Errorf("%s: no package-level sqltext.MustParse loads it", s)
		}
	}
	for _, f := range files {
		checkLookups(t, root, f, vars)
	}
	for key, l := range vars {
		for _, name := range l.file.Names() {
			if !l.used[name] {
				t.Errorf("%s (%s): statement %q is never looked up", key, l.at, name)
			}
		}
	}
	if len(vars) == 0 {
		t.Fatal("found no sqltext.MustParse in the module")
	}
}

// moduleFiles parses every Go file of the module and lists its .sql files
// of named statements, relative to root.
func moduleFiles(t *testing.T, root string) ([]goFile, []string) {
	t.Helper()
	var files []goFile
	var sqlFiles []string
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != root && (strings.HasPrefix(name, ".") || name == "node_modules" || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		r := rel(root, p)
		switch {
		case strings.HasSuffix(name, ".sql") && !migration.MatchString(r):
			sqlFiles = append(sqlFiles, r)
		case strings.HasSuffix(name, ".go"):
			a, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			files = append(files, goFile{pkg: path.Join(module, path.Dir(r)), path: p, ast: a})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files, sqlFiles
}

// loaders are the package-level calls that load a statement file, with
// the statements each looks up itself: a pass's state file is its record
// and read (pass.StateFile.In).
var loaders = []struct {
	pkg, fn string
	looksUp []string
}{
	{module + "/internal/sqltext", "MustParse", nil},
	{module + "/shared/pass", "MustParseStateFile", []string{"record", "read"}},
}

// loadCall is one package-level var set to a loader's call on a literal
// file name.
type loadCall struct {
	sqlPath string
	looksUp []string
}

// mustParseVars finds f's package-level vars set to
// sqltext.MustParse(fsys, "literal.sql") or another of the loaders, by
// name.
func mustParseVars(f goFile) map[string]loadCall {
	out := map[string]loadCall{}
	for _, decl := range f.ast.Decls {
		gen, ok := decl.(*ast.GenDecl)
		if !ok || gen.Tok != token.VAR {
			continue
		}
		for _, spec := range gen.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, v := range vs.Values {
				call, ok := v.(*ast.CallExpr)
				if !ok || len(call.Args) != 2 {
					continue
				}
				for _, l := range loaders {
					pkg := importName(f.ast, l.pkg)
					if pkg == "" || !isSelector(call.Fun, pkg, l.fn) {
						continue
					}
					if lit, ok := stringLit(call.Args[1]); ok {
						out[vs.Names[i].Name] = loadCall{sqlPath: lit, looksUp: l.looksUp}
					}
				}
			}
		}
	}
	return out
}

// checkLookups finds every X.Statement(name, schema) and X.Tag(name) in f
// and checks name against the file X loaded.
func checkLookups(t *testing.T, root string, f goFile, vars map[string]*loaded) {
	t.Helper()
	ast.Inspect(f.ast, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || !(sel.Sel.Name == "Statement" && len(call.Args) == 2 || sel.Sel.Name == "Tag" && len(call.Args) == 1) {
			return true
		}
		key := receiver(f, sel.X)
		l := vars[key]
		if l == nil {
			return true // not a statement file's method
		}
		name, ok := stringLit(call.Args[0])
		if !ok {
			t.Errorf("%s: %s.%s takes a name this test cannot read: look a statement up by a literal name", rel(root, f.path), key, sel.Sel.Name)
			return true
		}
		if !slices.Contains(l.file.Names(), name) {
			t.Errorf("%s: %s.%s(%q): %s has no such statement", rel(root, f.path), key, sel.Sel.Name, name, l.at)
		}
		l.used[name] = true
		return true
	})
}

// receiver is the "importpath.Var" a lookup's receiver names, or "".
func receiver(f goFile, x ast.Expr) string {
	switch r := x.(type) {
	case *ast.Ident:
		return f.pkg + "." + r.Name
	case *ast.SelectorExpr:
		pkg, ok := r.X.(*ast.Ident)
		if !ok {
			return ""
		}
		for _, imp := range f.ast.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if localName(imp, p) == pkg.Name {
				return p + "." + r.Sel.Name
			}
		}
	}
	return ""
}

func importName(f *ast.File, importPath string) string {
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == importPath {
			return localName(imp, p)
		}
	}
	return ""
}

func localName(imp *ast.ImportSpec, importPath string) string {
	if imp.Name != nil {
		return imp.Name.Name
	}
	return path.Base(importPath)
}

func isSelector(e ast.Expr, pkg, name string) bool {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != name {
		return false
	}
	id, ok := sel.X.(*ast.Ident)
	return ok && id.Name == pkg
}

func stringLit(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}

func rel(root, p string) string {
	r, err := filepath.Rel(root, p)
	if err != nil {
		return p
	}
	return filepath.ToSlash(r)
}
