package sweep_test

import (
	"context"
	"slices"
	"testing"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
)

// sweep_reset's statement is planned once per server connection and kept
// (plpgsql, plan_cache_mode = force_generic_plan), under the settings that
// leave it one plan whatever the statistics: the pool sends every
// statement unnamed, and a LANGUAGE sql body with SET clauses was planned
// again on every call.
func TestSweepResetIsPlannedOncePerConnection(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	var lang string
	var config []string
	err := db.Pool.QueryRow(context.Background(), `SELECT l.lanname, coalesce(p.proconfig, '{}')
		FROM pg_catalog.pg_proc AS p JOIN pg_catalog.pg_language AS l ON l.oid = p.prolang
		WHERE p.oid = to_regprocedure('outbox.sweep_reset(bigint, integer, integer)')`).Scan(&lang, &config)
	if err != nil {
		t.Fatalf("read sweep_reset from the catalog: %v", err)
	}
	if lang != "plpgsql" {
		t.Errorf("sweep_reset is LANGUAGE %s, want plpgsql (its plan kept per connection)", lang)
	}
	for _, want := range []string{"plan_cache_mode=force_generic_plan",
		"enable_sort=off", "enable_bitmapscan=off", "enable_seqscan=off", "jit=off"} {
		t.Run(want, func(t *testing.T) {
			if !slices.Contains(config, want) {
				t.Errorf("sweep_reset's settings %v lack %s", config, want)
			}
		})
	}
}
