// A load generator for the Colyseus BLINK room: `blink load --pace human`'s player, move for move.
//
//   node load.mjs --url ws://127.0.0.1:2567 --matches 300 --duration 30 [--reaction 0.35] [--ping 1]
//                 [--grace 5] [--seed N]
//
// How this works
// --------------
// Each simulated player is one colyseus.js client room (its own WebSocket), as a game's client
// would be. Per match, one player creates a room and the other joins it by id; set-ups run 32 at a
// time, the first one alone (a server that is not there is found at once, in one line). Players
// start to play when every match is set up, their first moves spread over a second or more (one
// more per 1,000 players), and the measured window opens when every player has started -- as in
// client/tools/load_player.py.
//
// A player keeps the last confirmed view (its hand, the two pile tops, its draw count, the phase)
// from the room's messages, applied in arrival order (one WebSocket: the room's order), and plays
// on its predicted state: the confirmed view with its own plays not yet confirmed applied by the
// same rules (rules.mjs), a drawn card unknown until the room names it. Before each move it waits a
// reaction time, log-normal around --reaction (median 0.35 s, sigma 0.25), chooses with blink's bot
// policy (any legal play at random; at a stalemate pick, the least useful card), and at the end of
// the reaction checks the move against the predicted state again (a move the table made illegal
// meanwhile is bounced locally, not sent). At most three plays await a verdict. When a match is
// over, each player asks for a rematch after a reaction time, so the load stays steady. As blink's
// client takes its clock from its plays' verdicts and pings only while idle, each player's turn to
// be pinged comes once a second (spread evenly), and it is pinged then only if no verdict came
// within that second.
//
// Measured: verdict times (send to verdict, on this process's clock), rejections by code, plays
// never answered (after a 5 s grace), games finished, messages received (all of them, counted on
// arrival), this process's CPU and its event-loop lag (a 50 ms timer's lateness: when it grows, the
// generator, not the server, is the limit). Progress goes to stderr every 5 s, the first line one
// second into the window ("... N actions ... games G"), so the caller can read the server's CPU
// between two lines against the plays made between them; the result is one JSON object on stdout.

import os from "node:os";
import { performance } from "node:perf_hooks";
import { Client } from "colyseus.js";
import { botAction, matches, seeded, HAND_SIZE } from "./rules.mjs";

const MAX_IN_FLIGHT = 3;
const SETUPS_IN_FLIGHT = 32;
const START_SPREAD_S = 1.0;
const LAG_PERIOD_MS = 50;
const SETUP_TIMEOUT_MS = 15_000;

function fail(message, status = 1) {
  process.stderr.write(`colyseus load: ${message}\n`);
  process.exit(status);
}

function parseArgs(argv) {
  const cfg = { url: null, matches: null, duration: 30, reaction: 0.35, ping: 1, grace: 5, seed: null, json: true };
  const numbers = { "--matches": "matches", "--duration": "duration", "--reaction": "reaction", "--ping": "ping",
    "--grace": "grace", "--seed": "seed" };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === "--url") cfg.url = argv[++i];
    else if (a in numbers) {
      const v = Number(argv[++i]);
      if (!Number.isFinite(v) || v < 0) fail(`${a} must be a number >= 0, not ${argv[i]}`, 2);
      cfg[numbers[a]] = v;
    } else fail(`unknown argument ${a}`, 2);
  }
  if (!cfg.url) fail("--url ws://HOST:PORT is required", 2);
  if (!Number.isInteger(cfg.matches) || cfg.matches < 1 || cfg.matches > 10_000) fail("--matches must be from 1 to 10000", 2);
  if (cfg.duration < 1) fail("--duration must be at least 1 s", 2);
  return cfg;
}

function percentiles(values, keys = ["p50", "p90", "p99", "max"]) {
  const xs = Float64Array.from(values).sort();
  const n = xs.length;
  const out = {};
  for (const k of keys) {
    if (!n) out[k] = null;
    else if (k === "max") out[k] = Math.round(xs[n - 1] * 1000) / 1000;
    else {
      const q = Number(k.slice(1));
      out[k] = Math.round(xs[Math.min(n - 1, Math.max(0, Math.ceil((q / 100) * n) - 1))] * 1000) / 1000;
    }
  }
  out.n = n;
  return out;
}

