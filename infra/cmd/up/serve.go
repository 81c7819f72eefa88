package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/outboxkeeper/outboxkeeper/infra/local"
	"github.com/outboxkeeper/outboxkeeper/shared/config"
)

// runServe is the background process: it starts the stack, publishes its
// endpoints, and drives the functions until SIGTERM (make down) or SIGINT.
func runServe(st state) error {
	ctx, stopSignals := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stopSignals()
	adminURL := os.Getenv("DATABASE_URL")
	if adminURL == "" {
		return fmt.Errorf("DATABASE_URL is not set: source .local/stack.env (make up does)")
	}
	// The template's schedules unless UP_SCHEDULE asks for a quicker look.
	var schedule time.Duration
	if v := os.Getenv("UP_SCHEDULE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return fmt.Errorf("UP_SCHEDULE=%q: want a positive Go duration", v)
		}
		schedule = d
	}
	schema := config.DefaultSchema
	if v := os.Getenv("OUTBOX_SCHEMA"); v != "" {
		schema = v
	}
	logger := log.New(os.Stdout, "", log.LstdFlags|log.Lmicroseconds)
	stack, err := local.Start(ctx, local.Options{
		RepoRoot: st.root, AdminURL: adminURL,
		// Kept between runs, unlike the demo's: a developer's data stays.
		Database: envOr("UP_DATABASE", "outboxkeeper_dev"), Fresh: false, Schema: schema,
		QueueName:        envOr("UP_QUEUE", "outboxkeeper-rollbacks"),
		ScheduleOverride: schedule, WorkDir: st.dir,
		Observe: func(inv local.Invocation) {
			if inv.Error != "" {
				logger.Printf("%s FAILED after %s: %s", inv.Function, inv.Duration.Round(time.Millisecond), inv.Error)
				return
			}
			logger.Printf("%s %s %s", inv.Function, inv.Duration.Round(time.Millisecond), inv.Response)
		},
	})
	if err != nil {
		return err
	}
	defer stack.Close()
	lines := stack.Endpoints()
	lines = append(lines, "FUNCTION_LOGS="+filepath.Join(stack.LogDir))
	if err := writeAtomic(st.endpoints, []byte(strings.Join(lines, "\n")+"\n")); err != nil {
		return err
	}
	logger.Printf("up: %s; compensate from %s", stack.ScheduleNote(), stack.Queues.URL)
	stack.Run(ctx)
	logger.Printf("up: stopping")
	_ = os.Remove(st.endpoints)
	return nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
