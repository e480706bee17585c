// The list of the relay's live and recent matches, read from /matches.json every second.
"use strict";

function duration(seconds) {
  const s = Math.floor(seconds), m = Math.floor(s / 60), h = Math.floor(m / 60);
  const pad = n => String(n).padStart(2, "0");
  return h > 0 ? `${h}:${pad(m % 60)}:${pad(s % 60)}` : `${m}:${pad(s % 60)}`;
}

function cell(row, text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  row.appendChild(td);
  return td;
}

function render(matches) {
  const body = document.querySelector("#matches tbody");
  const rows = [];
  for (const x of matches) {
    const tr = document.createElement("tr");
    tr.className = x.live ? "live" : "recent";
    tr.dataset.code = x.code;
    const link = document.createElement("a");
    link.href = "/m/" + encodeURIComponent(x.code);
    link.textContent = x.code;
    const first = document.createElement("td");
    first.appendChild(link);
    tr.appendChild(first);
    cell(tr, x.title || x.game);
    cell(tr, x.players.length ? x.players.join(" vs ") : "(waiting for players)", "players");
    cell(tr, x.wins.length ? x.wins.join(" – ") : "–", "score");
    cell(tr, x.result ? `over: ${x.result}` : x.status, "state");
    cell(tr, duration(x.seconds), "time");
    rows.push(tr);
  }
  body.replaceChildren(...rows);
  document.getElementById("none").hidden = matches.length > 0;
}

// Each game's leaderboard (the relay's OpenSkill ratings of players who play with a key), if any.
function renderBoards(boards) {
  const section = document.getElementById("leaderboard");
  const parts = [];
  for (const b of boards || []) {
    const h = document.createElement("h2");
    h.textContent = `Leaderboard: ${b.title} (${b.players} rated)`;
    const table = document.createElement("table");
    table.className = "matches board-" + b.game;
    const head = document.createElement("tr");
    for (const t of ["#", "player", "key", "rating", "matches"]) {
      const th = document.createElement("th");
      th.textContent = t;
      head.appendChild(th);
    }
    table.appendChild(head);
    b.rows.forEach((r, i) => {
      const tr = document.createElement("tr");
      cell(tr, String(i + 1));
      cell(tr, r.name, "players");
      cell(tr, r.key, "key");
      cell(tr, typeof r.rating === "number" ? r.rating.toFixed(1) : "–", "score");
      cell(tr, String(r.matches ?? "–"), "score");
      table.appendChild(tr);
    });
    parts.push(h, table);
  }
  section.replaceChildren(...parts);
  section.hidden = parts.length === 0;
}

async function refresh() {
  const status = document.getElementById("status");
  try {
    const answer = await fetch("/matches.json", { cache: "no-store" });
    if (!answer.ok) throw new Error(`HTTP ${answer.status}`);
    const data = await answer.json();
    render(data.matches);
    renderBoards(data.leaderboards);
    const live = data.matches.filter(x => x.live).length;
    status.textContent = `${live} live, ${data.matches.length - live} recent`;
    status.classList.remove("lost");
  } catch (e) {
    status.textContent = "the relay does not answer: trying again…";
    status.classList.add("lost");
  }
}

refresh();
setInterval(refresh, 1000);