function gauss(random) {
  // Box-Muller: Python's random.gauss in client/tools/load_player.py, as a JS player would draw it.
  let u = 0;
  while (u === 0) u = random();
  return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * random());
}

class Run {
  constructor(cfg) {
    this.cfg = cfg;
    this.random = cfg.seed === null ? Math.random : seeded(cfg.seed);
    this.players = [];
    this.acting = false;
    this.closing = false;
    this.windowStart = 0; // performance.now() ms; 0 until the window opens
    this.windowEnd = 0;
    this.actions = 0;
    this.accepted = 0;
    this.rejected = {};
    this.bounced = 0;
    this.verdictMs = [];
    this.pingMs = [];
    this.lagMs = [];
    this.messagesIn = 0;
    this.gamesFinished = 0; // games whose end arrived in the window (counted once a match, by seat 0)
    this.lostConnections = 0;
    this.matchesUp = 0;
    this.setupFailed = {};
  }

  inWindow(t) {
    return this.windowStart > 0 && t >= this.windowStart && (!this.windowEnd || t <= this.windowEnd);
  }

  unanswered() {
    let n = 0;
    for (const p of this.players) for (const t of p.awaiting.values()) if (this.inWindow(t)) n++;
    return n;
  }
}

class Player {
  constructor(run, random) {
    this.run = run;
    this.random = random;
    this.room = null;
    this.seat = null;
    this.status = "";
    this.game = -1;
    this.seq = -1;
    // the confirmed view
    this.phase = "";
    this.hand = [];
    this.tops = [null, null];
    this.draw = 0;
    this.picked = false;
    // own moves awaiting their confirmation: {id, kind, card, pile, seq (accepted at) or null}
    this.inflight = [];
    this.awaiting = new Map(); // id -> send time (performance.now() ms), until a verdict
    this.answeredAt = -Infinity; // when the latest verdict came: no ping is due for a period after it
    this.nextId = 1;
    this.busy = false;
    this.rematchedGame = -1;
    this.lost = false;
  }

  attach(room) {
    this.room = room;
    const on = (type, fn) => room.onMessage(type, (msg) => {
      this.run.messagesIn++;
      fn(msg);
    });
    on("start", (m) => this.onStart(m));
    on("verdict", (m) => this.onVerdict(m));
    on("pong", (m) => {
      if (this.run.windowStart && !this.run.windowEnd) this.run.pingMs.push(performance.now() - m.t0);
    });
    on("hand", (m) => {
      this.hand = m.hand;
      this.changed();
    });
    on("started", (m) => this.event(m, () => {
      this.tops = m.tops.slice();
      this.phase = "running";
    }));
    on("played", (m) => this.event(m, () => {
      this.tops[m.pile] = m.card;
      if (m.seat === this.seat) {
        let at = this.hand.indexOf(m.card);
        if (at < 0) at = this.hand.indexOf(null);
        if (at >= 0) this.hand.splice(at, 1);
        for (let i = 0; i < m.refilled; i++) this.hand.push(null);
        this.draw = m.draw;
      }
    }));
    on("stalemate", (m) => this.event(m, () => {
      if (m.resolution !== "tie") this.phase = "stalled";
    }));
    on("flipped", (m) => this.event(m, () => {
      this.tops = m.cards.slice();
      this.draw = Math.max(0, this.draw - 1);
      this.phase = "running";
    }));
    on("pick_started", (m) => this.event(m, () => {
      this.phase = "picking";
      this.picked = false;
    }));
    on("pick_made", (m) => this.event(m, () => {
      if (m.seat === this.seat) this.picked = true;
    }));
    on("picked", (m) => this.event(m, () => {
      this.tops = m.cards.slice();
      const at = this.hand.indexOf(m.cards[this.seat]);
      if (at >= 0) this.hand.splice(at, 1);
    }));
    on("resumed", (m) => this.event(m, () => {
      while (this.hand.length < m.hands[this.seat]) this.hand.push(null);
      this.draw = m.draws[this.seat];
      this.phase = "running";
      this.picked = false;
    }));
    on("over", (m) => this.event(m, () => {
      this.phase = "over";
      this.status = "over";
      if (this.seat === 0 && this.run.inWindow(performance.now())) this.run.gamesFinished++;
    }));
    on("rematch_requested", (m) => this.event(m, () => {}));
    room.onLeave(() => {
      if (!this.run.closing && !this.lost) {
        this.lost = true;
        this.run.lostConnections++;
      }
      this.room = null;
    });
  }

