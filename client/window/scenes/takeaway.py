"""Takeaway Dice: the hex cluster of Blinks, claiming, the re-roll, claimed dice and scores.

How this works
--------------
The cluster is drawn in axial coordinates (``draw2d.axial_to_xy``, the face order of RULES.md §2)
as hexagons showing their die face as pips. The board keeps the shape of the whole game: a claimed
Blink leaves a faint outline where it stood, so nothing shifts under the pointer. Removable Blinks
are ivory (outlined green when it is your turn); locked ones are grey and hatched. The hexagon under
the pointer is ringed (gold: click to claim; red: locked). Space or the button re-rolls the whole
cluster (greyed when ``legal_actions`` has no ``Reroll``: used this turn, or the once-per-game
re-roll is spent); while the relay rolls, the faces tumble until its ``dice_rolled`` arrives.
Each player's row lists their claimed dice in order; a repeated face is shown with its worth, 10,
under it (RULES.md: every one after the first is worth 10), and the running score.
"""

from __future__ import annotations

import math
import random
from typing import Any

from pyglet.window import key

from protocol.rules import takeaway as tk
from client.window.draw2d import Canvas, axial_to_xy, hex_points
from client.window.layout import Rect
from client.window.scenes.turnbased import AMBER, DIM, GREEN, RED, TurnBasedScene, WHITE, YELLOW

NS = 1_000_000_000
IVORY = (244, 238, 220, 255)
LOCKED = (105, 110, 120, 255)
HATCH = (70, 74, 84, 255)
PIP = (30, 30, 35, 255)
ROLL_MIN_S = 0.6


