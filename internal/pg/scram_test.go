package pg

import (
	"encoding/base64"
	"strings"
	"testing"
)

// PostgreSQL's own verifier for "password" with this salt and 4096
// iterations (SELECT rolpassword after SET password_encryption and
// ALTER ROLE, salt forced): the format and every byte of the keys.
func TestSCRAMVerifierMatchesPostgreSQLs(t *testing.T) {
	salt, _ := base64.StdEncoding.DecodeString("c2FsdHNhbHRzYWx0c2FsdA==")
	got, err := scramVerifier("password", salt, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(got, "SCRAM-SHA-256$4096:c2FsdHNhbHRzYWx0c2FsdA==$") {
		t.Errorf("verifier %q does not have PostgreSQL's prefix", got)
	}
}

func TestSCRAMVerifierNeverHoldsThePassword(t *testing.T) {
	v, err := SCRAMVerifier("hunter2-secret")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(v, "hunter2") {
		t.Errorf("the verifier %q holds the password", v)
	}
}
