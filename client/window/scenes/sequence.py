"""Sequence Dice: the 6 x 6 board, chips, the relay's dice, legal spaces, special rolls, the line.

How this works
--------------
Each space shows its number; a chip is a disc in its team colour with the colour's letter on it
(G, B, R), so the colours can be told apart without seeing colour. The two dice tumble from the
start of a turn until the relay's ``dice_rolled`` has arrived and a short minimum has passed, then
show the roll, its total and what it means (2/12 bonus turn, 10 defensive, 11 wild), which is
also announced on the message line. When it is your move, the spaces of ``legal_actions`` are
outlined: green for a space you may place on, red with a cross for an opponent chip you may
remove or replace; click one to play it. A winning SEQUENCE is outlined in gold with a line
through it. Your own unconfirmed chip has a dashed amber ring; a refused one a red ring.
"""

from __future__ import annotations

import random
from typing import Any

from protocol.rules import sequence as sq
from client.window.draw2d import Canvas
from client.window.layout import Rect
from client.window.scenes.turnbased import AMBER, DIM, GREEN, RED, TurnBasedScene, WHITE, YELLOW

NS = 1_000_000_000
ROLL_MIN_S = 0.7
CHIP_RGB = {0: (40, 170, 80, 255), 1: (50, 110, 230, 255), 2: (215, 55, 50, 255)}
CHIP_LETTER = {0: "G", 1: "B", 2: "R"}
SPACE = (232, 224, 200, 255)
SPACE_SPECIAL = (250, 236, 170, 255)  # the 2 and 12 spaces (not removable by a 10)


def roll_meaning(total: int) -> str:
    if total in sq.BONUS_TOTALS:
        return f"{total}: place on a {total} — then a BONUS turn"
    if total == sq.DEFENSIVE:
        return "10: DEFENSIVE roll — remove an opponent chip (not on a 2 or 12)"
    if total == sq.WILD:
        return "11: WILD roll — place on any open space"
    return f"{total}: place a chip on an open {total}"


