"""Roll Your Own: the die builder, the revealed dice with the exact odds, the rolls, the tally, and
the round's (a)/(b) choice and the winner's face choice as prompts.

How this works
--------------
While building, your six faces are shown as dice with a + above and a − below each (or keys 1–6
to pick a face, Up/Down to change it, Enter to build): a + is greyed when the budget is used up or
the face is at ``max_face``, a − at 0, and the total against the budget is always shown; Build is
enabled only for a valid die (``is_valid_build``). Builds are secret: until all are in, other
players show "building…" or "built ✓".

Once the dice are revealed every die is shown face by face with its total, and next to each
opponent the exact chance your die beats theirs in one roll (``beat_probability``: ties count
as not beating). The relay rolls a whole round in an instant, so the window replays the
``dice_rolled`` events one by one: each roll tumbles briefly, then shows every player's face with
the winner's ringed. The player list keeps the tally: rolls in this round, rounds in this game,
games in the match.

At the end of a round the loser is asked to choose (a) raise one face of their die by one — a +1
over each face that may go up — or (b) make the winner lower theirs (button B); after (b) the
winner chooses which face drops, with a −1 under each face that may go down.
"""

from __future__ import annotations

import random
from typing import Any

from pyglet.window import key

from protocol.rules import roll_your_own as ryo
from client.window.draw2d import Canvas
from client.window.layout import Rect
from client.window.scenes.turnbased import AMBER, DIM, GREEN, RED, TurnBasedScene, WHITE, YELLOW

NS = 1_000_000_000
TUMBLE_S = 0.25
SHOW_S = 0.4
QUEUE_MAX = 3
IVORY = (244, 238, 220, 255)
FACE_KEYS = {key._1: 0, key._2: 1, key._3: 2, key._4: 3, key._5: 4, key._6: 5,
             key.NUM_1: 0, key.NUM_2: 1, key.NUM_3: 2, key.NUM_4: 3, key.NUM_5: 4, key.NUM_6: 5}


