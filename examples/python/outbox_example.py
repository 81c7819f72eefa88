"""Publish, report a rollback and consume an outboxkeeper outbox from Python.

psycopg 3 talks to PostgreSQL, boto3 to the rollback report queue. The
recipe, in three parts:

* publish inside your own transaction with a plain ``INSERT INTO
  <schema>.events (topic, payload, headers)``: the table's defaults take
  the transaction's xid before they allocate the sequence, so nothing else
  is needed for soundness (``<schema>.publish(topic, payload, headers)``
  does the same as a function call);
* if the transaction does not commit, send the sequences it published and
  its xid to the report queue, and the compensate function fills them at
  once instead of after the fill function's grace. The xid must be read
  *inside* the transaction (``pg_current_xact_id()``), after publish: once
  the transaction has ended, nothing can tell you what it was;
* consume with ``<schema>.read_events(after, max)``, which returns the
  events in sequence order up to, never past, the first sequence that may
  still commit, placeholders included (``filled_by`` is set), and keep
  the position with ``<schema>.commit_position(name, position)`` after the
  batch is handled (at-least-once).

Run as a program it is the example that the project's tests drive:

    python outbox_example.py publish --committed 3 --rolled-back 2
    python outbox_example.py consume --name ledger --until 6

with DATABASE_URL, OUTBOX_SCHEMA (default outbox), ROLLBACK_QUEUE_URL and
the usual AWS variables (AWS_ENDPOINT_URL_SQS points boto3 at an emulator).
"""

import argparse
import json
import os
import sys
import time

import boto3
import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

#: A report carries at most this many sequences (COMPENSATE_MAX_SEQUENCES).
MAX_SEQUENCES_PER_REPORT = 10000


def schema_sql(text, schema):
    """``text`` with ``{schema}`` replaced by the quoted schema name."""
    return sql.SQL(text).format(schema=sql.Identifier(schema))


def publish(conn, schema, topic, payload, headers=None):
    """Publish one event in the connection's current transaction and
    return its sequence: a plain INSERT of the payload columns, whose
    sequence and xid the table's defaults fill in (the writer role may not
    name them)."""
    row = conn.execute(
        schema_sql("INSERT INTO {schema}.events (topic, payload, headers) VALUES (%s, %s, %s) RETURNING sequence", schema),
        (topic, Jsonb(payload), Jsonb(headers) if headers is not None else None),
    ).fetchone()
    return row[0]


def enqueue(conn, schema, recipient, kind, payload, tenant=None):
    """Enqueue a delivery to ``recipient`` in the connection's current
    transaction and return its id: ``<schema>.enqueue(recipient, kind,
    payload, tenant)``, which the deliver function pushes to the
    recipient's target once the transaction commits. The payload is bytes;
    here, the JSON document's UTF-8."""
    row = conn.execute(
        schema_sql("SELECT {schema}.enqueue(%s, %s, %s, %s)", schema),
        (recipient, kind, json.dumps(payload).encode(), tenant),
    ).fetchone()
    return row[0]


def current_xid(conn):
    """The transaction's xid as the decimal string a report carries. Call it
    inside the transaction, after publish (publish has assigned it)."""
    return conn.execute("SELECT pg_current_xact_id()::text").fetchone()[0]


class RollbackReporter:
    """Sends rollback reports to the compensate function's queue."""

    def __init__(self, queue_url, sqs=None):
        # boto3 reads AWS_ENDPOINT_URL_SQS, AWS_REGION and the credentials
        # from the environment, as on Lambda or ECS.
        # (Lambda sets AWS_REGION; botocore itself reads AWS_DEFAULT_REGION.)
        self.sqs = sqs or boto3.client("sqs", region_name=os.environ.get("AWS_REGION"))
        self.queue_url = queue_url

    def report(self, xid, sequences):
        """One message per MAX_SEQUENCES_PER_REPORT sequences."""
        seqs = sorted(set(sequences))
        for i in range(0, len(seqs), MAX_SEQUENCES_PER_REPORT):
            body = {"v": 1, "sequences": seqs[i : i + MAX_SEQUENCES_PER_REPORT]}
            if xid is not None:
                body["xid"] = xid
            self.sqs.send_message(QueueUrl=self.queue_url, MessageBody=json.dumps(body))


def in_transaction(conn, schema, reporter, work):
    """Run ``work(publish)`` in a transaction; ``publish(topic, payload,
    headers=None)`` publishes in it. If the transaction does not commit
    (work raised, or COMMIT failed), its sequences are reported with its
    xid and the exception is raised again. Returns work's result."""
    published, xid = [], None

    def tx_publish(topic, payload, headers=None):
        nonlocal xid
        seq = publish(conn, schema, topic, payload, headers)
        published.append(seq)
        if xid is None:
            xid = current_xid(conn)
        return seq

    try:
        with conn.transaction():
            return work(tx_publish)
    except BaseException:
        if published:
            try:
                reporter.report(xid, published)
            except Exception as report_error:  # never hide the original
                print(f"rollback report failed: {report_error}", file=sys.stderr)
        raise


