"""Roll Your Own's renderer: the die builder, the revealed dice with the exact odds, the rolls, the
tally, and the round's (a)/(b) choice and the winner's face choice as prompts.

How this works
--------------
What is shown comes from ``RyoViewModel`` (``client/window/viewmodels/ryo.py``): the builder's
faces, the roll being replayed, the odds, whose choice it is. This scene draws it. While building,
your six faces are shown as dice with a + above and a − below each (or keys 1–6 to pick a face,
Up/Down to change it, Enter to build): a + is greyed when the budget is used up or the face is at
``max_face``, a − at 0, and the total against the budget is always shown; Build is enabled only
for a valid die. Builds are secret: until all are in, other players show "building…" or "built ✓".

Once the dice are revealed every die is shown face by face with its total, and next to each
opponent the exact chance your die beats theirs in one roll (ties count as not beating). The
relay's rolls are replayed one by one: each roll tumbles briefly, then shows every player's face
with the winner's ringed. The player list keeps the tally: rolls in this round, rounds in this
game, games in the match.

At the end of a round the loser is asked to choose (a) raise one face of their die by one -- a +1
over each face that may go up -- or (b) make the winner lower theirs (button B); after (b) the
winner chooses which face drops, with a −1 under each face that may go down.
"""

from __future__ import annotations

from functools import partial
import random
import time

from pyglet.window import key

from protocol import messages as m
from protocol.rules import roll_your_own as ryo
from protocol.rules.base import Rejected
from client.window.draw2d import Canvas
from client.window.viewmodels import ClientView
from client.window.layout import Rect
from client.window.scenes.turnbased import TurnBasedScene
from client.window.viewmodels import AMBER, DIM, GREEN, RED, WHITE, YELLOW, RyoViewModel, rolls_of

NS = 1_000_000_000
IVORY = (244, 238, 220, 255)
FACE_KEYS = {key._1: 0, key._2: 1, key._3: 2, key._4: 3, key._5: 4, key._6: 5,
             key.NUM_1: 0, key.NUM_2: 1, key.NUM_3: 2, key.NUM_4: 3, key.NUM_5: 4, key.NUM_6: 5}


