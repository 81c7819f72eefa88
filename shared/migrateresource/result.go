package migrateresource

import (
	"log/slog"

	"github.com/aws/aws-lambda-go/cfn"

	"github.com/outboxkeeper/outboxkeeper/internal/metrics"
)

// Result is what one request did: the log line, and what the response
// said.
type Result struct {
	RequestType        string `json:"request_type"`
	LogicalResourceID  string `json:"logical_resource_id"`
	PhysicalResourceID string `json:"physical_resource_id"`
	Schema             string `json:"schema"`
	// Status and Reason are the response's.
	Status string `json:"status"`
	Reason string `json:"reason,omitempty"`
	// Applied names the migrations this request applied; AlreadyApplied
	// counts those it found applied.
	Applied        []string `json:"applied"`
	AlreadyApplied int      `json:"already_applied"`
	// Version is the schema's last migration after a successful Create
	// or Update; after a rollback, the highest one recorded ("unknown"
	// when it could not be read: ReadError says why).
	Version string `json:"version,omitempty"`
	// Rollback: an Update back to an older build (CodeVersion lower than
	// the old properties'), which applies nothing.
	Rollback  bool   `json:"rollback,omitempty"`
	ReadError string `json:"read_error,omitempty"`
	// Attempts counts the migrator's transactions: more than 1 when one
	// ran out of lock_timeout behind a long transaction and was retried.
	Attempts int `json:"attempts,omitempty"`
	// Maintainer is the functions' login the request set up, if any;
	// MaintainerCreated says the role was new.
	Maintainer        string `json:"maintainer,omitempty"`
	MaintainerCreated bool   `json:"maintainer_created,omitempty"`
	// Responded says the response reached ResponseURL; ResponseError is
	// why not.
	Responded     bool   `json:"responded"`
	ResponseError string `json:"response_error,omitempty"`
	DurationMS    int64  `json:"duration_ms"`
}

// Level is the log line's level: an error unless the response said
// SUCCESS and reached CloudFormation.
func (r *Result) Level(error) slog.Level {
	if r.Status != string(cfn.StatusSuccess) || !r.Responded {
		return slog.LevelError
	}
	return slog.LevelInfo
}

// Metrics are none: the resource runs once a deployment, and its outcome
// is the stack's.
func (r *Result) Metrics() []metrics.Metric { return nil }
