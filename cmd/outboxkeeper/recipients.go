package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"

	"github.com/outboxkeeper/outboxkeeper/shared/deliver/recipients"
)

var recipientsCommand = &command{
	name:    "recipients",
	summary: "the recipients deliveries name, and their targets",
	help: `A delivery names a recipient; the deliver function (functions/deliver) pushes it
to the recipient's target: an SQS queue (ARN or queue URL), an SNS topic ARN, an
EventBridge bus ARN, or an https:// webhook, signed with the stack's key. A
delivery to a recipient that does not exist, or is disabled, is dead with that
reason (outboxkeeper dead list). The stack's IAM role reaches only the ARNs of
its DeliverTargets parameter, and a webhook only the hosts of its
DeliverWebhookHosts parameter, at public addresses.`,
	sub: []*command{recipientsAdd, recipientsList, recipientsDisable, recipientsEnable, recipientsRemove},
}

type recipientsAddFlags struct {
	dbFlags
	name, target, note, hosts string
}

var recipientsAdd = &command{
	name:    "add",
	summary: "add a recipient, or give one a new target",
	help: `Adds the recipient --name with --target, or gives the recipient of that name the
new target (and enables it). The target is checked first, as the deliver
function checks it again at every push: an ARN must name an SQS queue, SNS topic
or EventBridge bus; a webhook must be https, its host among --webhook-hosts (the
stack's DeliverWebhookHosts; default $DELIVER_WEBHOOK_HOSTS), and every address
the host resolves to public (no private, loopback or link-local address).`,
	flags: func(fs *flag.FlagSet) any {
		f := &recipientsAddFlags{}
		addDBFlags(fs, &f.dbFlags)
		fs.StringVar(&f.name, "name", "", "the recipient's name, as deliveries name it (required)")
		fs.StringVar(&f.target, "target", "", "an SQS queue, SNS topic or EventBridge bus ARN, an SQS queue URL, or an https:// webhook URL (required)")
		fs.StringVar(&f.note, "note", "", "who owns it and why, for the person on call")
		fs.StringVar(&f.hosts, "webhook-hosts", "", "the hosts a webhook may name, comma-separated, *.domain for any under it (default $DELIVER_WEBHOOK_HOSTS)")
		return f
	},
	run: func(ctx context.Context, e *env, opts any) error {
		f := opts.(*recipientsAddFlags)
		if f.name == "" || f.target == "" {
			return usagef("--name and --target are required")
		}
		list := f.hosts
		if list == "" {
			list, _ = e.vars("DELIVER_WEBHOOK_HOSTS")
		}
		hosts, err := recipients.ParseHosts(list)
		if err != nil {
			return usagef("--webhook-hosts: %v", err)
		}
		if recipients.IsWebhook(f.target) && hosts.Empty() {
			return refusef("recipient %s: %s is a webhook, and no webhook host is allowed: give --webhook-hosts (the stack's DeliverWebhookHosts)", f.name, f.target)
		}
		policy := recipients.Policy{Hosts: hosts}
		if err := recipients.CheckTarget(ctx, policy, f.target); err != nil {
			return refusef("recipient %s: %v", f.name, err)
		}
		return withLogin(ctx, e, f.schema, func(l *login) error {
			created, err := recipients.NewAdmin(l.schema).Add(ctx, l.bounded(&f.dbFlags), policy, f.name, f.target, f.note)
			if err != nil {
				return err
			}
			if f.json {
				return printJSON(e.stdout, map[string]any{"name": f.name, "target": f.target, "created": created})
			}
			verb := "updated"
			if created {
				verb = "added"
			}
			_, err = fmt.Fprintf(e.stdout, "recipient %s %s: %s\n", f.name, verb, f.target)
			return err
		})
	},
}

var recipientsList = &command{
	name:    "list",
	summary: "every recipient: name, target, enabled, note",
	help:    `Lists every recipient of the schema by name, with its target and whether it is enabled.`,
	flags: func(fs *flag.FlagSet) any {
		f := &dbFlags{}
		addDBFlags(fs, f)
		return f
	},
	run: func(ctx context.Context, e *env, opts any) error {
		f := opts.(*dbFlags)
		return withLogin(ctx, e, f.schema, func(l *login) error {
			rows, err := recipients.NewAdmin(l.schema).List(ctx, l.bounded(f))
			if err != nil {
				return err
			}
			if f.json {
				return printJSON(e.stdout, listed(rows))
			}
			return tableOf(e.stdout, rows, "no recipients", []string{"NAME", "TARGET", "ENABLED", "UPDATED", "NOTE"},
				func(r recipients.Recipient) []string {
					return []string{r.Name, r.Target, strconv.FormatBool(r.Enabled), stamp(&r.UpdatedAt), r.Note}
				})
		})
	},
}

type recipientNameFlags struct {
	dbFlags
	name string
}

func nameFlags(fs *flag.FlagSet) any {
	f := &recipientNameFlags{}
	addDBFlags(fs, &f.dbFlags)
	fs.StringVar(&f.name, "name", "", "the recipient (required)")
	return f
}

// recipientChange is a command that changes one recipient by name.
func recipientChange(name, summary, help, done string, change func(ctx context.Context, r *recipients.Admin, l *login, f *recipientNameFlags) (bool, error)) *command {
	return &command{
		name: name, summary: summary, help: help, flags: nameFlags,
		run: func(ctx context.Context, e *env, opts any) error {
			f := opts.(*recipientNameFlags)
			if f.name == "" {
				return usagef("--name is required")
			}
			return withLogin(ctx, e, f.schema, func(l *login) error {
				found, err := change(ctx, recipients.NewAdmin(l.schema), l, f)
				if err != nil {
					return err
				}
				if !found {
					return fmt.Errorf("no recipient %s", f.name)
				}
				if f.json {
					return printJSON(e.stdout, map[string]any{"name": f.name, name: true})
				}
				_, err = fmt.Fprintf(e.stdout, "recipient %s %s\n", f.name, done)
				return err
			})
		},
	}
}

var recipientsDisable = recipientChange("disable", "stop pushing to a recipient: its deliveries die",
	`Disables the recipient: from the deliver function's next claim on, its pending
deliveries are dead with reason recipient_disabled (outboxkeeper dead list shows
them; dead retry puts them back once it is enabled again).`, "disabled",
	func(ctx context.Context, r *recipients.Admin, l *login, f *recipientNameFlags) (bool, error) {
		return r.SetEnabled(ctx, l.bounded(&f.dbFlags), f.name, false)
	})

var recipientsEnable = recipientChange("enable", "push to a disabled recipient again",
	`Enables the recipient again: its pending deliveries are pushed from the next claim on.`, "enabled",
	func(ctx context.Context, r *recipients.Admin, l *login, f *recipientNameFlags) (bool, error) {
		return r.SetEnabled(ctx, l.bounded(&f.dbFlags), f.name, true)
	})

var recipientsRemove = recipientChange("remove", "remove a recipient: its deliveries die as unknown",
	`Removes the recipient. Its deliveries stay; from the next claim on, the pending
ones are dead with reason unknown_recipient.`, "removed",
	func(ctx context.Context, r *recipients.Admin, l *login, f *recipientNameFlags) (bool, error) {
		return r.Remove(ctx, l.bounded(&f.dbFlags), f.name)
	})