def consume(conn, schema, name, handle, batch=100, until=None, timeout=None, poll=1.0, listen=None):
    """Hand the events after consumer ``name``'s position to ``handle`` in
    batches, committing the position after each batch is handled. Stops
    once the position reaches ``until`` or after ``timeout`` seconds, if
    given. ``listen`` is an optional second connection (autocommit) that
    LISTENs on ``<schema>_events``, so an idle consumer wakes when events
    commit instead of at its next poll. Returns the position."""
    deadline = None if timeout is None else time.monotonic() + timeout
    # Registers a new consumer at 0 and answers a registered one's stored
    # position: positions never move back.
    position = conn.execute(schema_sql("SELECT {schema}.commit_position(%s, 0)", schema), (name,)).fetchone()[0]
    if listen is not None:
        listen.execute(sql.SQL("LISTEN {}").format(sql.Identifier(schema + "_events")))
    while until is None or position < until:
        if deadline is not None and time.monotonic() > deadline:
            break
        rows = conn.execute(
            schema_sql(
                "SELECT sequence, topic, payload, headers, filled_by FROM {schema}.read_events(%s, %s)", schema
            ),
            (position, batch),
        ).fetchall()
        if not rows:
            if listen is not None:
                for _ in listen.notifies(timeout=poll, stop_after=1):
                    pass
            else:
                time.sleep(poll)
            continue
        handle(rows)
        position = conn.execute(
            schema_sql("SELECT {schema}.commit_position(%s, %s)", schema), (name, rows[-1][0])
        ).fetchone()[0]
    return position


class Declined(Exception):
    """The example's business failure: the transaction rolls back."""


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("publish", help="commit some orders, roll one transaction back and report it, commit one more")
    p.add_argument("--committed", type=int, default=3)
    p.add_argument("--rolled-back", type=int, default=2)
    e = sub.add_parser("enqueue", help="publish an event and enqueue a delivery to a recipient in one transaction")
    e.add_argument("--recipient", required=True)
    e.add_argument("--kind", required=True)
    e.add_argument("--tenant")
    c = sub.add_parser("consume", help="consume to a position and print the events as JSON lines")
    c.add_argument("--name", required=True)
    c.add_argument("--until", type=int, required=True)
    c.add_argument("--batch", type=int, default=2)
    c.add_argument("--timeout", type=float, default=30.0)
    args = parser.parse_args(argv)

    url = os.environ["DATABASE_URL"]
    schema = os.environ.get("OUTBOX_SCHEMA", "outbox")
    with psycopg.connect(url, autocommit=True) as conn:
        if args.command == "publish":
            reporter = RollbackReporter(os.environ["ROLLBACK_QUEUE_URL"])
            committed, rolled_back, xid = [], [], None

            def orders(n, first_id):
                def work(tx_publish):
                    return [tx_publish("order.placed", {"id": first_id + i}, {"source": "python"}) for i in range(n)]

                return work

            committed += in_transaction(conn, schema, reporter, orders(args.committed, 1))

            def declined(tx_publish):
                nonlocal xid
                rolled_back.extend(tx_publish("order.placed", {"id": 100 + i}) for i in range(args.rolled_back))
                xid = current_xid(conn)
                raise Declined("payment declined")

            try:
                in_transaction(conn, schema, reporter, declined)
            except Declined:
                pass
            committed += in_transaction(conn, schema, reporter, orders(1, 200))
            print(json.dumps({"committed": committed, "rolled_back": rolled_back, "xid": xid}))
        elif args.command == "enqueue":
            with conn.transaction():
                seq = publish(conn, schema, args.kind, {"id": 7})
                delivery = enqueue(conn, schema, args.recipient, args.kind, {"id": 7, "sequence": seq}, args.tenant)
            print(json.dumps({"sequence": seq, "delivery": delivery}))
        else:

            def show(rows):
                for seq, topic, payload, headers, filled_by in rows:
                    print(json.dumps({"sequence": seq, "topic": topic, "payload": payload,
                                      "headers": headers, "filled_by": filled_by}), flush=True)

            with psycopg.connect(url, autocommit=True) as listen:
                position = consume(conn, schema, args.name, show, batch=args.batch, until=args.until,
                                   timeout=args.timeout, poll=0.5, listen=listen)
            if position < args.until:
                print(f"consumer {args.name} reached {position}, not {args.until}", file=sys.stderr)
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
