"""The renderer the three turn-based scenes (Takeaway, Sequence, Roll Your Own) share.

How this works
--------------
What is shown is decided by the game's view-model (``client/window/viewmodels/``, pure: no
pyglet; a ``TurnViewModel`` subclass the scene's ``view_model`` makes, typed in the game's state
class like the scene: ``TakeawayScene(TurnBasedScene[takeaway.State])``). This scene draws, around
the game's own board:

- the *turn banner* across the top: amber with "YOUR TURN" and what you may do when you are to
  act, slate blue with "<name>'s turn — ..." otherwise ("WATCHING" when spectating), so whose
  turn it is is always obvious; with the ``turn_timer_s`` setting on, a shrinking bar along its
  bottom edge and "12 s" at its right count down the time left to act (``vm.turn_clock``);
- the *player list* on the right: a colour swatch and mark per seat, the name ("you"), a score line
  and a ▶ on everyone who is to act; a game adds its own detail under each row (claimed dice,
  a die and its odds);
- the *message line* (a refused move in red with its reason, an announcement in yellow), the
  *pending line* ("waiting for the relay") while an own move is unanswered, and the key hints;
- the *overlays*: connecting / waiting for players / error over the middle; a game's result in a
  strip under the board, in place of the message lines (``over_rect``), so that nothing of the
  finished board -- the winning line, anyone's dice -- is covered.

Every frame ``update`` gives the view-model the session's ``ClientModel``; ``model.state()`` is the
predicted state (the confirmed view plus your own unanswered moves), so a move made by a click in
this frame is drawn by this frame. When what is drawn changed (model version, hover, window size,
a message, an animation tick) the picture is redrawn into the drawables it already has: one
blended ``Mesh`` for the shapes (see ``draw2d.Canvas``) and labels from a pool, reused frame to
frame (a label is only touched when its text, size or place changed).

A game scene implements ``board`` (draw into the board rectangle, register click targets and
buttons), ``row_detail``/``row_lines`` and optionally ``game_key``. Moves go through ``act``:
predicted now, published in the background; a local refusal or a relay bounce shows its reason and
marks the spot (``vm.rejected_now``) in red while the prediction is undone.
"""

from __future__ import annotations

import time
from functools import partial
from dataclasses import dataclass
from typing import Callable, Generic, Iterator, TypeVar

import pyglet
from pyglet.window import key, mouse

from protocol import messages as m
from protocol.rules.base import Rejected
from client.matchstate import MatchState
from client.window import texts
from client.window.cards import FONT, Layer, label
from client.window.draw2d import Canvas
from client.window.geometry import Tris
from client.window.layout import Rect, fit_text
from client.window.mesh import Mesh
from client.window.host import SceneHost
from client.window.scenes.base import Scene
from client.window.viewmodels import (AMBER, DIM, PENDING_LINE, RED, RGBA, SOFT, WHITE, YELLOW, BannerKind,
                                      ClientView, TurnState, TurnViewModel, game_of)

S = TypeVar("S", bound=TurnState)  # the game's state, as its viewmodel's

PANEL = (24, 30, 40, 235)
WARM_BUDGET_S = 0.0015  # start-up work (glyphs) done in a quiet frame
PARTS = ("frame", "board", "over")  # the label pools (see ``__init__``)
#: Labels a part may make. The ones a picture does not use stay hidden with the layout of the
#: text they showed last (invisible labels cost the GPU next to nothing), for that text to return.
LABELS_MAX = 96
PIECES_MAX = 2000  # cached shapes (``piece``) before the cache starts afresh
#: relative font sizes the turn-based scenes draw most (``text(size=...)``), warmed ahead of use
LIKELY_SIZES = (1.0, 0.95, 0.85, 1.1, 0.8, 1.05, 0.9, 0.7, 1.3, 1.6)
#: the glyphs warmed, the most used first
WARM_CHARS = ("etaoinsrhldcumfpgwybvk ,.:0123456789—·ETAOINSRHLDCUMFPGWYBVKxjqzXJQZ()/-+%'!?…–←→↑↓▶✓✗⚠×"
              "[]{}<>=#&*;\"_|~$@^`")
