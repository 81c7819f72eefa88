#!/usr/bin/env bash
# Stops exactly what up.sh started, found by pid file / data dir; never by
# process name. Idempotent: stopping a stopped stack is fine.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

log() { printf 'down: %s\n' "$*" >&2; }

# kinesalite and moto
source "$(dirname "${BASH_SOURCE[0]}")/emulators.sh"
stop_emulators

# fauxqs
stop_started fauxqs fauxqs
rm -f "$PIDS/fauxqs.pid" "$PIDS/fauxqs.patches"

# PgBouncer, before the server it fronts.
stop_started pgbouncer pgbouncer
rm -f "$PIDS/pgbouncer.pid"

# PostgreSQL: pg_ctl, as the user that owns the cluster, knows its own pid.
data="$(pg_dir)/data"
if [[ -d "$data" ]] && as_pg "$PG_BIN/pg_ctl" status -D "$data" >/dev/null 2>&1; then
  log "stopping postgres ($data)"
  as_pg "$PG_BIN/pg_ctl" stop -D "$data" -m fast -w >/dev/null
fi
rm -f "$PIDS/postgres.pid"
log "stack is down"