  onStart(m) {
    if (m.game !== this.game) this.inflight = []; // the last game's plays await verdicts, not prediction
    this.seat = m.seat;
    this.status = m.status;
    this.game = m.game;
    this.seq = m.seq;
    this.phase = m.phase;
    this.hand = m.hand.slice();
    this.tops = [null, null];
    this.draw = m.draws[m.seat];
    this.picked = false;
    this.changed();
  }

  /** A public event: apply it to the confirmed view; own moves it confirms stop being predicted. */
  event(m, apply) {
    apply();
    this.seq = m.seq;
    if (this.inflight.length) this.inflight = this.inflight.filter((e) => e.seq === null || e.seq > m.seq);
    this.changed();
  }

  changed() {
    this.poke();
  }

  onVerdict(m) {
    const run = this.run;
    const sent = this.awaiting.get(m.id);
    this.awaiting.delete(m.id);
    if (sent !== undefined) this.answeredAt = performance.now();
    if (sent !== undefined && run.inWindow(sent)) {
      run.verdictMs.push(performance.now() - sent);
      if (m.ok) run.accepted++;
      else run.rejected[m.code] = (run.rejected[m.code] ?? 0) + 1;
    }
    if (m.ok) {
      for (const e of this.inflight) if (e.id === m.id) e.seq = m.seq;
      this.inflight = this.inflight.filter((e) => e.seq === null || e.seq > this.seq);
    } else {
      this.inflight = this.inflight.filter((e) => e.id !== m.id);
    }
    this.poke();
  }

  /** The predicted state: the confirmed view with this player's unconfirmed moves applied. */
  predicted() {
    const st = { phase: this.phase, hand: this.hand.slice(), tops: this.tops.slice(), draw: this.draw, picked: this.picked };
    for (const e of this.inflight) apply(st, e);
    return st;
  }

  poke() {
    if (!this.busy && this.run.acting && this.room !== null) this.decide();
  }

  decide() {
    if (this.status === "over") {
      if (this.rematchedGame !== this.game) {
        this.rematchedGame = this.game;
        this.later(this.reaction(), () => this.rematch());
      }
      return;
    }
    if (this.status !== "playing" || this.seat === null) return;
    if (this.inflight.length >= MAX_IN_FLIGHT && this.inflight.filter((e) => e.seq === null).length >= MAX_IN_FLIGHT) return;
    const st = this.predicted();
    const action = botAction(st.phase, st.hand, st.tops, st.picked, this.random);
    if (action === null) return;
    const seen = this.seq;
    this.later(this.reaction(), () => this.fire(action, seen));
  }

  later(seconds, fn) {
    this.busy = true;
    setTimeout(fn, seconds * 1000);
  }

  reaction() {
    const r = this.run.cfg.reaction;
    return r <= 0 ? 0 : r * Math.exp(0.25 * gauss(this.random));
  }

  rematch() {
    this.busy = false;
    if (this.run.acting && this.room !== null && this.status === "over") this.room.send("rematch");
  }

