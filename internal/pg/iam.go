package pg

import (
	"context"
	"fmt"
	"net"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/rds/auth"
	"github.com/jackc/pgx/v5"
)

// iamToken returns a pgxpool BeforeConnect hook that replaces the password
// with a fresh RDS IAM token. A token is a presigned URL valid for 15
// minutes, so it is signed per connection (cheap, local, no network call)
// rather than cached: a pool that re-dials after an hour must not present a
// stale one. cc is pgxpool's per-connection copy, so the pool's own config
// never holds a token.
func iamToken(cfg aws.Config) func(context.Context, *pgx.ConnConfig) error {
	return func(ctx context.Context, cc *pgx.ConnConfig) error {
		if cfg.Region == "" {
			return fmt.Errorf("rds iam auth: no AWS region (set AWS_REGION)")
		}
		// The token is bound to the endpoint the client dials: the RDS
		// Proxy, cluster or instance host named in DATABASE_URL.
		endpoint := net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port)))
		token, err := auth.BuildAuthToken(ctx, endpoint, cfg.Region, cc.User, cfg.Credentials)
		if err != nil {
			return fmt.Errorf("rds iam auth: sign token for %s@%s: %w", cc.User, endpoint, err)
		}
		cc.Password = token
		return nil
	}
}
