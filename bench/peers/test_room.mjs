// The Colyseus peer's rules and room, checked: `npm test` in bench/peers (node's test runner; needs
// the packages `npm ci` installs, and only loopback). The rules are checked on dealt and on made-up
// games (a stalemate of each kind); the room through a real server and two colyseus.js players.

import { test } from "node:test";
import assert from "node:assert/strict";
import { Server } from "@colyseus/core";
import { WebSocketTransport } from "@colyseus/ws-transport";
import { Client } from "colyseus.js";
import * as rules from "./rules.mjs";
import { BlinkRoom } from "./room.mjs";

function game(draw, hands, piles) {
  return { ...rules.deal(rules.DECK), draw, hands, piles, phase: "running" };
}

test("the deck has 60 different cards and a deal partitions them", () => {
  assert.equal(new Set(rules.DECK).size, 60);
  const g = rules.deal(rules.shuffled(rules.DECK, rules.seeded(7)));
  assert.ok(rules.invariantOk(g));
  assert.deepEqual(g.hands.map((h) => h.length), [3, 3]);
  assert.deepEqual(g.draw.map((d) => d.length), [26, 26]);
  assert.equal(rules.play(g, 0, g.hands[0][0], 0).code, "not_running");
});

test("bots' games keep every card in one place and end", () => {
  const random = rules.seeded(11);
  for (let round = 0; round < 20; round++) {
    const g = rules.deal(rules.shuffled(rules.DECK, random));
    rules.start(g);
    for (let steps = 0; g.phase !== "over" && steps < 1000; steps++) {
      if (g.phase === "stalled") rules.resolve(g, g.stalemates);
      else if (g.phase === "picking") rules.pickTimeout(g, g.stalemates);
      else {
        const seat = steps % 2;
        const move = rules.botAction(g.phase, g.hands[seat], [rules.top(g, 0), rules.top(g, 1)], false, random);
        if (move !== null) assert.ok(rules.play(g, seat, move.card, move.pile).events);
      }
      assert.ok(rules.invariantOk(g));
    }
    assert.equal(g.phase, "over");
  }
});

test("a play must match its pile and come from the hand; the hand is refilled", () => {
  const g = game([["1-red-star"], []], [["2-red-moon", "3-blue-star"], ["4-green-moon"]], [["5-yellow-triangle"], ["2-blue-moon"]]);
  assert.equal(rules.play(g, 0, "2-red-moon", 0).code, "no_match");
  assert.equal(rules.play(g, 0, "4-green-moon", 1).code, "not_in_hand");
  assert.equal(rules.play(g, 0, "2-red-moon", 2).code, "bad_pile");
  const { events } = rules.play(g, 0, "2-red-moon", 1);
  assert.deepEqual(events[0], { type: "played", seat: 0, card: "2-red-moon", pile: 1, refilled: 1, hand: 2, draw: 0 });
  assert.deepEqual(g.hands[0], ["3-blue-star", "1-red-star"]);
});

test("a stalemate flips when both draw piles have cards, picks when one is empty, ties at one card each", () => {
  const flip = game([["2-red-triangle", "3-red-triangle", "5-red-triangle", "2-yellow-triangle"], ["5-green-triangle"]],
    [["4-blue-star"], ["3-green-triangle"]], [["4-yellow-triangle"], ["1-blue-moon"]]);
  assert.deepEqual(rules.play(flip, 0, "4-blue-star", 0).events.map((e) => e.type), ["played", "stalemate"]);
  assert.equal(flip.resolution, "flip");
  assert.equal(rules.play(flip, 1, "3-green-triangle", 0).code, "stalemate");
  assert.equal(rules.resolve(flip, 2), null); // not the stalemate that is waiting
  assert.deepEqual(rules.resolve(flip, 1)[0], { type: "flipped", cards: ["2-yellow-triangle", "5-green-triangle"] });
  assert.equal(flip.phase, "running");

  const pick = game([[], ["5-yellow-triangle"]], [["4-blue-star", "3-green-triangle"], ["2-red-triangle"]],
    [["4-yellow-moon"], ["1-blue-moon"]]);
  assert.deepEqual(rules.play(pick, 0, "4-blue-star", 0).events.map((e) => e.type), ["played", "stalemate"]);
  assert.equal(pick.resolution, "pick");
  assert.deepEqual(rules.resolve(pick, 1).map((e) => e.type), ["pick_started"]);
  assert.equal(rules.pick(pick, 1, "3-green-triangle").code, "not_in_hand");
  assert.deepEqual(rules.pick(pick, 1, "2-red-triangle").events.map((e) => e.type), ["pick_made"]);
  assert.equal(rules.pick(pick, 1, "2-red-triangle").code, "already_picked");
  // Time is up for seat 0: its first card goes, it has emptied its hand by the placement and wins.
  assert.deepEqual(rules.pickTimeout(pick, 1).map((e) => e.type), ["picked", "over"]);
  assert.equal(pick.winner, 0);

  const tie = game([[], []], [["2-red-star", "3-green-triangle"], ["4-yellow-triangle"]], [["2-blue-moon"], ["1-blue-moon"]]);
  assert.deepEqual(rules.play(tie, 0, "2-red-star", 0).events.map((e) => e.type), ["played", "stalemate", "over"]);
  assert.equal(tie.tie, true);
  assert.equal(tie.phase, "over");
});