  fire(action, seen) {
    this.busy = false;
    const run = this.run;
    if (!run.acting || this.status !== "playing" || this.room === null) return;
    const st = this.predicted();
    if (!apply(st, action)) {
      run.bounced++; // the table changed while "reacting": the client would bounce it locally
      this.poke();
      return;
    }
    const id = this.nextId++;
    const now = performance.now();
    if (action.kind === "play") this.room.send("play", { id, card: action.card, pile: action.pile, seq: seen });
    else this.room.send("pick", { id, card: action.card });
    this.awaiting.set(id, now);
    this.inflight.push({ id, kind: action.kind, card: action.card, pile: action.pile, seq: null });
    if (run.inWindow(now)) run.actions++;
    this.poke();
  }
}

/** One own move applied to a predicted state, by the room's rules; false if they would refuse it. */
function apply(st, move) {
  if (move.kind === "pick") {
    if (st.phase !== "picking" || st.picked || !st.hand.includes(move.card)) return false;
    st.picked = true;
    return true;
  }
  if (st.phase !== "running") return false;
  const at = st.hand.indexOf(move.card);
  const top = st.tops[move.pile];
  if (at < 0 || (top !== null && !matches(move.card, top))) return false;
  st.hand.splice(at, 1);
  st.tops[move.pile] = move.card;
  const take = Math.min(Math.max(0, HAND_SIZE - st.hand.length), st.draw);
  for (let i = 0; i < take; i++) st.hand.push(null);
  st.draw -= take;
  if (!st.hand.length && !st.draw) st.phase = "over";
  return true;
}

