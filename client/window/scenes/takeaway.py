"""Takeaway Dice's renderer: the hex cluster of Blinks, claiming, the re-roll, claimed dice and scores.

How this works
--------------
What is shown comes from ``TakeawayViewModel`` (``client/window/viewmodels/takeaway.py``): whose
turn, the Blinks you may claim, the re-roll button's text and state, your unconfirmed claims, the
claimed dice with their worth and the rolling animation. This scene draws it. The cluster is drawn
in axial coordinates (``draw2d.axial_to_xy``, the face order of RULES.md §2) as hexagons showing
their die face as pips. The board keeps the shape of the whole game: a claimed Blink leaves a
faint outline where it stood, so nothing shifts under the pointer. Removable Blinks are ivory
(outlined green when it is your turn); locked ones are grey and hatched. The hexagon under the
pointer is ringed (gold: click to claim; red: locked). Space or the button re-rolls the whole
cluster; while the relay rolls, the faces tumble until its ``dice_rolled`` arrives. Each player's
row lists their claimed dice in order; a repeated face is shown with its worth, 10, under it.
"""

from __future__ import annotations

from functools import partial
import math
import random
from typing import Callable

from pyglet.window import key

from protocol import messages as m
from protocol.rules import takeaway as tk
from protocol.rules.base import Rejected
from client.window.draw2d import Canvas, axial_to_xy, hex_points
from client.window.viewmodels import ClientView
from client.window.host import SceneHost
from client.window.layout import Rect
from client.window.scenes.turnbased import TurnBasedScene
from client.window.viewmodels import AMBER, DIM, GREEN, RED, WHITE, YELLOW, TakeawayViewModel

NS = 1_000_000_000
IVORY = (244, 238, 220, 255)
LOCKED = (105, 110, 120, 255)
HATCH = (70, 74, 84, 255)
PIP = (30, 30, 35, 255)


