package deploy

import (
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"github.com/outboxkeeper/outboxkeeper/shared/compensate"
	"github.com/outboxkeeper/outboxkeeper/shared/config"
	"github.com/outboxkeeper/outboxkeeper/shared/deliver"
	"github.com/outboxkeeper/outboxkeeper/shared/fill"
	"github.com/outboxkeeper/outboxkeeper/shared/migrateresource"
	"github.com/outboxkeeper/outboxkeeper/shared/prune"
	"github.com/outboxkeeper/outboxkeeper/shared/relay"
	"github.com/outboxkeeper/outboxkeeper/shared/sweep"
)

// The functions' environment: what each variable is set to in every
// database mode, and the parameters' patterns, against the configuration
// loader.

var scenarios = []scenario{
	{name: "secret", params: map[string]string{
		"DatabaseSecretArn": "arn:aws:secretsmanager:eu-west-1:123456789012:secret:outbox-AbCdEf",
	}},
	// The secret RDS manages for a master user (username and password
	// only), the endpoint from the parameters, verified TLS.
	{name: "rds-managed secret", params: map[string]string{
		"DatabaseSecretArn":   "arn:aws:secretsmanager:eu-west-1:123456789012:secret:rds!db-0123-AbCdEf",
		"DatabaseHost":        "outbox.cluster-abc.eu-west-1.rds.amazonaws.com",
		"DatabaseCaSecretArn": "arn:aws:secretsmanager:eu-west-1:123456789012:secret:rds-ca-eu-west-1-XyZ123",
	}},
	{name: "iam", params: map[string]string{
		"DatabaseSecretArn":  "",
		"DatabaseHost":       "outbox.proxy-abc.eu-west-1.rds.amazonaws.com",
		"DatabaseUser":       "outboxkeeper",
		"DatabaseResourceId": "prx-0123456789abcdef0",
	}},
	relayScenario,
}

// relayTarget is the relay scenario's target: a FIFO queue, which the
// default RELAY_GROUP_BY (topic) serves.
const relayTarget = "arn:aws:sqs:eu-west-1:123456789012:orders.fifo"

// relayScenario deploys the relay (RelayTarget set); the others deploy
// none, and its resources are absent there.
var relayScenario = scenario{name: "relay", params: map[string]string{
	"DatabaseSecretArn": "arn:aws:secretsmanager:eu-west-1:123456789012:secret:outbox-AbCdEf",
	"RelayTarget":       relayTarget,
}}

// templateSets are the variables whose template default deliberately
// differs from the code's default, with the value the template gives.
var templateSets = map[string]map[string]string{
	// A watching pass must outlast the schedule's minute (see
	// checkWatchCoverage); the code's 20s default is a bounded pass's.
	"fill": {"FILL_PASS_BUDGET": "85s"},
	// The relay's target has no default: the scenario's.
	"relay": {"RELAY_TARGET": relayTarget},
}

