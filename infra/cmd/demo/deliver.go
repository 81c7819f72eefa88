package main

// The deliver function in the demo: its real bootstrap under
// aws-lambda-rie (two instances, as its reserved concurrency lets a
// watching pass hand over to the next minute's), pushing the publishers'
// deliveries to an SQS queue on fauxqs and to an HTTPS webhook served
// here, with a certificate made for the run and the signing key in moto's
// Secrets Manager. The webhook drops the connection before answering for
// some first pushes while losses are on: those stay delivered until the
// sweep puts them back, and the deliver function pushes them again.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkeeper/outboxkeeper/infra/local"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/rie"
	"github.com/outboxkeeper/outboxkeeper/shared/deliver"
)

// The demo's two recipients.
const (
	recipientWebhook = "webhook"
	recipientQueue   = "queue"
)

// demoKey signs the webhook requests (the secret's "current").
const demoKey = "demo-signing-key"

// deliverer is the deliver function and what it pushes to.
type deliverer struct {
	fns      []*local.Function
	queueURL string
	srv      *http.Server
	l        *ledger
	rng      *mrand.Rand
	rngMu    sync.Mutex

	// lossPct is the share of first webhook pushes whose connection is
	// dropped before the answer; 0 for the drain.
	lossPct atomic.Int32

	mu sync.Mutex
	// seen counts each delivery id's arrivals, at the webhook or the queue.
	seen map[int64]int
	// badSignatures counts webhook requests that did not verify.
	badSignatures int
	// dropped are the ids whose first push lost its answer.
	dropped map[int64]bool
}

// startDeliverer sets the recipients up and starts the deliver function.
func startDeliverer(ctx context.Context, root, workDir string, stack *local.Stack, pool *pgxpool.Pool, l *ledger) (*deliverer, error) {
	d := &deliverer{l: l, seen: map[int64]int{}, dropped: map[int64]bool{}, rng: mrand.New(mrand.NewPCG(9, 9))}
	d.lossPct.Store(10)
	caFile, hookURL, err := d.serve(workDir)
	if err != nil {
		return nil, err
	}
	q, err := stack.SQS.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(fmt.Sprintf("outboxkeeper-demo-deliveries-%d", time.Now().UnixNano()))})
	if err != nil {
		return nil, fmt.Errorf("create the deliveries queue: %w", err)
	}
	d.queueURL = aws.ToString(q.QueueUrl)
	secretARN, err := demoSecret(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := pool.Exec(ctx, `INSERT INTO `+stack.Schema+`.recipients (name, target, note) VALUES ($1, $2, 'the demo''s webhook'), ($3, $4, 'the demo''s queue')`,
		recipientWebhook, hookURL, recipientQueue, d.queueURL); err != nil {
		return nil, fmt.Errorf("add the recipients: %w", err)
	}
	bin := filepath.Join(workDir, "bin", "deliver", "bootstrap")
	if err := rie.Build(ctx, root, "./functions/deliver", bin); err != nil {
		return nil, err
	}
	rieBin := os.Getenv("AWS_LAMBDA_RIE")
	env := map[string]string{}
	for k, v := range stack.FunctionEnv("sweep") {
		if !strings.HasPrefix(k, "SWEEP_") {
			env[k] = v
		}
	}
	// The template's timeout for the deliver function, and the local
	// stack's HTTPS receiver: its CA, and loopback (never in a template).
	env["AWS_LAMBDA_FUNCTION_TIMEOUT"] = "90"
	env["DELIVER_WEBHOOK_HOSTS"] = "localhost"
	env["DELIVER_ALLOW_LOOPBACK"] = "true"
	env["DELIVER_CA_BUNDLE"] = caFile
	env["DELIVER_SIGNING_SECRET_ARN"] = secretARN
	env["AWS_ENDPOINT_URL_SECRETS_MANAGER"] = os.Getenv("AWS_ENDPOINT_URL_EVENTBRIDGE")
	for i := 1; i <= 2; i++ {
		out, err := os.Create(filepath.Join(stack.LogDir, fmt.Sprintf("deliver-%d.log", i)))
		if err != nil {
			return nil, err
		}
		f, err := rie.Start(ctx, rie.Spec{Name: "deliver", RIE: rieBin, Bootstrap: bin, Env: env, Output: out})
		if err != nil {
			out.Close()
			return nil, err
		}
		d.fns = append(d.fns, f)
	}
	return d, nil
}

// run invokes the function on the fill's schedule and reads the queue,
// until ctx ends.
func (d *deliverer) run(ctx context.Context, every time.Duration, observe local.Observer) {
	var wg sync.WaitGroup
	wg.Go(func() { local.Schedule(ctx, d.fns, []byte(`{"source":"outboxkeeper.schedule"}`), every, observe) })
	wg.Go(func() { d.readQueue(ctx) })
	wg.Wait()
}

