package deliver

import (
	"context"
	"embed"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/sqltext"
	"github.com/outboxkeeper/outboxkeeper/internal/store"
)

//go:embed recipients.sql
var recipientsFile embed.FS

var recipientsSQL = sqltext.MustParse(recipientsFile, "recipients.sql")

// Recipient is one row of <schema>.recipients.
type Recipient struct {
	Name      string    `json:"name"`
	Target    string    `json:"target"`
	Enabled   bool      `json:"enabled"`
	Note      string    `json:"note"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// MaxRecipientName is the longest recipient name, in bytes (the table's
// CHECK).
const MaxRecipientName = 200

// Recipients runs the operator's statements on the recipients table.
type Recipients struct {
	add, list, setEnabled, remove string
}

// NewRecipients renders the statements for schema.
func NewRecipients(schema string) *Recipients {
	return &Recipients{
		add:        recipientsSQL.Statement("add", schema),
		list:       recipientsSQL.Statement("list", schema),
		setEnabled: recipientsSQL.Statement("set_enabled", schema),
		remove:     recipientsSQL.Statement("remove", schema),
	}
}

// CheckTarget is the check `recipients add` makes of a target, the one
// the deliver function makes again at each push: an SQS queue, SNS topic
// or EventBridge bus ARN (or an SQS queue URL), or an https webhook of an
// allowed host whose every address is public.
func CheckTarget(ctx context.Context, policy Policy, target string) error {
	if IsWebhook(target) {
		_, err := policy.Check(ctx, target)
		return err
	}
	_, err := CheckARN(target)
	return err
}

// Add adds the recipient name with target (checked first), or gives the
// one of that name a new target; created says it is new.
func (r *Recipients) Add(ctx context.Context, q store.Querier, policy Policy, name, target, note string) (created bool, err error) {
	name, target = strings.TrimSpace(name), strings.TrimSpace(target)
	if name == "" || len(name) > MaxRecipientName {
		return false, fmt.Errorf("recipient name %q: must be 1 to %d bytes", name, MaxRecipientName)
	}
	if err := CheckTarget(ctx, policy, target); err != nil {
		return false, fmt.Errorf("recipient %s: %w", name, err)
	}
	if err := q.QueryRow(ctx, r.add, pgx.NamedArgs{"name": name, "target": target, "note": note}).Scan(&created); err != nil {
		return false, fmt.Errorf("add recipient %s: %w", name, err)
	}
	return created, nil
}

// List is every recipient, by name.
func (r *Recipients) List(ctx context.Context, q store.Querier) ([]Recipient, error) {
	out, err := store.Rows(ctx, q, r.list, pgx.StrictNamedArgs{}, pgx.RowToStructByPos[Recipient])
	if err != nil {
		return nil, fmt.Errorf("list recipients: %w", err)
	}
	return out, nil
}

// SetEnabled enables or disables a recipient; found is false for no such
// recipient.
func (r *Recipients) SetEnabled(ctx context.Context, q store.Querier, name string, enabled bool) (found bool, err error) {
	tag, err := q.Exec(ctx, r.setEnabled, pgx.NamedArgs{"name": name, "enabled": enabled})
	if err != nil {
		return false, fmt.Errorf("update recipient %s: %w", name, err)
	}
	return tag.RowsAffected() == 1, nil
}

// Remove deletes a recipient; found is false for no such recipient.
func (r *Recipients) Remove(ctx context.Context, q store.Querier, name string) (found bool, err error) {
	tag, err := q.Exec(ctx, r.remove, pgx.NamedArgs{"name": name})
	if err != nil {
		return false, fmt.Errorf("remove recipient %s: %w", name, err)
	}
	return tag.RowsAffected() == 1, nil
}
