// Starts the fauxqs SQS emulator for up.sh. Same as fauxqs's own CLI
// (dist/cli.js), which in 2.4.1 hard-codes `logger: true` and so ignores
// FAUXQS_LOGGER: per-request logs of a test suite's long polls are noise.
// Port and region still come from FAUXQS_PORT / FAUXQS_DEFAULT_REGION.
// State is in memory only: the local stack is throwaway by design.
import { startFauxqs } from "fauxqs";

await startFauxqs({ logger: process.env.FAUXQS_LOGGER === "true" });
