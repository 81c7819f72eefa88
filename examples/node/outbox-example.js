// Publish, report a rollback and consume an outboxkeeper outbox from
// Node.js: `pg` talks to PostgreSQL, `@aws-sdk/client-sqs` to the
// rollback report queue. The recipe, in three parts:
//
// - publish inside your own transaction with a plain
//   `INSERT INTO <schema>.events (topic, payload, headers)`: the table's
//   defaults take the transaction's xid before they allocate the
//   sequence, so nothing else is needed for soundness
//   (`<schema>.publish(topic, payload, headers)` does the same as a
//   function call);
// - if the transaction does not commit, send the sequences it published
//   and its xid to the report queue, and the compensate function fills
//   them at once instead of after the fill function's grace. Read the xid
//   *inside* the transaction (`pg_current_xact_id()`), after publish:
//   once the transaction has ended nothing can tell you what it was;
// - consume with `<schema>.read_events(after, max)`, which returns the
//   events in sequence order up to, never past, the first sequence that
//   may still commit, placeholders included (`filled_by` is set), and keep
//   the position with `<schema>.commit_position(name, position)` after the
//   batch is handled (at-least-once).
//
// Run as a program it is the example that the project's tests drive:
//
//   node outbox-example.js publish --committed 3 --rolled-back 2
//   node outbox-example.js consume --name ledger --until 6
//
// with DATABASE_URL, OUTBOX_SCHEMA (default outbox), ROLLBACK_QUEUE_URL
// and the usual AWS variables (AWS_ENDPOINT_URL_SQS points the SDK at an
// emulator).

import { parseArgs } from "node:util";
import pg from "pg";
import { SQSClient, SendMessageCommand } from "@aws-sdk/client-sqs";

// A report carries at most this many sequences (COMPENSATE_MAX_SEQUENCES).
export const MAX_SEQUENCES_PER_REPORT = 10000;

// quoteSchema refuses anything but a plain identifier, as outboxkeeper does.
export function quoteSchema(schema) {
  if (!/^[a-z_][a-z0-9_]{0,51}$/.test(schema) || schema.startsWith("pg_")) {
    throw new Error(`outbox schema ${JSON.stringify(schema)} must be a plain lower-case identifier`);
  }
  return `"${schema}"`;
}

// publish publishes one event in the client's current transaction and
// returns its sequence (a bigint arrives as a string; it is a Number here
// while it is below 2^53): a plain INSERT of the payload columns, whose
// sequence and xid the table's defaults fill in (the writer role may not
// name them).
export async function publish(client, schema, topic, payload, headers = null) {
  const { rows } = await client.query(`INSERT INTO ${quoteSchema(schema)}.events (topic, payload, headers) VALUES ($1, $2, $3) RETURNING sequence`, [
    topic,
    JSON.stringify(payload),
    headers === null ? null : JSON.stringify(headers),
  ]);
  return Number(rows[0].sequence);
}

// currentXid is the transaction's xid as the decimal string a report
// carries: call it inside the transaction, after publish.
// enqueue adds a delivery to recipient in the client's current
// transaction and returns its id: <schema>.enqueue(recipient, kind,
// payload, tenant), which the deliver function pushes to the recipient's
// target once the transaction commits. The payload is bytes: here, the
// JSON document's UTF-8.
export async function enqueue(client, schema, recipient, kind, payload, tenant = null) {
  const res = await client.query(`SELECT ${quoteSchema(schema)}.enqueue($1, $2, $3, $4) AS id`, [
    recipient,
    kind,
    Buffer.from(JSON.stringify(payload), "utf8"),
    tenant,
  ]);
  return Number(res.rows[0].id);
}

export async function currentXid(client) {
  const { rows } = await client.query("SELECT pg_current_xact_id()::text AS xid");
  return rows[0].xid;
}

// RollbackReporter sends rollback reports to the compensate queue.
export class RollbackReporter {
  // The SDK reads AWS_ENDPOINT_URL_SQS, AWS_REGION and the credentials
  // from the environment, as on Lambda or ECS. useQueueUrlAsEndpoint:
  // false sends to that endpoint, as the Go and Python SDKs do, rather
  // than to the queue URL's host (the same on AWS; an emulator's queue
  // URLs name a host that does not resolve).
  constructor(queueUrl, sqs = new SQSClient({ useQueueUrlAsEndpoint: false })) {
    this.queueUrl = queueUrl;
    this.sqs = sqs;
  }

  async report(xid, sequences) {
    const seqs = [...new Set(sequences)].sort((a, b) => a - b);
    for (let i = 0; i < seqs.length; i += MAX_SEQUENCES_PER_REPORT) {
      const body = { v: 1, sequences: seqs.slice(i, i + MAX_SEQUENCES_PER_REPORT) };
      if (xid !== null) body.xid = xid;
      await this.sqs.send(new SendMessageCommand({ QueueUrl: this.queueUrl, MessageBody: JSON.stringify(body) }));
    }
  }
}

