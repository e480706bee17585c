// One match drawn live from its Server-Sent Events (/m/CODE/events): every message is the whole
// public table after a change (``view``, in the game's wire form), the match's summary, and the
// event that made the change, if one did -- so a play is drawn as it lands, and a page that lost
// its connection is whole again with the first message after it reconnects. Nothing here can show
// a hidden card: the server is sent only what a spectator may read.
"use strict";

const code = decodeURIComponent(location.pathname.split("/")[2] || "").toUpperCase();
const PLAYS_KEPT = 60;
let lastSummary = null;
let lastSeq = 0;
let landed = null;  // the last card that landed on a centre pile: {pile, card}, ringed while it is on top

function byId(id) { return document.getElementById(id); }

function seatName(summary, seat) {
  return (summary.players && summary.players[seat]) || `seat ${seat + 1}`;
}

function duration(seconds) {
  const s = Math.floor(seconds), m = Math.floor(s / 60);
  return `${m}:${String(s % 60).padStart(2, "0")}`;
}

function ms(value) {
  return typeof value === "number" ? `${value.toFixed(value < 10 ? 1 : 0)} ms` : "–";
}

// -- the headline, the result and the players' panel ------------------------------------------

function drawSummary(s) {
  document.title = `blink - ${s.title || s.game} ${s.code}`;
  byId("game").textContent = `${s.title || s.game || "match"} ${s.code}`;
  byId("players").textContent = s.players.length ? s.players.join(" vs ") : "(waiting for players)";
  const score = s.wins.length ? `games won ${s.wins.join(" – ")} (best of ${s.best_of})` : "";
  byId("meta").textContent = [s.status, score, duration(s.seconds)].filter(Boolean).join(" · ");
  const result = byId("result");
  result.hidden = !s.result && s.status !== "closed";
  result.textContent = s.result ? `Match over: ${s.result}` : (s.status === "closed" ? "The relay closed this match." : "");
  const seats = byId("seats");
  const rows = [];
  s.players.forEach((name, i) => {
    const lat = (s.latency && s.latency[i]) || {};
    const div = document.createElement("div");
    div.className = "seat";
    div.dataset.seat = String(i);
    const who = document.createElement("div");
    who.className = "name";
    who.style.color = SEAT_COLOURS[i % SEAT_COLOURS.length];
    who.textContent = name;
    const figures = document.createElement("div");
    figures.className = "figures";
    const parts = [`round trip ${ms(lat.rtt_ms)}`];
    if (typeof lat.held_ms === "number" && lat.held_ms > 0) parts.push(`last play held ${ms(lat.held_ms)} for fair order`);
    if (typeof lat.races_lost === "number") parts.push(`races lost ${lat.races_lost}`);
    if (lat.dropped) parts.push("connection dropped: waiting for them");
    figures.textContent = parts.join(" · ");
    div.append(who, figures);
    rows.push(div);
  });
  seats.replaceChildren(...rows);
}

// -- each play as it lands ----------------------------------------------------------------------

const PILE_WORDS = ["left", "right"];

