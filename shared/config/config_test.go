package config

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outboxkeeper/outboxkeeper/internal/pg"
	compensatepkg "github.com/outboxkeeper/outboxkeeper/shared/compensate"
	deliverpkg "github.com/outboxkeeper/outboxkeeper/shared/deliver"
	fillpkg "github.com/outboxkeeper/outboxkeeper/shared/fill"
	migratepkg "github.com/outboxkeeper/outboxkeeper/shared/migrateresource"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
	prunepkg "github.com/outboxkeeper/outboxkeeper/shared/prune"
	relaypkg "github.com/outboxkeeper/outboxkeeper/shared/relay"
	sweeppkg "github.com/outboxkeeper/outboxkeeper/shared/sweep"
)

const testURL = "postgres://u@127.0.0.1:5432/db"

// fifoQueue is a FIFO SQS queue URL, a relay's target.
const fifoQueue = "https://sqs.eu-west-1.amazonaws.com/123456789012/orders.fifo"

func TestLoadDefaults(t *testing.T) {
	env := FromMap(map[string]string{"DATABASE_URL": testURL})
	db, err := LoadDatabase(env)
	if err != nil {
		t.Fatal(err)
	}
	if db != (Database{Login: pg.Login{URL: testURL}, Schema: "outbox"}) {
		t.Fatalf("database = %+v", db)
	}
	fill, err := Load[fillpkg.Config](env)
	if err != nil {
		t.Fatal(err)
	}
	if fill != (fillpkg.Config{Schema: "outbox", Grace: 250 * time.Millisecond, BatchLimit: 1000, PageSize: 1000, PassBudget: 20 * time.Second, Tick: 250 * time.Millisecond}) {
		t.Fatalf("fill = %+v", fill)
	}
	sweep, err := Load[sweeppkg.Config](env)
	if err != nil {
		t.Fatal(err)
	}
	if sweep != (sweeppkg.Config{Schema: "outbox", StuckAfter: 60 * time.Second, BatchLimit: 1000, MaxRedeliveries: 10, PassBudget: 20 * time.Second}) {
		t.Fatalf("sweep = %+v", sweep)
	}
	pr, err := Load[prunepkg.Config](env)
	if err != nil {
		t.Fatal(err)
	}
	if pr != (prunepkg.Config{Schema: "outbox", AckedAfter: 24 * time.Hour, DeadAfter: 168 * time.Hour, EventsAfter: pass.Off, BatchLimit: 5000, PassBudget: 20 * time.Second}) {
		t.Fatalf("prune = %+v", pr)
	}
	comp, err := Load[compensatepkg.Config](env)
	if err != nil {
		t.Fatal(err)
	}
	if comp != (compensatepkg.Config{Schema: "outbox", MaxSequences: 10000, Defer: 2 * time.Second, MaxDeferrals: 3, RetryAttempts: 5, RetryInterval: 500 * time.Millisecond, PassBudget: 30 * time.Second}) {
		t.Fatalf("compensate = %+v", comp)
	}
}

// loadInto loads a pass's Config from env into dst and keeps the error.
func loadInto[T PassConfig[T]](dst *T, env Lookup, errs *[]error) {
	var err error
	*dst, err = Load[T](env)
	*errs = append(*errs, err)
}

// orDefault is env with name set to v when env does not set it.
func orDefault(env Lookup, name, v string) Lookup {
	return func(n string) (string, bool) {
		if got, ok := env(n); ok || n != name {
			return got, ok
		}
		return v, true
	}
}

