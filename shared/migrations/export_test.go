package migrations

import (
	"context"

	"github.com/outboxkeeper/outboxkeeper/internal/store"
)

// ReadStatusOfBuild is ReadStatus as a build with only migrations build
// would read it: an older build, in-process.
func ReadStatusOfBuild(ctx context.Context, q store.Querier, schema string, build []Migration) (*Status, error) {
	return readStatus(ctx, q, schema, build)
}