#: (font size, weight) whose glyphs were rendered: fonts are shared by every scene
WARMED: set[tuple[float, str]] = set()
#: What a label was asked to show (text, size, weight, anchors, width): the same ask, the same label.
Ask = tuple[object, ...]
#: A click target: its id (what ``hover`` says), whether a point hits it, what a click does.
Target = tuple[object, Callable[[float, float], bool], Callable[[], object] | None]
BANNER_COLOURS: dict[BannerKind, RGBA] = {"idle": (40, 48, 62, 255), "over": (60, 50, 90, 255), "mine": (205, 135, 10, 255),
                  "theirs": (38, 62, 105, 255)}


def _die(x: float, y: float, size: float, value: int, body: RGBA, pip: RGBA, c: Canvas) -> None:
    c.die(x, y, size, value, body=body, pip=pip)


def _width(lbl: pyglet.text.Label, text: str) -> float:
    """How wide ``text`` draws in ``lbl``'s font (the label keeps it)."""
    lbl.text = text
    return float(lbl.content_width)


@dataclass
class Button:
    id: str
    rect: Rect
    text: str
    enabled: bool
    action: Callable[[], object] | None = None


class TurnBasedScene(Scene, Generic[S]):
    name = "turnbased"
    clear_colour = (0.09, 0.11, 0.15, 1.0)
    #: Unused labels keep their layout, hidden (False: emptied: the benchmark's baseline).
    keep_layouts = True

    def __init__(self, app: SceneHost) -> None:
        super().__init__(app)
        self.vm = self.view_model(app.game_title(app.current_game()))
        self.l_board = Layer(1)
        self.l_over = Layer(4)
        # Two parts, each rebuilt only when what it shows changed: the *frame* (banner, player list,
        # bottom lines, overlays: ``mesh`` and ``over_mesh``) and the *board* (``board_mesh``: the
        # game's board, its buttons and click targets). Hovering, a die tumbling or a refused move
        # redraws the board only; the turn clock ticking, a message or the connection the frame only.
        self.mesh = Mesh(self.batch, self.l_board.mesh, blend=True)
        self.board_mesh = Mesh(self.batch, self.l_board.mesh, blend=True)
        self.over_mesh = Mesh(self.batch, self.l_over.mesh, blend=True)
        # Labels: ``_pool[p][:_used[p]]`` are the ones drawn by part ``p``'s last picture ("frame",
        # "board", or "over": over the board, with the frame). Each remembers what it was asked to
        # show (``_asked``), so that the next picture hands the same request the same label: an
        # unchanged text is only moved, never laid out again (laying out text is most of a
        # rebuild's cost under software GL). A label a picture does not use is hidden, not
        # emptied: it keeps its layout, so a text that comes back (a turn's banner, a score, a
        # button's caption) is shown again without a new layout; ``relayouts`` counts the layouts.
        self._pool: dict[str, list[pyglet.text.Label]] = {p: [] for p in PARTS}
        self._used: dict[str, int] = {p: 0 for p in PARTS}
        self._asked: dict[int, Ask] = {}
        self._free: dict[str, dict[Ask, list[pyglet.text.Label]]] = {p: {} for p in PARTS}
        self._live: dict[str, list[pyglet.text.Label]] = {p: [] for p in PARTS}
        self._pic: dict[str, int] = {p: 0 for p in PARTS}  # pictures each part has built
        self._made: dict[str, int] = {p: 0 for p in PARTS}  # labels made for each part
        self._shown_at: dict[int, int] = {}  # label -> the last picture of its part that showed it
        self.relayouts = 0  # labels laid out again (a new text, size or weight): bench/frame_bench.py
        self._part = "frame"  # the part being built (where ``text`` takes its labels from)
        self._sizes: set[tuple[float, str]] = set()  # (font size, weight) in use: their glyphs are warmed
        self._pieces: dict[tuple[object, ...], Tris] = {}  # shapes by what they show (``piece``)
        self._warm: Iterator[None] | None = None
        self.mouse = (-1.0, -1.0)
        self.buttons: list[Button] = []
        self.targets: list[Target] = []
        self.hover: object = None
        self.esc_at = 0
        self._key: object = None
        self._board_key: object = None
        self.banner = ""
        self.prompt_text = ""
        self.clock_left: float | None = None  # seconds left on the turn timer (None: no timer running)
        self.timer_bar: tuple[Rect, tuple[int, int, int, int]] | None = None  # the countdown bar as drawn
        self.over_rect: Rect | None = None  # the result strip under the board, when a game is over
        self._widths: dict[tuple[str, float, bool], float] = {}  # ``measure``
        self._ruler: pyglet.text.Label | None = None
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
        self._key = self._board_key = None
        # the sizes the scenes mostly draw in: warmed from the first quiet frames on
        self._likely = [(float(max(6, round(f * k))), w) for k in LIKELY_SIZES for w in ("bold", "normal")]
        self._warm = self._warm or self._warm_steps()

    # ------------------------------------------------------------------ drawing helpers

    def text(self, x: float, y: float, s: str, size: float = 1.0, colour: tuple[int, int, int, int] = WHITE,
             ax: str = "center", ay: str = "center", bold: bool = False, over: bool = False,
             max_w: float | None = None) -> pyglet.text.Label:
        """A label for this picture (``size`` is relative to the base font); ``max_w`` shrinks the
        font until the text fits that width."""
        # whole points: each new size is a new font (a glyph atlas, every glyph rendered again)
        fs = float(max(6, round(self.f * size)))
        weight = "bold" if bold else "normal"
        want = (s, fs, weight, ax, ay, None if max_w is None else round(max_w, 1))
        part = "over" if over else self._part
        same = self._free[part].get(want)
        if same:
            lbl = same.pop()  # showed exactly this before: only its colour and place may change
        else:
            lbl = self._spare(part, fs, weight)
            self._asked[id(lbl)] = want
            if (lbl.text, lbl.font_size, lbl.weight, lbl.anchor_x, lbl.anchor_y) != (s, fs, weight, ax, ay):
                self.relayouts += 1
                lbl.begin_update()
                lbl.text = s
                lbl.font_size = fs
                lbl.weight = weight
                lbl.anchor_x = ax  # type: ignore[assignment]
                lbl.anchor_y = ay  # type: ignore[assignment]
                lbl.end_update()
            if max_w is not None and s:
                for _ in range(4):
                    if lbl.content_width <= max_w or lbl.font_size <= 7:
                        break
                    lbl.font_size = float(max(6, min(lbl.font_size - 1, int(lbl.font_size * max_w / lbl.content_width))))
                    self.relayouts += 1
                if lbl.content_width > max_w:  # still too wide at the smallest size: cut it, visibly
                    lbl.text = fit_text(s, max_w, lambda t: _width(lbl, t))
                    self.relayouts += 1
            self._sizes.add((float(lbl.font_size), weight))
        if not lbl.visible:
            lbl.visible = True
        self._shown_at[id(lbl)] = self._pic[part]
        self._live[part].append(lbl)
        self._used[part] += 1
        if tuple(lbl.color) != colour:
            lbl.color = colour
        if lbl.position != (x, y, 0):
            lbl.position = (x, y, 0)
        return lbl

    def measure(self, s: str, size: float = 1.0, bold: bool = False) -> float:
        """How wide ``text(..., s, size, bold=bold)`` would draw, to choose between wordings before
        drawing one (measured once per text and size)."""
        fs = float(max(6, round(self.f * size)))
        k = (s, fs, bold)
        got = self._widths.get(k)
        if got is None:
            if self._ruler is None:
                self._ruler = pyglet.text.Label("", font_name=list(FONT), font_size=fs)
            if len(self._widths) > PIECES_MAX:
                self._widths.clear()
            self._ruler.begin_update()
            self._ruler.text, self._ruler.font_size, self._ruler.weight = s, fs, "bold" if bold else "normal"
            self._ruler.end_update()
            got = self._widths[k] = float(self._ruler.content_width)
        return got

    def piece(self, c: Canvas, key: tuple[object, ...], draw: Callable[[Canvas], None]) -> None:
        """Add to ``c`` the shapes ``draw`` makes, computed once per ``key`` (which must say
        everything they depend on: place, size, face...): a rebuild then only copies the pieces that
        did not change (a board of dice is thousands of triangles)."""
        got = self._pieces.get(key)
        if got is None:
            if len(self._pieces) > PIECES_MAX:
                self._pieces.clear()
            pc = Canvas()
            draw(pc)
            got = self._pieces[key] = pc.t
        c.t.pos.extend(got.pos)
        c.t.col.extend(got.col)

    def die(self, c: Canvas, x: float, y: float, size: float, value: int, body: RGBA = (245, 245, 240, 255),
            pip: RGBA = (25, 25, 30, 255)) -> None:
        """``c.die``, made once per place, size, face and colours (``piece``)."""
        self.piece(c, ("die", x, y, size, value, body, pip), partial(_die, x, y, size, value, body, pip))

    def drawn_labels(self, part: str) -> list[pyglet.text.Label]:
        """The labels part ``part`` ("frame", "board" or "over") drew in its last picture."""
        return self._pool[part][: self._used[part]]

    def _spare(self, part: str, fs: float, weight: str) -> pyglet.text.Label:
        """A label the picture being built has not used yet, to lay out a new text in: the one
        hidden longest, of the same font if there is one (no new glyph size). Not one the last
        picture showed -- its text may be asked for later in this picture, or come back in the
        next (a turn's banner, the player list's arrow) -- while the part has made fewer than
        ``LABELS_MAX`` labels: a new one then."""
        free = self._free[part]
        pic = self._pic[part]
        best: tuple[tuple[bool, int], list[pyglet.text.Label], int] | None = None
        for k, lst in free.items():
            for i, lbl in enumerate(lst):
                rank = (not (k[1:3] == (fs, weight)), self._shown_at.get(id(lbl), -1))
                if best is None or rank < best[0]:
                    best = (rank, lst, i)
        if best is not None and (best[0][1] < pic - 1 or self._made[part] >= LABELS_MAX or not self.keep_layouts):
            return best[1].pop(best[2])
        self._made[part] += 1
        layer = self.l_over if part == "over" else self.l_board
        lbl = label(self.batch, layer.text, 10, WHITE, "center", "center")
        self._asked[id(lbl)] = ("\0new", 10.0, "normal")
        return lbl

    def _begin_labels(self, parts: tuple[str, ...]) -> None:
        for o in parts:
            self._pic[o] += 1
            free: dict[Ask, list[pyglet.text.Label]] = {}
            for lbl in self._pool[o]:
                free.setdefault(self._asked[id(lbl)], []).append(lbl)
            self._free[o] = free
            self._live[o] = []
            self._used[o] = 0

    def _end_labels(self, parts: tuple[str, ...]) -> None:
        for o in parts:
            rest = [lbl for lst in self._free[o].values() for lbl in lst]
            for lbl in rest:  # not in this picture: hidden with its layout, kept for a later one
                if not self.keep_layouts:  # the way before (bench/frame_bench.py --no-label-cache)
                    if lbl.text:
                        lbl.text = ""
                        self.relayouts += 1
                    self._asked[id(lbl)] = ("\0hidden", float(lbl.font_size), lbl.weight)
                elif lbl.visible:
                    lbl.visible = False
            self._pool[o] = self._live[o] + rest
            self._free[o] = {}
        if self._sizes - WARMED and self._warm is None:
            self._warm = self._warm_steps()

    def _warm_steps(self) -> Iterator[None]:
        """Render, a few glyphs per quiet frame, every printable glyph of each font size in use: the
        first use of a glyph in a size costs ~1 ms (a new word in a message spiked its frame)."""
        from client.window.cards import FONT

        while True:
            todo = sorted(self._sizes - WARMED) or [k for k in self._likely if k not in WARMED]
            if not todo:
                break
            size, weight = todo[0]  # the sizes seen in use first, then the likely ones
            WARMED.add((size, weight))
            font = pyglet.font.load(FONT, size, weight=weight)
            for ch in WARM_CHARS:  # one at a time: a glyph is ~1-2 ms under software GL
                font.get_glyphs(ch)
                yield
        self._warm = None

    def button(self, c: Canvas, id: str, rect: Rect, text: str, enabled: bool, action: Callable[[], object] | None,
               size: float = 1.0, hot: bool = False) -> None:
        hovered = enabled and rect.contains(*self.mouse)
        bg = (60, 70, 85, 255) if not enabled else ((230, 160, 30, 255) if hot else (45, 110, 190, 255))
        if hovered:
            bg = (min(255, bg[0] + 35), min(255, bg[1] + 35), min(255, bg[2] + 35), 255)
        c.rect(rect.x, rect.y, rect.w, rect.h, bg, radius=min(rect.h / 2, self.f * 0.6))
        if hovered:
            c.ring(rect.x, rect.y, rect.w, rect.h, 2, WHITE, radius=min(rect.h / 2, self.f * 0.6))
        self.text(rect.x, rect.y, text, size, WHITE if enabled else (150, 155, 165, 255), bold=enabled,
                  max_w=rect.w - self.f * 0.6)
        self.buttons.append(Button(id, rect, text, enabled, action))

    def target(self, id: object, hit: Callable[[float, float], bool], action: Callable[[], object] | None) -> None:
        """A clickable board spot (registered while drawing, tested on clicks and for the hover)."""
        self.targets.append((id, hit, action))

    # ------------------------------------------------------------------ what a game draws

    def view_model(self, title: str) -> TurnViewModel[S]:
        """The game's view-model (each game scene makes its own)."""
        raise NotImplementedError

    def row_detail(self, c: Canvas, model: ClientView, state: S, seat: int, rect: Rect) -> None:
        """Draw a game's own detail in a player row's lower part."""

    def row_lines(self, state: S) -> float:
        """How tall a player row is, in base-font lines."""
        return 3.2

    def board(self, c: Canvas, model: ClientView, state: S, me: int | None, now_ns: int) -> None:
        """Draw the game's board into ``self.board_rect``."""

    def game_key(self, symbol: int, state: S, me: int | None) -> bool:
        return False

    # ------------------------------------------------------------------ frame

    def enter(self) -> None:
        self._key = None

    def still(self) -> bool:
        # Everything drawn is in ``update``'s key (the clock and the rolling dice too): a frame whose
        # key did not change did not change the picture.
        return True

    def _model(self) -> tuple[ClientView | None, S | None]:
        model = self.app.session.model
        return model, self.vm.state(model)

    def me(self) -> int | None:
        return self.vm.me(self.app.session.model)

    def update(self, now_ns: int) -> None:
        session = self.app.session
        model, state = self._model()
        if model is not None and model.game and not self.plays(model.game):
            self.app.goto("table")  # a match of another game (joined or watched by code)
            return
        vm = self.vm
        vm.observe(model, now_ns)
        msg_live, rej_live = vm.live(now_ns)
        pending = len(vm.pending(model))
        clock = vm.turn_clock(model, now_ns)
        self.clock_left = None if clock is None else clock[0]
        animating = vm.animating(state, now_ns) if state is not None else None
        common = (None if model is None else model.version, id(state), self.w, self.h, vm.version, pending,
                  MatchState.read(model.match_state).status if model is not None else None)
        # the frame sees an animation only start, change kind and end (its texts may say so)
        key_now = (common, session.status, session.message, None if clock is None else round(clock[0] * 8),
                   msg_live, animating if not isinstance(animating, (int, tuple)) else
                   (animating[:2] if isinstance(animating, tuple) else True))
        board_key = (common, self.hover, self.mouse if self.buttons else None, rej_live, animating)
        if key_now != self._key or board_key != self._board_key:
            self._rebuild(model, state, now_ns, frame=key_now != self._key, board=board_key != self._board_key)
            self._key, self._board_key = key_now, board_key
            self.display_version += 1
        elif self._warm is not None:  # a quiet frame: a little start-up work (glyphs) instead
            deadline = time.perf_counter() + WARM_BUDGET_S
            while self._warm is not None and time.perf_counter() < deadline:
                next(self._warm, None)
        for cue in vm.drain_cues():
            self.app.sounds.play(cue)
        if vm.results_due(model, now_ns):
            self.app.goto("results")

    def _rebuild(self, model: ClientView | None, state: S | None, now_ns: int, frame: bool = True,
                 board: bool = True) -> None:
        if board:
            self._part = "board"
            self._begin_labels(("board",))
            self.buttons = []
            self.targets = []
            bc = Canvas()
            if model is not None and state is not None:
                self.board(bc, model, state, self.vm.me(model), now_ns)
            self.board_mesh.set(bc.t)
            self._end_labels(("board",))
        if frame:
            self._part = "frame"
            self._begin_labels(("frame", "over"))
            self._rebuild_frame(model, state, now_ns)
            self._end_labels(("frame", "over"))

    def _rebuild_frame(self, model: ClientView | None, state: S | None, now_ns: int) -> None:
        c = Canvas()
        over = Canvas()
        vm = self.vm
        f = self.f
        session = self.app.session
        # the turn banner
        banner = vm.banner(model, now_ns)
        game_over = banner.kind == "over"
        br = self.banner_rect
        clock = vm.turn_clock(model, now_ns) if state is not None and not game_over else None
        self.timer_bar = None
        c.rect(br.x, br.y, br.w, br.h, BANNER_COLOURS[banner.kind])
        self.text(f * 1.0, br.y + f * 0.85, banner.big, 1.6, WHITE, ax="left", bold=True,
                  max_w=self.w - f * 2 - self.app.hud_room)
        self.text(f * 1.0, br.y - f * 1.05, banner.small, 1.05, (255, 250, 235, 255), ax="left",
                  max_w=self.w - f * (9 if clock is not None else 2))
        self.banner, self.prompt_text = banner.big, banner.small
        if clock is not None:
            left, total = clock
            frac = left / total if total > 0 else 0.0
            bar_h = f * 0.5
            by = br.bottom - bar_h / 2  # just under the banner, in the gap above the board
            c.rect(br.x, by, br.w, bar_h, (15, 18, 24, 255))
            bar_c = RED if left < min(5.0, total * 0.34) else ((255, 245, 215, 255) if banner.kind == "mine"
                                                                else (120, 170, 255, 255))
            if frac > 0:
                c.rect(br.left + br.w * frac / 2, by, br.w * frac, bar_h, bar_c)
            self.timer_bar = (Rect(br.left + br.w * frac / 2, by, br.w * frac, bar_h), bar_c)
            # on the prompt line's right end (the top right corner is the network HUD's)
            self.text(self.w - f * 1.0, br.y - f * 1.0, f"{int(left + 0.999)} s", 1.3,
                      (255, 215, 200, 255) if left < 5 else WHITE, ax="right", bold=True)
        # the player list
        sr = self.side_rect
        c.rect(sr.x, sr.y, sr.w, sr.h, PANEL, radius=f * 0.8)
        ty = sr.top - f * 1.2
        self.text(sr.left + f, ty, "Players", 1.05, DIM, ax="left", bold=True)
        rows = vm.rows(model)
        if rows and model is not None and state is not None:
            rh = min(self.row_lines(state) * f, (sr.h - f * 2.6) / max(1, len(rows)))
            for r in rows:
                top = ty - f * 1.1 - r.seat * rh
                row = Rect(sr.x, top - rh / 2, sr.w - f, rh - f * 0.3)
                if r.acting:
                    c.rect(row.x, row.y, row.w, row.h, (70, 60, 30, 255) if r.mine else (40, 55, 80, 255),
                           radius=f * 0.5)
                    c.ring(row.x, row.y, row.w, row.h, 2, AMBER if r.mine else (120, 170, 255, 255), radius=f * 0.5)
                ly = row.top - f * 1.0
                c.circle(row.left + f * 1.1, ly, f * 0.7, r.colour)
                self.text(row.left + f * 1.1, ly, r.mark, 0.8, (20, 20, 20, 255), bold=True)
                score = self.text(row.right - f * 0.5, ly, r.score, 0.95, YELLOW, ax="right", bold=True)
                # the name keeps to the left of the score, smaller or cut if it must
                self.text(row.left + f * 2.2, ly, ("▶ " if r.acting else "") + r.name, 1.0, WHITE, ax="left",
                          bold=r.acting, max_w=row.w - f * 3.3 - (score.content_width if r.score else 0.0))
                self.row_detail(c, model, state, r.seat, Rect(row.x, (row.bottom + ly - f * 0.8) / 2, row.w,
                                                              max(f, ly - f * 0.8 - row.bottom)))
        # what is going on instead of the board
        if state is None:
            big, sub = vm.status(session.status, session.message, session.join_command, model)
            over.rect(self.w / 2, self.h / 2, self.w * 0.9, f * 8, (10, 14, 20, 230), radius=f)
            self.text(self.w / 2, self.h / 2 + f * 1.2, big, 2.4, WHITE, bold=True, over=True)
            self.text(self.w / 2, self.h / 2 - f * 2.0, sub, 1.0, DIM, over=True, max_w=self.w * 0.86)
        # bottom lines (a game's result takes their place: ``result strip`` below)
        text, colour_m = vm.message(now_ns)
        over_now = game_over and state is not None
        if not over_now:
            self.text(self.board_rect.x, self.message_y, text, 1.1, colour_m, bold=True, max_w=self.board_rect.w)
        if vm.pending(model) and not over_now:
            self.text(self.board_rect.x, self.pending_y, PENDING_LINE, 0.95, AMBER, max_w=self.board_rect.w)
        hint = vm.hint_line(model)
        if not over_now:  # the game's keys are of no use once it is over (the results follow)
            self.text(self.w / 2, self.hint_y, hint if self.app.overlay is None else texts.replay_hint(hint), 0.85,
                      DIM, max_w=self.w - f)
        self.over_rect = None
        if over_now and model is not None:
            # the result strip: under the board, over the message and key lines -- the board (the
            # winning line, every player's dice) stays in view, as the banner above says who won
            br = self.board_rect
            low = f * 0.4
            strip = self.over_rect = Rect(br.x, (low + br.bottom - f * 0.4) / 2, br.w, br.bottom - f * 0.4 - low)
            over.rect(strip.x, strip.y, strip.w, strip.h, (10, 14, 20, 235), radius=f * 0.6)
            over.ring(strip.x, strip.y, strip.w, strip.h, 2, YELLOW, radius=f * 0.6)
            self.text(strip.x, strip.y + strip.h * 0.19, banner.small or "Game over", 1.4, WHITE, bold=True,
                      over=True, max_w=strip.w - f * 1.5)
            self.text(strip.x, strip.y - strip.h * 0.24, vm.tally(model, state), 0.9, DIM, over=True,
                      max_w=strip.w - f * 1.5)
        self.mesh.set(c.t)
        self.over_mesh.set(over.t)

    def pname(self, model: ClientView | None, seat: object) -> str:
        return self.vm.pname(model, seat)

    def say(self, text: str, colour: tuple[int, int, int, int] = YELLOW) -> None:
        self.vm.say(text, time.time_ns(), colour)

    # ------------------------------------------------------------------ input -> actions

    def act(self, action: object) -> m.Act | Rejected | None:
        """Play ``action``: predicted now (this frame draws it), published in the background."""
        model = self.app.session.model
        now = time.time_ns()
        self.app.note_input()
        if model is None or model.spectating:
            self.vm.say("✗ spectators only watch", now, RED)
            return None
        result = self.app.session.act_now(action)
        if isinstance(result, Rejected):
            self.vm.refused(action, result.code, result.detail, now, game=game_of(model))
        else:
            self.vm.cues.append("land")
            self.vm.version += 1
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
                    self.say(f"“{b.text}” is not possible now", SOFT)
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
            playing = self.app.session.model
            running = (playing is not None and not playing.spectating and
                       MatchState.read(playing.match_state).status in ("playing", "between"))
            now = time.time_ns()
            if running and now - self.esc_at > 2_000_000_000:
                self.esc_at = now
                self.vm.say("press Esc again to leave this match (you forfeit it)", now)
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

    def describe(self) -> dict[str, object]:
        model, state = self._model()
        pending = model.predictor.pending if model is not None and model.predictor is not None else []
        return {"scene": self.name, "game": model.game if model is not None else None, "banner": self.banner,
                "prompt": self.prompt_text, "message": self.vm.msg[0], "pending": len(pending),
                "timer": None if self.clock_left is None else round(self.clock_left, 2),
                "phase": getattr(state, "phase", None),
                "buttons": {b.id: b.enabled for b in self.buttons},
                "players": [row.name for row in self.vm.rows(model)] if model is not None else []}