function describe(ev, s) {
  const who = typeof ev.seat === "number" ? seatName(s, ev.seat) : (typeof ev.player === "string" ? ev.player : "");
  switch (ev.type) {
    case "card_played": return `${who} played ${ev.card} on the ${PILE_WORDS[ev.pile] || ev.pile} pile`;
    case "card_picked": return `${who} placed ${ev.card || "a card"} on the ${PILE_WORDS[ev.pile] || ev.pile} pile`;
    case "card_flipped": return `${who} flipped ${ev.card || "a card"} onto the ${PILE_WORDS[ev.pile] || ev.pile} pile`;
    case "hand_refilled": return null;
    case "game_over": return null;  // the match's game_result that follows says it with the score
    case "card_drawn": return null;
    case "card_revealed": return `${who}'s pile opens with ${ev.card}`;
    case "stalemate": return `stalemate (${ev.resolution})`;
    case "race_started": return "the race is on";
    case "game_started": return `a game starts: ${(ev.players || []).join(" vs ")}`;
    case "game_result": return `game over: ${ev.winner !== null && ev.winner !== undefined ? ev.winner + " wins" : "no winner"} (${ev.reason})`;
    case "match_over": return "the match is over";
    case "player_dropped": return `${who}'s connection dropped: the seat waits ${ev.grace_s} s`;
    case "player_returned": return `${who} is back`;
    case "seat_taken": return `${ev.name} sat down`;
    default: {
      // the event's own plain facts; its long parts (a whole cluster, every roll) are the board's to show
      const rest = Object.entries(ev)
        .filter(([k, v]) => !["seq", "type", "seat", "player", "ts"].includes(k) && !k.endsWith("_seat")
                && (typeof v !== "object" || v === null || JSON.stringify(v).length <= 24))
        .map(([k, v]) => `${k.replace(/_/g, " ")} ${typeof v === "object" ? JSON.stringify(v) : v}`).join(", ");
      return `${who ? who + ": " : ""}${ev.type.replace(/_/g, " ")}${rest ? " (" + rest + ")" : ""}`;
    }
  }
}

function notePlay(ev, s) {
  const words = describe(ev, s);
  if (!words) return;
  const li = document.createElement("li");
  li.textContent = `#${ev.seq} ${words}`;
  const list = byId("plays");
  list.prepend(li);
  while (list.children.length > PLAYS_KEPT) list.lastChild.remove();
}

// -- the boards -----------------------------------------------------------------------------------

function newBoard(width, height) {
  const svg = svgEl("svg", { viewBox: `0 0 ${width} ${height}`, role: "img" });
  return svg;
}

function count(xs) { return Array.isArray(xs) ? xs.length : (typeof xs === "number" ? xs : 0); }

function drawBlink(view, s, ev) {
  const svg = newBoard(900, 600);
  svg.setAttribute("aria-label", "BLINK table");
  const W = 62, H = 88, PW = 100, PH = 142;
  const rows = { 1: 95, 0: 505 };  // seat 1 across the table, seat 0 nearest
  if (ev && ["card_played", "card_picked", "card_flipped"].includes(ev.type)) landed = { pile: ev.pile, card: ev.card };
  for (const seat of [0, 1]) {
    const y = rows[seat];
    const name = seatName(s, seat);
    const hand = view.hands[seat] || [];
    const drawn = count(view.draw[seat]);
    svgText(svg, 30, y - 52, name, { class: "seat-name", "data-seat": seat, "font-size": 22, "font-weight": "bold",
                                      fill: SEAT_COLOURS[seat] });
    const lost = ((s.latency || [])[seat] || {}).races_lost;
    svgText(svg, 30, y - 26, `hand ${hand.length} · draw pile ${drawn}`, { "font-size": 15, fill: "#cfe0d5",
                                                                           class: "counts", "data-seat": seat });
    if (typeof lost === "number") {
      svgText(svg, 30, y - 6, `races lost ${lost}`, { "font-size": 15, fill: "#cfe0d5", class: "races", "data-seat": seat });
    }
    hand.forEach((card, i) => drawCard(svg, 330 + i * (W + 14), y, W, H, card, null));
    if (hand.length === 0) drawSlot(svg, 330, y, W, H);
    if (drawn > 0) {
      for (let k = Math.min(3, drawn) - 1; k >= 0; k--) drawCard(svg, 720 + k * 3, y - k * 3, W, H, null, null);
      svgText(svg, 720, y + H / 2 + 20, `${drawn}`, { "text-anchor": "middle", "font-size": 16, fill: "#e8f0ea" });
    } else {
      drawSlot(svg, 720, y, W, H);
    }
  }
  const centreY = 300;
  [0, 1].forEach(pile => {
    const x = pile === 0 ? 350 : 550;
    const cards = view.piles[pile] || [];
    if (cards.length === 0) drawSlot(svg, x, centreY, PW, PH);
    const shown = cards.slice(-3);
    shown.forEach((card, i) => {
      const top = i === shown.length - 1;
      const dx = (i - (shown.length - 1)) * 6;
      const ring = top && landed && landed.pile === pile && landed.card === card ? "landed" : null;
      drawCard(svg, x + dx, centreY + dx * 0.5, PW, PH, card, ring);
    });
    svgText(svg, x, centreY + PH / 2 + 26, `${seatName(s, pile)}'s pile · ${cards.length}`,
            { "text-anchor": "middle", "font-size": 15, fill: "#e8f0ea", class: "pile-label" });
  });
  const phase = { countdown: "get ready…", running: "race!", stalled: "stalemate", picking: "pick a card",
                  over: "game over" }[view.phase] || view.phase;
  svgText(svg, 450, 200, phase, { "text-anchor": "middle", "font-size": 20, fill: "#ffe28a", class: "phase" });
  return svg;
}

