// The BLINK race as a Colyseus 0.16 room: the peer a game developer would pick instead of blink.
//
// How this works
// --------------
// One room is one match of two seats (maxClients 2: the room locks itself when full). When the
// second player joins, the room deals (rules.mjs) and sends each seat its whole view ("start": its
// hand, the card counts, the countdown); the countdown, the stalemate pause and the pick time limit
// are plain timers. A play ("play" {id, card, pile, seq}) is judged at once against the game as it
// is then: the verdict goes to the player first ("verdict" {id, ok, seq} or {id, ok: false, code}),
// then the public change to both seats ("played" and whatever followed it: a stalemate, the end),
// then the new hand to its owner ("hand" {seq, hand}). Every public message carries the match's
// gap-free seq, as blink's events do, and a hand names the seq it follows.
//
// Plain messages only, no schema state: the room never calls setState, and its patch interval is
// off (patchRate null), which is Colyseus's fastest path -- nothing is diffed or patched, each
// message is one msgpack frame on the client's WebSocket.
//
// A rejected play is told why, with blink's codes. As blink's relay does, a play that lost a race
// (it matched the pile top its player saw, at the seq it names, but not the top now) is rejected
// as "pile_changed", not "no_match": the room keeps the last few pile tops by seq for that.
// When the match is over, both players may ask for a rematch ("rematch"); once both have, a new
// game is dealt in the same room, as `blink load` keeps its matches going. "ping" {t0} is
// answered by "pong" {t0}, blink's application-level clock ping.

import { Room } from "@colyseus/core";
import * as rules from "./rules.mjs";

export const SETTINGS = { countdown_s: 0.5, stalemate_pause_s: 0.3, pick_time_s: 5.0 }; // blink's quick settings
const TOPS_KEPT = 64; // pile tops remembered by seq, to tell a lost race from a play that never matched

let roomCounter = 0;

export class BlinkRoom extends Room {
  maxClients = 2;

  onCreate(options) {
    this.patchRate = null; // no state, no patches: plain messages only
    this.settings = { ...SETTINGS, ...(options?.settings ?? {}) };
    this.random = rules.seeded(((options?.seed ?? (Math.random() * 2 ** 32)) + roomCounter++ * 0x9e3779b9) >>> 0);
    this.seats = []; // clients, by seat
    this.game = null;
    this.gameIndex = 0;
    this.seq = 0;
    this.status = "waiting"; // waiting | playing | over
    this.rematch = [false, false];
    this.timer = null;
    this.tops = new Map(); // seq -> [phase running?, top 0, top 1]
    this.onMessage("play", (client, msg) => this.onPlay(client, msg));
    this.onMessage("pick", (client, msg) => this.onPick(client, msg));
    this.onMessage("rematch", (client) => this.onRematch(client));
    this.onMessage("ping", (client, msg) => client.send("pong", { t0: msg?.t0 }));
  }

  onJoin(client) {
    client.userData = { seat: this.seats.length };
    this.seats.push(client);
    if (this.seats.length === 2) this.startGame();
  }

  onLeave(client) {
    // A player who leaves ends the match for both: the room goes when it is empty (autoDispose).
    this.clearTimer();
    this.status = "over";
  }

  onDispose() {
    this.clearTimer();
  }

  clearTimer() {
    if (this.timer !== null) {
      clearTimeout(this.timer);
      this.timer = null;
    }
  }

  later(seconds, fn) {
    this.clearTimer();
    this.timer = setTimeout(() => {
      this.timer = null;
      fn();
    }, seconds * 1000);
  }

  startGame() {
    this.gameIndex += 1;
    this.status = "playing";
    this.rematch = [false, false];
    this.game = rules.deal(rules.shuffled(rules.DECK, this.random));
    this.tops.clear();
    this.seq += 1;
    const g = this.game;
    this.seats.forEach((client, seat) => {
      client.send("start", {
        seq: this.seq, game: this.gameIndex, seat, status: this.status, phase: g.phase,
        hand: g.hands[seat], hands: g.hands.map((h) => h.length), draws: g.draw.map((d) => d.length),
        countdown_s: this.settings.countdown_s,
      });
    });
    this.later(this.settings.countdown_s, () => this.publish(rules.start(g)));
  }

  /** Number, remember and broadcast a step's public events; then the hands that changed, to their
   * owners; then arm the timer the new phase needs. */
  publish(events, handsFor = []) {
    if (!events) return;
    const g = this.game;
    for (const ev of events) {
      ev.seq = ++this.seq;
      const { type, ...data } = ev;
      this.broadcast(type, data);
      if (type === "over") this.status = "over";
    }
    this.rememberTops();
    for (const seat of handsFor) this.seats[seat]?.send("hand", { seq: this.seq, hand: g.hands[seat] });
    if (g.phase === "stalled") {
      const n = g.stalemates;
      this.later(this.settings.stalemate_pause_s, () => this.publish(rules.resolve(g, n)));
    } else if (g.phase === "picking") {
      const n = g.stalemates;
      this.later(this.settings.pick_time_s, () => this.publish(rules.pickTimeout(g, n), [0, 1]));
    }
  }

  rememberTops() {
    const g = this.game;
    this.tops.set(this.seq, [g.phase === "running", rules.top(g, 0), rules.top(g, 1)]);
    if (this.tops.size > TOPS_KEPT) this.tops.delete(this.tops.keys().next().value);
  }

  onPlay(client, msg) {
    const seat = client.userData?.seat;
    const id = msg?.id;
    if (this.game === null || seat === undefined) {
      client.send("verdict", { id, ok: false, code: "not_running" });
      return;
    }
    const result = rules.play(this.game, seat, msg.card, msg.pile);
    if (result.code !== undefined) {
      let code = result.code;
      if (code === "no_match" || code === "stalemate" || code === "game_over") {
        const then = this.tops.get(msg.seq);
        if (then !== undefined && then[0] && rules.matches(msg.card, then[1 + msg.pile])) code = "pile_changed";
      }
      client.send("verdict", { id, ok: false, code });
      return;
    }
    client.send("verdict", { id, ok: true, seq: this.seq + 1 }); // at once: the seq its card lands at
    this.publish(result.events, result.events[0].refilled ? [seat] : []);
  }

  onPick(client, msg) {
    const seat = client.userData?.seat;
    if (this.game === null || seat === undefined) return;
    const result = rules.pick(this.game, seat, msg?.card);
    if (result.code !== undefined) {
      client.send("verdict", { id: msg?.id, ok: false, code: result.code });
      return;
    }
    if (result.events.some((e) => e.type === "picked")) this.clearTimer();
    client.send("verdict", { id: msg?.id, ok: true, seq: this.seq + 1 });
    this.publish(result.events, result.events.some((e) => e.type === "picked") ? [0, 1] : []);
  }

  onRematch(client) {
    const seat = client.userData?.seat;
    if (seat === undefined || this.status !== "over" || this.seats.length < 2) return;
    this.rematch[seat] = true;
    this.seq += 1;
    this.broadcast("rematch_requested", { seq: this.seq, seat });
    if (this.rematch.every(Boolean)) this.startGame();
  }
}
