// Package awsenv is the AWS SDK configuration of a function running on
// Lambda, read from the variables Lambda sets: the region (AWS_REGION),
// the execution role's credentials (AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN) and, as the SDK's own loader
// honours them, endpoint overrides (AWS_ENDPOINT_URL and
// AWS_ENDPOINT_URL_<SERVICE>, which is how the local stack points SQS at
// its emulator; AWS_IGNORE_CONFIGURED_ENDPOINT_URLS) and AWS_MAX_ATTEMPTS.
//
// The SDK's config package (LoadDefaultConfig) resolves far more — shared
// config and credentials files, profiles, SSO, web identity, process and
// container credentials, EC2 instance metadata — none of which a Lambda
// function has, and it links the STS, SSO and sign-in clients for them:
// 1.7 MB of each function's 13 MB binary (BENCHMARKS.md, row 10). The
// operator CLI, which runs on a laptop or a CI runner, keeps the full chain.
package awsenv

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
)

// Load is From(os.LookupEnv). It never fails for missing credentials: like
// the SDK's loader it leaves that to the first signed request, so a
// function that needs no AWS call (a plain DATABASE_URL) never minds.
func Load(context.Context) (aws.Config, error) { return From(os.LookupEnv) }

// From builds the configuration from the variables lookup returns.
func From(lookup func(string) (string, bool)) (aws.Config, error) {
	get := func(name string) string {
		v, _ := lookup(name)
		return strings.TrimSpace(v)
	}
	cfg := aws.Config{
		Region:        cmp.Or(get("AWS_REGION"), get("AWS_DEFAULT_REGION")),
		Credentials:   aws.NewCredentialsCache(envCredentials{key: get("AWS_ACCESS_KEY_ID"), secret: get("AWS_SECRET_ACCESS_KEY"), session: get("AWS_SESSION_TOKEN")}),
		ConfigSources: []any{endpoints{get: get}},
	}
	ignore, err := parseBool(get, "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS")
	if err != nil {
		return aws.Config{}, err
	}
	if base := get("AWS_ENDPOINT_URL"); base != "" && !ignore {
		cfg.BaseEndpoint = aws.String(base)
	}
	if v := get("AWS_MAX_ATTEMPTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return aws.Config{}, fmt.Errorf("config: AWS_MAX_ATTEMPTS=%q: must be a whole number of at least 1", v)
		}
		cfg.RetryMaxAttempts = n
	}
	return cfg, nil
}

// envCredentials are the execution role's temporary credentials, which
// Lambda hands every execution environment for its lifetime.
type envCredentials struct{ key, secret, session string }

var errNoCredentials = errors.New("no AWS credentials: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not set (Lambda sets them from the function's role)")

func (c envCredentials) Retrieve(context.Context) (aws.Credentials, error) {
	if c.key == "" || c.secret == "" {
		return aws.Credentials{}, errNoCredentials
	}
	return aws.Credentials{AccessKeyID: c.key, SecretAccessKey: c.secret, SessionToken: c.session, Source: credentials.StaticCredentialsName}, nil
}

// endpoints answers the service clients' question for a service-specific
// endpoint, AWS_ENDPOINT_URL_<SDK ID in upper case, spaces as _>, as the
// SDK's environment configuration does (aws.Config.ConfigSources).
type endpoints struct{ get func(string) string }

func (e endpoints) GetServiceBaseEndpoint(_ context.Context, sdkID string) (string, bool, error) {
	v := e.get("AWS_ENDPOINT_URL_" + strings.ReplaceAll(strings.ToUpper(sdkID), " ", "_"))
	return v, v != "", nil
}

func (e endpoints) GetIgnoreConfiguredEndpoints(context.Context) (bool, bool, error) {
	v, err := parseBool(e.get, "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS")
	return v, err == nil && e.get("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS") != "", err
}

func parseBool(get func(string) string, name string) (bool, error) {
	v := get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("config: %s=%q: must be true or false", name, v)
	}
	return b, nil
}
