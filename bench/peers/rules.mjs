// The BLINK race (docs/RULES.md section 1) for the Colyseus peer: the rules the room judges by and
// the load generator predicts with, as blink's relay and `blink load` share protocol/rules/blink.py.
//
// How this works
// --------------
// A card is its text, `count-colour-shape` ("4-yellow-star"), as on blink's wire; CARD maps each
// text of the standard 60-card deck to its three features. A game is a plain mutable object (the
// room owns it and changes it in place, as a Colyseus room would):
//
//   countdown --start--> running --(nobody can play)--> stalled --resolve--> running
//                           |                                 \--> picking --both picked / timeout--> running
//                           +--(a hand and draw pile run out)--> over    (or over: a win or the one-card tie)
//
// Every function that changes a game returns the public events it made ({type, ...}), in order; the
// room numbers them (seq), broadcasts them, and sends each owner its new hand. Nothing here keeps
// time or draws chance: the room brings the shuffled deck and fires the timers (the countdown, the
// stalemate pause, the pick time limit), as blink's relay does around its engine.

export const COLOURS = ["red", "yellow", "green", "blue"];
export const SHAPES = ["star", "triangle", "moon"];
export const COUNTS = [1, 2, 3, 4, 5];
export const HAND_SIZE = 3;

/** The 60 cards, in blink's deck order (colour, then shape, then count). */
export const DECK = [];
export const CARD = Object.create(null);
for (const colour of COLOURS) {
  for (const shape of SHAPES) {
    for (const count of COUNTS) {
      const text = `${count}-${colour}-${shape}`;
      DECK.push(text);
      CARD[text] = { count, colour, shape };
    }
  }
}

/** Two cards match when they share at least one of colour, shape or count. */
export function matches(a, b) {
  const x = CARD[a];
  const y = CARD[b];
  return x.colour === y.colour || x.shape === y.shape || x.count === y.count;
}

/** Fisher-Yates with the given source of [0, 1) numbers. */
export function shuffled(cards, random) {
  const out = cards.slice();
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [out[i], out[j]] = [out[j], out[i]];
  }
  return out;
}