// TestEveryVariable sets each variable of docs/design.md §7 to a good and to a bad value:
// the good one must land in its field, the bad one must fail naming the
// variable and quoting the value.
func TestEveryVariable(t *testing.T) {
	type loaded struct {
		db   Database
		fill fillpkg.Config
		sw   sweeppkg.Config
		comp compensatepkg.Config
		pr   prunepkg.Config
		rl   relaypkg.Config
		mg   migratepkg.Config
		dl   deliverpkg.Config
		// stack is LoadStack's.
		stack string
	}
	load := func(vars map[string]string) (loaded, error) {
		env := FromMap(vars)
		var l loaded
		var errs []error
		var err error
		l.db, err = LoadDatabase(env)
		errs = append(errs, err)
		loadInto(&l.fill, env, &errs)
		loadInto(&l.sw, env, &errs)
		loadInto(&l.comp, env, &errs)
		loadInto(&l.pr, env, &errs)
		// RELAY_TARGET is required: a FIFO queue unless the case sets it.
		loadInto(&l.rl, orDefault(env, "RELAY_TARGET", fifoQueue), &errs)
		loadInto(&l.mg, env, &errs)
		// DELIVER_WEBHOOK_HOSTS needs a signing key: one unless the case sets it.
		loadInto(&l.dl, orDefault(env, "DELIVER_SIGNING_SECRET_ARN", "arn:aws:secretsmanager:eu-west-1:1:secret:sign"), &errs)
		l.stack, err = LoadStack(env)
		errs = append(errs, err)
		return l, errors.Join(errs...)
	}
	// secret: the variable belongs to secret mode, so its cases log in
	// with DATABASE_SECRET_ARN instead of DATABASE_URL.
	secret := map[string]bool{"DATABASE_SECRET_ARN": true, "DATABASE_HOST": true, "DATABASE_PORT": true, "DATABASE_NAME": true}
	const arn = "arn:aws:secretsmanager:eu-west-1:1:secret:db"
	cases := []struct {
		name  string
		good  string
		check func(loaded) bool
		bad   []string
	}{
		{"DATABASE_URL", testURL, func(l loaded) bool { return l.db.URL == testURL }, nil},
		{"DATABASE_HOST", "outbox.proxy-abc.eu-west-1.rds.amazonaws.com", func(l loaded) bool { return l.db.Host == "outbox.proxy-abc.eu-west-1.rds.amazonaws.com" },
			[]string{"db.internal/x", "user@db", "two words"}},
		{"DATABASE_PORT", "6543", func(l loaded) bool { return l.db.Port == 6543 }, []string{"0", "65536", "pg"}},
		{"DATABASE_NAME", "app", func(l loaded) bool { return l.db.Name == "app" }, nil},
		{"DATABASE_CA_PEM", "-----BEGIN CERTIFICATE-----", func(l loaded) bool { return l.db.CAPEM != "" }, nil},
		{"DATABASE_CA_SECRET_ARN", "arn:aws:secretsmanager:eu-west-1:1:secret:rds-ca", func(l loaded) bool { return l.db.CASecretARN != "" }, []string{"rds-ca"}},
		{"DATABASE_SECRET_ARN", "arn:aws:secretsmanager:eu-west-1:1:secret:db", func(l loaded) bool { return l.db.SecretARN != "" }, []string{"not-an-arn"}},
		{"DATABASE_IAM_AUTH", "true", func(l loaded) bool { return l.db.IAMAuth }, []string{"yes please"}},
		{"STACK_NAME", "billing-outbox", func(l loaded) bool { return l.stack == "billing-outbox" }, []string{"billing_outbox", "2nd", "has space"}},
		{"OUTBOX_SCHEMA", "billing_outbox", func(l loaded) bool { return l.db.Schema == "billing_outbox" }, []string{"Outbox", "a;drop", "pg_catalog", "1abc", strings.Repeat("a", 64)}},
		{"FILL_GRACE", "750ms", func(l loaded) bool { return l.fill.Grace == 750*time.Millisecond }, []string{"2", "-1s", "soon"}},
		{"FILL_BATCH_LIMIT", "2", func(l loaded) bool { return l.fill.BatchLimit == 2 }, []string{"0", "x", "1.5"}},
		{"FILL_PAGE_SIZE", "50", func(l loaded) bool { return l.fill.PageSize == 50 }, []string{"-3", "lots"}},
		{"FILL_PASS_BUDGET", "5s", func(l loaded) bool { return l.fill.PassBudget == 5*time.Second }, []string{"10ms", "5", "720h", "16m"}},
		{"FILL_WATCH", "false", func(l loaded) bool { return l.fill.Bounded }, []string{"maybe"}},
		{"FILL_TICK", "250ms", func(l loaded) bool { return l.fill.Tick == 250*time.Millisecond }, []string{"5ms", "2m", "often"}},
		{"SWEEP_STUCK_AFTER", "90s", func(l loaded) bool { return l.sw.StuckAfter == 90*time.Second }, []string{"0s", "1m30"}},
		{"SWEEP_BATCH_LIMIT", "100", func(l loaded) bool { return l.sw.BatchLimit == 100 }, []string{"0"}},
		{"SWEEP_MAX_REDELIVERIES", "0", func(l loaded) bool { return l.sw.MaxRedeliveries == pass.Off }, []string{"-1", "many"}},
		{"SWEEP_PASS_BUDGET", "3s", func(l loaded) bool { return l.sw.PassBudget == 3*time.Second }, []string{"0s", "720h", "15m1s"}},
		{"COMPENSATE_DLQ_URL", "https://sqs.eu-west-1.amazonaws.com/1/dlq", func(l loaded) bool { return l.comp.DLQURL != "" }, []string{"dlq"}},
		{"COMPENSATE_MAX_SEQUENCES", "500", func(l loaded) bool { return l.comp.MaxSequences == 500 }, []string{"0", "1000000"}},
		{"COMPENSATE_DEFER", "5s", func(l loaded) bool { return l.comp.Defer == 5*time.Second }, []string{"1500ms", "13h", "-1s"}},
		{"COMPENSATE_MAX_DEFERRALS", "7", func(l loaded) bool { return l.comp.MaxDeferrals == 7 }, []string{"0"}},
		{"COMPENSATE_RETRY_ATTEMPTS", "0", func(l loaded) bool { return l.comp.RetryAttempts == pass.Off }, []string{"-1", "101", "two"}},
		{"COMPENSATE_RETRY_INTERVAL", "100ms", func(l loaded) bool { return l.comp.RetryInterval == 100*time.Millisecond }, []string{"-5ms", "fast"}},
		{"COMPENSATE_PASS_BUDGET", "45s", func(l loaded) bool { return l.comp.PassBudget == 45*time.Second }, []string{"0s", "50ms", "16m"}},
		{"PRUNE_ACKED_AFTER", "0", func(l loaded) bool { return l.pr.AckedAfter == pass.Off }, []string{"500ms", "a day"}},
		{"PRUNE_DEAD_AFTER", "720h", func(l loaded) bool { return l.pr.DeadAfter == 720*time.Hour }, []string{"-1h", "week"}},
		{"PRUNE_EVENTS_AFTER", "2160h", func(l loaded) bool { return l.pr.EventsAfter == 2160*time.Hour }, []string{"1ms", "90d"}},
		{"PRUNE_BATCH_LIMIT", "200", func(l loaded) bool { return l.pr.BatchLimit == 200 }, []string{"0", "100001"}},
		{"PRUNE_PASS_BUDGET", "10s", func(l loaded) bool { return l.pr.PassBudget == 10*time.Second }, []string{"0s", "50ms", "720h"}},
		{"RELAY_NAME", "orders-bus_2", func(l loaded) bool { return l.rl.Name == "orders-bus_2" }, []string{"-x", "a b", "relay:x", strings.Repeat("a", 61)}},
		{"RELAY_TARGET", "arn:aws:kinesis:eu-west-1:123456789012:stream/orders", func(l loaded) bool { return l.rl.Target == "arn:aws:kinesis:eu-west-1:123456789012:stream/orders" },
			[]string{"orders", "arn:aws:lambda:eu-west-1:123456789012:function:f", "arn:aws:sqs:eu-west-1:12:q"}},
		{"RELAY_TOPICS", "orders.*,billing.invoice.*", func(l loaded) bool { return l.rl.Topics == "orders.*,billing.invoice.*" }, []string{"orders.*,", ",", "orders.\xff"}},
		{"RELAY_GROUP_BY", "tenant", func(l loaded) bool { return l.rl.GroupBy == "tenant" }, []string{"none"}},
		{"RELAY_AGGREGATE_TYPES", "order,invoice", func(l loaded) bool { return l.rl.AggregateTypes == "order,invoice" }, []string{"order,", "order,,invoice", "\xff"}},
		{"RELAY_SOURCE", "billing.outbox", func(l loaded) bool { return l.rl.Source == "billing.outbox" }, nil},
		{"RELAY_MAX_ATTEMPTS", "0", func(l loaded) bool { return l.rl.MaxAttempts == relaypkg.NeverPark }, []string{"1001", "-2", "many"}},
		{"RELAY_TICK", "50ms", func(l loaded) bool { return l.rl.Tick == 50*time.Millisecond }, []string{"1ms", "2m", "0s"}},
		{"RELAY_BATCH_LIMIT", "10000", func(l loaded) bool { return l.rl.BatchLimit == 10000 }, []string{"0", "10001"}},
		{"RELAY_CONCURRENCY", "16", func(l loaded) bool { return l.rl.Concurrency == 16 }, []string{"0", "65"}},
		{"RELAY_PASS_BUDGET", "30s", func(l loaded) bool { return l.rl.PassBudget == 30*time.Second }, []string{"0s", "16m"}},
		{"RELAY_WATCH", "false", func(l loaded) bool { return l.rl.Bounded }, []string{"sometimes"}},
		{"MAINTAINER_SECRET_ARN", "arn:aws:secretsmanager:eu-west-1:123456789012:secret:maint-AbCdEf",
			func(l loaded) bool {
				return l.mg.MaintainerSecretARN == "arn:aws:secretsmanager:eu-west-1:123456789012:secret:maint-AbCdEf"
			}, []string{"maint"}},
		{"MAINTAINER_IAM_USER", "outbox_maintainer", func(l loaded) bool { return l.mg.MaintainerIAMUser == "outbox_maintainer" }, []string{"a;drop", "1abc"}},
		{"RELAY_START", "latest", func(l loaded) bool { return l.rl.Start == relaypkg.StartLatest }, []string{"newest"}},
		{"DELIVER_TICK", "50ms", func(l loaded) bool { return l.dl.Tick == 50*time.Millisecond }, []string{"1ms", "2m", "0s"}},
		{"DELIVER_BATCH_LIMIT", "1000", func(l loaded) bool { return l.dl.BatchLimit == 1000 }, []string{"0", "1001"}},
		{"DELIVER_CONCURRENCY", "32", func(l loaded) bool { return l.dl.Concurrency == 32 }, []string{"0", "257"}},
		{"DELIVER_WEBHOOK_TIMEOUT", "3s", func(l loaded) bool { return l.dl.WebhookTimeout == 3*time.Second }, []string{"0s", "1ms", "6m"}},
		{"DELIVER_WEBHOOK_HOSTS", "*.example.com", func(l loaded) bool { return l.dl.WebhookHosts == "*.example.com" }, []string{"https://x"}},
		{"DELIVER_SIGNING_SECRET_ARN", "arn:aws:secretsmanager:eu-west-1:1:secret:sign", func(l loaded) bool { return l.dl.SigningSecretARN != "" }, nil},
		{"DELIVER_CA_BUNDLE", "", func(l loaded) bool { return l.dl.CABundle == "" }, []string{"/nonexistent/ca.pem"}},
		{"DELIVER_ALLOW_LOOPBACK", "true", func(l loaded) bool { return l.dl.AllowLoopback }, []string{"sometimes"}},
		{"DELIVER_PASS_BUDGET", "30s", func(l loaded) bool { return l.dl.PassBudget == 30*time.Second }, []string{"0s", "16m"}},
		{"DELIVER_WATCH", "false", func(l loaded) bool { return l.dl.Bounded }, []string{"sometimes"}},
	}
	listed := map[string]bool{}
	for _, v := range Variables() {
		listed[v.Name] = true
	}
	for _, c := range cases {
		if !listed[c.name] {
			t.Errorf("%s is tested but missing from Variables()", c.name)
		}
		delete(listed, c.name)
		t.Run(c.name+"/good", func(t *testing.T) {
			vars := map[string]string{"DATABASE_URL": testURL}
			if secret[c.name] {
				vars = map[string]string{"DATABASE_SECRET_ARN": arn}
			}
			vars[c.name] = c.good
			l, err := load(vars)
			if err != nil {
				t.Fatal(err)
			}
			if !c.check(l) {
				t.Fatalf("%s=%q did not land: %+v", c.name, c.good, l)
			}
		})
		for _, bad := range c.bad {
			t.Run(c.name+"/bad/"+bad, func(t *testing.T) {
				vars := map[string]string{"DATABASE_URL": testURL}
				if secret[c.name] {
					vars = map[string]string{"DATABASE_SECRET_ARN": arn}
				}
				vars[c.name] = bad
				_, err := load(vars)
				var cerr *Error
				if !errors.As(err, &cerr) {
					t.Fatalf("%s=%q: want a config error, got %v", c.name, bad, err)
				}
				if cerr.Variable != c.name || cerr.Value != bad {
					t.Fatalf("error names %s=%q, want %s=%q: %v", cerr.Variable, cerr.Value, c.name, bad, err)
				}
				if !strings.Contains(err.Error(), c.name) {
					t.Fatalf("message %q does not name %s", err, c.name)
				}
			})
		}
	}
	for name := range listed {
		t.Errorf("Variables() lists %s but no case tests it", name)
	}
}

