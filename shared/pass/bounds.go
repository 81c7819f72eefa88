package pass

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/outboxkeeper/outboxkeeper/internal/setting"
	"github.com/outboxkeeper/outboxkeeper/internal/store"
)

// MaxPassBudget bounds every *_PASS_BUDGET: Lambda's longest timeout. A
// budget above it is a typo (720h), which no invocation could ever spend.
const MaxPassBudget = setting.MaxPassBudget

// MinPassBudget is the shortest pass budget: a pass needs a few statements.
const MinPassBudget = 100 * time.Millisecond

// Bound is one numeric Config field's accepted values, declared once in
// its package's table: the Config's defaults and Validate come from it,
// and infra/deploy compares it with the template.yaml parameter feeding
// Variable, so template and code cannot disagree.
type Bound struct {
	// Field is the Config field, Variable the environment variable (its
	// env tag) that sets it.
	Field, Variable string
	// Default is the field's value when zero. Min and Max bound the rest,
	// inclusive; Max 0 means no upper bound. A duration's are nanoseconds.
	Default, Min, Max int64
	// OffMeans, when set, says what Off means for this field (0 in the
	// variable); Off is refused otherwise.
	OffMeans string
	// Whole, when set, is the unit a duration must be a whole number of.
	Whole time.Duration
	// Why explains the upper bound, said with it.
	Why string
	// Duration says the field is a time.Duration.
	Duration bool
}

// Range is a field's accepted values, inclusive; Max 0 means no upper
// bound.
type Range struct{ Min, Max int64 }

// Ints is lo to hi.
func Ints(lo, hi int) Range { return Range{int64(lo), int64(hi)} }

// Durations is lo to hi.
func Durations(lo, hi time.Duration) Range { return Range{int64(lo), int64(hi)} }

// AtLeast is lo and above.
func AtLeast(lo time.Duration) Range { return Range{Min: int64(lo)} }

// Int bounds an int field.
func Int(field, variable string, def int, r Range) Bound {
	return Bound{Field: field, Variable: variable, Default: int64(def), Min: r.Min, Max: r.Max}
}

// Dur bounds a time.Duration field.
func Dur(field, variable string, def time.Duration, r Range) Bound {
	return Bound{Field: field, Variable: variable, Default: int64(def), Min: r.Min, Max: r.Max, Duration: true}
}

// PassBudget bounds a pass's PassBudget field: MinPassBudget to
// MaxPassBudget.
func PassBudget(variable string, def time.Duration) Bound {
	return Dur("PassBudget", variable, def, Durations(MinPassBudget, MaxPassBudget)).Because("Lambda's longest timeout")
}

// OrOff accepts Off too, meaning means.
func (b Bound) OrOff(means string) Bound { b.OffMeans = means; return b }

// InWhole requires a whole number of unit.
func (b Bound) InWhole(unit time.Duration) Bound { b.Whole = unit; return b }

// Because explains the upper bound.
func (b Bound) Because(why string) Bound { b.Why = why; return b }

// Accepts says v (after defaults) is one of the field's values.
func (b Bound) Accepts(v int64) bool {
	if v == Off {
		return b.OffMeans != ""
	}
	return v >= b.Min && (b.Max == 0 || v <= b.Max) && (b.Whole == 0 || v%int64(b.Whole) == 0)
}

// Format writes v as the variable takes it: "15m", "100ms", "1000".
func (b Bound) Format(v int64) string {
	if !b.Duration {
		return strconv.FormatInt(v, 10)
	}
	s := time.Duration(v).String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// Range is the accepted values as the template's descriptions state them:
// "100ms to 15m", "at least 1s", "whole seconds, 1s to 12h".
func (b Bound) Range() string {
	r := "at least " + b.Format(b.Min)
	if b.Max != 0 {
		r = b.Format(b.Min) + " to " + b.Format(b.Max)
	}
	if b.Whole == time.Second {
		r = "whole seconds, " + r
	}
	return r
}

// Reason is the refusal of a value outside the bound.
func (b Bound) Reason() string {
	r := "must be " + b.Range()
	if b.Why != "" {
		r += " (" + b.Why + ")"
	}
	if b.OffMeans != "" {
		r += ", or 0 for " + b.OffMeans
	}
	return r
}

// WithDefaults returns cfg (a Config struct) with every zero bounded field
// at its Default, and an empty Schema field at store.DefaultSchema.
func WithDefaults[C any](cfg C, bounds []Bound) C {
	v := reflect.ValueOf(&cfg).Elem()
	if f := v.FieldByName("Schema"); f.IsValid() && f.String() == "" {
		f.SetString(store.DefaultSchema)
	}
	for _, b := range bounds {
		if f := v.FieldByName(b.Field); f.Int() == 0 {
			f.SetInt(b.Default)
		}
	}
	return cfg
}

// Validate is a Config's one check, on cfg with its defaults: its Schema
// field (a plain identifier), then each bound. Its error is a
// *setting.Error naming the field, which shared/config turns into the
// variable's name.
func Validate[C any](name string, cfg C, bounds []Bound) error {
	cfg = WithDefaults(cfg, bounds)
	c := setting.Checker{Pass: name}
	v := reflect.ValueOf(cfg)
	if f := v.FieldByName("Schema"); f.IsValid() {
		c.Check(store.ValidSchema(f.String()) == nil, "Schema", f.String(), "must be a plain lower-case identifier, not pg_*")
	}
	for _, b := range bounds {
		f := v.FieldByName(b.Field)
		if !f.IsValid() {
			panic(fmt.Sprintf("pass: %s's bound names no field %s", name, b.Field))
		}
		c.Check(b.Accepts(f.Int()), b.Field, f.Interface(), b.Reason())
	}
	return c.Err()
}
