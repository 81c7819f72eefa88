package migrateresource

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-lambda-go/cfn"
	"github.com/aws/aws-lambda-go/lambdacontext"

	migrations "github.com/outboxkeeper/outboxkeeper/shared/migrations"
)

// ResponseReserve is kept back from the invocation's deadline for the
// response: migrations still running then are cancelled (their
// transaction rolls back) so that CloudFormation always hears FAILED,
// instead of waiting for an answer from an invocation Lambda killed.
const ResponseReserve = 5 * time.Second

// Handle is the Lambda handler: it answers one request at its
// ResponseURL and logs one line. It returns an error only when the
// response could not be delivered; Lambda then retries the asynchronous
// invocation, which is safe: the migrations applied are recorded, and a
// second run applies nothing.
func (s *Service) Handle(ctx context.Context, ev cfn.Event) error {
	_, err := s.handle.Handle(ctx, ev)
	return err
}

// RunOnce does what ev asks and sends the response; the error says the
// response never reached CloudFormation.
func (s *Service) RunOnce(ctx context.Context, ev cfn.Event) (*Result, error) {
	start := s.opts.Now()
	res := &Result{
		RequestType:        string(ev.RequestType),
		LogicalResourceID:  ev.LogicalResourceID,
		PhysicalResourceID: physicalID(ev, s.cfg.Schema),
		Schema:             s.cfg.Schema,
		Applied:            []string{},
	}
	resp := cfn.Response{
		Status:             cfn.StatusSuccess,
		RequestID:          ev.RequestID,
		LogicalResourceID:  ev.LogicalResourceID,
		StackID:            ev.StackID,
		PhysicalResourceID: res.PhysicalResourceID,
	}
	apply, known := applies(ev.RequestType)
	res.Rollback = rollingBack(ev)
	var err error
	switch {
	case !known:
		err = fmt.Errorf("unknown RequestType %q (want Create, Update or Delete)", ev.RequestType)
	case res.Rollback:
		// Nothing applied, and the rollback never fails on the database:
		// the version it reports is read if it can be.
		res.Version = s.current(ctx, res)
	case apply:
		err = s.apply(ctx, res)
	}
	if err != nil {
		resp.Status = cfn.StatusFailed
		resp.Reason = reason(s.cfg.Schema, err)
	} else if apply {
		// A rollback answers the same attributes: the stack's outputs read
		// SchemaVersion whichever way the deployment goes.
		resp.Data = map[string]any{"SchemaVersion": res.Version, "Applied": fmt.Sprint(len(res.Applied))}
	}
	res.Status, res.Reason = string(resp.Status), resp.Reason
	body, err := encode(resp)
	if err == nil {
		err = s.send(ctx, ev.ResponseURL, body)
	}
	res.Responded = err == nil
	if err != nil {
		res.ResponseError = err.Error()
	}
	res.DurationMS = s.opts.Now().Sub(start).Milliseconds()
	if !res.Responded {
		return res, fmt.Errorf("migrate: respond to CloudFormation: %s", res.ResponseError)
	}
	return res, nil
}

// apply runs the migrations, bounded by the invocation's deadline less
// ResponseReserve.
func (s *Service) apply(ctx context.Context, res *Result) error {
	actx, cancel := reserved(ctx)
	defer cancel()
	db, err := s.login(actx)
	if err != nil {
		return err
	}
	defer db.Close()
	r, err := migrations.ApplyWith(actx, db, s.cfg.Schema, migrations.ApplyOptions{
		OnLockTimeout: func(lerr *migrations.LockError, pause time.Duration) {
			s.opts.Logger.LogAttrs(ctx, slog.LevelWarn, "migrate: waiting for a lock",
				slog.String("schema", s.cfg.Schema), slog.String("step", lerr.Step), slog.Int("attempt", lerr.Attempts),
				slog.Int64("lock_timeout_ms", lerr.LockTimeout.Milliseconds()), slog.Int64("retry_in_ms", pause.Milliseconds()))
		},
	})
	res.Attempts = r.Attempts
	if err != nil {
		if errors.Is(actx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("the migrations did not finish within the function's timeout less %s; "+
				"they run in one transaction, which rolled back, so nothing changed: %w", ResponseReserve, err)
		}
		return err
	}
	res.Applied, res.AlreadyApplied = append(res.Applied, r.Applied...), len(r.Skipped)
	res.Version = migrations.Latest().Name
	return nil
}

// current is the schema's highest recorded migration, read without
// changing anything; "unknown" when it cannot be read (the reason is
// logged as read_error).
func (s *Service) current(ctx context.Context, res *Result) string {
	v, err := s.readCurrent(ctx)
	if err != nil {
		res.ReadError = err.Error()
		return "unknown"
	}
	return v
}

func (s *Service) readCurrent(ctx context.Context) (string, error) {
	ctx, cancel := reserved(ctx)
	defer cancel()
	db, err := s.login(ctx)
	if err != nil {
		return "", err
	}
	defer db.Close()
	tx, err := db.Begin(ctx)
	if err != nil {
		return "", err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // read only
	st, err := migrations.ReadStatus(ctx, tx, s.cfg.Schema)
	if err != nil {
		return "", err
	}
	cur, ok := st.Current()
	if !ok {
		return "none", nil
	}
	return cur.Name, nil
}

// reserved is ctx bounded by its deadline less ResponseReserve, so the
// response still goes out after the work ends on it.
func reserved(ctx context.Context) (context.Context, context.CancelFunc) {
	deadline, ok := ctx.Deadline()
	if !ok {
		return ctx, func() {}
	}
	return context.WithDeadline(ctx, deadline.Add(-ResponseReserve))
}

// login opens the database, or fails with the configuration's error when
// the function was built misconfigured.
func (s *Service) login(ctx context.Context) (DB, error) {
	if s.opts.Misconfigured != nil {
		return nil, s.opts.Misconfigured
	}
	db, err := s.open(ctx)
	if err != nil {
		return nil, fmt.Errorf("log in: %w", err)
	}
	return db, nil
}

// reason is the Reason of a FAILED response: what CloudFormation shows in
// the stack's events, so it says what failed and where to read more.
func reason(schema string, err error) string {
	r := fmt.Sprintf("outboxkeeper could not migrate schema %s: %v", schema, err)
	if stream := lambdacontext.LogStreamName; stream != "" {
		r += " (log stream " + stream + ")"
	}
	return r
}
