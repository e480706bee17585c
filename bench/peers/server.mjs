// A Colyseus server with the BLINK room (room.mjs) on 127.0.0.1:PORT, as a deployment would run it:
// the matchmaker's HTTP routes and the WebSocket transport on one port, one Node process.
//
//   node server.mjs --port 2567 [--seed N]
//
// It prints "colyseus listening on PORT" on stdout once it accepts players, stops cleanly on SIGINT
// or SIGTERM, and ends by itself when the process that started it is gone (so a benchmark killed
// outright leaves no server behind).
//
// The transport's heartbeat (a WebSocket ping from the server to every client, every 3 s by
// default) is set to the keep-alive blink's players use (60 s): both sides then check liveness
// alike, and neither pays for it while plays flow.

import { Server } from "@colyseus/core";
import { WebSocketTransport } from "@colyseus/ws-transport";
import { BlinkRoom } from "./room.mjs";

function option(name, fallback) {
  const i = process.argv.indexOf(name);
  return i >= 0 && i + 1 < process.argv.length ? process.argv[i + 1] : fallback;
}

const port = Number(option("--port", "2567"));
const seed = option("--seed", undefined);
if (!Number.isInteger(port) || port < 1 || port > 65535) {
  console.error(`server.mjs: --port must be a port number, not ${option("--port")}`);
  process.exit(2);
}

const server = new Server({
  greet: false,
  transport: new WebSocketTransport({ pingInterval: 60_000, maxPayload: 8192 }),
  gracefullyShutdown: false,
});
server.define("blink", BlinkRoom, seed === undefined ? {} : { seed: Number(seed) });

let stopping = false;
async function stop(status) {
  if (stopping) return;
  stopping = true;
  try {
    await server.gracefullyShutdown(false);
  } catch {
    // stopping anyway
  }
  process.exit(status);
}
process.on("SIGINT", () => stop(0));
process.on("SIGTERM", () => stop(0));
const parent = process.ppid;
setInterval(() => {
  if (process.ppid !== parent) stop(1);
}, 1000).unref();

try {
  await server.listen(port, "127.0.0.1");
} catch (err) {
  console.error(`server.mjs: cannot listen on 127.0.0.1:${port}: ${err?.message ?? err}`);
  process.exit(1);
}
console.log(`colyseus listening on ${port}`);