// checkEnvironment: in every database mode, each function gets only
// variables the configuration reads for it, everything it requires, and
// values that the configuration accepts; with the parameters' defaults the
// tunables equal the code's defaults.
func checkEnvironment(tpl *template) []string {
	used := map[string][]string{}
	for _, v := range config.Variables() {
		used[v.Name] = v.UsedBy
	}
	var problems []string
	for _, sc := range scenarios {
		e := tpl.evaluator(sc)
		for _, fn := range tpl.functions() {
			if !e.exists(fn) {
				continue
			}
			short := shortName(fn)
			where := fmt.Sprintf("%s (%s)", fn, sc.name)
			env := e.environment(fn)
			for name := range env {
				if !slices.Contains(used[name], short) {
					problems = append(problems, fmt.Sprintf("%s: sets %s, which the %s configuration does not read", where, name, short))
				}
			}
			_, hasURL := env["DATABASE_URL"]
			_, hasSecret := env["DATABASE_SECRET_ARN"]
			secretMode := sc.params["DatabaseSecretArn"] != ""
			switch {
			case secretMode && (!hasSecret || hasURL):
				problems = append(problems, where+": want DATABASE_SECRET_ARN and no DATABASE_URL")
			case !secretMode && (!hasURL || hasSecret || env["DATABASE_IAM_AUTH"] != "true"):
				problems = append(problems, where+": want DATABASE_URL, DATABASE_IAM_AUTH=true and no DATABASE_SECRET_ARN")
			}
			if host := sc.params["DatabaseHost"]; secretMode && host != "" && env["DATABASE_HOST"] != host {
				problems = append(problems, fmt.Sprintf("%s: DATABASE_HOST = %q, want the DatabaseHost parameter %q", where, env["DATABASE_HOST"], host))
			}
			if ca := sc.params["DatabaseCaSecretArn"]; ca != "" && env["DATABASE_CA_SECRET_ARN"] != ca {
				problems = append(problems, fmt.Sprintf("%s: DATABASE_CA_SECRET_ARN = %q, want the DatabaseCaSecretArn parameter", where, env["DATABASE_CA_SECRET_ARN"]))
			}
			// Two logins: the owner's is the migrate function's alone.
			if short == "migrate" {
				if owner := sc.params["DatabaseSecretArn"]; secretMode && env["DATABASE_SECRET_ARN"] != owner {
					problems = append(problems, fmt.Sprintf("%s: DATABASE_SECRET_ARN = %q: the migrate function must log in with the owner's secret (DatabaseSecretArn)", where, env["DATABASE_SECRET_ARN"]))
				}
				if owner := sc.params["DatabaseUser"]; !secretMode && !strings.Contains(env["DATABASE_URL"], "://"+owner+"@") {
					problems = append(problems, fmt.Sprintf("%s: DATABASE_URL = %q: the migrate function must log in as the owner (DatabaseUser)", where, env["DATABASE_URL"]))
				}
			} else {
				if owner := sc.params["DatabaseSecretArn"]; owner != "" && env["DATABASE_SECRET_ARN"] == owner {
					problems = append(problems, where+": logs in with the owner's secret (DatabaseSecretArn); only the migrate function may")
				}
				if owner := sc.params["DatabaseUser"]; !secretMode && owner != "" && strings.Contains(env["DATABASE_URL"], "://"+owner+"@") {
					problems = append(problems, where+": logs in as the owner DatabaseUser; only the migrate function may")
				}
			}
			lookup := config.FromMap(env)
			db, err := config.LoadDatabase(lookup)
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s: %v", where, err))
			}
			if sc.name == "iam" && !strings.Contains(db.URL, "sslmode=require") {
				problems = append(problems, where+": the IAM DATABASE_URL must require TLS")
			}
			got, err := load(short, env)
			want, _ := load(short, templateSets[short])
			if c, ok := got.(migrateresource.Config); ok {
				switch {
				case secretMode && !strings.HasSuffix(c.MaintainerSecretARN, "MaintainerSecret-AbCdEf"):
					problems = append(problems, where+": MAINTAINER_SECRET_ARN is not the stack's MaintainerSecret")
				case !secretMode && c.MaintainerIAMUser != "outbox_maintainer":
					problems = append(problems, fmt.Sprintf("%s: MAINTAINER_IAM_USER = %q, want outbox_maintainer (<OutboxSchema>_maintainer)", where, c.MaintainerIAMUser))
				}
				c.MaintainerSecretARN, c.MaintainerIAMUser = "", ""
				got = c
			}
			if c, ok := got.(compensate.Config); ok {
				if c.DLQURL == "" {
					problems = append(problems, where+": COMPENSATE_DLQ_URL is not set")
				}
				c.DLQURL = ""
				got = c
			}
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s: %v", where, err))
			} else if !reflect.DeepEqual(got, want) {
				problems = append(problems, fmt.Sprintf("%s: parameter defaults give %+v, the code's defaults are %+v", where, got, want))
			}
		}
	}
	return problems
}

// load runs the configuration loader of one function over env.
func load(short string, env map[string]string) (any, error) {
	lookup := config.FromMap(env)
	switch short {
	case "fill":
		return config.Load[fill.Config](lookup)
	case "sweep":
		return config.Load[sweep.Config](lookup)
	case "compensate":
		return config.Load[compensate.Config](lookup)
	case "prune":
		return config.Load[prune.Config](lookup)
	case "deliver":
		return config.Load[deliver.Config](lookup)
	case "migrate":
		return config.Load[migrateresource.Config](lookup)
	case "relay":
		return config.Load[relay.Config](lookup)
	}
	return nil, fmt.Errorf("unknown function %q: teach this test its configuration", short)
}

// durationSamples are values a user may type; each one the configuration
// accepts must pass the parameter's AllowedPattern too, or a valid setting
// is refused at deploy time.
var durationSamples = []string{"0s", "1s", "90s", "1m30s", "1.5s", "500ms", "2h45m", "12h"}

// checkParameterPatterns: a parameter's AllowedPattern never refuses a
// value the variable it feeds accepts. (The reverse, a value the pattern
// takes but the range check refuses, fails at init naming the variable.)
func checkParameterPatterns(tpl *template) []string {
	var problems []string
	for _, fn := range tpl.functions() {
		vars, _ := get(tpl.Resources[fn], "Properties", "Environment", "Variables").(map[string]any)
		for name, v := range vars {
			param, _ := get(v, "Ref").(string)
			pattern, _ := get(tpl.Parameters[param], "AllowedPattern").(string)
			if pattern == "" {
				continue
			}
			re, err := regexp.Compile(pattern)
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s: AllowedPattern: %v", param, err))
				continue
			}
			for _, sample := range durationSamples {
				env := map[string]string{"RELAY_TARGET": relayTarget, name: sample}
				if _, err := load(shortName(fn), env); err == nil && !re.MatchString(sample) {
					problems = append(problems, fmt.Sprintf("%s: AllowedPattern refuses %q, which %s accepts", param, sample, name))
				}
			}
		}
	}
	return problems
}
