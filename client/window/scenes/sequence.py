"""Sequence Dice's renderer: the 6 x 6 board, chips, the relay's dice, legal spaces, special rolls, the line.

How this works
--------------
What is shown comes from ``SequenceViewModel`` (``client/window/viewmodels/sequence.py``): whose
turn, the roll and its meaning, the spaces you may play and your unconfirmed chip. This scene draws
it. Each space shows its number; a chip is a disc in its team colour with the colour's letter on it
(G, B, R), so the colours can be told apart without seeing colour. The two dice tumble until the
relay's roll is in, then show it, its total and what it means (2/12 bonus turn, 10 defensive,
11 wild). When it is your move, the legal spaces are outlined: green for a space you may place on,
red with a cross for an opponent chip you may remove; click one to play it. A winning SEQUENCE is
outlined in gold with a line through it. Your own unconfirmed chip has a dashed amber ring; a
refused one a red ring.
"""

from __future__ import annotations

from functools import partial
import random
import time

from protocol.rules import sequence as sq
from client.window.draw2d import Canvas
from client.window.viewmodels import ClientView
from client.window.host import SceneHost
from client.window.layout import Rect
from client.window.scenes.turnbased import TurnBasedScene
from client.window.viewmodels import AMBER, CHIP_LETTER, CHIP_RGB, DIM, GREEN, RED, WHITE, YELLOW, SequenceViewModel

NS = 1_000_000_000
SPACE = (232, 224, 200, 255)
SPACE_SPECIAL = (250, 236, 170, 255)  # the 2 and 12 spaces (not removable by a 10)


def _space(x: float, y: float, w: float, h: float, bg: tuple[int, int, int, int], radius: float, c: Canvas) -> None:
    c.rect(x, y, w, h, bg, radius=radius)


#: The widest the pending "sent" tag may be, in spaces: inside the chip (radius 0.3 of a space) with
#: a margin, so a tag never crosses the chip's rim nor reaches the space's number in its corner.
SENT_TAG_W = 0.46


