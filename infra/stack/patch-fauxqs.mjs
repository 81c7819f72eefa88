// Patches the installed fauxqs (infra/node_modules, pinned in
// infra/package.json) where it departs from AWS in a way the relay's tests
// and demo would trip on. Run by up.sh after every `npm ci` and before
// every start: each patch is an exact text replacement, applied once
// (a file that already carries the replacement is left alone), and a file
// that holds neither text fails the start, naming the patch, so a fauxqs
// upgrade cannot silently run unpatched. It prints the patches' digest,
// which up.sh keeps beside the pid file to restart a fauxqs started before
// a patch changed.
//
//   node infra/stack/patch-fauxqs.mjs [node_modules dir]
import { createHash } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

const patches = [
  {
    name: "sns-publish-batch-entry-order",
    // PublishBatch (query protocol) sends its entries as
    // PublishBatchRequestEntries.member.N.*, and the SDK writes the keys
    // sorted as text: member.1, member.10, member.2, ... fauxqs 2.4.1
    // publishes the entries in the order their keys first appear, so the
    // 10th entry of a full batch was published second, breaking a FIFO
    // topic's group order. AWS publishes them by member number.
    file: "fauxqs/dist/sns/actions/publish.js",
    find: "    for (const idx of indices) {\n        const prefix = `PublishBatchRequestEntries.member.${idx}`;",
    replace:
      "    for (const idx of [...indices].sort((a, b) => Number(a) - Number(b))) { // outboxkeeper: by member number, as AWS\n        const prefix = `PublishBatchRequestEntries.member.${idx}`;",
  },
];

const dir = process.argv[2] ?? join(import.meta.dirname, "..", "node_modules");
const digest = createHash("sha256");
for (const p of patches) {
  const path = join(dir, p.file);
  const text = readFileSync(path, "utf8");
  digest.update(p.name + "\0" + p.replace + "\0");
  if (text.includes(p.replace)) {
    continue;
  }
  const at = text.indexOf(p.find);
  if (at < 0 || text.indexOf(p.find, at + 1) >= 0) {
    console.error(`patch-fauxqs: ${p.name}: ${path} does not hold the text it replaces exactly once; fauxqs changed, so review the patch`);
    process.exit(1);
  }
  writeFileSync(path, text.slice(0, at) + p.replace + text.slice(at + p.find.length));
  console.error(`patch-fauxqs: applied ${p.name}`);
}
console.log(digest.digest("hex").slice(0, 16));
