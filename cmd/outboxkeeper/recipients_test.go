package main

import (
	"testing"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
)

// add, list, disable, enable and remove, as an operator: the row changes
// as each says, and list shows it.
func TestRecipientsAddListDisableRemove(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	vars := map[string]string{"DATABASE_URL": db.Operator(t).URL, "DELIVER_WEBHOOK_HOSTS": "*.example.com"}
	const queue = "arn:aws:sqs:us-east-1:123456789012:billing"
	code, out, errs := cli(t, vars, "recipients", "add", "--name", "billing", "--target", queue, "--note", "team billing")
	wantCode(t, "recipients add", code, exitOK, out, errs)
	wantIn(t, "recipients add", out, "recipient billing added")
	code, out, errs = cli(t, vars, "recipients", "list")
	wantCode(t, "recipients list", code, exitOK, out, errs)
	wantIn(t, "recipients list", out, "NAME", "billing", queue, "true", "team billing")
	code, out, errs = cli(t, vars, "recipients", "disable", "--name", "billing")
	wantCode(t, "recipients disable", code, exitOK, out, errs)
	if on := testdb.Scalar[bool](t, db.Pool, `SELECT enabled FROM outbox.recipients WHERE name = 'billing'`); on {
		t.Error("after disable the recipient is enabled")
	}
	code, out, errs = cli(t, vars, "recipients", "enable", "--name", "billing")
	wantCode(t, "recipients enable", code, exitOK, out, errs)
	if on := testdb.Scalar[bool](t, db.Pool, `SELECT enabled FROM outbox.recipients WHERE name = 'billing'`); !on {
		t.Error("after enable the recipient is disabled")
	}
	code, out, errs = cli(t, vars, "recipients", "remove", "--name", "billing")
	wantCode(t, "recipients remove", code, exitOK, out, errs)
	if n := testdb.Scalar[int](t, db.Pool, `SELECT count(*) FROM outbox.recipients`); n != 0 {
		t.Errorf("after remove %d recipients remain", n)
	}
	code, _, errs = cli(t, vars, "recipients", "remove", "--name", "billing")
	wantCode(t, "remove again", code, exitError, "", errs)
	wantIn(t, "remove again", errs, "no recipient billing")
}

// A webhook outside the policy is refused at add, naming why, and nothing
// is written.
func TestRecipientsAddRefusesWebhooksOutsideThePolicy(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	vars := map[string]string{"DATABASE_URL": db.Operator(t).URL, "DELIVER_WEBHOOK_HOSTS": "localhost,hooks.example.com,10.0.0.7"}
	for _, c := range []struct{ target, why string }{
		{"http://hooks.example.com/in", "must be https"},
		{"https://other.example.org/in", "not among the allowed"},
		{"https://localhost/in", "loopback"},
		{"https://10.0.0.7/in", "private address"},
		{"https://169.254.169.254/latest/meta-data", "link-local"},
		{"arn:aws:kinesis:us-east-1:123456789012:stream/s", "not a recipient's target"},
	} {
		code, out, errs := cli(t, vars, "recipients", "add", "--name", "x", "--target", c.target)
		wantCode(t, "add "+c.target, code, exitUsage, out, errs)
		wantIn(t, "add "+c.target, errs, c.why)
	}
	if n := testdb.Scalar[int](t, db.Pool, `SELECT count(*) FROM outbox.recipients`); n != 0 {
		t.Errorf("%d recipients written, want none", n)
	}
}