/** A small seeded generator (mulberry32): the room's shuffles are reproducible from --seed. */
export function seeded(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Deal from a known deck order: the first half is seat 0's draw pile, top first; each seat's top
 * card starts its centre pile face down, the next three are its hand. */
export function deal(deck) {
  const half = deck.length >> 1;
  const src = [deck.slice(0, half), deck.slice(half, 2 * half)];
  return {
    draw: src.map((s) => s.slice(1 + HAND_SIZE)),
    hands: src.map((s) => s.slice(1, 1 + HAND_SIZE)),
    piles: src.map((s) => [s[0]]),
    phase: "countdown", // countdown | running | stalled | picking | over
    resolution: "", // while stalled: flip | pick
    picks: [null, null],
    winner: null,
    tie: false,
    stalemates: 0,
  };
}

export function top(game, pile) {
  const p = game.piles[pile];
  return p.length ? p[p.length - 1] : null;
}

function phaseRejection(game) {
  if (game.phase === "countdown") return "not_running";
  if (game.phase === "stalled" || game.phase === "picking") return "stalemate";
  return "game_over";
}

/** The countdown is over: both centre cards turn face up and the race starts. */
export function start(game) {
  if (game.phase !== "countdown") return null;
  game.phase = "running";
  const events = [{ type: "started", tops: [top(game, 0), top(game, 1)] }];
  afterChange(game, events);
  return events;
}

/** A play of `card` from `seat`'s hand onto `pile`: {code} when rejected (the game untouched), else
 * {events}; with the hand refilled from the seat's own draw pile up to three. */
export function play(game, seat, card, pile) {
  if (game.phase !== "running") return { code: phaseRejection(game) };
  if (typeof card !== "string" || CARD[card] === undefined) return { code: "malformed" };
  if (pile !== 0 && pile !== 1) return { code: "bad_pile" };
  const hand = game.hands[seat];
  const at = hand.indexOf(card);
  if (at < 0) return { code: "not_in_hand" };
  const onto = game.piles[pile];
  if (onto.length && !matches(card, onto[onto.length - 1])) return { code: "no_match" };
  hand.splice(at, 1);
  onto.push(card);
  const draw = game.draw[seat];
  const take = draw.splice(0, Math.max(0, HAND_SIZE - hand.length));
  hand.push(...take);
  const events = [{ type: "played", seat, card, pile, refilled: take.length, hand: hand.length, draw: draw.length }];
  afterChange(game, events);
  return { events };
}

function anyoneCanMove(game) {
  const t0 = top(game, 0);
  const t1 = top(game, 1);
  for (const hand of game.hands) {
    for (const card of hand) {
      if (t0 === null || t1 === null || matches(card, t0) || matches(card, t1)) return true;
    }
  }
  return false;
}

/** After every change in the running phase: a winner, else a stalemate (the room detects it itself). */
function afterChange(game, events) {
  for (const p of [0, 1]) {
    if (!game.hands[p].length && !game.draw[p].length) {
      game.phase = "over";
      game.winner = p;
      events.push({ type: "over", winner: p, reason: "out_of_cards" });
      return;
    }
  }
  if (anyoneCanMove(game)) {
    game.phase = "running";
    return;
  }
  const n = ++game.stalemates;
  if (game.hands.every((h) => h.length === 1) && game.draw.every((d) => !d.length)) {
    game.phase = "over";
    game.tie = true;
    events.push({ type: "stalemate", resolution: "tie", stalemate: n });
    events.push({ type: "over", winner: null, reason: "tie" });
    return;
  }
  game.phase = "stalled";
  game.resolution = game.draw.every((d) => d.length) ? "flip" : "pick";
  events.push({ type: "stalemate", resolution: game.resolution, stalemate: n });
}

/** The stalemate pause is over: flip (each seat's draw top onto its own pile) or start the picking. */
export function resolve(game, stalemate) {
  if (game.phase !== "stalled" || stalemate !== game.stalemates) return null;
  const events = [];
  if (game.resolution === "flip") {
    const cards = [0, 1].map((p) => game.draw[p].shift());
    cards.forEach((c, p) => game.piles[p].push(c));
    game.resolution = "";
    game.phase = "running";
    events.push({ type: "flipped", cards });
    afterChange(game, events);
    return events;
  }
  game.phase = "picking";
  events.push({ type: "pick_started", stalemate });
  return events;
}

/** A seat's choice of the card for its own pile; {code} or {events} (both placed once both chose). */
export function pick(game, seat, card) {
  if (game.phase !== "picking") return { code: game.phase === "running" ? "not_stalemate" : phaseRejection(game) };
  if (game.picks[seat] !== null) return { code: "already_picked" };
  if (!game.hands[seat].includes(card)) return { code: "not_in_hand" };
  game.picks[seat] = card;
  const events = [{ type: "pick_made", seat }];
  if (game.picks.every((c) => c !== null)) placePicks(game, events);
  return { events };
}

/** The pick time ran out: the first card of the hand for whoever has not chosen. */
export function pickTimeout(game, stalemate) {
  if (game.phase !== "picking" || stalemate !== game.stalemates) return null;
  for (const p of [0, 1]) if (game.picks[p] === null) game.picks[p] = game.hands[p][0];
  const events = [];
  placePicks(game, events);
  return events;
}

function placePicks(game, events) {
  const cards = game.picks.slice();
  for (const p of [0, 1]) {
    const hand = game.hands[p];
    hand.splice(hand.indexOf(cards[p]), 1);
    game.piles[p].push(cards[p]);
  }
  game.picks = [null, null];
  game.resolution = "";
  game.phase = "running";
  events.push({ type: "picked", cards });
  // RULES.md: a player who empties their hand by a stalemate placement wins.
  for (const p of [0, 1]) {
    if (!game.hands[p].length && !game.draw[p].length) {
      game.phase = "over";
      game.winner = p;
      events.push({ type: "over", winner: p, reason: "out_of_cards" });
      return;
    }
  }
  for (const p of [0, 1]) game.hands[p].push(...game.draw[p].splice(0, Math.max(0, HAND_SIZE - game.hands[p].length)));
  events.push({ type: "resumed", hands: game.hands.map((h) => h.length), draws: game.draw.map((d) => d.length) });
  afterChange(game, events);
}

/** blink's bot policy (protocol/rules/blink.py, `bot_action`): while running, any legal play at
 * random (every card-and-pile pair that matches, equally likely); while picking, the card that
 * matches the fewest of the others. `hand` holds known cards only; `tops` the two pile tops. */
export function botAction(phase, hand, tops, picked, random) {
  if (phase === "running") {
    const legal = [];
    for (const card of hand) {
      if (card === null) continue; // a drawn card not yet named by the room
      for (const pile of [0, 1]) {
        if (tops[pile] === null || matches(card, tops[pile])) legal.push({ card, pile });
      }
    }
    return legal.length ? { kind: "play", ...legal[Math.floor(random() * legal.length)] } : null;
  }
  if (phase === "picking" && !picked) {
    const known = hand.filter((c) => c !== null);
    let best = null;
    let bestScore = Infinity;
    for (const card of known) {
      const score = known.filter((o) => o !== card && matches(card, o)).length;
      if (score < bestScore) {
        best = card;
        bestScore = score;
      }
    }
    return best === null ? null : { kind: "pick", card: best };
  }
  return null;
}

/** Every card is in exactly one place (RULES.md's invariant). */
export function invariantOk(game) {
  const seen = [...game.draw.flat(), ...game.hands.flat(), ...game.piles.flat()];
  return seen.length === DECK.length && new Set(seen).size === DECK.length && seen.every((c) => CARD[c] !== undefined);
}
