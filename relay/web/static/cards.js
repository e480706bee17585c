// BLINK cards and dice drawn in SVG the way the window draws them (client/window/geometry.py):
// a face with a dark border, the count as a digit in two corners, the colour written at the
// bottom, and the symbols -- star, triangle, crescent moon -- each with a dark outline, so shape
// and count read without colour. A card the page may not see is drawn as a back.
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
const PALETTE = {
  red: "rgb(214,44,38)", yellow: "rgb(246,196,22)", green: "rgb(34,150,72)", blue: "rgb(34,92,204)",
  purple: "rgb(130,60,180)", orange: "rgb(240,120,20)", black: "rgb(40,40,40)", pink: "rgb(230,110,170)",
};
const INK = "rgb(28,28,36)";
const FACE = "rgb(250,247,238)";
const BACK = "rgb(38,58,120)";
const BACK_PATTERN = "rgb(70,96,170)";
const SEAT_COLOURS = ["#f0c040", "#58b4ff", "#ff7a70", "#7ddc8a", "#c895ff", "#ffa24a", "#60e0d0", "#f27fc0"];

function svgEl(name, attrs, parent) {
  const el = document.createElementNS(SVG_NS, name);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
  if (parent) parent.appendChild(el);
  return el;
}

function svgText(parent, x, y, text, attrs) {
  const t = svgEl("text", Object.assign({ x: x, y: y }, attrs || {}), parent);
  t.textContent = text;
  return t;
}

function colourOf(name) {
  if (PALETTE[name]) return PALETTE[name];
  let h = 0;  // a colour of a custom deck: stable, made up from its name (as the window does)
  for (let i = 0; i < name.length; i++) h += name.charCodeAt(i) * (i + 7);
  return `rgb(${60 + h % 170},${60 + Math.floor(h / 7) % 170},${60 + Math.floor(h / 49) % 170})`;
}

function parseCard(text) {
  if (typeof text !== "string") return null;
  const parts = text.split("-");
  if (parts.length !== 3 || !/^[0-9]+$/.test(parts[0])) return null;
  return { count: Number(parts[0]), colour: parts[1], shape: parts[2] };
}

function starPoints(cx, cy, r) {
  const pts = [];
  for (let i = 0; i < 10; i++) {
    const rad = i % 2 === 0 ? r : r * 0.45;
    const a = (90 + 36 * i) * Math.PI / 180;
    pts.push([cx + rad * Math.cos(a), cy - rad * Math.sin(a)]);
  }
  return pts;
}

function trianglePoints(cx, cy, r) {
  const R = r * 1.22;
  const yc = cy + r * 0.14;  // (y grows downwards here)
  return [90, 210, 330].map(a => [cx + R * Math.cos(a * Math.PI / 180), yc - R * Math.sin(a * Math.PI / 180)]);
}

function moonPath(cx, cy, r) {
  const R = r * 1.02, d = R * 0.5, rc = R * 0.85, ox = cx - R * 0.25;
  const xi = (d * d + R * R - rc * rc) / (2 * d);
  const yi = Math.sqrt(Math.max(0, R * R - xi * xi));
  const top = [ox + xi, cy - yi], bottom = [ox + xi, cy + yi];
  return `M${top[0]},${top[1]} A${R},${R} 0 1 0 ${bottom[0]},${bottom[1]} A${rc},${rc} 0 1 1 ${top[0]},${top[1]} Z`;
}

function symbolLayout(count, aw, ah) {
  let r = Math.min(aw / 4.8, ah / 7.2);
  const qx = aw / 4, qy = ah / 3.0;
  const layouts = {
    1: [[0, 0]], 2: [[0, -qy * 0.75], [0, qy * 0.75]], 3: [[0, -qy], [0, 0], [0, qy]],
    4: [[-qx, -qy * 0.75], [qx, -qy * 0.75], [-qx, qy * 0.75], [qx, qy * 0.75]],
    5: [[-qx, -qy], [qx, -qy], [0, 0], [-qx, qy], [qx, qy]],
  };
  if (layouts[count]) return { centres: layouts[count], r: r };
  const rows = Math.ceil(count / 2);
  r = Math.min(aw / 4.3, ah / (rows * 2.3));
  const centres = [];
  for (let i = 0; i < count; i++) {
    const row = Math.floor(i / 2), col = i % 2;
    const x = (count % 2 && i === count - 1) ? 0 : (col === 0 ? -qx : qx);
    centres.push([x, -ah / 2 + (row + 0.5) * ah / rows]);
  }
  return { centres: centres, r: r };
}

function drawSymbol(g, shape, cx, cy, r, fill) {
  const outline = Math.max(1.2, r * 0.16);
  const attrs = { fill: fill, stroke: INK, "stroke-width": outline * 1.6, "stroke-linejoin": "round",
                  "paint-order": "stroke" };
  if (shape === "star") {
    svgEl("polygon", Object.assign({ points: starPoints(cx, cy, r * 1.12).map(p => p.join(",")).join(" ") }, attrs), g);
  } else if (shape === "triangle") {
    svgEl("polygon", Object.assign({ points: trianglePoints(cx, cy, r).map(p => p.join(",")).join(" ") }, attrs), g);
  } else if (shape === "moon") {
    svgEl("path", Object.assign({ d: moonPath(cx, cy, r) }, attrs), g);
  } else {
    svgEl("circle", Object.assign({ cx: cx, cy: cy, r: r }, attrs), g);
  }
}