class SequenceScene(TurnBasedScene):
    name = "sequence"
    game = "sequence"

    def __init__(self, app: Any) -> None:
        self._roll_until = 0
        self._cells: dict[tuple[int, int], Rect] = {}
        self._rolled_turn = -1
        super().__init__(app)

    def acting(self, state: Any) -> list[int]:
        if state.phase == "rolloff":
            return list(state.contenders)
        return [] if state.current is None or state.phase == "over" else [state.current]

    def _rolling(self, state: Any, now_ns: int) -> bool:
        return state.phase in ("roll", "rolloff") or now_ns < self._roll_until

    def prompt(self, model: Any, state: Any, me: int | None) -> tuple[str, str]:
        now = self._now()
        if state.phase == "rolloff":
            return "rolling for who goes first…", "rolling for who goes first…"
        if self._rolling(state, now) or state.total is None:
            return "the relay is rolling your dice…", "the relay is rolling the dice…"
        total = state.total
        mine = roll_meaning(total) + "  —  click a highlighted space"
        return mine, f"rolled {total}: " + roll_meaning(total).split(": ", 1)[1]

    @staticmethod
    def _now() -> int:
        import time
        return time.time_ns()

    def seat_colour(self, state: Any, seat: int) -> tuple[int, int, int, int]:
        return CHIP_RGB[state.colour(seat)]

    def seat_mark(self, state: Any, seat: int) -> str:
        return CHIP_LETTER[state.colour(seat)]

    def score_text(self, state: Any, seat: int) -> str:
        return f"{state.count(state.colour(seat))}/{state.settings.chips_per_colour} chips"

    def row_lines(self, state: Any) -> float:
        return 3.5

    def row_detail(self, c: Canvas, model: Any, state: Any, seat: int, rect: Rect) -> None:
        col = sq.COLOURS[state.colour(seat)]
        team = ""
        if state.players == 4:
            mates = [self.pname(model, s) for s in sq.seats_of(state.colour(seat), 4) if s != seat]
            team = f"  ·  team with {mates[0]}" if mates else ""
        self.text(rect.left + self.f * 2.2, rect.y, f"{col} chips{team}", 0.85, DIM, ax="left")

    def hints(self, state: Any, me: int | None) -> str:
        return (f"click a highlighted space     SEQUENCE = {state.settings.sequence_length} in a row, column or "
                "diagonal     2/12 bonus · 10 defensive · 11 wild     Esc  menu")

    def animating(self, state: Any, now_ns: int) -> Any:
        if self._rolling(state, now_ns):
            return now_ns // (NS // 12)
        return None

    def on_event(self, ev: Any, model: Any, state: Any, now_ns: int) -> None:
        d = ev.data
        if ev.type == "turn_started":
            self._roll_until = now_ns + int(ROLL_MIN_S * NS)
            if d.get("bonus"):
                self.say(f"BONUS TURN for {self.who(model, d)}!", now_ns, YELLOW)
        elif ev.type == "dice_rolled":
            self._roll_until = max(self._roll_until, now_ns + int(ROLL_MIN_S * NS * 0.5))
            total = d.get("total")
            who = self.who(model, d)
            if total in sq.BONUS_TOTALS:
                self.say(f"{who} rolled {total}: BONUS turn after this one!", now_ns, YELLOW)
            elif total == sq.DEFENSIVE:
                self.say(f"{who} rolled 10: DEFENSIVE — remove an opponent chip", now_ns, (255, 160, 120, 255))
            elif total == sq.WILD:
                self.say(f"{who} rolled 11: WILD — any open space", now_ns, (170, 220, 255, 255))
        elif ev.type == "no_move":
            why = str(d.get("reason", "")).replace("_", " ")
            self.say(f"{self.who(model, d)} rolled {d.get('total')}: no move ({why})", now_ns,
                     (255, 200, 120, 255))
        elif ev.type == "first_player":
            self.say(f"{self.who(model, d)} rolled highest and goes first", now_ns,
                     (200, 220, 255, 255))
        elif ev.type == "chip_removed" and d.get("seat") != self.me():
            self.say(f"{self.who(model, d)} removed a {d.get('colour')} chip", now_ns,
                     (255, 160, 120, 255))

    def result_line(self, model: Any, state: Any) -> str:
        if state.phase != "over":
            return ""
        if not state.winners:
            return "Draw: the turn limit was reached"
        me = self.me()
        col = sq.COLOURS[state.colour(state.winners[0])].upper()
        who = " & ".join(self.pname(model, s) for s in state.winners)
        return (f"SEQUENCE! {'You win' if me in state.winners else who + ' win' + ('s' if len(state.winners) == 1 else '')}"
                f" ({col})")

    # ------------------------------------------------------------------ the board

    def board(self, c: Canvas, model: Any, state: Any, me: int | None, now_ns: int) -> None:
        f = self.f
        br = self.board_rect
        rows, cols = state.settings.rows, state.settings.cols
        dice_w = f * 12
        side = min((br.w - dice_w - f * 3) / cols, (br.h - f * 2) / rows)
        gx = br.left + f + side * cols / 2
        gy = br.y
        x0, y0 = gx - side * cols / 2, gy + side * rows / 2
        c.rect(gx, gy, side * cols + f * 0.8, side * rows + f * 0.8, (60, 45, 30, 255), radius=f * 0.5)
        rolling = self._rolling(state, now_ns)
        my_move = me is not None and state.phase == "move" and state.current == me and not rolling
        legal: dict[tuple[int, int], Any] = {}
        if my_move and me is not None:
            for a in sq.legal_actions(state, me):
                if (a.row, a.col) not in legal or isinstance(a, sq.PlaceChip):
                    legal[(a.row, a.col)] = a
        line = set(map(tuple, state.line))
        pend = self._pending(model)
        self._cells = {}
        for r in range(rows):
            for col in range(cols):
                n = state.settings.board[r][col]
                x = x0 + side * (col + 0.5)
                y = y0 - side * (r + 0.5)
                cell = Rect(x, y, side * 0.94, side * 0.94)
                self._cells[(r, col)] = cell
                bg = SPACE_SPECIAL if n in sq.BONUS_TOTALS else SPACE
                c.rect(x, y, cell.w, cell.h, bg, radius=side * 0.08)
                chip = state.chips[r][col]
                a = legal.get((r, col))
                if chip is None:
                    self.text(x, y, str(n), 1.5 * side / 60, (95, 80, 60, 255), bold=True)
                else:
                    self.text(x - side * 0.33, y + side * 0.33, str(n), 0.7, (95, 80, 60, 255), bold=True)
                    c.circle(x, y, side * 0.33, (20, 20, 20, 255), segs=24)
                    c.circle(x, y, side * 0.3, CHIP_RGB[chip], segs=24)
                    self.text(x, y, CHIP_LETTER[chip], 1.3 * side / 60, WHITE, bold=True)
                if a is not None:
                    hov = self.hover == ("space", r, col)
                    colour = GREEN if chip is None else RED
                    c.ring(x, y, cell.w, cell.h, max(3.0, side * 0.06) * (1.6 if hov else 1.0),
                           (255, 215, 60, 255) if hov else colour, radius=side * 0.08)
                    if chip is not None:  # an opponent chip you may remove / replace: a cross
                        c.line(x - side * 0.2, y - side * 0.2, x + side * 0.2, y + side * 0.2, max(2.0, side * 0.05), WHITE)
                        c.line(x - side * 0.2, y + side * 0.2, x + side * 0.2, y - side * 0.2, max(2.0, side * 0.05), WHITE)
                    self.target(("space", r, col), (lambda px, py, cell=cell: cell.contains(px, py)),
                                (lambda a=a: self.act(a)))
                if (r, col) in line:
                    c.ring(x, y, cell.w, cell.h, max(4.0, side * 0.08), (255, 210, 40, 255), radius=side * 0.08)
                if (r, col) in pend:
                    c.disc_ring(x, y, side * 0.34, max(3.0, side * 0.06), AMBER)
                    self.text(x + side * 0.3, y + side * 0.36, "sent", 0.7, (200, 120, 0, 255), bold=True)
        if len(state.line) >= 2:
            a0, a1 = state.line[0], state.line[-1]
            p0, p1 = self._cells[tuple(a0)], self._cells[tuple(a1)]
            c.line(p0.x, p0.y, p1.x, p1.y, max(4.0, side * 0.08), (255, 210, 40, 230))
        if self.rejected is not None and isinstance(self.rejected[0], (sq.PlaceChip, sq.RemoveChip)):
            a = self.rejected[0]
            cell = self._cells.get((a.row, a.col))
            if cell is not None:
                c.ring(cell.x, cell.y, cell.w, cell.h, max(4.0, side * 0.09), RED, radius=side * 0.08)
        # the dice
        dx = br.right - dice_w / 2 - f * 0.5
        dy = br.top - f * 5
        c.rect(dx, dy - f * 1.5, dice_w, f * 12, (30, 38, 50, 255), radius=f * 0.8)
        self.text(dx, dy + f * 3.3, "the roll", 0.95, DIM, bold=True)
        ds = f * 3.6
        if rolling:
            rng = random.Random(now_ns // (NS // 12))
            faces = (rng.randint(1, 6), rng.randint(1, 6))
            total_txt, colour = "rolling…", DIM
        elif state.dice is not None:
            faces = state.dice
            total_txt, colour = f"total {sum(faces)}", YELLOW
        else:
            faces, total_txt, colour = None, "", DIM
        if faces is not None:
            for i, v in enumerate(faces):
                c.die(dx + (i - 0.5) * (ds + f * 0.8), dy, ds, v)
        self.text(dx, dy - ds / 2 - f * 1.2, total_txt, 1.2, colour, bold=True)
        if not rolling and state.total is not None:
            t = state.total
            tag = ("BONUS TURN" if t in sq.BONUS_TOTALS else "DEFENSIVE" if t == sq.DEFENSIVE else
                   "WILD" if t == sq.WILD else "")
            if tag:
                c.rect(dx, dy - ds / 2 - f * 3.2, dice_w * 0.85, f * 2, (150, 60, 160, 255) if t == sq.WILD else
                       (170, 80, 40, 255) if t == sq.DEFENSIVE else (170, 130, 20, 255), radius=f * 0.5)
                self.text(dx, dy - ds / 2 - f * 3.2, tag, 1.1, WHITE, bold=True)
        # the legend
        ly = dy - f * 9
        self.text(dx, ly, "green: place here", 0.8, GREEN)
        self.text(dx, ly - f * 1.3, "red ✕: remove chip", 0.8, (255, 130, 120, 255))
        self.text(dx, ly - f * 2.6, "yellow: 2 / 12 spaces", 0.8, (250, 230, 150, 255))

    def _pending(self, model: Any) -> set[tuple[int, int]]:
        if model is None or model.predictor is None:
            return set()
        return {(p.action.row, p.action.col) for p in model.predictor.pending
                if isinstance(p.action, (sq.PlaceChip, sq.RemoveChip))}

    def space_centre(self, r: int, col: int) -> tuple[float, float]:
        cell = self._cells[(r, col)]
        return cell.x, cell.y

    def describe(self) -> dict[str, Any]:
        d = super().describe()
        model, state = self._model()
        if state is not None:
            d.update(chips=[list(row) for row in state.chips], dice=state.dice, current=state.current,
                     line=[list(x) for x in state.line],
                     rolling=self._rolling(state, self._now()), drawn_spaces=len(self._cells))
        return d
