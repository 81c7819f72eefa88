// Starts the kinesalite Kinesis emulator for emulators.sh. Same as its CLI
// (cli.js) but bound to loopback only (the CLI listens on every interface),
// with streams ACTIVE at once (the CLI's default keeps a new stream CREATING
// for 500 ms, which every test would have to wait out) and in memory only:
// the local stack is throwaway by design.
// Port from KINESALITE_PORT.
const kinesalite = require("kinesalite");

const port = Number(process.env.KINESALITE_PORT);
const server = kinesalite({ createStreamMs: 0, deleteStreamMs: 0, updateStreamMs: 0, shardLimit: 100 });
server.listen(port, "127.0.0.1", () => console.log(`kinesalite listening on 127.0.0.1:${port}`));