// A pass budget is bounded above by Lambda's longest timeout: 720h was
// accepted, and a budget no invocation can have hides a typo.
func TestPassBudgetAboveLambdasLongestTimeoutNamesTheVariable(t *testing.T) {
	loaders := map[string]func(Lookup) error{
		"FILL_PASS_BUDGET":  func(env Lookup) error { _, err := Load[fillpkg.Config](env); return err },
		"SWEEP_PASS_BUDGET": func(env Lookup) error { _, err := Load[sweeppkg.Config](env); return err },
		"PRUNE_PASS_BUDGET": func(env Lookup) error { _, err := Load[prunepkg.Config](env); return err },
		"COMPENSATE_PASS_BUDGET": func(env Lookup) error {
			_, err := Load[compensatepkg.Config](env)
			return err
		},
	}
	for name, load := range loaders {
		t.Run(name+"=720h", func(t *testing.T) {
			err := load(FromMap(map[string]string{"DATABASE_URL": testURL, name: "720h"}))
			var cerr *Error
			if !errors.As(err, &cerr) || cerr.Variable != name {
				t.Fatalf("%v, want a config error naming %s", err, name)
			}
			if !strings.Contains(cerr.Reason, "15m") {
				t.Errorf("reason %q does not state the upper bound 15m", cerr.Reason)
			}
		})
		t.Run(name+"=15m", func(t *testing.T) {
			if err := load(FromMap(map[string]string{"DATABASE_URL": testURL, name: "15m"})); err != nil {
				t.Errorf("Lambda's longest timeout is refused: %v", err)
			}
		})
	}
}

