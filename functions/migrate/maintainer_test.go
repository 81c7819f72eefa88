package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/lambdatest"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testcluster"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testenv"
)

// deployment is the local equivalent of a stack with the default two
// logins: a cluster that checks passwords (scram-sha-256) over TLS only,
// an owner that is no superuser (as RDS's master user: CREATEROLE, CREATE
// on the database), and the maintainer's secret in Secrets Manager (moto)
// holding only a username and a password, as the template generates it.
type deployment struct {
	cluster    *testcluster.Cluster
	ca         []byte
	ownerURL   string
	secretARN  string
	secrets    *secretsmanager.Client
	smEndpoint string
}

const maintainerName = "outbox_maintainer"

func newDeployment(t *testing.T) *deployment {
	t.Helper()
	smEndpoint := testenv.Lookup("AWS_ENDPOINT_URL_EVENTBRIDGE") // moto serves Secrets Manager on the same port
	if smEndpoint == "" {
		testenv.Missing(t, "moto (AWS_ENDPOINT_URL_EVENTBRIDGE) is not in .local/stack.env: run infra/stack/up.sh")
	}
	ca := testcluster.NewCA(t, "maintainer test CA")
	c := testcluster.Start(t, testcluster.Options{TLS: ca.Issue(t, "localhost", "127.0.0.1")})
	c.Exec(t, `CREATE ROLE app_owner LOGIN PASSWORD 'owner-password' CREATEROLE`)
	c.Exec(t, `GRANT CREATE ON DATABASE postgres TO app_owner`)
	d := &deployment{cluster: c, ca: ca.PEM, smEndpoint: smEndpoint,
		ownerURL: c.URL("app_owner", "owner-password", "postgres", "sslmode=verify-full")}
	d.secrets = secretsmanager.New(secretsmanager.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(smEndpoint),
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
	})
	d.secretARN = d.createSecret(t, maintainerName)
	return d
}

// createSecret stores a maintainer secret for username with a password
// Secrets Manager generates, as the template's GenerateSecretString does.
func (d *deployment) createSecret(t *testing.T, username string) string {
	t.Helper()
	ctx := context.Background()
	pw, err := d.secrets.GetRandomPassword(ctx, &secretsmanager.GetRandomPasswordInput{ExcludePunctuation: aws.Bool(true), PasswordLength: aws.Int64(32)})
	if err != nil {
		t.Fatalf("moto: GetRandomPassword: %v", err)
	}
	doc, _ := json.Marshal(map[string]string{"username": username, "password": *pw.RandomPassword})
	out, err := d.secrets.CreateSecret(ctx, &secretsmanager.CreateSecretInput{
		Name: aws.String(fmt.Sprintf("outboxkeeper-maintainer-%d", time.Now().UnixNano())), SecretString: aws.String(string(doc)),
	})
	if err != nil {
		t.Fatalf("moto: CreateSecret: %v", err)
	}
	t.Cleanup(func() {
		d.secrets.DeleteSecret(context.Background(), &secretsmanager.DeleteSecretInput{SecretId: out.ARN, ForceDeleteWithoutRecovery: aws.Bool(true)}) //nolint:errcheck
	})
	return *out.ARN
}

// migrate runs the migrate function as the owner, with the maintainer's
// variables, and returns its response.
func (d *deployment) migrate(t *testing.T, extra map[string]string) put {
	t.Helper()
	env := map[string]string{"DATABASE_URL": d.ownerURL, "DATABASE_CA_PEM": string(d.ca),
		"AWS_ENDPOINT_URL_SECRETS_MANAGER": d.smEndpoint}
	for k, v := range extra {
		env[k] = v
	}
	r := newResponseURL(t)
	_, payload := r.event(t, "create", "outbox")
	return invoke(t, start(t, env), r, payload)
}

