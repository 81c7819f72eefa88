package pg

import (
	"context"
	"strings"
	"testing"
)

// The secret RDS makes for a master user it manages
// (ManageMasterUserPassword) holds a username and a password only.
const rdsManagedSecret = `{"username":"postgres","password":"Zq8$w:d@/x"}`

func TestRDSManagedSecretTakesWhereFromTheVariables(t *testing.T) {
	fake := &fakeSecrets{value: rdsManagedSecret}
	db := Login{SecretARN: testARN, Host: "app.cluster-abc.eu-west-1.rds.amazonaws.com", Port: 5433, Name: "app"}
	pc, err := PoolConfig(context.Background(), db, Options{Secrets: fake})
	if err != nil {
		t.Fatal(err)
	}
	cc := pc.ConnConfig
	if cc.Host != db.Host {
		t.Errorf("host = %q, want DATABASE_HOST's %q", cc.Host, db.Host)
	}
	if cc.Port != 5433 {
		t.Errorf("port = %d, want DATABASE_PORT's 5433", cc.Port)
	}
	if cc.Database != "app" {
		t.Errorf("database = %q, want DATABASE_NAME's app", cc.Database)
	}
	if cc.User != "postgres" || cc.Password != "Zq8$w:d@/x" {
		t.Errorf("login = %q/%q, want the secret's", cc.User, cc.Password)
	}
	if cc.TLSConfig == nil || len(cc.Fallbacks) != 0 {
		t.Error("want TLS with no plain-text fallback")
	}
}

func TestRDSManagedSecretWithoutHostNamesTheVariable(t *testing.T) {
	_, err := PoolConfig(context.Background(), Login{SecretARN: testARN}, Options{Secrets: &fakeSecrets{value: rdsManagedSecret}})
	if err == nil || !strings.Contains(err.Error(), "DATABASE_HOST") {
		t.Fatalf("got %v, want an error naming DATABASE_HOST", err)
	}
	if strings.Contains(err.Error(), "Zq8") {
		t.Fatalf("error leaks the password: %v", err)
	}
}

// DATABASE_HOST wins over the secret's own host: the secret RDS rotates
// names the instance, and the functions may dial an RDS Proxy instead.
func TestHostVariableOverridesTheSecretsHost(t *testing.T) {
	fake := &fakeSecrets{value: `{"username":"u","password":"p","host":"instance.abc.rds.amazonaws.com","port":5432,"dbname":"app"}`}
	db := Login{SecretARN: testARN, Host: "proxy.proxy-abc.rds.amazonaws.com"}
	pc, err := PoolConfig(context.Background(), db, Options{Secrets: fake})
	if err != nil {
		t.Fatal(err)
	}
	if pc.ConnConfig.Host != db.Host {
		t.Errorf("host = %q, want %q", pc.ConnConfig.Host, db.Host)
	}
	if pc.ConnConfig.Database != "app" {
		t.Errorf("database = %q, want the secret's app (DATABASE_NAME unset)", pc.ConnConfig.Database)
	}
}