// FILL_GRACE=0s means no grace at all, where an unset one means the default.
func TestStackDefaultsToTheDefaultStack(t *testing.T) {
	stack, err := LoadStack(FromMap(map[string]string{}))
	if err != nil {
		t.Fatal(err)
	}
	if stack != "outboxkeeper" {
		t.Errorf("LoadStack without STACK_NAME = %q, want outboxkeeper", stack)
	}
}

func TestFillGraceZeroMeansNone(t *testing.T) {
	c, err := Load[fillpkg.Config](FromMap(map[string]string{"FILL_GRACE": "0s"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Grace != pass.Off {
		t.Errorf("Grace = %s, want pass.Off (no grace)", c.Grace)
	}
}

func TestDatabaseSourceRules(t *testing.T) {
	cases := []struct {
		name    string
		vars    map[string]string
		varName string
	}{
		{"neither URL nor secret", map[string]string{}, "DATABASE_URL"},
		{"both URL and secret", map[string]string{"DATABASE_URL": testURL, "DATABASE_SECRET_ARN": "arn:aws:secretsmanager:x"}, "DATABASE_SECRET_ARN"},
		{"IAM auth without URL", map[string]string{"DATABASE_SECRET_ARN": "arn:aws:secretsmanager:x", "DATABASE_IAM_AUTH": "true"}, "DATABASE_IAM_AUTH"},
		{"host with a URL", map[string]string{"DATABASE_URL": testURL, "DATABASE_HOST": "db.internal"}, "DATABASE_HOST"},
		{"port with a URL", map[string]string{"DATABASE_URL": testURL, "DATABASE_PORT": "5433"}, "DATABASE_PORT"},
		{"database name with a URL", map[string]string{"DATABASE_URL": testURL, "DATABASE_NAME": "app"}, "DATABASE_NAME"},
		{"two CA bundles", map[string]string{"DATABASE_URL": testURL, "DATABASE_CA_PEM": "x", "DATABASE_CA_SECRET_ARN": "arn:aws:secretsmanager:x"}, "DATABASE_CA_SECRET_ARN"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := LoadDatabase(FromMap(c.vars))
			var cerr *Error
			if !errors.As(err, &cerr) || cerr.Variable != c.varName {
				t.Fatalf("want an error naming %s, got %v", c.varName, err)
			}
		})
	}
}

// Variables lists exactly the variables the pass configs and the database
// login read: every `env` tag is listed for its function, and nothing else.
func TestVariablesAreThePassConfigsTags(t *testing.T) {
	tagged := map[string][]string{}
	for fn, cfg := range map[string]any{"fill": fillpkg.Config{}, "sweep": sweeppkg.Config{}, "compensate": compensatepkg.Config{},
		"prune": prunepkg.Config{}, "relay": relaypkg.Config{}, "deliver": deliverpkg.Config{}, "migrate": migratepkg.Config{}} {
		typ := reflect.TypeOf(cfg)
		for i := range typ.NumField() {
			if tag, ok := typ.Field(i).Tag.Lookup("env"); ok {
				name, _ := strings.CutSuffix(tag, ",not")
				tagged[name] = append(tagged[name], fn)
			}
		}
	}
	for _, v := range Variables() {
		if strings.HasPrefix(v.Name, "DATABASE_") || v.Name == "STACK_NAME" {
			continue // LoadDatabase's and LoadStack's
		}
		got := tagged[v.Name]
		slices.Sort(got)
		want := slices.Sorted(slices.Values(v.UsedBy))
		if !slices.Equal(got, want) {
			t.Errorf("%s: listed for %v, read by %v", v.Name, want, got)
		}
		delete(tagged, v.Name)
	}
	for name, fns := range tagged {
		t.Errorf("%s is read by %v but not listed in Variables()", name, fns)
	}
}

// The relay's settings that depend on each other fail the init naming
// the variable to change: a FIFO target needs a group, an EventBridge
// target a Source EventBridge takes, and a target is required.
func TestRelayConfigurationRefusalsNameTheVariable(t *testing.T) {
	cases := []struct {
		name, variable string
		vars           map[string]string
	}{
		{"FIFO queue without groups", "RELAY_GROUP_BY", map[string]string{"RELAY_TARGET": fifoQueue, "RELAY_GROUP_BY": "none"}},
		{"FIFO topic without groups", "RELAY_GROUP_BY", map[string]string{"RELAY_TARGET": "arn:aws:sns:eu-west-1:123456789012:orders.fifo", "RELAY_GROUP_BY": "none"}},
		{"EventBridge source of AWS's own", "RELAY_SOURCE", map[string]string{"RELAY_TARGET": "arn:aws:events:eu-west-1:123456789012:event-bus/orders", "RELAY_SOURCE": "aws.orders"}},
		{"no target", "RELAY_TARGET", map[string]string{}},
		{"an unknown kind of ARN", "RELAY_TARGET", map[string]string{"RELAY_TARGET": "arn:aws:dynamodb:eu-west-1:123456789012:table/orders"}},
		{"a topic pattern that cannot match", "RELAY_TOPICS", map[string]string{"RELAY_TARGET": fifoQueue, "RELAY_TOPICS": "orders.*, ,billing.*"}},
		{"an aggregate type list with a stray comma", "RELAY_AGGREGATE_TYPES", map[string]string{"RELAY_TARGET": fifoQueue, "RELAY_AGGREGATE_TYPES": "order, ,invoice"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.vars["DATABASE_URL"] = testURL
			_, err := Load[relaypkg.Config](FromMap(c.vars))
			var cerr *Error
			if !errors.As(err, &cerr) {
				t.Fatalf("want a config error naming %s, got %v", c.variable, err)
			}
			if cerr.Variable != c.variable {
				t.Errorf("the error names %s, want %s: %v", cerr.Variable, c.variable, err)
			}
		})
	}
	// Without groups is fine on a standard queue, and the default Source
	// follows the schema.
	c, err := Load[relaypkg.Config](FromMap(map[string]string{
		"RELAY_TARGET": "arn:aws:events:eu-west-1:123456789012:event-bus/orders", "OUTBOX_SCHEMA": "billing", "RELAY_GROUP_BY": "none",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Source != "outboxkeeper.billing" {
		t.Errorf("default Source %q, want outboxkeeper.billing", c.Source)
	}
}