func (d *deployment) secret(t *testing.T) map[string]any {
	t.Helper()
	v, err := d.secrets.GetSecretValue(context.Background(), &secretsmanager.GetSecretValueInput{SecretId: aws.String(d.secretARN)})
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal([]byte(*v.SecretString), &doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

// The default deployment, locally: the migrate function alone logs in as
// the owner and sets the maintainer up from its secret; every scheduled
// and SQS-triggered function then logs in with that secret, does its
// work, and its login can neither DROP, TRUNCATE nor ALTER any table,
// sequence, function or the schema.
func TestEveryFunctionRunsAsTheMaintainerWhoCannotChangeTheSchema(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	p := d.migrate(t, map[string]string{"MAINTAINER_SECRET_ARN": d.secretARN})
	if !strings.Contains(p.Body, `"Status":"SUCCESS"`) {
		t.Fatalf("migrate as the owner with the maintainer's secret: %s", p.Body)
	}
	sec := d.secret(t)
	if sec["host"] != "127.0.0.1" || sec["dbname"] != "postgres" || fmt.Sprint(sec["port"]) != fmt.Sprint(d.cluster.Port) {
		t.Errorf("the maintainer's secret was not completed with the owner's endpoint: host %v port %v dbname %v", sec["host"], sec["port"], sec["dbname"])
	}

	functions := []struct {
		name  string
		env   map[string]string
		event string
	}{
		{"fill", map[string]string{"FILL_WATCH": "false"}, `{"source":"outboxkeeper.schedule"}`},
		{"sweep", nil, `{"source":"outboxkeeper.schedule"}`},
		{"compensate", nil, `{"Records":[]}`},
		{"prune", map[string]string{"PRUNE_EVENTS_AFTER": "24h"}, `{"source":"outboxkeeper.schedule"}`},
		{"relay", map[string]string{"RELAY_WATCH": "false", "RELAY_TARGET": "https://sqs.us-east-1.amazonaws.com/123456789012/maintainer-test"}, `{"source":"outboxkeeper.schedule"}`},
		{"deliver", map[string]string{"DELIVER_WATCH": "false"}, `{"source":"outboxkeeper.schedule"}`},
	}
	for _, f := range functions {
		env := map[string]string{"DATABASE_SECRET_ARN": d.secretARN, "DATABASE_CA_PEM": string(d.ca),
			"AWS_ENDPOINT_URL_SECRETS_MANAGER": d.smEndpoint}
		for k, v := range f.env {
			env[k] = v
		}
		fn := lambdatest.Start(t, lambdatest.Build(t, f.name), env)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		out, err := fn.Invoke(ctx, []byte(f.event))
		cancel()
		if err != nil {
			t.Errorf("%s with the maintainer's secret: %v\n%s", f.name, err, out)
		}
	}

	// Who each function logged in as: its pool stays open between
	// invocations, as on Lambda.
	admin := d.cluster.URL("postgres", d.cluster.Password, "postgres", "sslmode=require")
	conn := connect(t, admin)
	for _, f := range functions {
		var users []string
		rows, err := conn.Query(context.Background(), `SELECT DISTINCT usename::text FROM pg_stat_activity WHERE application_name = $1`, "outboxkeeper-"+f.name)
		if err == nil {
			users, err = pgx.CollectRows(rows, pgx.RowTo[string])
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(users) != 1 || users[0] != maintainerName {
			t.Errorf("%s's sessions log in as %v, want %s alone", f.name, users, maintainerName)
		}
	}

	m := connect(t, d.cluster.URL(maintainerName, sec["password"].(string), "postgres", "sslmode=require"))
	statements := schemaChanges(t, conn, "outbox")
	if len(statements) < 40 {
		t.Fatalf("only %d statements to try: the schema's objects were not found", len(statements))
	}
	for _, sql := range statements {
		if err := tryRolledBack(m, sql); !insufficientPrivilege(err) {
			t.Errorf("the maintainer's %q: %v, want permission denied (42501)", sql, err)
		}
	}
	// The control: the same statements are the owner's to run, so the
	// refusals above are about the login, not the statements.
	owner := connect(t, d.ownerURL+"&sslrootcert="+writeCA(t, d.ca))
	for _, sql := range []string{`ALTER TABLE outbox.events ADD COLUMN probe int`, `TRUNCATE outbox.consumers`, `DROP FUNCTION outbox.consumer_status()`} {
		if err := tryRolledBack(owner, sql); err != nil {
			t.Errorf("the owner's %q: %v", sql, err)
		}
	}
}

// schemaChanges is a DROP, a TRUNCATE (tables) and an ALTER for every
// table, sequence, view and function of schema, and the schema's own.
func schemaChanges(t *testing.T, conn *pgx.Conn, schema string) []string {
	t.Helper()
	out := []string{
		fmt.Sprintf(`DROP SCHEMA %s CASCADE`, schema),
		fmt.Sprintf(`ALTER SCHEMA %s RENAME TO hijacked`, schema),
		fmt.Sprintf(`CREATE TABLE %s.planted (x int)`, schema),
		fmt.Sprintf(`CREATE FUNCTION %s.planted() RETURNS int LANGUAGE sql AS 'SELECT 1'`, schema),
	}
	rows, err := conn.Query(context.Background(), `
		SELECT c.oid::regclass::text, c.relkind::text FROM pg_class c
		WHERE c.relnamespace = $1::regnamespace AND c.relkind IN ('r', 'S', 'v', 'p')
		UNION ALL
		SELECT p.oid::regprocedure::text, 'f' FROM pg_proc p WHERE p.pronamespace = $1::regnamespace
		ORDER BY 1`, schema)
	if err != nil {
		t.Fatal(err)
	}
	type object struct{ Name, Kind string }
	objs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[object])
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		switch o.Kind {
		case "r", "p":
			out = append(out, "DROP TABLE "+o.Name+" CASCADE", "TRUNCATE "+o.Name+" CASCADE",
				"ALTER TABLE "+o.Name+" ADD COLUMN planted int", "ALTER TABLE "+o.Name+" DISABLE TRIGGER ALL")
		case "S":
			out = append(out, "DROP SEQUENCE "+o.Name+" CASCADE", "ALTER SEQUENCE "+o.Name+" RESTART WITH 1")
		case "v":
			out = append(out, "DROP VIEW "+o.Name+" CASCADE", "ALTER VIEW "+o.Name+" RENAME TO planted")
		case "f":
			out = append(out, "DROP FUNCTION "+o.Name+" CASCADE", "ALTER FUNCTION "+o.Name+" SECURITY DEFINER")
		}
	}
	return out
}

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// tryRolledBack runs sql in a transaction it always rolls back.
func tryRolledBack(conn *pgx.Conn, sql string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	_, err = tx.Exec(ctx, sql)
	return err
}

func insufficientPrivilege(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42501"
}

func writeCA(t *testing.T, pem []byte) string {
	t.Helper()
	path := t.TempDir() + "/ca.pem"
	if err := writeFile(path, pem); err != nil {
		t.Fatal(err)
	}
	return path
}

func writeFile(path string, b []byte) error { return os.WriteFile(path, b, 0o600) }

// A maintainer secret naming the owner's own login would hand the
// functions the owner's rights (and reset its password): refused, the
// deployment fails saying why, and the owner's password is unchanged.
func TestMigrateRefusesTheOwnerAsTheMaintainer(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	p := d.migrate(t, map[string]string{"MAINTAINER_SECRET_ARN": d.createSecret(t, "app_owner")})
	if !strings.Contains(p.Body, `"Status":"FAILED"`) || !strings.Contains(p.Body, "is the schema's owner") {
		t.Errorf("migrate with the owner as the maintainer: %s", p.Body)
	}
	connect(t, d.ownerURL+"&sslrootcert="+writeCA(t, d.ca)) // still logs in with its own password
}

// The IAM-only variant: the maintainer is created without a password and
// granted rds_iam (RDS's role, made here as RDS has it) and the
// maintainer's rights; without rds_iam the deployment fails naming it.
func TestIAMMaintainerIsGrantedRdsIamAndTheMaintainersRights(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	p := d.migrate(t, map[string]string{"MAINTAINER_IAM_USER": "outbox_iam_maintainer"})
	if !strings.Contains(p.Body, `"Status":"FAILED"`) || !strings.Contains(p.Body, "rds_iam") {
		t.Errorf("migrate with an IAM maintainer and no rds_iam role: %s", p.Body)
	}
	d.cluster.Exec(t, `CREATE ROLE rds_iam NOLOGIN`)
	d.cluster.Exec(t, `GRANT rds_iam TO app_owner WITH ADMIN OPTION`)
	p = d.migrate(t, map[string]string{"MAINTAINER_IAM_USER": "outbox_iam_maintainer"})
	if !strings.Contains(p.Body, `"Status":"SUCCESS"`) {
		t.Fatalf("migrate with an IAM maintainer: %s", p.Body)
	}
	conn := connect(t, d.cluster.URL("postgres", d.cluster.Password, "postgres", "sslmode=require"))
	for _, c := range []struct{ what, sql string }{
		{"is a member of rds_iam", `SELECT pg_has_role('outbox_iam_maintainer', 'rds_iam', 'MEMBER')`},
		{"may read events through read_events", `SELECT has_function_privilege('outbox_iam_maintainer', 'outbox.read_events(bigint, integer)', 'EXECUTE')`},
		{"may insert placeholders", `SELECT has_column_privilege('outbox_iam_maintainer', 'outbox.events', 'filled_by', 'INSERT')`},
		{"has no password", `SELECT rolpassword IS NULL FROM pg_authid WHERE rolname = 'outbox_iam_maintainer'`},
		{"may not create in the schema", `SELECT NOT has_schema_privilege('outbox_iam_maintainer', 'outbox', 'CREATE')`},
	} {
		var ok bool
		if err := conn.QueryRow(context.Background(), c.sql).Scan(&ok); err != nil || !ok {
			t.Errorf("the IAM maintainer %s: %v (%v)", c.what, ok, err)
		}
	}
}

// The owner from a secret (an RDS-shaped one with its host, as Secrets
// Manager's rotation template keeps it): the migrate function logs in
// with it, sets the maintainer up and gives the maintainer's secret the
// same endpoint; a function then logs in with that.
func TestOwnerFromASecretSetsUpTheMaintainer(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	doc, _ := json.Marshal(map[string]any{"username": "app_owner", "password": "owner-password",
		"host": "127.0.0.1", "port": d.cluster.Port, "dbname": "postgres", "engine": "postgres"})
	out, err := d.secrets.CreateSecret(context.Background(), &secretsmanager.CreateSecretInput{
		Name: aws.String(fmt.Sprintf("outboxkeeper-owner-%d", time.Now().UnixNano())), SecretString: aws.String(string(doc)),
	})
	if err != nil {
		t.Fatal(err)
	}
	p := d.migrate(t, map[string]string{"DATABASE_URL": "", "DATABASE_SECRET_ARN": *out.ARN, "MAINTAINER_SECRET_ARN": d.secretARN})
	if !strings.Contains(p.Body, `"Status":"SUCCESS"`) {
		t.Fatalf("migrate with the owner's secret: %s", p.Body)
	}
	if sec := d.secret(t); sec["host"] != "127.0.0.1" || fmt.Sprint(sec["port"]) != fmt.Sprint(d.cluster.Port) {
		t.Errorf("the maintainer's secret has host %v port %v, want the owner's secret's", sec["host"], sec["port"])
	}
	fn := lambdatest.Start(t, lambdatest.Build(t, "sweep"), map[string]string{"DATABASE_SECRET_ARN": d.secretARN,
		"DATABASE_CA_PEM": string(d.ca), "AWS_ENDPOINT_URL_SECRETS_MANAGER": d.smEndpoint})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if res, err := fn.Invoke(ctx, []byte(`{"source":"outboxkeeper.schedule"}`)); err != nil {
		t.Errorf("sweep with the maintainer's secret: %v\n%s", err, res)
	}
}