test("the room deals, judges a play at once, broadcasts it, sends the new hand and rematches", async () => {
  const server = new Server({ greet: false, transport: new WebSocketTransport({ pingInterval: 0 }) });
  server.define("blink", BlinkRoom, { seed: 5, settings: { countdown_s: 0.05 } });
  await server.listen(0, "127.0.0.1");
  const port = server.transport.server.address().port;
  const inbox = [[], []];
  const waiters = [];
  const until = (seat, type, pred = () => true) => new Promise((resolve, reject) => {
    const found = inbox[seat].find((m) => m.type === type && pred(m.msg));
    if (found) return resolve(found.msg);
    const timer = setTimeout(() => reject(new Error(`no ${type} for seat ${seat}`)), 5000);
    waiters.push({ seat, type, pred, resolve: (msg) => { clearTimeout(timer); resolve(msg); } });
  });
  const listen = (room, seat) => room.onMessage("*", (type, msg) => {
    inbox[seat].push({ type, msg });
    for (const w of waiters.splice(0)) {
      if (w.seat === seat && w.type === type && w.pred(msg)) w.resolve(msg);
      else waiters.push(w);
    }
  });
  try {
    const client = new Client(`ws://127.0.0.1:${port}`);
    const a = await client.create("blink");
    listen(a, 0);
    const b = await client.joinById(a.roomId);
    listen(b, 1);
    const start = await until(0, "start");
    assert.equal(start.seat, 0);
    assert.equal(start.hand.length, 3);
    const started = await until(1, "started");
    const move = rules.botAction("running", start.hand, started.tops, false, rules.seeded(1));
    assert.notEqual(move, null); // (this seed's deal has a first move)
    a.send("play", { id: 1, card: move.card, pile: move.pile, seq: started.seq });
    const verdict = await until(0, "verdict", (m) => m.id === 1);
    assert.equal(verdict.ok, true);
    const played = await until(1, "played", (m) => m.seq === verdict.seq);
    assert.equal(played.card, move.card);
    const hand = await until(0, "hand", (m) => m.seq >= verdict.seq);
    assert.equal(hand.hand.length, 3);
    assert.ok(!hand.hand.includes(move.card));
    const tops = started.tops.slice();
    tops[move.pile] = move.card;
    const wrong = hand.hand.find((c) => !rules.matches(c, tops[0]));
    assert.notEqual(wrong, undefined); // (this seed's deal has one)
    a.send("play", { id: 2, card: wrong, pile: 0, seq: hand.seq });
    assert.equal((await until(0, "verdict", (m) => m.id === 2)).code, "no_match");
    a.send("play", { id: 3, card: move.card, pile: move.pile, seq: hand.seq });
    assert.equal((await until(0, "verdict", (m) => m.id === 3)).code, "not_in_hand");
    a.send("rematch");
    a.send("ping", { t0: 42 });
    assert.equal((await until(0, "pong")).t0, 42);
    assert.ok(!inbox[1].some((m) => m.type === "rematch_requested")); // no rematch while the game runs
    await a.leave();
    await b.leave();
  } finally {
    await server.gracefullyShutdown(false);
  }
});
