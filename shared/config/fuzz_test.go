package config

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	compensatepkg "github.com/outboxkeeper/outboxkeeper/shared/compensate"
	fillpkg "github.com/outboxkeeper/outboxkeeper/shared/fill"
	relaypkg "github.com/outboxkeeper/outboxkeeper/shared/relay"
	sweeppkg "github.com/outboxkeeper/outboxkeeper/shared/sweep"
)

// FuzzLoad: whatever the environment holds, loading a pass's Config never
// panics, refuses only with an *Error naming one of the variables that pass
// reads (so a bad deployment's init log says which to fix), and accepts
// only a Config its own Validate accepts. One value is set at a time on
// one variable the fuzzer picks, plus a second free-form one.
func FuzzLoad(f *testing.F) {
	for _, seed := range []struct {
		pick  uint8
		value string
	}{
		{0, "2s"}, {0, "0s"}, {0, "-1s"}, {1, "0"}, {1, "100001"}, {2, "1e3"}, {3, "85s"},
		{4, "false"}, {4, "yes"}, {5, "10ms"}, {5, "1h"}, {6, "0"}, {7, "-1"}, {8, "1500ms"},
		{9, "https://sqs.eu-west-1.amazonaws.com/1/dlq"}, {9, "dlq"}, {10, " 3 "}, {11, "Outbox"},
		{12, "9223372036854775807"}, {13, "1.5s"}, {14, "\x00"},
	} {
		f.Add(seed.pick, seed.value, "")
	}
	names := []string{}
	for _, v := range Variables() {
		names = append(names, v.Name)
	}
	f.Fuzz(func(t *testing.T, pick uint8, value, other string) {
		env := FromMap(map[string]string{
			names[int(pick)%len(names)]:     value,
			names[(int(pick)+1)%len(names)]: other,
		})
		check(t, env, "fill", Load[fillpkg.Config])
		check(t, env, "sweep", Load[sweeppkg.Config])
		check(t, env, "compensate", Load[compensatepkg.Config])
		check(t, env, "relay", Load[relaypkg.Config])
	})
}

// check loads one pass's Config from env and holds it to FuzzLoad's rules.
func check[T PassConfig[T]](t *testing.T, env Lookup, pass string, load func(Lookup) (T, error)) {
	t.Helper()
	c, err := load(env)
	if err != nil {
		var ce *Error
		if !errors.As(err, &ce) {
			t.Fatalf("%s: refused without naming a variable: %v", pass, err)
		}
		if !slices.ContainsFunc(Variables(), func(v Variable) bool {
			return v.Name == ce.Variable && slices.Contains(v.UsedBy, pass)
		}) {
			t.Fatalf("%s: the error names %s, which %s does not read: %v", pass, ce.Variable, pass, err)
		}
		if ce.Reason == "" || !strings.Contains(err.Error(), ce.Variable) {
			t.Fatalf("%s: an error without a reason or a name: %v", pass, err)
		}
		return
	}
	if verr := c.Validate(); verr != nil {
		t.Fatalf("%s: accepted a Config its Validate refuses: %v", pass, verr)
	}
	if again := c.WithDefaults(); !reflect.DeepEqual(again, c) {
		t.Fatalf("%s: the loaded Config lacks its defaults: %+v", pass, c)
	}
}
