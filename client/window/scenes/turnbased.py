"""What the three turn-based scenes (Takeaway, Sequence, Roll Your Own) share.

How this works
--------------
A ``TurnBasedScene`` draws, around the game's own board:

- the *turn banner* across the top: amber with "YOUR TURN" and what you may do when you are to
  act, slate blue with "<name>'s turn — ..." otherwise ("WATCHING" when spectating), so whose
  turn it is is always obvious; with the ``turn_timer_s`` setting on, a shrinking bar along its
  bottom edge and "12 s" at its right count down the time left to act (``turn_clock``);
- the *player list* on the right: a colour swatch and mark per seat, the name ("you"), a score line
  and a ▶ on everyone who is to act; a game adds its own detail under each row (claimed dice,
  a die and its odds);
- the *message line* (a refused move in red with its reason, an announcement in yellow), the
  *pending line* ("waiting for the relay") while an own move is unanswered, and the key hints;
- the *overlays*: connecting / waiting for players / error, and a game's result band.

Every frame ``update`` reads the session's ``ClientModel``; ``model.state()`` is the predicted state
(the confirmed view plus your own unanswered moves), so a move made by a click in this frame is
drawn by this frame. When what is drawn changed (model version, hover, window size, a message, an
animation tick) the whole picture is rebuilt: one blended ``Mesh`` for the shapes (see
``draw2d.Canvas``) and labels from a pool, reused frame to frame. Turn-based boards change a few
times a second, so this is cheap.

A game scene implements ``board`` (draw into the board rectangle, register click targets and
buttons), ``acting`` (who is to act), ``prompt`` (what you may do / what they are doing),
``score_text``/``row_detail``, ``hints`` and optionally ``on_event`` (announcements),
``animating`` and ``key``. Moves go through ``act``: predicted now, published in the background;
a local refusal or a relay bounce shows its reason and marks the spot (``rejected``) in red while
the prediction is undone.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

import pyglet
from pyglet.window import key, mouse

from protocol.rules.base import Rejected
from client.window.cards import Layer, label
from client.window.draw2d import Canvas
from client.window.layout import Rect
from client.window.mesh import Mesh
from client.window.scenes.base import Scene, newer
from client.window import texts

NS = 1_000_000_000
MESSAGE_S = 3.5
REJECT_S = 2.5
RESULTS_AFTER_S = 3.0

#: one colour and one mark per seat (the mark tells seats apart without colour)
SEAT_COLOURS: tuple[tuple[int, int, int, int], ...] = (
    (70, 200, 110, 255), (80, 150, 255, 255), (240, 90, 80, 255), (240, 190, 60, 255),
    (190, 110, 240, 255), (80, 210, 210, 255), (240, 140, 200, 255), (170, 170, 170, 255))
SEAT_MARKS = ("●", "■", "▲", "◆", "★", "✚", "♥", "♣")

WHITE = (255, 255, 255, 255)
DIM = (200, 210, 220, 255)
AMBER = (255, 176, 0, 255)
RED = (235, 60, 55, 255)
YELLOW = (255, 225, 110, 255)
GREEN = (90, 230, 120, 255)
PANEL = (24, 30, 40, 235)

#: the public events that start the wait for a player's move, per game (the turn timer counts from
#: the local receive time of the latest of them; see ``turn_clock``)
TIMER_EVENTS = {
    "takeaway": ("turn_started",),
    "sequence": ("turn_started", "dice_rolled"),
    "ryo": ("build_started", "choice_started", "lower_chosen"),
}

REASONS = {
    "not_your_turn": "it is not your turn",
    "locked": "that Blink is locked",
    "no_such_cell": "there is no Blink there",
    "already_rerolled": "one re-roll per turn",
    "reroll_used": "your once-per-game re-roll is spent",
    "wrong_phase": "not now",
    "spectator": "spectators only watch",
    "game_over": "the game is over",
}


def reason_text(code: str, detail: str = "") -> str:
    if code in REASONS:
        return REASONS[code]
    if code in texts.REASONS:
        return texts.reason_text(code)
    return detail or code.replace("_", " ")


@dataclass
class Button:
    id: str
    rect: Rect
    text: str
    enabled: bool
    action: Callable[[], Any] | None = None


class TurnBasedScene(Scene):
    name = "turnbased"
    game = ""
    clear_colour = (0.09, 0.11, 0.15, 1.0)

    def __init__(self, app: Any) -> None:
        super().__init__(app)
        self.l_board = Layer(1)
        self.l_over = Layer(4)
        self.mesh = Mesh(self.batch, self.l_board.mesh, blend=True)
        self.over_mesh = Mesh(self.batch, self.l_over.mesh, blend=True)
        self._pool: dict[bool, list[pyglet.text.Label]] = {False: [], True: []}
        self._used: dict[bool, int] = {False: 0, True: 0}
        self.mouse = (-1.0, -1.0)
        self.buttons: list[Button] = []
        self.targets: list[tuple[Any, Callable[[float, float], bool], Callable[[], Any] | None]] = []
        self.hover: Any = None
        self.message = ("", 0, RED)
        self.rejected: tuple[Any, int] | None = None  # (action, start ns): marked in red on the board
        self.esc_at = 0
        self.over_at: int | None = None
        self._key: Any = None
        self._local = 0
        self._last_bounce: Any = None
        self._last_event: Any = None
        self._seen_game = -1
        self.banner = ""
        self.prompt_text = ""
        self.clock_left: float | None = None  # seconds left on the turn timer (None: no timer running)
        self._clock: tuple[Any, int, int] | None = None  # (timer id, confirmed seq when first seen, prev seq)
        self._clock_seq = -1
        self.timer_bar: tuple[Rect, tuple[int, int, int, int]] | None = None  # the countdown bar as drawn
        self.resize(*app.size)

    # ------------------------------------------------------------------ layout

    def resize(self, width: int, height: int) -> None:
        self.w, self.h = max(320, width), max(240, height)
        self.f = f = max(9.0, min(15.0, self.h / 50))
        self.banner_rect = Rect(self.w / 2, self.h - f * 2.2, self.w, f * 4.4)
        side_w = max(f * 17, min(self.w * 0.3, f * 26))
        bottom = f * 5.6
        top = self.h - f * 4.4
        self.side_rect = Rect(self.w - side_w / 2 - f * 0.5, (top + bottom) / 2, side_w, top - bottom - f)
        bw = self.w - side_w - f * 2
        self.board_rect = Rect(f * 0.5 + bw / 2, (top + bottom) / 2, bw, top - bottom - f)
        self.message_y = f * 4.3
        self.pending_y = f * 2.7
        self.hint_y = f * 1.1
        self._key = None

    # ------------------------------------------------------------------ drawing helpers

    def text(self, x: float, y: float, s: str, size: float = 1.0, colour: tuple[int, int, int, int] = WHITE,
             ax: str = "center", ay: str = "center", bold: bool = False, over: bool = False,
             max_w: float | None = None) -> pyglet.text.Label:
        """A label for this picture (``size`` is relative to the base font); ``max_w`` shrinks the
        font until the text fits that width."""
        pool = self._pool[over]
        i = self._used[over]
        self._used[over] = i + 1
        if i >= len(pool):
            layer = self.l_over if over else self.l_board
            pool.append(label(self.batch, layer.text, 10, WHITE, "center", "center"))
        lbl = pool[i]
        fs = round(max(6.0, self.f * size), 1)
        weight = "bold" if bold else "normal"
        if (lbl.text, lbl.font_size, lbl.weight, lbl.anchor_x, lbl.anchor_y) != (s, fs, weight, ax, ay):
            lbl.begin_update()
            lbl.text = s
            lbl.font_size = fs
            lbl.weight = weight
            lbl.anchor_x = ax
            lbl.anchor_y = ay
            lbl.end_update()
        if max_w is not None and s:
            for _ in range(4):
                if lbl.content_width <= max_w or lbl.font_size <= 7:
                    break
                lbl.font_size = round(max(6.0, lbl.font_size * max_w / lbl.content_width * 0.97), 1)
        if tuple(lbl.color) != colour:
            lbl.color = colour
        if lbl.position != (x, y, 0):
            lbl.position = (x, y, 0)
        return lbl

    def button(self, c: Canvas, id: str, rect: Rect, text: str, enabled: bool, action: Callable[[], Any] | None,
               size: float = 1.0, hot: bool = False) -> None:
        hovered = enabled and rect.contains(*self.mouse)
        bg = (60, 70, 85, 255) if not enabled else ((230, 160, 30, 255) if hot else (45, 110, 190, 255))
        if hovered:
            bg = tuple(min(255, v + 35) for v in bg[:3]) + (255,)  # type: ignore[assignment]
        c.rect(rect.x, rect.y, rect.w, rect.h, bg, radius=min(rect.h / 2, self.f * 0.6))
        if hovered:
            c.ring(rect.x, rect.y, rect.w, rect.h, 2, WHITE, radius=min(rect.h / 2, self.f * 0.6))
        self.text(rect.x, rect.y, text, size, WHITE if enabled else (150, 155, 165, 255), bold=enabled,
                  max_w=rect.w - self.f * 0.6)
        self.buttons.append(Button(id, rect, text, enabled, action))

    def target(self, id: Any, hit: Callable[[float, float], bool], action: Callable[[], Any] | None) -> None:
        """A clickable board spot (registered while drawing, tested on clicks and for the hover)."""
        self.targets.append((id, hit, action))

    # ------------------------------------------------------------------ what a game says

    def acting(self, state: Any) -> list[int]:
        """Seats that are to act now."""
        return []

    def prompt(self, model: Any, state: Any, me: int | None) -> tuple[str, str]:
        """(what you may do when you act, what the others are doing) as short lines."""
        return "", ""

    def score_text(self, state: Any, seat: int) -> str:
        return ""

    def idle_banner(self, state: Any) -> str:
        """The banner when no player is to act (the relay is rolling, say)."""
        return "waiting for the relay"

    def row_detail(self, c: Canvas, model: Any, state: Any, seat: int, rect: Rect) -> None:
        """Draw a game's own detail in a player row's lower part."""

    def row_lines(self, state: Any) -> float:
        """How tall a player row is, in base-font lines."""
        return 3.2

    def seat_colour(self, state: Any, seat: int) -> tuple[int, int, int, int]:
        return SEAT_COLOURS[seat % len(SEAT_COLOURS)]

    def seat_mark(self, state: Any, seat: int) -> str:
        return SEAT_MARKS[seat % len(SEAT_MARKS)]

    def board(self, c: Canvas, model: Any, state: Any, me: int | None, now_ns: int) -> None:
        """Draw the game's board into ``self.board_rect``."""

    def hints(self, state: Any, me: int | None) -> str:
        return "Esc  menu"

    def animating(self, state: Any, now_ns: int) -> Any:
        """A value that changes while something animates (the picture is rebuilt when it does)."""
        return None

    def on_event(self, ev: Any, model: Any, state: Any, now_ns: int) -> None:
        """A public event arrived (announcements)."""

    def game_key(self, symbol: int, state: Any, me: int | None) -> bool:
        return False

    def result_line(self, model: Any, state: Any) -> str:
        return ""

    # ------------------------------------------------------------------ frame

    def enter(self) -> None:
        self._key = None

    def _model(self) -> tuple[Any, Any]:
        model = self.app.session.model
        state = model.state() if model is not None else None
        return model, state

    def me(self) -> int | None:
        model = self.app.session.model
        if model is None or model.spectating:
            return None
        return model.seat

    def update(self, now_ns: int) -> None:
        session = self.app.session
        model, state = self._model()
        if model is not None and model.game and model.game != self.game:
            self.app.goto("table")  # a match of another game (joined or watched by code)
            return
        if model is not None and state is not None:
            self._watch(model, state, now_ns)
        msg_live = bool(self.message[0]) and now_ns - self.message[1] < MESSAGE_S * NS
        rej_live = self.rejected is not None and now_ns - self.rejected[1] < REJECT_S * NS
        pending = len(model.predictor.pending) if model is not None and model.predictor is not None else 0
        clock = self.turn_clock(model, now_ns)
        self.clock_left = None if clock is None else clock[0]
        key_now = (None if model is None else model.version, id(state), session.status, session.message,
                   None if clock is None else round(clock[0] * 8),
                   self.w, self.h, self.hover, self.mouse if self.buttons else None, self._local, msg_live, rej_live,
                   pending, self.animating(state, now_ns) if state is not None else None,
                   (model.match_state or {}).get("status") if model is not None else None)
        if key_now != self._key:
            self._key = key_now
            if not msg_live and self.message[0]:
                self.message = ("", 0, RED)
            if not rej_live:
                self.rejected = None
            self._rebuild(model, state, now_ns)
            self.display_version += 1
        if self.over_at is not None and now_ns - self.over_at > RESULTS_AFTER_S * NS and not (model and model.spectating):
            self.app.goto("results")

    def _watch(self, model: Any, state: Any, now_ns: int) -> None:
        if model.predictor is not None and model.predictor.game != self._seen_game:
            self._seen_game = model.predictor.game
            self.over_at = None
        new_b = newer(model.bounces, self._last_bounce)
        if model.bounces:
            self._last_bounce = model.bounces[-1]
        for b in new_b:
            self.refused(b.action, b.code, b.detail, now_ns, by_relay=True)
        new_e = newer(model.events, self._last_event)
        if model.events:
            self._last_event = model.events[-1]
        for ev in new_e:
            self.on_event(ev, model, state, now_ns)
        if self.over_at is None and (model.match_state or {}).get("status") == "over":
            self.over_at = now_ns

    def turn_clock(self, model: Any, now_ns: int) -> tuple[float, float] | None:
        """(seconds left, seconds in all) on the running turn timer, or None when there is none.

        The game's rules say which timed wait the confirmed state is in (``timers``: the timer with
        a delay); when that wait is first seen, its start is the local receive time of the latest
        event that starts a wait (``TIMER_EVENTS``) among those that came with it, else the receive
        time of the state update itself."""
        if model is None or model.predictor is None or model.rules is None:
            return None
        try:
            total = float((model.settings or {}).get("turn_timer_s") or 0)
        except (TypeError, ValueError):
            return None
        state = model.predictor.confirmed
        if total <= 0 or state is None or (model.match_state or {}).get("status") not in (None, "playing"):
            self._clock = None
            return None
        name = None
        try:
            for t in model.rules.timers(state):
                if t.delay_ns > 0:
                    name = t.name
                    break
        except Exception:  # a view without what the rules need: no countdown rather than a crash
            name = None
        seq = model.predictor.confirmed_seq
        if name is None:
            self._clock = None
            self._clock_seq = seq
            return None
        ident = (model.predictor.game, name)
        if self._clock is None or self._clock[0] != ident:
            self._clock = (ident, seq, self._clock_seq if self._clock is None else self._clock[1])
        self._clock_seq = seq
        _, key_seq, prev_seq = self._clock
        start = None
        kinds = TIMER_EVENTS.get(self.game, ())
        for ev in reversed(model.events):
            if ev.seq <= prev_seq:
                break
            if ev.seq <= key_seq and ev.type in kinds:
                start = model.seq_received_ns.get(ev.seq)
                if start is not None:
                    break
        if start is None:
            start = model.seq_received_ns.get(key_seq, now_ns)
        left = total - (now_ns - start) / NS
        return max(0.0, min(total, left)), total

    def refused(self, action: Any, code: str, detail: str, now_ns: int, by_relay: bool = False) -> None:
        why = reason_text(code, detail)
        text = f"✗ the relay refused your move: {why} — it has been undone" if by_relay else f"✗ {why}"
        self.say(text, now_ns, RED)
        self.rejected = (action, now_ns)
        self.app.sounds.play("bounce")

    def say(self, text: str, now_ns: int | None = None, colour: tuple[int, int, int, int] = YELLOW) -> None:
        self.message = (text, now_ns if now_ns is not None else time.time_ns(), colour)
        self._local += 1

    def _rebuild(self, model: Any, state: Any, now_ns: int) -> None:
        self._used = {False: 0, True: 0}
        self.buttons = []
        self.targets = []
        c = Canvas()
        over = Canvas()
        me = self.me()
        f = self.f
        session = self.app.session
        # the turn banner
        acting = self.acting(state) if state is not None else []
        mine, others = self.prompt(model, state, me) if state is not None else ("", "")
        names = list(model.players) if model is not None else []
        watching = model is not None and model.spectating
        game_over = state is not None and (getattr(state, "phase", "") == "over" or
                                           (model.match_state or {}).get("status") in ("between", "over"))
        br = self.banner_rect
        if state is None:
            colour, big, small = (40, 48, 62, 255), self.title(), ""
        elif game_over:
            colour, big, small = (60, 50, 90, 255), "GAME OVER", self.result_line(model, state)
        elif me is not None and me in acting:
            colour, big, small = (205, 135, 10, 255), "YOUR TURN", mine
        else:
            who = ", ".join(self.pname(model, s) for s in acting)
            colour = (38, 62, 105, 255)
            now = (f"{who}'s turn" if len(acting) == 1 else f"waiting for {who}") if acting else self.idle_banner(state)
            big = (f"WATCHING {model.match} — " if watching else "") + now
            small = others
        clock = self.turn_clock(model, now_ns) if state is not None and not game_over else None
        self.timer_bar = None
        c.rect(br.x, br.y, br.w, br.h, colour)
        self.text(f * 1.0, br.y + f * 0.85, big, 1.6, WHITE, ax="left", bold=True, max_w=self.w - f * 22)
        self.text(f * 1.0, br.y - f * 1.05, small, 1.05, (255, 250, 235, 255), ax="left",
                  max_w=self.w - f * (9 if clock is not None else 2))
        self.banner, self.prompt_text = big, small
        if clock is not None:
            left, total = clock
            frac = left / total if total > 0 else 0.0
            bar_h = f * 0.5
            by = br.bottom - bar_h / 2  # just under the banner, in the gap above the board
            c.rect(br.x, by, br.w, bar_h, (15, 18, 24, 255))
            mine_now = me is not None and me in acting
            bar_c = RED if left < min(5.0, total * 0.34) else ((255, 245, 215, 255) if mine_now else (120, 170, 255, 255))
            if frac > 0:
                c.rect(br.left + br.w * frac / 2, by, br.w * frac, bar_h, bar_c)
            self.timer_bar = (Rect(br.left + br.w * frac / 2, by, br.w * frac, bar_h), bar_c)
            secs = f"{int(left + 0.999)} s"
            # on the prompt line's right end (the top right corner is the network HUD's)
            self.text(self.w - f * 1.0, br.y - f * 1.0, secs, 1.3,
                      (255, 215, 200, 255) if left < 5 else WHITE, ax="right", bold=True)
        # the player list
        sr = self.side_rect
        c.rect(sr.x, sr.y, sr.w, sr.h, PANEL, radius=f * 0.8)
        ty = sr.top - f * 1.2
        self.text(sr.left + f, ty, "Players", 1.05, DIM, ax="left", bold=True)
        if model is not None and state is not None:
            n = getattr(state, "players", len(names))
            rh = min(self.row_lines(state) * f, (sr.h - f * 2.6) / max(1, n))
            for seat in range(n):
                top = ty - f * 1.1 - seat * rh
                row = Rect(sr.x, top - rh / 2, sr.w - f, rh - f * 0.3)
                if seat in acting:
                    c.rect(row.x, row.y, row.w, row.h, (70, 60, 30, 255) if seat == me else (40, 55, 80, 255),
                           radius=f * 0.5)
                    c.ring(row.x, row.y, row.w, row.h, 2, AMBER if seat == me else (120, 170, 255, 255), radius=f * 0.5)
                sc = self.seat_colour(state, seat)
                ly = row.top - f * 1.0
                c.circle(row.left + f * 1.1, ly, f * 0.7, sc)
                self.text(row.left + f * 1.1, ly, self.seat_mark(state, seat), 0.8, (20, 20, 20, 255), bold=True)
                arrow = "▶ " if seat in acting and not game_over else ""
                nm = (names[seat] if seat < len(names) else f"seat {seat + 1}") + ("  (you)" if seat == me else "")
                self.text(row.left + f * 2.2, ly, arrow + nm, 1.0, WHITE, ax="left", bold=seat in acting)
                self.text(row.right - f * 0.5, ly, self.score_text(state, seat), 0.95, YELLOW, ax="right", bold=True)
                self.row_detail(c, model, state, seat, Rect(row.x, (row.bottom + ly - f * 0.8) / 2, row.w,
                                                            max(f, ly - f * 0.8 - row.bottom)))
        # the board, or what is going on instead
        if state is not None:
            self.board(c, model, state, me, now_ns)
        else:
            self._status_overlay(over, model, session)
        # bottom lines
        text, _, colour_m = self.message
        self.text(self.board_rect.x, self.message_y, text, 1.1, colour_m, bold=True, max_w=self.board_rect.w)
        pending = model.predictor.pending if model is not None and model.predictor is not None else []
        if pending:
            self.text(self.board_rect.x, self.pending_y, "PENDING — your move is shown; waiting for the relay to confirm it",
                      0.95, AMBER)
        hint = "Esc  menu" if state is None else (
            "spectating a match: read-only     Esc  menu" if watching else self.hints(state, me))
        self.text(self.w / 2, self.hint_y, hint, 0.85, DIM,
                  max_w=self.w - f)
        if game_over and state is not None:
            self._result_overlay(over, model, state)
        self.mesh.set(c.t)
        self.over_mesh.set(over.t)
        for o in (False, True):
            for lbl in self._pool[o][self._used[o]:]:
                if lbl.text:
                    lbl.text = ""

    def title(self) -> str:
        return {"takeaway": "Takeaway Dice", "sequence": "Sequence Dice", "ryo": "Roll Your Own"}.get(self.game, self.game)

    def _status_overlay(self, over: Canvas, model: Any, session: Any) -> None:
        f = self.f
        if session.status == "error":
            big, sub = "Cannot play", session.message
        elif session.status == "waiting" and model is not None and model.match:
            big = f"Match code  {model.match}"
            sub = (f"waiting for players — they run:  blink play --server {session.server_url} "
                   f"--match {model.match}")
        else:
            big, sub = self.title(), session.message or "connecting…"
        over.rect(self.w / 2, self.h / 2, self.w * 0.9, f * 8, (10, 14, 20, 230), radius=f)
        self.text(self.w / 2, self.h / 2 + f * 1.2, big, 2.4, WHITE, bold=True, over=True)
        self.text(self.w / 2, self.h / 2 - f * 2.0, sub, 1.0, DIM, over=True)

    def _result_overlay(self, over: Canvas, model: Any, state: Any) -> None:
        f = self.f
        br = self.board_rect
        ms = model.match_state or {}
        line = self.result_line(model, state)
        wins = list(ms.get("wins") or [])
        names = list(model.players)
        tally = "   ".join(f"{names[i] if i < len(names) else i}: {w}" for i, w in enumerate(wins))
        over.rect(br.x, br.y, br.w * 0.9, f * 7.5, (10, 14, 20, 225), radius=f)
        over.ring(br.x, br.y, br.w * 0.9, f * 7.5, 2, YELLOW, radius=f)
        self.text(br.x, br.y + f * 1.6, line or "Game over", 1.9, WHITE, bold=True, over=True)
        tail = "match over — results follow" if ms.get("status") == "over" else "next game starting…"
        self.text(br.x, br.y - f * 1.6, f"games won  {tally}   ·   {tail}", 1.0, DIM, over=True)

    def who(self, model: Any, data: dict[str, Any]) -> str:
        """The player an event is about (events carry ``seat`` and the name in ``player``)."""
        seat = data.get("seat")
        if type(seat) is int:
            return self.pname(model, seat)
        return str(data.get("player", "?"))

    def pname(self, model: Any, seat: Any) -> str:
        if type(seat) is not int:
            return str(seat)
        names = list(model.players) if model is not None else []
        if 0 <= seat < len(names):
            return "you" if seat == self.me() else names[seat]
        return f"seat {seat + 1}"

    # ------------------------------------------------------------------ input -> actions

    def act(self, action: Any) -> Any:
        """Play ``action``: predicted now (this frame draws it), published in the background."""
        model = self.app.session.model
        now = time.time_ns()
        self.app.note_input()
        self._local += 1
        if model is None or model.spectating:
            self.say("✗ spectators only watch", now, RED)
            return None
        result = self.app.session.act_now(action)
        if isinstance(result, Rejected):
            self.refused(action, result.code, result.detail, now)
        else:
            self.app.sounds.play("land")
        return result

    def on_mouse_motion(self, x: int, y: int) -> None:
        self.mouse = (float(x), float(y))
        hov = None
        for id, hit, _ in self.targets:
            if hit(x, y):
                hov = id
                break
        if hov != self.hover:
            self.hover = hov
            self.app.note_input()

    def on_mouse_press(self, x: int, y: int, button: int, modifiers: int) -> bool:
        if button != mouse.LEFT:
            return False
        self.mouse = (float(x), float(y))
        for b in self.buttons:
            if b.rect.contains(x, y):
                if b.enabled and b.action is not None:
                    b.action()
                elif not b.enabled:
                    self.say(f"“{b.text}” is not possible now", None, (255, 200, 120, 255))
                    self.app.note_input()
                return True
        for id, hit, action in self.targets:
            if hit(x, y):
                if action is not None:
                    action()
                return True
        return False

    def on_key_press(self, symbol: int, modifiers: int) -> bool:
        if symbol == key.ESCAPE:
            model = self.app.session.model
            running = (model is not None and not model.spectating and
                       (model.match_state or {}).get("status") in ("playing", "between"))
            now = time.time_ns()
            if running and now - self.esc_at > 2 * NS:
                self.esc_at = now
                self.say("press Esc again to leave this match (you forfeit it)", now)
                self.app.note_input()
            else:
                self.app.back_to_menu()
            return True
        model, state = self._model()
        if symbol == key.R and self.app.session.player is not None and self.app.session.player.match_over():
            self.app.goto("results")
            return True
        if state is not None:
            return self.game_key(symbol, state, self.me())
        return False

    def describe(self) -> dict[str, Any]:
        model, state = self._model()
        pending = model.predictor.pending if model is not None and model.predictor is not None else []
        return {"scene": self.name, "game": self.game, "banner": self.banner, "prompt": self.prompt_text,
                "message": self.message[0], "pending": len(pending),
                "timer": None if self.clock_left is None else round(self.clock_left, 2),
                "phase": getattr(state, "phase", None),
                "buttons": {b.id: b.enabled for b in self.buttons}}