// inTransaction runs work(publish) in a transaction on client;
// publish(topic, payload, headers) publishes in it. If the transaction
// does not commit (work threw, or COMMIT failed), its sequences are
// reported with its xid and the error is thrown again.
export async function inTransaction(client, schema, reporter, work) {
  const published = [];
  let xid = null;
  const txPublish = async (topic, payload, headers = null) => {
    const seq = await publish(client, schema, topic, payload, headers);
    published.push(seq);
    if (xid === null) xid = await currentXid(client);
    return seq;
  };
  await client.query("BEGIN");
  try {
    const result = await work(txPublish);
    await client.query("COMMIT");
    return result;
  } catch (err) {
    await client.query("ROLLBACK").catch(() => {}); // a failed COMMIT has ended it already
    if (published.length > 0) {
      try {
        await reporter.report(xid, published);
      } catch (reportErr) {
        console.error(`rollback report failed: ${reportErr}`); // never hide the original
      }
    }
    throw err;
  }
}

// consume hands the events after consumer `name`'s position to handle in
// batches, committing the position after each batch is handled, until the
// position reaches `until` or `timeoutMs` passes, if given. `listen` is an
// optional second client on which it LISTENs to <schema>_events, so an
// idle consumer wakes when events commit instead of at its next poll.
// Returns the position.
export async function consume(client, schema, name, handle, { batch = 100, until = null, timeoutMs = null, pollMs = 1000, listen = null } = {}) {
  const s = quoteSchema(schema);
  const deadline = timeoutMs === null ? null : Date.now() + timeoutMs;
  // Registers a new consumer at 0 and answers a registered one's stored
  // position: positions never move back.
  const { rows } = await client.query(`SELECT ${s}.commit_position($1, 0) AS position`, [name]);
  let position = Number(rows[0].position);
  let wake = null;
  if (listen !== null) {
    listen.on("notification", () => wake?.());
    // LISTEN takes no parameters: the channel is quoted by the driver.
    await listen.query(`LISTEN ${listen.escapeIdentifier(`${schema}_events`)}`);
  }
  while (until === null || position < until) {
    if (deadline !== null && Date.now() > deadline) break;
    const res = await client.query(
      `SELECT sequence, topic, payload, headers, filled_by FROM ${s}.read_events($1, $2)`,
      [position, batch],
    );
    if (res.rows.length === 0) {
      await new Promise((resolve) => {
        const timer = setTimeout(resolve, pollMs);
        wake = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      wake = null;
      continue;
    }
    await handle(res.rows);
    const last = res.rows[res.rows.length - 1].sequence;
    const committed = await client.query(`SELECT ${s}.commit_position($1, $2) AS position`, [name, last]);
    position = Number(committed.rows[0].position);
  }
  return position;
}

class Declined extends Error {}

async function main() {
  const { positionals, values } = parseArgs({
    allowPositionals: true,
    options: {
      committed: { type: "string", default: "3" },
      "rolled-back": { type: "string", default: "2" },
      name: { type: "string" },
      until: { type: "string" },
      batch: { type: "string", default: "2" },
      timeout: { type: "string", default: "30" },
      recipient: { type: "string" },
      kind: { type: "string" },
      tenant: { type: "string" },
    },
  });
  const schema = process.env.OUTBOX_SCHEMA || "outbox";
  const client = new pg.Client({ connectionString: process.env.DATABASE_URL });
  await client.connect();
  try {
    if (positionals[0] === "publish") {
      const reporter = new RollbackReporter(process.env.ROLLBACK_QUEUE_URL);
      const orders = (n, firstId) => async (txPublish) => {
        const seqs = [];
        for (let i = 0; i < n; i++) seqs.push(await txPublish("order.placed", { id: firstId + i }, { source: "node" }));
        return seqs;
      };
      const committed = await inTransaction(client, schema, reporter, orders(Number(values.committed), 1));
      const rolledBack = [];
      let xid = null;
      try {
        await inTransaction(client, schema, reporter, async (txPublish) => {
          for (let i = 0; i < Number(values["rolled-back"]); i++) rolledBack.push(await txPublish("order.placed", { id: 100 + i }));
          xid = await currentXid(client);
          throw new Declined("payment declined");
        });
      } catch (err) {
        if (!(err instanceof Declined)) throw err;
      }
      committed.push(...(await inTransaction(client, schema, reporter, orders(1, 200))));
      console.log(JSON.stringify({ committed, rolled_back: rolledBack, xid }));
    } else if (positionals[0] === "enqueue") {
      await client.query("BEGIN");
      try {
        const seq = await publish(client, schema, values.kind, { id: 7 });
        const delivery = await enqueue(client, schema, values.recipient, values.kind, { id: 7, sequence: seq }, values.tenant ?? null);
        await client.query("COMMIT");
        console.log(JSON.stringify({ sequence: seq, delivery }));
      } catch (err) {
        await client.query("ROLLBACK");
        throw err;
      }
    } else if (positionals[0] === "consume") {
      const until = Number(values.until);
      const listen = new pg.Client({ connectionString: process.env.DATABASE_URL });
      await listen.connect();
      try {
        const position = await consume(
          client,
          schema,
          values.name,
          (rows) => {
            for (const r of rows) {
              console.log(JSON.stringify({ sequence: Number(r.sequence), topic: r.topic, payload: r.payload, headers: r.headers, filled_by: r.filled_by }));
            }
          },
          { batch: Number(values.batch), until, timeoutMs: Number(values.timeout) * 1000, pollMs: 500, listen },
        );
        if (position < until) {
          console.error(`consumer ${values.name} reached ${position}, not ${until}`);
          process.exitCode = 1;
        }
      } finally {
        await listen.end();
      }
    } else {
      console.error("usage: outbox-example.js publish|consume ...");
      process.exitCode = 2;
    }
  } finally {
    await client.end();
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  main().catch((err) => {
    console.error(err);
    process.exit(1);
  });
}