class TakeawayScene(TurnBasedScene[tk.State]):
    name = "takeaway"
    vm: TakeawayViewModel

    def __init__(self, app: SceneHost) -> None:
        self._hex: dict[tuple[int, int], tuple[float, float, float]] = {}
        # what a state says about its cells, worked out once per state (a hover or a tumbling die
        # redraws the board without the state changing): (state, me, legal cells, locked cells)
        self._known: tuple[tk.State, int | None, set[tuple[int, int]], set[tuple[int, int]]] | None = None
        super().__init__(app)

    def view_model(self, title: str) -> TakeawayViewModel:
        return TakeawayViewModel(title)

    def row_lines(self, state: tk.State) -> float:
        return 5.2

    def row_detail(self, c: Canvas, model: ClientView, state: tk.State, seat: int, rect: Rect) -> None:
        dice = self.vm.claimed(state, seat)
        f = self.f
        pending = len(self.vm.pending_cells(model))
        if not dice:
            self.text(rect.left + f * 2.2, rect.y, "no dice claimed yet", 0.85, DIM, ax="left")
            return
        size = min(f * 1.7, (rect.w - f * 2.4) / max(1, len(dice)) - f * 0.2)
        x = rect.left + f * 2.2 + size / 2
        y = rect.y + f * 0.45
        for i, (face, worth, dup) in enumerate(dice):
            body = (255, 215, 150, 255) if dup else IVORY
            self.die(c, x, y, size, face, body=body, pip=PIP)
            if seat == self.me() and pending and i >= len(dice) - pending:
                c.ring(x, y, size, size, 2, AMBER, radius=size * 0.18, dashed=True)
            self.text(x, y - size / 2 - f * 0.55, worth, 0.7, (255, 150, 90, 255) if dup else DIM, bold=dup)
            x += size + f * 0.2

    # ------------------------------------------------------------------ the board

    def board(self, c: Canvas, model: ClientView, state: tk.State, me: int | None, now_ns: int) -> None:
        f = self.f
        br = self.board_rect
        cells = {(q, r) for q, r, _ in state.cells}
        allc = self.vm.cluster(state)
        # fit the cluster into the board rectangle, leaving room for the re-roll button below
        area = Rect(br.x, br.y + f * 1.6, br.w - f * 2, br.h - f * 4.4)
        pts = [axial_to_xy(q, r, 1.0) for q, r in allc] or [(0.0, 0.0)]
        xs, ys = [p[0] for p in pts], [p[1] for p in pts]
        span_x = max(xs) - min(xs) + math.sqrt(3)
        span_y = max(ys) - min(ys) + 2.0
        size = max(8.0, min(area.w / span_x, area.h / span_y))
        ox = area.x - (max(xs) + min(xs)) / 2 * size
        oy = area.y - (max(ys) + min(ys)) / 2 * size
        known = self._known
        if known is None or known[0] is not state or known[1] != me:
            coords = state.coords()
            known = self._known = (state, me, self.vm.legal_cells(state, me),
                                   {(q, r) for q, r, _ in state.cells if tk.is_locked(coords, (q, r))})
        legal, locked_cells = known[2], known[3]
        rolling = self.vm.rolling(state, now_ns)
        rng = random.Random(now_ns // (NS // 12))
        self._hex = {}
        r_hex = size * 0.94
        for q, r in sorted(allc):
            x, y = axial_to_xy(q, r, size)
            x, y = x + ox, y + oy
            self._hex[(q, r)] = (x, y, r_hex)
            if (q, r) not in cells:
                c.outline(hex_points(x, y, r_hex * 0.9), 1.5, (70, 80, 95, 255))
                continue
        pend = self.vm.pending_cells(model)
        for q, r, face in state.cells:
            x, y, rr = self._hex[(q, r)]
            locked = (q, r) in locked_cells
            hovered = self.hover == ("cell", q, r)
            shown = rng.randint(1, 6) if rolling or face is None else face
            self.piece(c, ("blink", x, y, rr, locked, shown), partial(self._blink, x, y, rr, locked, shown))
            if (q, r) in legal:
                c.outline(hex_points(x, y, rr), max(2.0, rr * 0.06), GREEN)
            if hovered:
                ok = (q, r) in legal
                c.outline(hex_points(x, y, rr), max(3.0, rr * 0.12), (255, 215, 60, 255) if ok else RED)
            self.target(("cell", q, r), self._hit_hex(x, y, rr), partial(self.claim, q, r))
        for q, r in pend:  # claimed by you, not yet confirmed: a dashed amber outline where it stood
            if (q, r) in self._hex:
                x, y, rr = self._hex[(q, r)]
                c.outline(hex_points(x, y, rr), max(3.0, rr * 0.1), AMBER, dashed=True)
                self.text(x, y, "sent", 0.85, AMBER, bold=True)
        rejected = self.vm.rejected_now(now_ns)
        if isinstance(rejected, tk.ClaimBlink):
            a = rejected
            if (a.q, a.r) in self._hex:
                x, y, rr = self._hex[(a.q, a.r)]
                c.outline(hex_points(x, y, rr), max(4.0, rr * 0.14), RED)
        # the re-roll button and the legend
        why, can = self.vm.reroll(state, me)
        b = Rect(br.x, br.bottom + f * 1.4, f * 21, f * 2.3)
        self.button(c, "reroll", b, why, can, lambda: self.reroll(), hot=can)
        if isinstance(rejected, tk.Reroll):
            c.ring(b.x, b.y, b.w, b.h, 3, RED, radius=f * 0.6)
        lx = br.left + f * 1.2
        ly = br.top - f * 0.9
        c.hexagon(lx, ly, f * 0.7, IVORY)
        first = self.text(lx + f * 1.1, ly, "removable", 0.85, WHITE, ax="left")
        hx = first.x + first.content_width + f * 1.6  # the second sample after the first word, whatever its size
        c.hexagon(hx, ly, f * 0.7, LOCKED)
        c.line(hx - f * 0.4, ly - f * 0.4, hx + f * 0.4, ly + f * 0.4, 2, HATCH)
        self.text(hx + f * 1.1, ly, "locked", 0.85, WHITE, ax="left")
        self.text(br.right - f, ly, f"{len(state.cells)} Blinks left", 0.85, DIM, ax="right")
        if state.settings.reroll_once_per_game:
            self.text(br.right - f, ly - f * 1.4, "re-roll: once per game", 0.8, YELLOW, ax="right")

    @staticmethod
    def _blink(x: float, y: float, rr: float, locked: bool, shown: int, c: Canvas) -> None:
        """One Blink: its hexagon, the hatching when locked, its pips."""
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
        c.pips(x, y, rr * 0.62, shown, (235, 235, 240, 255) if locked else PIP)

    @staticmethod
    def _hit_hex(x: float, y: float, r: float) -> Callable[[float, float], bool]:
        return lambda px, py: math.hypot(px - x, py - y) <= r * 0.9

    def cell_centre(self, q: int, r: int) -> tuple[float, float]:
        x, y, _ = self._hex[(q, r)]
        return x, y

    # ------------------------------------------------------------------ moves

    def claim(self, q: int, r: int) -> m.Act | Rejected | None:
        return self.act(tk.ClaimBlink(q, r))

    def reroll(self) -> m.Act | Rejected | None:
        return self.act(tk.Reroll())

    def game_key(self, symbol: int, state: tk.State, me: int | None) -> bool:
        if symbol == key.SPACE:
            self.reroll()
            return True
        return False

    def describe(self) -> dict[str, object]:
        d = super().describe()
        model, state = self._model()
        if state is not None:
            d.update(cells=sorted([q, r, face] for q, r, face in state.cells),
                     claims=[list(x) for x in state.claims], scores=list(state.scores()),
                     current=state.current, drawn_cells=sorted(self._hex))
        return d