function drawTakeaway(view, s) {
  const svg = newBoard(900, 600);
  svg.setAttribute("aria-label", "Takeaway Dice cluster");
  const size = 34, cx = 420, cy = 290;
  const current = view.phase === "turn" || view.phase === "rolling"
    ? (view.order.length ? view.order[view.turn % view.order.length] : null) : null;
  for (const [q, r, face] of view.cells) {
    const x = cx + size * Math.sqrt(3) * (q + r / 2), y = cy + size * 1.5 * r;
    const pts = [];
    for (let k = 0; k < 6; k++) {
      const a = (60 * k - 30) * Math.PI / 180;
      pts.push(`${x + size * Math.cos(a)},${y + size * Math.sin(a)}`);
    }
    svgEl("polygon", { points: pts.join(" "), fill: "rgba(255,255,255,0.08)", stroke: "rgba(255,255,255,0.35)" }, svg);
    drawDie(svg, x, y, size * 1.05, face, null);
  }
  s.players.forEach((name, seat) => {
    const claims = view.claims.filter(c => c[0] === seat);
    const total = claims.reduce((a, c) => a + c[3], 0);
    const y = 40 + seat * 30;
    svgText(svg, 700, y, `${seat === current ? "▶ " : ""}${name}: ${claims.length} claimed (${total})`,
            { "font-size": 16, fill: SEAT_COLOURS[seat % SEAT_COLOURS.length], class: "seat-name", "data-seat": seat });
  });
  svgText(svg, 30, 40, view.phase, { "font-size": 18, fill: "#ffe28a", class: "phase" });
  return svg;
}

function drawSequence(view, s) {
  const svg = newBoard(900, 600);
  svg.setAttribute("aria-label", "Sequence Dice board");
  const board = view.settings.board, rows = board.length, cols = board[0].length;
  const cell = Math.min(480 / rows, 480 / cols), ox = 40, oy = 60;
  const line = new Set((view.line || []).map(p => p.join(",")));
  const chipColours = ["rgb(34,150,72)", "rgb(34,92,204)", "rgb(214,44,38)"];
  for (let r = 0; r < rows; r++) {
    for (let c = 0; c < cols; c++) {
      const x = ox + c * cell, y = oy + r * cell;
      svgEl("rect", { x: x, y: y, width: cell - 3, height: cell - 3, rx: 5, fill: "rgba(255,255,255,0.1)",
                      stroke: line.has(`${r},${c}`) ? "#ffe28a" : "rgba(255,255,255,0.3)",
                      "stroke-width": line.has(`${r},${c}`) ? 4 : 1 }, svg);
      svgText(svg, x + 6, y + 16, String(board[r][c]), { "font-size": 13, fill: "#cfe0d5" });
      const chip = view.chips[r][c];
      if (chip !== null && chip !== undefined) {
        svgEl("circle", { cx: x + cell / 2, cy: y + cell / 2 + 3, r: cell * 0.3, fill: chipColours[chip % 3], stroke: "#111",
                          "stroke-width": 2, class: "chip" }, svg);
      }
    }
  }
  s.players.forEach((name, seat) => {
    svgText(svg, 600, 80 + seat * 30, `${seat === view.current ? "▶ " : ""}${name}`,
            { "font-size": 17, fill: chipColours[seat % 3], class: "seat-name", "data-seat": seat });
  });
  if (view.dice) view.dice.forEach((d, i) => drawDie(svg, 640 + i * 70, 260, 56, d, null));
  svgText(svg, 40, 36, view.phase, { "font-size": 18, fill: "#ffe28a", class: "phase" });
  return svg;
}

