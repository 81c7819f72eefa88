package recipients

import (
	"context"
	"embed"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/sqltext"
	"github.com/outboxkeeper/outboxkeeper/internal/store"
)

//go:embed recipients.sql
var file embed.FS

// SQL is recipients.sql.
var SQL = sqltext.MustParse(file, "recipients.sql")

// Recipient is one row of <schema>.recipients.
type Recipient struct {
	Name      string    `json:"name"`
	Target    string    `json:"target"`
	Enabled   bool      `json:"enabled"`
	Note      string    `json:"note"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// MaxName is the longest recipient name, in bytes (the table's
// CHECK).
const MaxName = 200

// Admin runs the operator's statements on the recipients table.
type Admin struct {
	add, list, setEnabled, remove string
}

// NewAdmin renders the statements for schema.
func NewAdmin(schema string) *Admin {
	return &Admin{
		add:        SQL.Statement("add", schema),
		list:       SQL.Statement("list", schema),
		setEnabled: SQL.Statement("set_enabled", schema),
		remove:     SQL.Statement("remove", schema),
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
	return CheckARN(target)
}

var arnRE = regexp.MustCompile(`^arn:aws(-[a-z]+)*:(sqs|sns|events):[a-z]{2}(-[a-z]+)+-\d+:\d{12}:(.+)$`)

// CheckARN says why target is not an SQS queue, SNS topic or EventBridge
// bus ARN or an SQS queue URL, or nil: the shape only (shared/target reads
// it at push time, and IAM decides whether the function may reach it).
func CheckARN(target string) error {
	if queueURL(target) {
		return nil
	}
	m := arnRE.FindStringSubmatch(target)
	switch {
	case strings.HasPrefix(target, "arn:") && strings.Contains(target, ":kinesis:"):
		return fmt.Errorf("target %q: a Kinesis stream is not a recipient's target (want an SQS queue, SNS topic, EventBridge bus or https webhook)", target)
	case m == nil:
		return fmt.Errorf("target %q: not an SQS queue, SNS topic or EventBridge bus ARN, an SQS queue URL, or an https webhook URL", target)
	case m[2] == "events" && !strings.HasPrefix(m[4], "event-bus/"):
		return fmt.Errorf("target %q: an EventBridge ARN but not an event bus's (want ...:event-bus/NAME)", target)
	}
	return nil
}

// Add adds the recipient name with target (checked first), or gives the
// one of that name a new target; created says it is new.
func (r *Admin) Add(ctx context.Context, q store.Querier, policy Policy, name, target, note string) (created bool, err error) {
	name, target = strings.TrimSpace(name), strings.TrimSpace(target)
	if name == "" || len(name) > MaxName {
		return false, fmt.Errorf("recipient name %q: must be 1 to %d bytes", name, MaxName)
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
func (r *Admin) List(ctx context.Context, q store.Querier) ([]Recipient, error) {
	out, err := store.Rows(ctx, q, r.list, pgx.StrictNamedArgs{}, pgx.RowToStructByPos[Recipient])
	if err != nil {
		return nil, fmt.Errorf("list recipients: %w", err)
	}
	return out, nil
}

// SetEnabled enables or disables a recipient; found is false for no such
// recipient.
func (r *Admin) SetEnabled(ctx context.Context, q store.Querier, name string, enabled bool) (found bool, err error) {
	tag, err := q.Exec(ctx, r.setEnabled, pgx.NamedArgs{"name": name, "enabled": enabled})
	if err != nil {
		return false, fmt.Errorf("update recipient %s: %w", name, err)
	}
	return tag.RowsAffected() == 1, nil
}

// Remove deletes a recipient; found is false for no such recipient.
func (r *Admin) Remove(ctx context.Context, q store.Querier, name string) (found bool, err error) {
	tag, err := q.Exec(ctx, r.remove, pgx.NamedArgs{"name": name})
	if err != nil {
		return false, fmt.Errorf("remove recipient %s: %w", name, err)
	}
	return tag.RowsAffected() == 1, nil
}