function withTimeout(promise, ms, what) {
  let timer;
  return Promise.race([
    promise,
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`no answer to ${what} within ${ms / 1000} s`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

async function setupMatch(run, client, i) {
  const a = new Player(run, seeded(Math.floor(run.random() * 2 ** 32)));
  const b = new Player(run, seeded(Math.floor(run.random() * 2 ** 32)));
  run.players.push(a, b);
  const ra = await withTimeout(client.create("blink", { name: `p${i}a` }), SETUP_TIMEOUT_MS, "a create");
  a.attach(ra);
  const rb = await withTimeout(client.joinById(ra.roomId, { name: `p${i}b` }), SETUP_TIMEOUT_MS, "a join");
  b.attach(rb);
  run.matchesUp++;
}

async function main() {
  const cfg = parseArgs(process.argv.slice(2));
  const run = new Run(cfg);
  const client = new Client(cfg.url);
  let stop = false;
  let wake = null;
  const interrupt = () => {
    stop = true;
    wake?.();
  };
  process.on("SIGINT", interrupt);
  process.on("SIGTERM", interrupt);
  const parent = process.ppid;
  setInterval(() => {
    if (process.ppid !== parent) process.exit(1);
  }, 1000).unref();
  const sleep = (ms) => new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    wake = () => {
      clearTimeout(t);
      resolve();
    };
  });

  const started = performance.now();
  try {
    await setupMatch(run, client, 0);
  } catch (err) {
    fail(`cannot reach the Colyseus server at ${cfg.url}: ${err?.message || err}`);
  }
  let next = 1;
  const worker = async () => {
    while (next < cfg.matches && !stop) {
      const i = next++;
      try {
        await setupMatch(run, client, i);
      } catch (err) {
        const why = err?.message || String(err);
        run.setupFailed[why] = (run.setupFailed[why] ?? 0) + 1;
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(SETUPS_IN_FLIGHT, cfg.matches - 1) }, worker));
  const setupS = (performance.now() - started) / 1000;

  // Lag probe and pinger, as client/tools/load_player.py's.
  let lastLag = performance.now();
  const lagTimer = setInterval(() => {
    const now = performance.now();
    const lag = Math.max(0, now - lastLag - LAG_PERIOD_MS);
    lastLag = now;
    if (run.windowStart && !run.windowEnd) run.lagMs.push(lag);
  }, LAG_PERIOD_MS);
  let pingIndex = 0;
  const pingTimer = cfg.ping > 0 ? setInterval(() => {
    if (!run.acting) return;
    const players = run.players.filter((p) => p.room !== null);
    if (!players.length) return;
    const count = Math.max(1, Math.round((players.length * 0.1) / cfg.ping));
    const t0 = performance.now();
    for (let k = 0; k < Math.min(count, players.length); k++) {
      pingIndex = (pingIndex + 1) % players.length;
      const p = players[pingIndex];
      if (t0 - p.answeredAt >= cfg.ping * 1000) p.room.send("ping", { t0 }); // idle only
    }
  }, 100) : null;

  run.acting = true;
  const spread = START_SPREAD_S * (1 + run.players.length / 1000);
  for (const p of run.players) setTimeout(() => p.poke(), run.random() * spread * 1000);
  if (!stop) await sleep(spread * 1000);
  const cpu0 = process.cpuUsage();
  const msgs0 = run.messagesIn;
  run.windowStart = performance.now();
  const deadline = run.windowStart + cfg.duration * 1000;
  let lastLine = -Infinity;
  while (!stop) {
    const left = deadline - performance.now();
    if (left <= 0) break;
    await sleep(Math.min(1000, left));
    const now = performance.now();
    if (now - lastLine >= 5000 && !stop) {
      lastLine = now;
      const elapsed = (now - run.windowStart) / 1000;
      const v = percentiles(run.verdictMs.slice(-2000), ["p50", "p99"]);
      process.stderr.write(`colyseus load: ${elapsed.toFixed(0).padStart(5)}/${cfg.duration} s  ${run.matchesUp} matches  `
        + `${run.actions} actions (${(run.actions / elapsed).toFixed(0)}/s)  games ${run.gamesFinished}  verdict p50 `
        + `${v.p50 ?? "-"} p99 ${v.p99 ?? "-"} ms  awaiting ${run.unanswered()}\n`);
    }
  }
  run.windowEnd = performance.now();
  run.acting = false;
  const wall = (run.windowEnd - run.windowStart) / 1000;
  const cpu = process.cpuUsage(cpu0);
  const ownCpu = (cpu.user + cpu.system) / 1e6;
  const windowMsgs = run.messagesIn - msgs0;

  const graceEnd = performance.now() + (stop ? 1 : cfg.grace) * 1000;
  while (run.unanswered() && performance.now() < graceEnd) await new Promise((r) => setTimeout(r, 50));
  clearInterval(lagTimer);
  if (pingTimer !== null) clearInterval(pingTimer);
  const result = {
    peer: "colyseus",
    matches: cfg.matches,
    matches_running: run.matchesUp,
    players: 2 * run.matchesUp,
    pace: "human",
    server: cfg.url,
    setup_s: Math.round(setupS * 100) / 100,
    duration_s: Math.round(wall * 100) / 100,
    actions: run.actions,
    actions_per_s: wall > 0 ? Math.round((run.actions / wall) * 10) / 10 : 0,
    accepted: run.accepted,
    rejected: run.rejected,
    bounced_locally: run.bounced,
    verdict_ms: percentiles(run.verdictMs),
    unanswered: run.unanswered(),
    ping_ms: percentiles(run.pingMs, ["p50", "p99"]),
    generator_lag_ms: percentiles(run.lagMs, ["p50", "p99", "max"]),
    generator_cpu_pct: wall > 0 ? Math.round((ownCpu / wall) * 1000) / 10 : null,
    generator_us_per_msg: windowMsgs ? Math.round((ownCpu / windowMsgs) * 1e7) / 10 : null,
    window_messages: windowMsgs,
    messages_per_play: run.actions ? Math.round((windowMsgs / run.actions) * 100) / 100 : null,
    games_finished: run.gamesFinished,
    messages_in: run.messagesIn,
    lost_connections: run.lostConnections,
    setup_failed: run.setupFailed,
    load_avg_1m: Math.round(os.loadavg()[0] * 100) / 100,
    interrupted: stop,
  };
  run.closing = true;
  await Promise.allSettled(run.players.filter((p) => p.room !== null).map((p) => p.room.leave(true)));
  process.stdout.write(JSON.stringify(result) + "\n");
  process.exit(stop ? 130 : run.matchesUp ? 0 : 1);
}

main().catch((err) => fail(err?.message || String(err)));