class RyoScene(TurnBasedScene):
    name = "ryo"
    game = "ryo"

    def __init__(self, app: Any) -> None:
        self.faces: list[int] = []
        self.sel = 0
        self._build_for: tuple[int, int] | None = None  # (predictor game, ryo game) the builder was made for
        self._queue: list[dict[str, Any]] = []  # dice_rolled events to replay
        self._showing: tuple[dict[str, Any], int] | None = None  # (event, start ns)
        super().__init__(app)

    # ------------------------------------------------------------------ what is going on

    def acting(self, state: Any) -> list[int]:
        if state.phase == "build":
            return [p for p in range(state.players) if not state.built[p]]
        if state.phase == "choice" and state.chooser is not None:
            return [state.chooser]
        if state.phase == "lower" and state.round_winner is not None:
            return [state.round_winner]
        return []

    def prompt(self, model: Any, state: Any, me: int | None) -> tuple[str, str]:
        s = state.settings
        if state.phase == "build":
            return (f"build your die: six faces, 0–{s.max_face} pips each, at most {s.budget} in all, then Build"
                    f" (game {state.game})", "building their secret dice…")
        if state.phase in ("rolling", "rolloff"):
            return "", "the relay rolls every die at once…"
        if state.phase == "choice":
            w = self.pname(model, state.round_winner) if state.round_winner is not None else "the winner"
            return (f"you lost the round — (a) raise one face by 1: click +1 or keys 1–6   ·   (b) make {w} lower "
                    "their die: B", "lost the round and chooses (a) raise or (b) lower the winner")
        if state.phase == "lower":
            return ("you won the round, and the loser chose (b): pick one of your faces to drop by 1 "
                    "(click −1, or 1–6)", "chooses which face of their die drops by 1")
        return "", ""

    def idle_banner(self, state: Any) -> str:
        return "ROLLING — every die at once" if state.phase in ("rolling", "rolloff") else "waiting for the relay"

    def score_text(self, state: Any, seat: int) -> str:
        if not state.game_wins:
            return ""
        return f"games {state.game_wins[seat]}/{state.settings.games_per_match}"

    def row_lines(self, state: Any) -> float:
        return 3.4

    def row_detail(self, c: Canvas, model: Any, state: Any, seat: int, rect: Rect) -> None:
        s = state.settings
        if not state.roll_wins:
            return
        line = (f"rolls {state.roll_wins[seat]}/{s.rolls_per_round}   rounds {state.round_wins[seat]}/"
                f"{s.rounds_per_game}")
        if state.phase == "build":
            line += "   ·   " + ("built ✓" if state.built[seat] else "building…")
        self.text(rect.left + self.f * 2.2, rect.y, line, 0.82, DIM, ax="left")

    def hints(self, state: Any, me: int | None) -> str:
        if state.phase == "build":
            return "1–6  pick a face     ↑ ↓  or  + −  change it     Enter  build     Esc  menu"
        if state.phase in ("choice", "lower"):
            return "1–6  choose a face     B  make the winner lower (choice b)     Esc  menu"
        return "first to win a roll-count wins the round · rounds win the game · games win the match     Esc  menu"

    def animating(self, state: Any, now_ns: int) -> Any:
        self._advance(now_ns)
        if self._showing is None:
            return None
        ev, t0 = self._showing
        if now_ns - t0 < TUMBLE_S * NS:
            return ("tumble", id(ev), now_ns // (NS // 14))
        return ("show", id(ev))

    def _advance(self, now_ns: int) -> None:
        if self._showing is not None and now_ns - self._showing[1] < (TUMBLE_S + SHOW_S) * NS:
            return
        if self._queue:
            if len(self._queue) > QUEUE_MAX:
                del self._queue[: len(self._queue) - QUEUE_MAX]
            self._showing = (self._queue.pop(0), now_ns)
        elif self._showing is not None and now_ns - self._showing[1] > 4 * NS:
            self._showing = None

    def on_event(self, ev: Any, model: Any, state: Any, now_ns: int) -> None:
        d = ev.data
        if ev.type == "dice_rolled":
            self._queue.append(dict(d))
        elif ev.type == "round_won":
            self.say(f"{self.who(model, d)} won round {d.get('round')}", now_ns, YELLOW)
        elif ev.type == "game_won":
            self.say(f"{self.who(model, d)} won game {d.get('ryo_game')} — new dice next", now_ns,
                     YELLOW)
        elif ev.type == "roll_tied" and d.get("ignored"):
            pass
        elif ev.type == "raised" or ev.type == "face_raised":
            self.say(f"{self.who(model, d)} raised a face", now_ns, (200, 220, 255, 255))
        elif ev.type == "no_choice":
            self.say("no face can change: next round", now_ns, (200, 220, 255, 255))
        elif ev.type == "lot_drawn":
            self.say(f"identical dice: {self.who(model, d)} wins by lot", now_ns)

    def result_line(self, model: Any, state: Any) -> str:
        if state.phase != "over" or state.winner is None:
            return ""
        return "You win the match" if state.winner == self.me() else f"{self.pname(model, state.winner)} wins the match"

    # ------------------------------------------------------------------ the builder

    def _builder(self, model: Any, state: Any) -> None:
        k = (model.predictor.game if model.predictor else 0, state.game)
        if k != self._build_for or len(self.faces) != ryo.FACES:
            self._build_for = k
            try:
                self.faces = list(ryo.default_build(state.settings, None))
            except ValueError:
                self.faces = [0] * ryo.FACES
            self.sel = 0

    def change(self, i: int, delta: int) -> None:
        model, state = self._model()
        if state is None or state.phase != "build":
            return
        self._builder(model, state)
        s = state.settings
        v = self.faces[i] + delta
        self.app.note_input()
        self.sel = i
        self._local += 1
        if v < 0:
            self.say("a face cannot go below 0", None, (255, 200, 120, 255))
        elif v > s.max_face:
            self.say(f"a face cannot go above {s.max_face}", None, (255, 200, 120, 255))
        elif delta > 0 and sum(self.faces) + delta > s.budget:
            self.say(f"the budget is {s.budget}: lower another face first", None, (255, 200, 120, 255))
        else:
            self.faces[i] = v

    def build(self) -> Any:
        model, state = self._model()
        if state is None:
            return None
        return self.act(ryo.BuildDie(tuple(self.faces)))

    # ------------------------------------------------------------------ the board

    def board(self, c: Canvas, model: Any, state: Any, me: int | None, now_ns: int) -> None:
        f = self.f
        br = self.board_rect
        s = state.settings
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
                    c.die(br.x + (i - 2.5) * f * 4, top - f * 5, f * 3, v, body=IVORY)
                pend = any(isinstance(p.action, ryo.BuildDie) for p in (model.predictor.pending if model.predictor else []))
                if pend:
                    self.text(br.x, top - f * 8.5, "PENDING — build sent, not yet confirmed", 1.0, AMBER, bold=True)
            return
        # revealed: every die, its total and your odds
        n = state.players
        avail = br.h - f * 11
        rh = min(f * 5.2, avail / max(1, n))
        size = min(f * 2.6, rh * 0.55, (br.w * 0.42) / 6.8)
        shown = self._shown_roll(now_ns)
        tumbling = shown is not None and shown[1]
        faces_by_seat = {}
        if shown is not None:
            for r in shown[0].get("rolls", []):
                faces_by_seat[r.get("player")] = r.get("face")
        best = max((r.get("value", 0) for r in shown[0].get("rolls", [])), default=None) if shown else None
        mydie = state.dice[me] if me is not None and me < len(state.dice) else None
        self.text(br.left + f, top, "Dice", 1.1, DIM, ax="left", bold=True)
        if mydie is not None:
            self.text(br.right - f, top, "chance your die beats theirs in one roll", 0.85, DIM, ax="right")
        for seat in range(n):
            die = state.dice[seat]
            y = top - f * 2.4 - rh * seat - size / 2
            self.text(br.left + f, y, self.pname(model, seat), 1.0, self.seat_colour(state, seat), ax="left", bold=True,
                      max_w=f * 8.2 - size / 2)
            if die is None:
                continue
            hl = faces_by_seat.get(seat) if not tumbling else None
            x0 = br.left + f * 9.8
            for i, v in enumerate(die):
                x = x0 + i * (size + f * 0.4)
                tumbling_here = False  # the die itself stays put; the big dice below tumble
                c.die(x, y, size, v, body=IVORY)
                if hl == i and not tumbling and shown is not None and any(
                        r.get("player") == seat and r.get("value") == v for r in shown[0].get("rolls", [])):
                    won = best is not None and v == best
                    c.ring(x, y, size, size, 3, GREEN if won else (150, 170, 200, 255), radius=size * 0.18)
                if not tumbling_here:
                    self.text(x, y - size / 2 - f * 0.55, str(v), 0.7, DIM)
                self._face_buttons(c, model, state, me, seat, i, x, y, size)
            self.text(x0 + 6 * (size + f * 0.4) - f * 0.2, y, f"Σ {sum(die)}", 0.95, WHITE, ax="left")
            if mydie is not None and seat != me:
                p = ryo.beat_probability(mydie, die)
                q = ryo.beat_probability(die, mydie)
                colour = GREEN if p > q else RED if p < q else YELLOW
                self.text(br.right - f, y + f * 0.6, f"you beat them {p * 100:.1f}%", 0.95, colour, ax="right",
                          bold=True)
                self.text(br.right - f, y - f * 0.7, f"they beat you {q * 100:.1f}%  ·  tie {(1 - p - q) * 100:.1f}%",
                          0.8, DIM, ax="right")
        # the latest roll, big: each rolling player's face
        if shown is not None:
            rolls = shown[0].get("rolls", [])
            big = min(f * 5, br.w / max(1, len(rolls)) / 2.2)
            by = br.bottom + f * 9.5 + big / 2
            for k, r in enumerate(rolls):
                seat = r.get("player", -1)
                bx = br.x + (k - (len(rolls) - 1) / 2) * big * 2.2
                die = state.dice[seat] if isinstance(seat, int) and 0 <= seat < len(state.dice) else None
                rng = random.Random(now_ns // (NS // 14) + 7 * k)
                v = rng.choice(die) if tumbling and die else r.get("value", 0)
                c.die(bx, by, big, v, body=IVORY)
                if not tumbling and best is not None and r.get("value") == best:
                    c.ring(bx, by, big, big, 4, GREEN, radius=big * 0.18)
                self.text(bx, by - big / 2 - f * 0.9, f"{self.pname(model, seat)}: {'…' if tumbling else v}", 1.0,
                          self.seat_colour(state, seat) if isinstance(seat, int) else WHITE, bold=True,
                          max_w=big * 2.1)
        # the latest roll, in words
        ly = br.bottom + f * 5.2
        if shown is not None and not tumbling:
            parts = []
            for r in shown[0].get("rolls", []):
                parts.append(f"{self.pname(model, r.get('player', -1))} {r.get('value')}")
            kind = "roll-off (lowest chooses)" if shown[0].get("kind") == "rolloff" else f"roll {shown[0].get('roll', 0) + 1}"
            self.text(br.x, ly, f"{kind}:  " + "   ".join(parts), 1.15, YELLOW, bold=True)
        elif tumbling:
            self.text(br.x, ly, "rolling…", 1.15, DIM, bold=True)
        self.text(br.x, ly - f * 1.6, f"game {state.game} of best-of-{2 * s.games_per_match - 1} · round {state.round}"
                  f" · first to {s.rolls_per_round} rolls wins a round, {s.rounds_per_game} rounds a game", 0.85, DIM)
        # the choice
        if state.phase == "choice" and state.chooser == me and me is not None:
            w = state.round_winner
            can_b = w is not None and bool(ryo.lowerable(state, w))
            b = Rect(br.x, br.bottom + f * 1.6, min(br.w - f * 2, f * 30), f * 2.3)
            self.button(c, "lower", b, f"(b) make {self.pname(model, w) if w is not None else 'the winner'} lower "
                        "their die  (B)", can_b, lambda: self.act(ryo.LowerWinner()), hot=True)

    def _face_buttons(self, c: Canvas, model: Any, state: Any, me: int | None, seat: int, i: int, x: float, y: float,
                      size: float) -> None:
        if me is None or seat != me:
            return
        f = self.f
        if state.phase == "choice" and state.chooser == me:
            ok = i in ryo.raisable(state, me)
            if i == 0:
                self.text(x - size / 2 - f * 0.6, y + size / 2 + f * 1.0, "(a)", 0.9, AMBER, ax="right", bold=True)
            self.button(c, f"raise{i}", Rect(x, y + size / 2 + f * 1.0, size, f * 1.5), "+1", ok,
                        (lambda i=i: self.act(ryo.RaiseFace(i))), size=0.75, hot=ok)
        elif state.phase == "lower" and state.round_winner == me:
            ok = i in ryo.lowerable(state, me)
            if i == 0:
                self.text(x - size / 2 - f * 0.6, y - size / 2 - f * 1.9, "drop:", 0.85, AMBER, ax="right", bold=True)
            self.button(c, f"lower{i}", Rect(x, y - size / 2 - f * 1.9, size, f * 1.5), "−1", ok,
                        (lambda i=i: self.act(ryo.LowerFace(i))), size=0.8, hot=ok)

    def _shown_roll(self, now_ns: int) -> tuple[dict[str, Any], bool] | None:
        if self._showing is None:
            return None
        ev, t0 = self._showing
        return ev, now_ns - t0 < TUMBLE_S * NS

    def _draw_builder(self, c: Canvas, model: Any, state: Any, me: int) -> None:
        self._builder(model, state)
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
            c.die(x, y, size, v, body=IVORY)
            if i == self.sel:
                c.ring(x, y, size, size, 3, (255, 215, 60, 255), radius=size * 0.18)
            self.text(x, y - size / 2 - f * 4.2, f"face {i + 1}: {v}", 0.9, WHITE if i == self.sel else DIM, bold=i == self.sel)
            up = v < s.max_face and total < s.budget
            self.button(c, f"plus{i}", Rect(x, y + size / 2 + f * 1.5, size * 0.8, f * 2), "+", up,
                        (lambda i=i: self.change(i, +1)), size=1.4)
            self.button(c, f"minus{i}", Rect(x, y - size / 2 - f * 1.6, size * 0.8, f * 2), "−", v > 0,
                        (lambda i=i: self.change(i, -1)), size=1.4)
            self.target(("face", i), (lambda px, py, x=x: abs(px - x) <= size / 2 and abs(py - y) <= size / 2),
                        (lambda i=i: self._select(i)))
        valid = ryo.is_valid_build(tuple(self.faces), s.budget, s.max_face)
        self.button(c, "build", Rect(br.x, br.bottom + f * 1.8, f * 18, f * 2.6), "Build this die  (Enter)", valid,
                    self.build, size=1.1, hot=True)
        prev = [d for d in state.previous if d is not None]
        if prev:
            self.text(br.x, br.bottom + f * 4.4, "last game: " + "   ".join(
                f"{self.pname(model, p)} {list(d)}" for p, d in enumerate(state.previous) if d is not None), 0.85, DIM)
        if self.rejected is not None and isinstance(self.rejected[0], ryo.BuildDie):
            c.ring(br.x, br.bottom + f * 1.8, f * 14, f * 2.6, 3, RED, radius=f * 0.6)

    def _select(self, i: int) -> None:
        self.app.note_input()
        self.sel = i
        self._local += 1

    # ------------------------------------------------------------------ keys

    def game_key(self, symbol: int, state: Any, me: int | None) -> bool:
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

    def describe(self) -> dict[str, Any]:
        d = super().describe()
        model, state = self._model()
        if state is not None:
            d.update(builder=list(self.faces), dice=[None if x is None else list(x) for x in state.dice],
                     built=list(state.built), tally={"rolls": list(state.roll_wins), "rounds": list(state.round_wins),
                                                     "games": list(state.game_wins)})
        return d
