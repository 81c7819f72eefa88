package deploy

import (
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/outboxkeeper/outboxkeeper/internal/store"
	"github.com/outboxkeeper/outboxkeeper/shared/compensate"
	"github.com/outboxkeeper/outboxkeeper/shared/deliver"
	"github.com/outboxkeeper/outboxkeeper/shared/fill"
	"github.com/outboxkeeper/outboxkeeper/shared/migrateresource"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
	"github.com/outboxkeeper/outboxkeeper/shared/prune"
	"github.com/outboxkeeper/outboxkeeper/shared/relay"
	"github.com/outboxkeeper/outboxkeeper/shared/sweep"
)

// Template and code agree on every bound: each pass's Config declares its
// numeric fields' bounds once (pass.Bound), its Validate checks them, and
// this reads them against the template parameters that feed the variables.

// configs are every function's Config, by the name config.Variables uses.
var configs = map[string]interface{ Bounds() []pass.Bound }{
	"fill": fill.Config{}, "sweep": sweep.Config{}, "compensate": compensate.Config{},
	"prune": prune.Config{}, "deliver": deliver.Config{}, "migrate": migrateresource.Config{}, "relay": relay.Config{},
}

// offNote is how a description says what 0 means: "0s - forever".
var offNote = regexp.MustCompile(`\b0s? - `)

// checkBounds: each bounded variable is fed by a parameter stating the
// code's bounds. A Number's MinValue and MaxValue are the bound's (its
// MinValue 0 where 0 means off); a duration's description states the
// range as the code says it ("(a Go duration, 100ms to 15m", "at least
// 1s", "(whole seconds, 1s to 12h"); a description says what 0 means
// ("0s - forever") exactly where 0 is off. And the schema parameter's
// pattern is the schema check's.
func checkBounds(tpl *template) []string {
	var problems []string
	for _, fn := range tpl.functions() {
		vars, _ := get(tpl.Resources[fn], "Properties", "Environment", "Variables").(map[string]any)
		for _, b := range configs[shortName(fn)].Bounds() {
			param, _ := get(vars[b.Variable], "Ref").(string)
			if param == "" {
				problems = append(problems, fmt.Sprintf("%s: %s is not set from a parameter, so no parameter states its bounds", fn, b.Variable))
				continue
			}
			problems = append(problems, checkBound(param, tpl.Parameters[param], b)...)
		}
	}
	return append(problems, checkSchemaPattern(tpl)...)
}

// schemaSamples straddle the schema check's every rule: first character,
// characters, length (52 bytes, so the NOTIFY channels fit).
var schemaSamples = []string{"outbox", "billing_outbox", "_x", "a1", "Outbox", "1abc", "a;drop", "a-b",
	strings.Repeat("a", 52), strings.Repeat("a", 53)}

// checkSchemaPattern: OutboxSchema's AllowedPattern takes a sample exactly
// when the schema check does. (pg_* names, which the pattern takes, fail
// the init naming OUTBOX_SCHEMA.)
func checkSchemaPattern(tpl *template) []string {
	pattern, _ := get(tpl.Parameters["OutboxSchema"], "AllowedPattern").(string)
	re, err := regexp.Compile(pattern)
	if err != nil {
		return []string{fmt.Sprintf("OutboxSchema: AllowedPattern: %v", err)}
	}
	var problems []string
	for _, name := range schemaSamples {
		if code, tpl := store.ValidSchema(name) == nil, re.MatchString(name); code != tpl {
			problems = append(problems, fmt.Sprintf("OutboxSchema: AllowedPattern takes %q: %v, the schema check: %v", name, tpl, code))
		}
	}
	return problems
}

// checkBound compares one parameter with the bound of the variable it feeds.
func checkBound(param string, p any, b pass.Bound) []string {
	var problems []string
	fail := func(format string, args ...any) {
		problems = append(problems, fmt.Sprintf("%s (%s): ", param, b.Variable)+fmt.Sprintf(format, args...))
	}
	desc, _ := get(p, "Description").(string)
	if !strings.HasPrefix(desc, b.Variable+" - ") {
		fail("the description does not start with %q", b.Variable+" - ")
	}
	if got, want := offNote.MatchString(desc), b.OffMeans != ""; got != want {
		fail("the description says what 0 means: %v; in the code 0 is %q", got, b.OffMeans)
	}
	if get(p, "Type") == "Number" {
		lo := b.Min
		if b.OffMeans != "" {
			lo = 0
		}
		if got, ok := number(get(p, "MinValue")); !ok || int64(got) != lo {
			fail("MinValue %v, the code's least is %d", get(p, "MinValue"), lo)
		}
		got, ok := number(get(p, "MaxValue"))
		switch {
		case b.Max == 0 && ok:
			fail("MaxValue %d, the code has no upper bound", got)
		case b.Max != 0 && (!ok || int64(got) != b.Max):
			fail("MaxValue %v, the code's most is %d", get(p, "MaxValue"), b.Max)
		}
		return problems
	}
	want := "(a Go duration, " + b.Range()
	if b.Whole != 0 {
		want = "(" + b.Range()
	}
	if !strings.Contains(desc, want) {
		fail("the description %q does not state the code's range %q", desc, want)
	}
	return problems
}

// TestBoundsNameTheirFieldsVariables: a bound's Variable is its field's
// env tag, the name config.Load reads it by, so the parameter checkBounds
// compares is the one that sets the field.
func TestBoundsNameTheirFieldsVariables(t *testing.T) {
	n := 0
	for name, c := range configs {
		typ := reflect.TypeOf(c)
		for _, b := range c.Bounds() {
			f, ok := typ.FieldByName(b.Field)
			if !ok {
				t.Errorf("%s: a bound names no field %s", name, b.Field)
				continue
			}
			if tag, _, _ := strings.Cut(f.Tag.Get("env"), ","); tag != b.Variable {
				t.Errorf("%s.%s: bound for %s, env tag %q", name, b.Field, b.Variable, tag)
			}
			n++
		}
	}
	if n < 15 {
		t.Fatalf("found %d bounds: fewer than the passes declare", n)
	}
}