func (d *deliverer) close() {
	for _, f := range d.fns {
		f.Stop()
	}
	_ = d.srv.Close()
}

func (d *deliverer) arrived(id int64) {
	d.mu.Lock()
	d.seen[id]++
	d.mu.Unlock()
}

// readQueue records every delivery that reached the queue.
func (d *deliverer) readQueue(ctx context.Context) {
	cfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		d.l.fail("deliveries queue", err)
		return
	}
	c := sqs.NewFromConfig(cfg)
	for ctx.Err() == nil {
		out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(d.queueURL), MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
		if err != nil {
			if ctx.Err() == nil {
				d.l.fail("deliveries queue", err)
				time.Sleep(time.Second)
			}
			continue
		}
		for _, m := range out.Messages {
			var env struct {
				ID int64 `json:"delivery_id"`
			}
			if json.Unmarshal([]byte(aws.ToString(m.Body)), &env) == nil {
				d.arrived(env.ID)
			}
			_, _ = c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(d.queueURL), ReceiptHandle: m.ReceiptHandle})
		}
	}
}

// hook is the webhook: it verifies the signature, drops some first
// pushes' connections, and acks the rest.
func (d *deliverer) hook(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	id, _ := strconv.ParseInt(r.Header.Get(deliver.HeaderDeliveryID), 10, 64)
	if err := deliver.Verify([]byte(demoKey), r.Header.Get(deliver.HeaderTimestamp), r.Header.Get(deliver.HeaderSignature), body, time.Now(), 5*time.Minute); err != nil {
		d.mu.Lock()
		d.badSignatures++
		d.mu.Unlock()
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	d.arrived(id)
	d.rngMu.Lock()
	drop := d.rng.IntN(100) < int(d.lossPct.Load())
	d.rngMu.Unlock()
	d.mu.Lock()
	drop = drop && !d.dropped[id]
	if drop {
		d.dropped[id] = true
	}
	d.mu.Unlock()
	if drop {
		// The answer is lost (the stream reset, or the connection closed
		// on HTTP/1.1): the push stays delivered for the sweep.
		d.l.lostAcks.Add(1)
		panic(http.ErrAbortHandler)
	}
	w.WriteHeader(http.StatusNoContent)
}

// serve starts the HTTPS webhook on a certificate of a CA made for the
// run, and returns the CA's file and the webhook's URL.
func (d *deliverer) serve(workDir string) (caFile, url string, err error) {
	caPEM, cert, err := demoCertificate()
	if err != nil {
		return "", "", err
	}
	caFile = filepath.Join(workDir, "webhook-ca.pem")
	if err := os.WriteFile(caFile, caPEM, 0o600); err != nil {
		return "", "", err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", "", err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /hook", d.hook)
	d.srv = &http.Server{Handler: mux, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = d.srv.ServeTLS(ln, "", "") }()
	return caFile, fmt.Sprintf("https://localhost:%d/hook", ln.Addr().(*net.TCPAddr).Port), nil
}

// demoCertificate is a CA and a localhost certificate it signed.
func demoCertificate() ([]byte, tls.Certificate, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "outboxkeeper demo CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "localhost"},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	caCert, _ := x509.ParseCertificate(caDER)
	der, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	cert, err := tls.X509KeyPair(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), cert, err
}

// demoSecret stores the signing key in moto's Secrets Manager (the local
// stack's EventBridge endpoint serves it too).
func demoSecret(ctx context.Context) (string, error) {
	cfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return "", err
	}
	moto := os.Getenv("AWS_ENDPOINT_URL_EVENTBRIDGE")
	if moto == "" {
		return "", fmt.Errorf("AWS_ENDPOINT_URL_EVENTBRIDGE is not set (source .local/stack.env): moto serves the signing key")
	}
	c := secretsmanager.NewFromConfig(cfg, func(o *secretsmanager.Options) { o.BaseEndpoint = aws.String(moto) })
	out, err := c.CreateSecret(ctx, &secretsmanager.CreateSecretInput{
		Name:         aws.String(fmt.Sprintf("outboxkeeper-demo-signing-%d", time.Now().UnixNano())),
		SecretString: aws.String(`{"current":"` + demoKey + `"}`)})
	if err != nil {
		return "", fmt.Errorf("store the signing key: %w", err)
	}
	return aws.ToString(out.ARN), nil
}

// deliveryView is what the verdict reads of the recipients' side.
type deliveryView struct {
	seen          map[int64]int
	badSignatures int
}

func (d *deliverer) view() deliveryView {
	d.mu.Lock()
	defer d.mu.Unlock()
	seen := make(map[int64]int, len(d.seen))
	for k, v := range d.seen {
		seen[k] = v
	}
	return deliveryView{seen: seen, badSignatures: d.badSignatures}
}
