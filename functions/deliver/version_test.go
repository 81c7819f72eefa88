package main

import (
	"testing"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/lambdatest"
)

// The init checks the schema version: a database behind the build, or
// ahead of it with a migration not marked compatible, fails the init
// naming both versions; one ahead with compatible migrations only serves.
func TestInitChecksTheSchemaVersion(t *testing.T) {
	t.Parallel()
	lambdatest.InitChecksTheSchemaVersion(t, "deliver", map[string]string{"DELIVER_WATCH": "false"}, schedule)
}
