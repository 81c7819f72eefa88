package awsenv

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// env is a fake environment for From.
func env(vars map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		v, ok := vars[name]
		return v, ok
	}
}

func region(t *testing.T, vars map[string]string) string {
	t.Helper()
	c, err := From(env(vars))
	if err != nil {
		t.Fatalf("From: %v", err)
	}
	return c.Region
}

func TestRegionIsLambdasAWSRegion(t *testing.T) {
	got := region(t, map[string]string{"AWS_REGION": "eu-west-1", "AWS_DEFAULT_REGION": "us-east-1"})
	if got != "eu-west-1" {
		t.Errorf("Region = %q, want AWS_REGION's eu-west-1", got)
	}
}

func TestRegionFallsBackToAWSDefaultRegion(t *testing.T) {
	got := region(t, map[string]string{"AWS_DEFAULT_REGION": "us-east-1"})
	if got != "us-east-1" {
		t.Errorf("Region = %q, want AWS_DEFAULT_REGION's us-east-1", got)
	}
}

func TestCredentialsAreTheExecutionRolesFromTheEnvironment(t *testing.T) {
	cfg, err := From(env(map[string]string{"AWS_ACCESS_KEY_ID": "AKIA1", "AWS_SECRET_ACCESS_KEY": "s3cret", "AWS_SESSION_TOKEN": "tok"}))
	if err != nil {
		t.Fatal(err)
	}
	c, err := cfg.Credentials.Retrieve(context.Background())
	if err != nil {
		t.Fatalf("Retrieve: %v", err)
	}
	if c.AccessKeyID != "AKIA1" || c.SecretAccessKey != "s3cret" {
		t.Errorf("key %q secret %q, want AKIA1 and s3cret", c.AccessKeyID, c.SecretAccessKey)
	}
	if c.SessionToken != "tok" {
		t.Errorf("SessionToken = %q, want AWS_SESSION_TOKEN's tok", c.SessionToken)
	}
}

func TestMissingCredentialsFailTheFirstSignedRequestNotTheLoad(t *testing.T) {
	cfg, err := From(env(map[string]string{"AWS_REGION": "eu-west-1"}))
	if err != nil {
		t.Fatalf("From without credentials: %v, want no error until they are used", err)
	}
	_, err = cfg.Credentials.Retrieve(context.Background())
	if !errors.Is(err, errNoCredentials) {
		t.Errorf("Retrieve without credentials: %v, want one naming AWS_ACCESS_KEY_ID", err)
	}
}

func TestServiceEndpointVariablesReachTheServiceClients(t *testing.T) {
	cfg, err := From(env(map[string]string{
		"AWS_REGION":                       "us-east-1",
		"AWS_ENDPOINT_URL_SQS":             "http://127.0.0.1:9324",
		"AWS_ENDPOINT_URL_SECRETS_MANAGER": "http://127.0.0.1:4566",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if got := sqs.NewFromConfig(cfg).Options().BaseEndpoint; got == nil || *got != "http://127.0.0.1:9324" {
		t.Errorf("SQS BaseEndpoint = %v, want AWS_ENDPOINT_URL_SQS", got)
	}
	if got := secretsmanager.NewFromConfig(cfg).Options().BaseEndpoint; got == nil || *got != "http://127.0.0.1:4566" {
		t.Errorf("Secrets Manager BaseEndpoint = %v, want AWS_ENDPOINT_URL_SECRETS_MANAGER", got)
	}
}

func TestGlobalEndpointVariableReachesEveryClient(t *testing.T) {
	cfg, err := From(env(map[string]string{"AWS_ENDPOINT_URL": "http://127.0.0.1:4566"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := sqs.NewFromConfig(cfg).Options().BaseEndpoint; got == nil || *got != "http://127.0.0.1:4566" {
		t.Errorf("SQS BaseEndpoint = %v, want AWS_ENDPOINT_URL", got)
	}
}

func TestIgnoreConfiguredEndpointsLeavesAWSsOwn(t *testing.T) {
	cfg, err := From(env(map[string]string{
		"AWS_ENDPOINT_URL": "http://127.0.0.1:4566", "AWS_ENDPOINT_URL_SQS": "http://127.0.0.1:9324",
		"AWS_IGNORE_CONFIGURED_ENDPOINT_URLS": "true",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if got := sqs.NewFromConfig(cfg).Options().BaseEndpoint; got != nil {
		t.Errorf("SQS BaseEndpoint = %q, want none with AWS_IGNORE_CONFIGURED_ENDPOINT_URLS=true", *got)
	}
}

func TestMaxAttemptsIsTheRetryLimit(t *testing.T) {
	cfg, err := From(env(map[string]string{"AWS_MAX_ATTEMPTS": "5"}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.RetryMaxAttempts != 5 {
		t.Errorf("RetryMaxAttempts = %d, want 5", cfg.RetryMaxAttempts)
	}
}

func TestBadValuesNameTheirVariable(t *testing.T) {
	for name, value := range map[string]string{"AWS_MAX_ATTEMPTS": "0", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS": "maybe"} {
		_, err := From(env(map[string]string{name: value}))
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s=%q: error %v, want one naming the variable", name, value, err)
		}
	}
}