function drawRyo(view, s) {
  const svg = newBoard(900, Math.max(300, 90 + s.players.length * 80));
  svg.setAttribute("aria-label", "Roll Your Own dice");
  svgText(svg, 30, 36, `${view.phase} · game ${view.game} · round ${view.round}`, { "font-size": 18, fill: "#ffe28a", class: "phase" });
  const last = new Map((view.last_roll || []).map(([seat, face, value]) => [seat, [face, value]]));
  s.players.forEach((name, seat) => {
    const y = 90 + seat * 80;
    svgText(svg, 30, y + 6, name, { "font-size": 18, "font-weight": "bold", fill: SEAT_COLOURS[seat % SEAT_COLOURS.length],
                                    class: "seat-name", "data-seat": seat });
    svgText(svg, 30, y + 28, `rounds ${view.round_wins[seat] ?? 0} · games ${view.game_wins[seat] ?? 0}`,
            { "font-size": 14, fill: "#cfe0d5" });
    const die = view.dice[seat];
    for (let f = 0; f < 6; f++) {
      const rolled = last.has(seat) && last.get(seat)[0] === f;
      const g = drawDie(svg, 260 + f * 62, y, 50, die ? die[f] : null, rolled ? "rgb(255,226,138)" : null);
      if (rolled) g.classList.add("rolled");
    }
    if (!die) svgText(svg, 650, y + 6, view.built[seat] ? "built (secret until the reveal)" : "building…",
                      { "font-size": 14, fill: "#cfe0d5" });
  });
  return svg;
}

function drawOther(view) {
  const pre = document.createElement("pre");
  pre.className = "kv";
  pre.textContent = JSON.stringify(view, null, 1);
  return pre;
}

const BOARDS = { blink: drawBlink, takeaway: drawTakeaway, sequence: drawSequence, ryo: drawRyo };

function drawBoard(frame) {
  const board = byId("board");
  const s = frame.summary;
  if (!frame.view) {
    const p = document.createElement("p");
    p.className = "none";
    p.textContent = s.status === "waiting" ? "Waiting for the players to sit down…" : "The table shows at the next change.";
    board.replaceChildren(p);
    return;
  }
  const draw = BOARDS[s.game] || drawOther;
  board.replaceChildren(draw(frame.view, s, frame.event));
  board.dataset.seq = String(frame.seq);
}

// -- the stream -----------------------------------------------------------------------------------

function onFrame(frame) {
  lastSummary = frame.summary;
  drawSummary(frame.summary);
  if (frame.event) notePlay(frame.event, frame.summary);
  if (frame.view || frame.seq >= lastSeq || !frame.event) drawBoard(frame);
  lastSeq = Math.max(lastSeq, frame.seq);
}

function connect() {
  const status = byId("connection");
  const source = new EventSource(`/m/${encodeURIComponent(code)}/events`);
  source.onopen = () => { status.textContent = "live"; status.classList.remove("lost"); };
  source.onmessage = e => { onFrame(JSON.parse(e.data)); };
  source.onerror = () => {
    status.textContent = "connection lost: reconnecting…";
    status.classList.add("lost");
    if (source.readyState === EventSource.CLOSED) setTimeout(connect, 2000);
  };
}

setInterval(() => {  // the clock of a live match runs between messages too
  if (lastSummary && lastSummary.live) {
    lastSummary.seconds += 1;
    drawSummary(lastSummary);
  }
}, 1000);

connect();