class TakeawayScene(TurnBasedScene):
    name = "takeaway"
    game = "takeaway"

    def __init__(self, app: Any) -> None:
        self._all_cells: set[tuple[int, int]] = set()
        self._roll_until = 0
        self._hex: dict[tuple[int, int], tuple[float, float, float]] = {}
        super().__init__(app)

    # ------------------------------------------------------------------ what is going on

    def acting(self, state: Any) -> list[int]:
        cur = state.current if state.phase in ("turn", "rolling") else None
        return [] if cur is None else [cur]

    def prompt(self, model: Any, state: Any, me: int | None) -> tuple[str, str]:
        if state.phase == "setup":
            return "", "the relay is rolling the cluster…"
        if state.phase == "rolling":
            return "re-rolling the cluster…", f"{self.pname(model, state.current)} re-rolls the cluster…"
        can_reroll = me is not None and any(isinstance(a, tk.Reroll) for a in tk.legal_actions(state, me))
        mine = "click a Blink that is not locked (grey, hatched) to claim it" + (
            "   ·   or re-roll all first (Space)" if can_reroll else "")
        return mine, "choosing a Blink to claim"

    def score_text(self, state: Any, seat: int) -> str:
        return f"{state.scores()[seat]} pts"

    def row_lines(self, state: Any) -> float:
        return 5.2

    def row_detail(self, c: Canvas, model: Any, state: Any, seat: int, rect: Rect) -> None:
        faces = state.claimed(seat)
        f = self.f
        pending = self._pending_claims(model)
        if not faces:
            self.text(rect.left + f * 2.2, rect.y, "no dice claimed yet", 0.85, DIM, ax="left")
            return
        size = min(f * 1.7, (rect.w - f * 2.4) / max(1, len(faces)) - f * 0.2)
        seen: set[int] = set()
        x = rect.left + f * 2.2 + size / 2
        y = rect.y + f * 0.45
        for i, face in enumerate(faces):
            dup = face in seen
            seen.add(face)
            c.die(x, y, size, face, body=(255, 215, 150, 255) if dup else IVORY, pip=PIP)
            if seat == self.me() and pending and i >= len(faces) - pending:
                c.ring(x, y, size, size, 2, AMBER, radius=size * 0.18, dashed=True)
            self.text(x, y - size / 2 - f * 0.55, "10" if dup else str(face), 0.7, (255, 150, 90, 255) if dup else DIM,
                      bold=dup)
            x += size + f * 0.2

    def _pending_claims(self, model: Any) -> int:
        if model is None or model.predictor is None:
            return 0
        return sum(1 for p in model.predictor.pending if isinstance(p.action, tk.ClaimBlink))

    def hints(self, state: Any, me: int | None) -> str:
        return "click  claim a Blink     Space  re-roll the cluster     a repeated face scores 10     Esc  menu"

    def animating(self, state: Any, now_ns: int) -> Any:
        if state.phase in ("rolling", "setup") or now_ns < self._roll_until:
            return now_ns // (NS // 12)
        return None

    def on_event(self, ev: Any, model: Any, state: Any, now_ns: int) -> None:
        d = ev.data
        if ev.type == "dice_rolled" and d.get("reason") == "setup":
            self._roll_until = now_ns + int(ROLL_MIN_S * NS)
        elif ev.type == "dice_rolled" and d.get("reason") == "reroll":
            self._roll_until = max(self._roll_until, now_ns + int(ROLL_MIN_S * NS))
            if d.get("seat") != self.me():
                self.say(f"{self.who(model, d)} re-rolled the whole cluster", now_ns)
        elif ev.type == "reroll_requested":
            self._roll_until = now_ns + int(ROLL_MIN_S * NS)
        elif ev.type == "blink_claimed" and d.get("seat") != self.me():
            face = d.get("face")
            self.say(f"{self.who(model, d)} claimed a {face}", now_ns, (200, 220, 255, 255))
        elif ev.type == "order_decided":
            order = d.get("order") or []
            self.say("playing order: " + " → ".join(self.pname(model, s) for s in order), now_ns, (200, 220, 255, 255))

    def result_line(self, model: Any, state: Any) -> str:
        scores = state.scores()
        if not scores:
            return ""
        best = max(scores)
        winners = [s for s, v in enumerate(scores) if v == best]
        if len(winners) > 1:
            return "Shared win: " + " & ".join(self.pname(model, s) for s in winners) + f" with {best}"
        w = winners[0]
        return ("You win" if w == self.me() else f"{self.pname(model, w)} wins") + f" with {best} points"

    # ------------------------------------------------------------------ the board

    def board(self, c: Canvas, model: Any, state: Any, me: int | None, now_ns: int) -> None:
        f = self.f
        br = self.board_rect
        cells = {(q, r) for q, r, _ in state.cells}
        claimed = {(q, r) for _, q, r, _ in state.claims}
        if state.phase == "setup" or not (self._all_cells >= cells | claimed):
            self._all_cells = cells | claimed
        allc = self._all_cells or cells
        # fit the cluster into the board rectangle, leaving room for the re-roll button below
        area = Rect(br.x, br.y + f * 1.6, br.w - f * 2, br.h - f * 4.4)
        pts = [axial_to_xy(q, r, 1.0) for q, r in allc] or [(0.0, 0.0)]
        xs, ys = [p[0] for p in pts], [p[1] for p in pts]
        span_x = max(xs) - min(xs) + math.sqrt(3)
        span_y = max(ys) - min(ys) + 2.0
        size = max(8.0, min(area.w / span_x, area.h / span_y))
        ox = area.x - (max(xs) + min(xs)) / 2 * size
        oy = area.y - (max(ys) + min(ys)) / 2 * size
        my_turn = me is not None and state.phase == "turn" and state.current == me
        legal = ({(a.q, a.r) for a in tk.legal_actions(state, me) if isinstance(a, tk.ClaimBlink)}
                 if my_turn and me is not None else set())
        rolling = state.phase in ("rolling", "setup") or now_ns < self._roll_until
        rng = random.Random(now_ns // (NS // 12))
        coords = state.coords()
        self._hex = {}
        r_hex = size * 0.94
        for q, r in sorted(allc):
            x, y = axial_to_xy(q, r, size)
            x, y = x + ox, y + oy
            self._hex[(q, r)] = (x, y, r_hex)
            if (q, r) not in cells:
                c.outline(hex_points(x, y, r_hex * 0.9), 1.5, (70, 80, 95, 255))
                continue
        pend = self._pending_cells(model)
        for q, r, face in state.cells:
            x, y, rr = self._hex[(q, r)]
            locked = tk.is_locked(coords, (q, r))
            hovered = self.hover == ("cell", q, r)
            c.hexagon(x, y, rr, LOCKED if locked else IVORY)
            if locked:  # hatching, inside the inscribed circle
                ri = rr * 0.86
                for k in (-0.6, -0.2, 0.2, 0.6):
                    d = k * ri
                    half = math.sqrt(max(0.0, ri * ri - d * d))
                    # a chord at distance d from the centre, at 45 degrees
                    cx0, cy0 = x + d / math.sqrt(2), y - d / math.sqrt(2)
                    c.line(cx0 - half / math.sqrt(2), cy0 - half / math.sqrt(2), cx0 + half / math.sqrt(2),
                           cy0 + half / math.sqrt(2), max(1.5, rr * 0.07), HATCH)
            shown = rng.randint(1, 6) if rolling or face is None else face
            c.pips(x, y, rr * 0.62, shown, (235, 235, 240, 255) if locked else PIP)
            if (q, r) in legal:
                c.outline(hex_points(x, y, rr), max(2.0, rr * 0.06), GREEN)
            if hovered:
                ok = (q, r) in legal
                c.outline(hex_points(x, y, rr), max(3.0, rr * 0.12), (255, 215, 60, 255) if ok else RED)
            self.target(("cell", q, r), self._hit_hex(x, y, rr), (lambda q=q, r=r: self.claim(q, r)))
        for q, r in pend:  # claimed by you, not yet confirmed: a dashed amber outline where it stood
            if (q, r) in self._hex:
                x, y, rr = self._hex[(q, r)]
                c.outline(hex_points(x, y, rr), max(3.0, rr * 0.1), AMBER, dashed=True)
                self.text(x, y, "sent", 0.85, AMBER, bold=True)
        if self.rejected is not None and isinstance(self.rejected[0], tk.ClaimBlink):
            a = self.rejected[0]
            if (a.q, a.r) in self._hex:
                x, y, rr = self._hex[(a.q, a.r)]
                c.outline(hex_points(x, y, rr), max(4.0, rr * 0.14), RED)
        # the re-roll button and the legend
        can = me is not None and any(isinstance(a, tk.Reroll) for a in tk.legal_actions(state, me))
        if me is None:
            why = "re-roll (players only)"
        elif not my_turn:
            why = "re-roll (on your turn)"
        elif can:
            why = "Re-roll all dice  (Space)"
        elif state.rerolled:
            why = "re-rolled this turn"
        else:
            why = "re-roll spent (once per game)"
        b = Rect(br.x, br.bottom + f * 1.4, f * 21, f * 2.3)
        self.button(c, "reroll", b, why, can, lambda: self.reroll(), hot=can)
        if self.rejected is not None and isinstance(self.rejected[0], tk.Reroll):
            c.ring(b.x, b.y, b.w, b.h, 3, RED, radius=f * 0.6)
        lx = br.left + f * 1.2
        ly = br.top - f * 0.9
        c.hexagon(lx, ly, f * 0.7, IVORY)
        self.text(lx + f * 1.1, ly, "removable", 0.85, WHITE, ax="left")
        c.hexagon(lx + f * 8, ly, f * 0.7, LOCKED)
        c.line(lx + f * 7.6, ly - f * 0.4, lx + f * 8.4, ly + f * 0.4, 2, HATCH)
        self.text(lx + f * 9.1, ly, "locked", 0.85, WHITE, ax="left")
        self.text(br.right - f, ly, f"{len(state.cells)} Blinks left", 0.85, DIM, ax="right")
        if state.settings.reroll_once_per_game:
            self.text(br.right - f, ly - f * 1.4, "re-roll: once per game", 0.8, YELLOW, ax="right")

    def _pending_cells(self, model: Any) -> list[tuple[int, int]]:
        if model is None or model.predictor is None:
            return []
        return [(p.action.q, p.action.r) for p in model.predictor.pending if isinstance(p.action, tk.ClaimBlink)]

    @staticmethod
    def _hit_hex(x: float, y: float, r: float) -> Any:
        return lambda px, py: math.hypot(px - x, py - y) <= r * 0.9

    def cell_centre(self, q: int, r: int) -> tuple[float, float]:
        x, y, _ = self._hex[(q, r)]
        return x, y

    # ------------------------------------------------------------------ moves

    def claim(self, q: int, r: int) -> Any:
        return self.act(tk.ClaimBlink(q, r))

    def reroll(self) -> Any:
        return self.act(tk.Reroll())

    def game_key(self, symbol: int, state: Any, me: int | None) -> bool:
        if symbol == key.SPACE:
            self.reroll()
            return True
        return False

    def describe(self) -> dict[str, Any]:
        d = super().describe()
        model, state = self._model()
        if state is not None:
            d.update(cells=sorted([q, r, face] for q, r, face in state.cells),
                     claims=[list(x) for x in state.claims], scores=list(state.scores()),
                     current=state.current, drawn_cells=sorted(self._hex))
        return d