class SequenceScene(TurnBasedScene[sq.State]):
    name = "sequence"
    vm: SequenceViewModel

    def __init__(self, app: SceneHost) -> None:
        self._cells: dict[tuple[int, int], Rect] = {}
        super().__init__(app)

    def view_model(self, title: str) -> SequenceViewModel:
        return SequenceViewModel(title)

    def row_lines(self, state: sq.State) -> float:
        return 3.5

    def row_detail(self, c: Canvas, model: ClientView, state: sq.State, seat: int, rect: Rect) -> None:
        self.text(rect.left + self.f * 2.2, rect.y, self.vm.row_text(model, state, seat), 0.85, DIM, ax="left")

    # ------------------------------------------------------------------ the board

    def board(self, c: Canvas, model: ClientView, state: sq.State, me: int | None, now_ns: int) -> None:
        f = self.f
        br = self.board_rect
        rows, cols = state.settings.rows, state.settings.cols
        dice_w = f * 12
        side = min((br.w - dice_w - f * 3) / cols, (br.h - f * 2) / rows)
        gx = br.left + f + side * cols / 2
        gy = br.y
        x0, y0 = gx - side * cols / 2, gy + side * rows / 2
        c.rect(gx, gy, side * cols + f * 0.8, side * rows + f * 0.8, (60, 45, 30, 255), radius=f * 0.5)
        rolling = self.vm.rolling(state, now_ns)
        legal = self.vm.legal_spaces(state, me, now_ns)
        line = set(map(tuple, state.line))
        pend = self.vm.pending_spaces(model)
        self._cells = {}
        for r in range(rows):
            for col in range(cols):
                n = state.settings.board[r][col]
                x = x0 + side * (col + 0.5)
                y = y0 - side * (r + 0.5)
                cell = Rect(x, y, side * 0.94, side * 0.94)
                self._cells[(r, col)] = cell
                bg = SPACE_SPECIAL if n in sq.BONUS_TOTALS else SPACE
                self.piece(c, ("space", x, y, cell.w, bg), partial(_space, x, y, cell.w, cell.h, bg, side * 0.08))
                chip = state.chips[r][col]
                a = legal.get((r, col))
                sent = (r, col) in pend
                if chip is None and not sent:
                    self.text(x, y, str(n), 1.5 * side / 60, (95, 80, 60, 255), bold=True)
                else:
                    self.text(x - side * 0.33, y + side * 0.33, str(n), 0.7, (95, 80, 60, 255), bold=True)
                if chip is not None:
                    c.circle(x, y, side * 0.33, (20, 20, 20, 255), segs=24)
                    c.circle(x, y, side * 0.3, CHIP_RGB[chip], segs=24)
                if sent:
                    # "sent" takes the chip letter's place, inside the chip's ring: it never covers
                    # the chip's edge or the space's number
                    self.text(x, y, "sent", 0.8, WHITE if chip is not None else (200, 120, 0, 255), bold=True,
                              max_w=side * SENT_TAG_W)
                elif chip is not None:
                    self.text(x, y, CHIP_LETTER[chip], 1.3 * side / 60, WHITE, bold=True)
                if a is not None:
                    hov = self.hover == ("space", r, col)
                    colour = GREEN if chip is None else RED
                    c.ring(x, y, cell.w, cell.h, max(3.0, side * 0.06) * (1.6 if hov else 1.0),
                           (255, 215, 60, 255) if hov else colour, radius=side * 0.08)
                    if chip is not None:  # an opponent chip you may remove / replace: a cross
                        c.line(x - side * 0.2, y - side * 0.2, x + side * 0.2, y + side * 0.2, max(2.0, side * 0.05), WHITE)
                        c.line(x - side * 0.2, y + side * 0.2, x + side * 0.2, y - side * 0.2, max(2.0, side * 0.05), WHITE)
                    self.target(("space", r, col), cell.contains,
                                partial(self.act, a))
                if (r, col) in line:
                    c.ring(x, y, cell.w, cell.h, max(4.0, side * 0.08), (255, 210, 40, 255), radius=side * 0.08)
                if sent:
                    c.disc_ring(x, y, side * 0.34, max(3.0, side * 0.06), AMBER)
        if len(state.line) >= 2:
            a0, a1 = state.line[0], state.line[-1]
            p0, p1 = self._cells[(a0[0], a0[1])], self._cells[(a1[0], a1[1])]
            c.line(p0.x, p0.y, p1.x, p1.y, max(4.0, side * 0.08), (255, 210, 40, 230))
        rejected = self.vm.rejected_now(now_ns)
        if isinstance(rejected, (sq.PlaceChip, sq.RemoveChip)):
            a = rejected
            spot = self._cells.get((a.row, a.col))
            if spot is not None:
                c.ring(spot.x, spot.y, spot.w, spot.h, max(4.0, side * 0.09), RED, radius=side * 0.08)
        # the dice
        dx = br.right - dice_w / 2 - f * 0.5
        dy = br.top - f * 5
        c.rect(dx, dy - f * 1.5, dice_w, f * 12, (30, 38, 50, 255), radius=f * 0.8)
        self.text(dx, dy + f * 3.3, "the roll", 0.95, DIM, bold=True)
        ds = f * 3.6
        faces, total_txt, tag = self.vm.dice(state, now_ns)
        colour = YELLOW if faces is not None else DIM
        if rolling:
            rng = random.Random(now_ns // (NS // 12))
            faces = (rng.randint(1, 6), rng.randint(1, 6))
        if faces is not None:
            for i, v in enumerate(faces):
                self.die(c, dx + (i - 0.5) * (ds + f * 0.8), dy, ds, v)
        self.text(dx, dy - ds / 2 - f * 1.2, total_txt, 1.2, colour, bold=True)
        if tag:
            t = state.total
            if tag:
                c.rect(dx, dy - ds / 2 - f * 3.2, dice_w * 0.85, f * 2, (150, 60, 160, 255) if t == sq.WILD else
                       (170, 80, 40, 255) if t == sq.DEFENSIVE else (170, 130, 20, 255), radius=f * 0.5)
                self.text(dx, dy - ds / 2 - f * 3.2, tag, 1.1, WHITE, bold=True)
        # the legend
        ly = dy - f * 9
        self.text(dx, ly, "green: place here", 0.8, GREEN)
        self.text(dx, ly - f * 1.3, "red ✕: remove chip", 0.8, (255, 130, 120, 255))
        self.text(dx, ly - f * 2.6, "yellow: 2 / 12 spaces", 0.8, (250, 230, 150, 255))

    def space_centre(self, r: int, col: int) -> tuple[float, float]:
        cell = self._cells[(r, col)]
        return cell.x, cell.y

    def describe(self) -> dict[str, object]:
        d = super().describe()
        model, state = self._model()
        if state is not None:
            d.update(chips=[list(row) for row in state.chips], dice=state.dice, current=state.current,
                     line=[list(x) for x in state.line],
                     rolling=self.vm.rolling(state, time.time_ns()), drawn_spaces=len(self._cells),
                     sent_tags=self.sent_tags())
        return d

    def sent_tags(self) -> list[dict[str, float]]:
        """Each "sent" tag drawn: its box and the space it marks (tests check it stays inside the chip)."""
        out = []
        for lbl in self.drawn_labels("board"):
            if lbl.text != "sent":
                continue
            x, y = lbl.x, lbl.y
            cell = min(self._cells.values(), key=lambda c: (c.x - x) ** 2 + (c.y - y) ** 2)
            out.append({"x": x, "y": y, "w": float(lbl.content_width), "h": float(lbl.content_height),
                        "cx": cell.x, "cy": cell.y, "side": cell.w / 0.94})
        return out
