package deploy

import (
	"encoding/json"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/outboxkeeper/outboxkeeper/shared/config"
)

// localDatabaseURL is the local stack's URL at its default port, read from
// infra/stack/lib.sh, which up.sh starts PostgreSQL with.
func localDatabaseURL(t *testing.T) string {
	t.Helper()
	lib := read(t, "../stack/lib.sh")
	port := regexp.MustCompile(`(?m)^PG_PORT=\$\{OUTBOXKEEPER_PG_PORT:-(\d+)\}$`).FindStringSubmatch(lib)
	url := regexp.MustCompile(`(?m)^LOCAL_DATABASE_URL="([^"]+)"$`).FindStringSubmatch(lib)
	if port == nil || url == nil {
		t.Fatal("infra/stack/lib.sh no longer sets PG_PORT and LOCAL_DATABASE_URL as this test reads them")
	}
	return strings.ReplaceAll(url[1], "${PG_PORT}", port[1])
}

// events/env.json is what `sam local invoke --env-vars` takes: for every
// function of the template, every variable its configuration reads, with
// values that configuration accepts, logging in to the local stack's
// PostgreSQL without TLS. SAM only overrides variables the template
// defines, so each one the template defines with the parameters' defaults
// (where DATABASE_URL is built from empty parameters) must be there.
func TestEnvVarsFileServesEveryFunctionLocally(t *testing.T) {
	tpl := loadTemplate(t, read(t, templatePath))
	var file map[string]map[string]string
	if err := json.Unmarshal([]byte(read(t, "../../events/env.json")), &file); err != nil {
		t.Fatalf("events/env.json: %v", err)
	}
	var named []string
	for fn := range file {
		named = append(named, fn)
	}
	sort.Strings(named)
	if !slices.Equal(named, tpl.functions()) {
		t.Errorf("events/env.json names %v, the template's functions are %v", named, tpl.functions())
	}
	reads := map[string][]string{}
	for _, v := range config.Variables() {
		for _, fn := range v.UsedBy {
			reads[fn] = append(reads[fn], v.Name)
		}
	}
	local := localDatabaseURL(t)
	defaults := tpl.evaluator(scenario{name: "defaults"})
	for _, fn := range tpl.functions() {
		env := file[fn]
		var got []string
		for name := range env {
			got = append(got, name)
		}
		sort.Strings(got)
		want := slices.Clone(reads[shortName(fn)])
		sort.Strings(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s: events/env.json sets %v, its configuration reads %v", fn, got, want)
		}
		for name := range defaults.environment(fn) {
			if _, ok := env[name]; !ok {
				t.Errorf("%s: the template defines %s, which events/env.json does not override", fn, name)
			}
		}
		if env["DATABASE_URL"] != local {
			t.Errorf("%s: DATABASE_URL %q, want the local stack's %s", fn, env["DATABASE_URL"], local)
		}
		if _, err := config.LoadDatabase(config.FromMap(env)); err != nil {
			t.Errorf("%s: %v", fn, err)
		}
		if _, err := load(shortName(fn), env); err != nil {
			t.Errorf("%s: %v", fn, err)
		}
	}
}