// One card centred at (x, y), w wide and h high: ``text`` a card ("4-yellow-star"), or null for
// one the page may not see (a back). ``ring``: "landed" (just played) or null.
function drawCard(parent, x, y, w, h, text, ring) {
  const g = svgEl("g", { transform: `translate(${x},${y})`, class: "card" }, parent);
  const radius = w * 0.09, border = Math.max(1.5, w * 0.025);
  const card = parseCard(text);
  svgEl("rect", { x: -w / 2 + w * 0.03, y: -h / 2 + w * 0.035, width: w, height: h, rx: radius, fill: "rgba(0,0,0,0.27)" }, g);
  if (card === null) {
    g.setAttribute("data-card", "back");
    svgEl("rect", { x: -w / 2, y: -h / 2, width: w, height: h, rx: radius, fill: "rgb(230,230,235)" }, g);
    svgEl("rect", { x: -w / 2 + 2 * border, y: -h / 2 + 2 * border, width: w - 4 * border, height: h - 4 * border,
                    rx: Math.max(0, radius - 2 * border), fill: BACK }, g);
    const cols = 4, rows = 6, dw = (w - 6 * border) / cols, dh = (h - 6 * border) / rows;
    for (let i = 0; i < cols; i++) {
      for (let j = 0; j < rows; j++) {
        const cx = -w / 2 + 3 * border + dw * (i + 0.5), cy = -h / 2 + 3 * border + dh * (j + 0.5);
        svgEl("polygon", { points: `${cx + dw * 0.32},${cy} ${cx},${cy - dh * 0.32} ${cx - dw * 0.32},${cy} ${cx},${cy + dh * 0.32}`,
                           fill: BACK_PATTERN }, g);
      }
    }
  } else {
    g.setAttribute("data-card", text);
    svgEl("rect", { x: -w / 2, y: -h / 2, width: w, height: h, rx: radius, fill: INK }, g);
    svgEl("rect", { x: -w / 2 + border, y: -h / 2 + border, width: w - 2 * border, height: h - 2 * border,
                    rx: Math.max(0, radius - border), fill: FACE }, g);
    const top = -(h * 0.5 - h * 0.15), bottom = h * 0.5 - h * 0.14;
    const ah = bottom - top, aw = w * 0.66, acy = (top + bottom) / 2;
    const lay = symbolLayout(card.count, aw, ah);
    for (const [sx, sy] of lay.centres) drawSymbol(g, card.shape, sx, acy + sy, lay.r, colourOf(card.colour));
    const corner = Math.max(7, h * 0.105), pad = w * 0.07;
    svgText(g, -w / 2 + pad, -h / 2 + pad * 0.6 + corner * 0.85, String(card.count),
            { "font-size": corner, "font-weight": "bold", fill: INK });
    svgText(g, w / 2 - pad, h / 2 - pad * 0.6, String(card.count),
            { "font-size": corner, "font-weight": "bold", fill: INK, "text-anchor": "end" });
    svgText(g, 0, h / 2 - h * 0.035, card.colour.toUpperCase(),
            { "font-size": Math.max(6, h * 0.058), "font-weight": "bold", fill: "rgb(70,70,80)", "text-anchor": "middle" });
  }
  if (ring) {
    svgEl("rect", { x: -w / 2 - 3, y: -h / 2 - 3, width: w + 6, height: h + 6, rx: radius + 3, fill: "none",
                    stroke: "rgb(90,230,120)", "stroke-width": Math.max(2.5, w * 0.045), class: "ring-" + ring }, g);
  }
  return g;
}

// An empty place for a card: a faint dashed outline.
function drawSlot(parent, x, y, w, h) {
  return svgEl("rect", { x: x - w / 2 + 2, y: y - h / 2 + 2, width: w - 4, height: h - 4, rx: w * 0.09, fill: "none",
                         stroke: "rgba(255,255,255,0.3)", "stroke-width": 2, "stroke-dasharray": "6 5" }, parent);
}

// One die face (1..6 pips), or its number when it is larger; null: not rolled or not shown.
function drawDie(parent, x, y, size, value, colour) {
  const g = svgEl("g", { transform: `translate(${x},${y})`, class: "die" }, parent);
  svgEl("rect", { x: -size / 2, y: -size / 2, width: size, height: size, rx: size * 0.18, fill: colour || FACE,
                  stroke: INK, "stroke-width": 2 }, g);
  if (value === null || value === undefined) {
    svgText(g, 0, size * 0.18, "?", { "font-size": size * 0.5, "text-anchor": "middle", fill: INK });
    return g;
  }
  g.setAttribute("data-value", String(value));
  const q = size * 0.27, pr = size * 0.09;
  const pips = { 1: [[0, 0]], 2: [[-q, -q], [q, q]], 3: [[-q, -q], [0, 0], [q, q]],
                 4: [[-q, -q], [q, -q], [-q, q], [q, q]], 5: [[-q, -q], [q, -q], [0, 0], [-q, q], [q, q]],
                 6: [[-q, -q], [q, -q], [-q, 0], [q, 0], [-q, q], [q, q]] }[value];
  if (pips) {
    for (const [px, py] of pips) svgEl("circle", { cx: px, cy: py, r: pr, fill: INK }, g);
  } else {
    svgText(g, 0, size * 0.18, String(value), { "font-size": size * 0.5, "text-anchor": "middle", fill: INK });
  }
  return g;
}
