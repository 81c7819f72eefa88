#!/usr/bin/env bash
# Restarts the local stack's PostgreSQL (`pg_ctl restart -m fast`): every
# connection is cut and the server is gone for a moment, as in a failover.
# The fill's recovery test plays a restart in the middle of a pass with it.
# Exits 2 when the stack does not manage the cluster (DATABASE_URL points
# elsewhere), so a caller can tell "cannot" from "failed".
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
url=$(sed -n "s/^DATABASE_URL=//p" "$LOCAL/stack.env" 2>/dev/null | tr -d "'")
if [[ "$url" != "$LOCAL_DATABASE_URL" ]]; then
  echo "pg-restart: the stack does not manage the database at ${url:-(none)}" >&2
  exit 2
fi
dir=$(pg_dir)
as_pg "$PG_BIN/pg_ctl" restart -D "$dir/data" -m fast -w -t 60 -l "$dir/log/postgres.log" >/dev/null
head -1 "$dir/data/postmaster.pid" >"$PIDS/postgres.pid"