class RyoScene(TurnBasedScene[ryo.State]):
    name = "ryo"
    vm: RyoViewModel

    @property
    def faces(self) -> list[int]:
        return self.vm.faces

    @property
    def sel(self) -> int:
        return self.vm.sel

    def view_model(self, title: str) -> RyoViewModel:
        return RyoViewModel(title)

    def row_lines(self, state: ryo.State) -> float:
        return 3.4

    def row_detail(self, c: Canvas, model: ClientView, state: ryo.State, seat: int, rect: Rect) -> None:
        line = self.vm.row_text(state, seat)
        if line:
            self.text(rect.left + self.f * 2.2, rect.y, line, 0.82, DIM, ax="left")

    def change(self, i: int, delta: int) -> None:
        if self.vm.change(self.app.session.model, i, delta, time.time_ns()):
            self.app.note_input()

    def build(self) -> m.Act | Rejected | None:
        model, state = self._model()
        if state is None:
            return None
        return self.act(self.vm.build_action())

    # ------------------------------------------------------------------ the board

    def board(self, c: Canvas, model: ClientView, state: ryo.State, me: int | None, now_ns: int) -> None:
        f = self.f
        br = self.board_rect
        if state.phase == "build" and me is not None and not state.built[me]:
            self._draw_builder(c, model, state, me)
            return
        top = br.top - f * 1.2
        if state.phase == "build":
            mine = state.dice[me] if me is not None else None
            self.text(br.x, top - f * 1.5, "your die is built — waiting for the others" if mine else
                      "the players are building their dice", 1.3, WHITE, bold=True)
            if mine:
                for i, v in enumerate(mine):
                    self.die(c, br.x + (i - 2.5) * f * 4, top - f * 5, f * 3, v, body=IVORY)
                pend = any(isinstance(p.action, ryo.BuildDie) for p in (model.predictor.pending if model.predictor else []))
                if pend:
                    self.text(br.x, top - f * 8.5, "PENDING — build sent, not yet confirmed", 1.0, AMBER, bold=True)
            return
        # revealed: every die, its total and your odds
        n = state.players
        avail = br.h - f * 16  # the rows stay above the latest roll, its words and the rules line
        rh = min(f * 5.2, avail / max(1, n))
        size = min(f * 2.6, rh * 0.55, (br.w * 0.42) / 6.8)
        shown = self.vm.shown_roll(now_ns)
        tumbling = shown is not None and shown[1]
        asking = not self.vm.deciding(now_ns)  # the round's question waits for its rolls to be shown
        rolls = rolls_of(shown[0]) if shown is not None else []
        faces_by_seat = {r.player: r.face for r in rolls}
        best = max((r.value for r in rolls), default=None) if shown else None
        mydie = state.dice[me] if me is not None and me < len(state.dice) else None
        where, rules = self.vm.rules_line(state)
        title = self.text(br.left + f, top, "Dice", 1.1, DIM, ax="left", bold=True)
        place = self.text(title.x + title.content_width + f, top, where, 0.85, DIM, ax="left")
        if mydie is not None:
            self.text(br.right - f, top, "chance your die beats theirs in one roll", 0.85, DIM, ax="right",
                      max_w=br.right - f * 2 - (place.x + place.content_width))
        for seat in range(n):
            die = state.dice[seat]
            y = top - f * 2.4 - rh * seat - size / 2
            self.text(br.left + f, y, self.pname(model, seat), 1.0, self.vm.seat_colour(state, seat), ax="left", bold=True,
                      max_w=f * 8.2 - size / 2)
            if die is None:
                continue
            hl = faces_by_seat.get(seat) if not tumbling else None
            x0 = br.left + f * 9.8
            for i, v in enumerate(die):
                x = x0 + i * (size + f * 0.4)
                tumbling_here = False  # the die itself stays put; the big dice below tumble
                self.die(c, x, y, size, v, body=IVORY)
                if hl == i and not tumbling and shown is not None and any(
                        r.player == seat and r.value == v for r in rolls):
                    won = best is not None and v == best
                    c.ring(x, y, size, size, 3, GREEN if won else (150, 170, 200, 255), radius=size * 0.18)
                if not tumbling_here:
                    self.text(x, y - size / 2 - f * 0.55, str(v), 0.7, DIM)
                self._face_buttons(c, model, state, me, seat, i, x, y, size, asking)
            sigma = self.text(x0 + 6 * (size + f * 0.4) - f * 0.2, y, f"Σ {sum(die)}", 0.95, WHITE, ax="left")
            if mydie is not None and seat != me:
                p, q = self.vm.odds(mydie, die)
                colour = GREEN if p > q else RED if p < q else YELLOW
                # right of the Σ column: in full words where they fit, else in short ones
                room = br.right - f - (sigma.x + sigma.content_width + f)
                lines = [(f"you beat them {p * 100:.1f}%", 0.95, True),
                         (f"they beat you {q * 100:.1f}%  ·  tie {(1 - p - q) * 100:.1f}%", 0.8, False)]
                if any(self.measure(t, k, bold) > room for t, k, bold in lines):
                    lines = [(f"you {p * 100:.1f}%", 0.95, True),
                             (f"them {q * 100:.1f}% · tie {(1 - p - q) * 100:.1f}%", 0.8, False)]
                for (t, k, bold), dy, tint in zip(lines, (0.6, -0.7), (colour, DIM)):
                    self.text(br.right - f, y + f * dy, t, k, tint, ax="right", bold=bold, max_w=room)
        # the latest roll, big: each rolling player's face
        if shown is not None:
            big = min(f * 5, br.w / max(1, len(rolls)) / 2.2)
            by = br.bottom + f * 9.5 + big / 2
            for k, r in enumerate(rolls):
                seat = r.player
                bx = br.x + (k - (len(rolls) - 1) / 2) * big * 2.2
                die = state.dice[seat] if isinstance(seat, int) and 0 <= seat < len(state.dice) else None
                rng = random.Random(now_ns // (NS // 14) + 7 * k)
                v = rng.choice(die) if tumbling and die else r.value
                self.die(c, bx, by, big, v, body=IVORY)
                if not tumbling and best is not None and r.value == best:
                    c.ring(bx, by, big, big, 4, GREEN, radius=big * 0.18)
                self.text(bx, by - big / 2 - f * 0.9, f"{self.pname(model, seat)}: {'…' if tumbling else v}", 1.0,
                          self.vm.seat_colour(state, seat) if isinstance(seat, int) else WHITE, bold=True,
                          max_w=big * 2.1)
        # the latest roll, in words
        ly = br.bottom + f * 5.2
        if shown is not None and not tumbling:
            self.text(br.x, ly, self.vm.roll_words(model, shown[0]), 1.15, YELLOW, bold=True)
        elif tumbling:
            self.text(br.x, ly, "rolling…", 1.15, DIM, bold=True)
        self.text(br.x, ly - f * 1.6, rules, 0.85, DIM, max_w=br.w - f)
        # the choice
        if state.phase == "choice" and state.chooser == me and me is not None and asking:
            w = state.round_winner
            can_b = w is not None and bool(ryo.lowerable(state, w))
            b = Rect(br.x, br.bottom + f * 1.6, min(br.w - f * 2, f * 30), f * 2.3)
            self.button(c, "lower", b, f"(b) make {self.pname(model, w) if w is not None else 'the winner'} lower "
                        "their die  (B)", can_b, lambda: self.act(ryo.LowerWinner()), hot=True)

    def _face_buttons(self, c: Canvas, model: ClientView, state: ryo.State, me: int | None, seat: int, i: int,
                      x: float, y: float, size: float, asking: bool) -> None:
        if me is None or seat != me or not asking:
            return
        f = self.f
        if state.phase == "choice" and state.chooser == me:
            ok = i in ryo.raisable(state, me)
            if i == 0:
                self.text(x - size / 2 - f * 0.6, y + size / 2 + f * 1.0, "(a)", 0.9, AMBER, ax="right", bold=True)
            self.button(c, f"raise{i}", Rect(x, y + size / 2 + f * 1.0, size, f * 1.5), "+1", ok,
                        partial(self.act, ryo.RaiseFace(i)), size=0.75, hot=ok)
        elif state.phase == "lower" and state.round_winner == me:
            ok = i in ryo.lowerable(state, me)
            if i == 0:
                self.text(x - size / 2 - f * 0.6, y - size / 2 - f * 1.9, "drop:", 0.85, AMBER, ax="right", bold=True)
            self.button(c, f"lower{i}", Rect(x, y - size / 2 - f * 1.9, size, f * 1.5), "−1", ok,
                        partial(self.act, ryo.LowerFace(i)), size=0.8, hot=ok)

    def _draw_builder(self, c: Canvas, model: ClientView, state: ryo.State, me: int) -> None:
        self.vm.builder(model, state)
        f = self.f
        br = self.board_rect
        s = state.settings
        total = sum(self.faces)
        size = min(f * 6, (br.w - f * 6) / 6 - f * 1.2)
        gap = f * 1.2
        x0 = br.x - (6 * size + 5 * gap) / 2 + size / 2
        y = br.y + f * 2
        self.text(br.x, br.top - f * 1.4, f"Build your die for game {state.game}", 1.5, WHITE, bold=True)
        left = s.budget - total
        colour = GREEN if left == 0 else YELLOW if left > 0 else RED
        self.text(br.x, br.top - f * 3.6, f"total {total} / {s.budget}   ({left} left)     each face 0–{s.max_face}",
                  1.2, colour, bold=True)
        for i, v in enumerate(self.faces):
            x = x0 + i * (size + gap)
            self.die(c, x, y, size, v, body=IVORY)
            if i == self.sel:
                c.ring(x, y, size, size, 3, (255, 215, 60, 255), radius=size * 0.18)
            self.text(x, y - size / 2 - f * 4.2, f"face {i + 1}: {v}", 0.9, WHITE if i == self.sel else DIM, bold=i == self.sel)
            up = self.vm.can_raise(state, me, i, +1)
            self.button(c, f"plus{i}", Rect(x, y + size / 2 + f * 1.5, size * 0.8, f * 2), "+", up,
                        partial(self.change, i, +1), size=1.4)
            self.button(c, f"minus{i}", Rect(x, y - size / 2 - f * 1.6, size * 0.8, f * 2), "−", v > 0,
                        partial(self.change, i, -1), size=1.4)
            self.target(("face", i), Rect(x, y, size, size).contains,
                        partial(self._select, i))
        valid = self.vm.valid(state)
        self.button(c, "build", Rect(br.x, br.bottom + f * 1.8, f * 18, f * 2.6), "Build this die  (Enter)", valid,
                    self.build, size=1.1, hot=True)
        prev = [d for d in state.previous if d is not None]
        if prev:
            self.text(br.x, br.bottom + f * 4.4, "last game: " + "   ".join(
                f"{self.pname(model, p)} {list(d)}" for p, d in enumerate(state.previous) if d is not None), 0.85, DIM)
        if isinstance(self.vm.rejected_now(time.time_ns()), ryo.BuildDie):
            c.ring(br.x, br.bottom + f * 1.8, f * 14, f * 2.6, 3, RED, radius=f * 0.6)

    def _select(self, i: int) -> None:
        self.app.note_input()
        self.vm.select(i)

    # ------------------------------------------------------------------ keys

    def game_key(self, symbol: int, state: ryo.State, me: int | None) -> bool:
        if state.phase == "build":
            if symbol in FACE_KEYS:
                self._select(FACE_KEYS[symbol])
                return True
            if symbol in (key.UP, key.PLUS, key.EQUAL, key.NUM_ADD):
                self.change(self.sel, +1)
                return True
            if symbol in (key.DOWN, key.MINUS, key.NUM_SUBTRACT):
                self.change(self.sel, -1)
                return True
            if symbol in (key.LEFT, key.RIGHT):
                self._select((self.sel + (1 if symbol == key.RIGHT else -1)) % 6)
                return True
            if symbol in (key.ENTER, key.RETURN, key.NUM_ENTER):
                self.build()
                return True
        if state.phase in ("choice", "lower") and self.vm.deciding(time.time_ns()):
            return False  # the rolls that led here are still being shown
        if state.phase == "choice" and me is not None and state.chooser == me:
            if symbol in FACE_KEYS:
                self.act(ryo.RaiseFace(FACE_KEYS[symbol]))
                return True
            if symbol == key.B:
                self.act(ryo.LowerWinner())
                return True
        if state.phase == "lower" and me is not None and state.round_winner == me and symbol in FACE_KEYS:
            self.act(ryo.LowerFace(FACE_KEYS[symbol]))
            return True
        return False

    def describe(self) -> dict[str, object]:
        d = super().describe()
        model, state = self._model()
        if state is not None:
            d.update(builder=list(self.faces), dice=[None if x is None else list(x) for x in state.dice],
                     built=list(state.built), tally={"rolls": list(state.roll_wins), "rounds": list(state.round_wins),
                                                     "games": list(state.game_wins)})
        return d
