"""The BLINK table's renderer: pyglet drawables built once and brought in line with the view-model.

How this works
--------------
What the table shows is decided by ``TableViewModel`` (``client/window/viewmodels/table.py``,
pure: no pyglet): the hand in stable slots, the pile tops with the pending ring, the draw piles,
the text band (countdown, GO!, stalemate, the pick timer, a game's result), bounce flights, fading
rings, the message line and the sounds to play. This scene owns the drawables -- a ``CardView`` per
card place, labels, the band's panel and timer bar -- and each frame:

- ``update`` gives the view-model the session's ``ClientModel`` (``observe``); when the view-model's
  ``board_key`` (model version, selection, flights), the session status or the window size changed,
  the drawables are brought in line with ``board()`` (``_sync``); in between, only the animations
  move (``_animate``) and the band's texts are set (``_overlay``; a label is only touched when its
  text changed). Nothing is recreated per frame. Quiet frames warm the card pictures and glyphs.
- input (1/2/3, Left/Right or A/D, a click then a pile, a drag onto a pile) is asked of the
  view-model (``select``/``play``/``pick``), whose action goes through ``Session.act_now``: predicted
  now, so the frame that handled the key already draws it, and published in the background.
"""

from __future__ import annotations

import time
from functools import partial
from typing import Iterator

import pyglet
from pyglet.window import key, mouse

from protocol import messages as m
from protocol.rules import blink
from protocol.rules.base import Rejected
from client.matchstate import MatchState
from client.window.cards import FELT, FONT, CardView, Layer, fit_label, glyph_font, label, set_color, set_text
from client.window.layout import Rect, TableLayout, fit_text, table_layout
from client.window.mesh import Mesh, mix
from client.window import geometry as geo
from client.window import texts
from client.window.host import SceneHost
from client.window.scenes.base import Scene
from client.window.viewmodels import NS, Band, BandPlace, CardShow, Slot, Step, TableBoard, TableViewModel

WARM_BUDGET_S = 0.0015  # start-up work done in quiet frames (see _warm_steps)

KEYS_SLOT = {key._1: 0, key._2: 1, key._3: 2, key._4: 3, key._5: 4, key._6: 5, key._7: 6, key._8: 7, key._9: 8,
             key.NUM_1: 0, key.NUM_2: 1, key.NUM_3: 2, key.NUM_4: 3, key.NUM_5: 4, key.NUM_6: 5, key.NUM_7: 6,
             key.NUM_8: 7, key.NUM_9: 8}
KEYS_PILE = {key.LEFT: 0, key.A: 0, key.RIGHT: 1, key.D: 1}


def _ease_out(f: float) -> float:
    f = max(0.0, min(1.0, f))
    return 1 - (1 - f) ** 3


def _width(lbl: pyglet.text.Label, text: str) -> float:
    """How wide ``text`` draws in ``lbl``'s font (the label keeps it)."""
    lbl.text = text
    return float(lbl.content_width)


def _panel(w: float, h: float, rgba: tuple[int, int, int, int]) -> geo.Tris:
    t = geo.Tris()
    geo.rounded_rect(t, w, h, min(h / 2, 18.0), rgba)
    return t


class TableScene(Scene):
    name = "table"
    clear_colour = (0.06, 0.30, 0.20, 1.0)  # card-table felt

    def __init__(self, app: SceneHost) -> None:
        super().__init__(app)
        b = self.batch
        # draw order: the table, then the text band over it, then a card in flight (a bounce, a
        # drag) over both, then the message line over everything
        self.l_table = Layer(1)
        self.l_over = Layer(3)
        self.l_float = Layer(5)
        self.l_top = Layer(7)
        self.hand: list[CardView] = [CardView(b, self.l_table) for _ in range(3)]
        self.opp: list[CardView] = [CardView(b, self.l_table) for _ in range(3)]
        self.piles = [CardView(b, self.l_table), CardView(b, self.l_table)]
        self.my_draw = CardView(b, self.l_table)
        self.opp_draw = CardView(b, self.l_table)
        self.ghost = CardView(b, self.l_float)  # a bounced card on its way back
        self.drag = CardView(b, self.l_float)  # a card being dragged with the mouse
        t, o = self.l_table.text, self.l_over.text
        white, dim = (255, 255, 255, 255), (210, 230, 220, 255)
        self.score_lbl = label(b, t, 14, white, "left", "center", bold=True)
        self.info_lbl = label(b, t, 11, dim, "center", "center")
        self.opp_name_lbl = label(b, t, 13, white, "right", "center", bold=True)
        self.opp_info_lbl = label(b, t, 10, dim, "right", "center")
        self.key_lbls = [label(b, t, 13, dim, "center", "center", bold=True) for _ in range(3)]
        self.pile_lbls = [label(b, t, 11, dim, "center", "center"), label(b, t, 11, dim, "center", "center")]
        self.draw_lbls = [label(b, t, 10, dim, "center", "center"), label(b, t, 10, dim, "center", "center")]
        self.msg_lbl = label(b, self.l_top.text, 16, (255, 90, 80, 255), "center", "center", bold=True)
        self.hint_lbl = label(b, t, 11, (200, 225, 210, 255), "center", "center")
        self.band = Mesh(b, self.l_over.mesh, blend=True)
        self.bar_bg = Mesh(b, self.l_over.ring, blend=True)
        self.bar = Mesh(b, self.l_over.ring, blend=True)
        # Two pairs of band texts with fixed sizes (changing a label's font size means a new layout):
        # big ones over the piles, smaller ones in the status band above your hand.
        self.big_c = label(b, o, 40, white, "center", "center", bold=True)
        self.sub_c = label(b, o, 14, (235, 235, 235, 255), "center", "center")
        self.big_s = label(b, o, 22, white, "center", "center", bold=True)
        self.sub_s = label(b, o, 13, (235, 235, 235, 255), "center", "center")
        self.layout: TableLayout = table_layout(*app.size)
        self.vm = TableViewModel()
        self.board: TableBoard | None = None  # what is drawn (the view-model's last board)
        self.drag_slot: int | None = None
        self.drag_from: tuple[float, float] | None = None
        self.dragging = False
        self.drag_pos = (0.0, 0.0)
        self.esc_at = 0
        self._key: object = None
        self._warm: Iterator[None] | None = None
        self._band_key: object = None
        self.band_where: BandPlace = ""  # where the text band is drawn (see ``_overlay``)
        self.band_rect: Rect | None = None  # its panel
        self._bar_key: object = None
        self._bar_y = 0.0
        self._still = False  # the last update changed nothing drawn but what bumped display_version
        self._look: object = None
        self.resize(*app.size)

    # ------------------------------------------------------------------ frame

    def resize(self, width: int, height: int) -> None:
        hand_size = max(3, len(self.hand))
        self.layout = table_layout(width, height, hand_size)
        lay = self.layout
        f = lay.font
        for lbl, size in ((self.score_lbl, f * 1.15), (self.info_lbl, f * 0.95), (self.opp_name_lbl, f * 1.05),
                          (self.opp_info_lbl, f * 0.85), (self.msg_lbl, f * 1.3), (self.hint_lbl, f * 0.9),
                          (self.big_c, f * 3.2), (self.sub_c, f * 1.15), (self.big_s, f * 1.4),
                          (self.sub_s, f * 0.95)):
            if lbl.font_size != round(size, 1):
                lbl.font_size = round(size, 1)
        for lbl in self.key_lbls:
            lbl.font_size = round(f * 1.1, 1)
        for lbl in self.pile_lbls + self.draw_lbls:
            lbl.font_size = round(f * 0.9, 1)
        self.score_lbl.position = (f, lay.top_bar_y, 0)
        self.info_lbl.position = (width / 2, lay.top_bar_y, 0)
        o0 = lay.opp_hand[0]
        self.opp_name_lbl.position = (o0.left - f * 1.5, o0.y + f * 0.8, 0)
        self.opp_info_lbl.position = (o0.left - f * 1.5, o0.y - f * 0.8, 0)
        for i, lbl in enumerate(self.key_lbls):
            r = lay.hand[i] if i < len(lay.hand) else lay.hand[-1]
            lbl.position = (r.x, r.bottom - f * 1.1, 0)
        for i, lbl in enumerate(self.pile_lbls):
            r = lay.piles[i]
            lbl.position = (r.x, r.bottom - f * 1.2, 0)
        self.draw_lbls[0].position = (lay.my_draw.x, lay.my_draw.bottom - f * 1.1, 0)
        self.draw_lbls[1].position = (lay.opp_draw.x, lay.opp_draw.bottom - f * 0.9, 0)
        self.msg_lbl.position = (width / 2, lay.message_y, 0)
        self.hint_lbl.position = (width / 2, lay.hint_y, 0)
        self._band_key = None
        self._key = None  # re-place the cards
        self._warm = self._warm_up(lay)

    def _warm_up(self, lay: TableLayout) -> Iterator[None]:
        """Build every card picture for this size ahead of need, a little at a time (see update),
        and render the glyphs of the card labels now, so a play never waits for either."""
        m = geo.CardMetrics(lay.card_w, lay.card_h)
        text = "0123456789?" + "".join(c.upper() for c in geo.PALETTE)
        sizes = {round(m.corner_font, 1), round(m.word_font, 1), round(max(8.0, lay.card_h * 0.16), 1),
                 round(max(8.0, lay.card_h * 0.22), 1), round(max(8.0, lay.card_h * 0.52 * 0.16), 1)}
        for size in sizes:
            glyph_font(size).get_glyphs(text)
        w, h = round(lay.card_w, 1), round(lay.card_h, 1)
        return self._warm_steps([(c.count, c.colour, c.shape, w, h) for c in blink.standard_deck()])

    def _warm_steps(self, faces: list[tuple[int, str, str, float, float]]) -> Iterator[None]:
        """One small piece of work per quiet frame: the glyphs of the band and message texts (the
        first use of a glyph renders it: ~10 ms for a line in a new size), then every card picture."""
        first = "0123456789GO!Stalemate:choseardCnyuwigpbkfv"  # the countdown and band words first
        chars = first + "".join(chr(c) for c in range(33, 127) if chr(c) not in first) + "—…·–←→"
        for lbl in (self.big_c, self.big_s, self.sub_c, self.sub_s, self.msg_lbl):
            font = pyglet.font.load(FONT, lbl.font_size, weight=lbl.weight)
            for ch in chars:
                font.get_glyphs(ch)
                yield
        for args in faces:
            mix(geo.card_face(*args), 1.0, FELT)
            yield

    def enter(self) -> None:
        self._key = None

    def still(self) -> bool:
        return self._still

    def update(self, now_ns: int) -> None:
        session = self.app.session
        model = session.model
        if model is not None and model.game and not self.plays(model.game):
            self.app.goto("table")  # a match of another game (joined or watched by code)
            return
        vm = self.vm
        vm.observe(model, now_ns)
        key_now = (vm.board_key(model), session.status, session.message, self.layout, self.dragging)
        if key_now != self._key:
            self._key = key_now
            self._sync(vm.board(model, self.drag_slot if self.dragging else None))
            self.display_version += 1
        elif self._warm is not None:
            until = time.perf_counter() + WARM_BUDGET_S  # a little of it in each quiet frame
            while time.perf_counter() < until:
                if next(self._warm, StopIteration) is StopIteration:
                    self._warm = None
                    break
        self._animate(now_ns)
        band = vm.band(model, session.status, session.message, session.join_command, now_ns)
        self._overlay(band)
        # What moves without a new board -- a bounce in flight, a shake, a drag, the rings as they
        # fade (in eighths: ``CardView.set_ring``), the band's texts and pick timer, the message --
        # as drawn: a frame that changed none of it is not drawn again.
        look = (vm.message(now_ns), band, [v._ring_key for v in self.piles], [v._ring_key for v in self.hand],
                [(v.x, v.y) for v in self.hand], (self.ghost.style, self.ghost.x, self.ghost.y),
                (self.drag.style, self.drag.x, self.drag.y))
        self._still = look == self._look
        self._look = look
        for cue in vm.drain_cues():
            self.app.sounds.play(cue)
        if vm.results_due(now_ns):
            self.app.goto("results")

    # ------------------------------------------------------------------ drawing what the view-model says

    def _sync(self, board: TableBoard) -> None:
        lay = self.layout
        self.board = board
        size = len(board.hand)
        while len(self.hand) < size:
            self.hand.append(CardView(self.batch, self.l_table))
            self.key_lbls.append(label(self.batch, self.l_table.text, 13, (210, 230, 220, 255), "center", "center",
                                       bold=True))
        if len(lay.hand) < size:
            self.resize(lay.w, lay.h)
            lay = self.layout
        for i, view in enumerate(self.hand):
            r = lay.hand[i] if i < len(lay.hand) else lay.hand[-1]
            c = board.hand[i] if i < size else CardShow()
            view.show(c.card, c.style, r.w, r.h, c.alpha)
            view.move(r.x, r.y + (r.h * 0.08 if c.raised else 0.0))
            view.set_ring(c.ring)
            text, selected = board.keys[i] if i < size else ("", False)
            set_text(self.key_lbls[i], text)
            set_color(self.key_lbls[i], (255, 255, 255, 255) if selected else (190, 215, 200, 255))
        for i, view in enumerate(self.opp):
            r = lay.opp_hand[i] if i < len(lay.opp_hand) else lay.opp_hand[-1]
            c = board.opp_hand[i] if i < len(board.opp_hand) else CardShow()
            view.show(c.card, c.style, r.w, r.h)
            view.move(r.x, r.y)
        for p, view in enumerate(self.piles):
            r = lay.piles[p]
            c = board.piles[p]
            view.show(c.card, c.style, r.w, r.h, c.alpha)
            view.move(r.x, r.y)
            view.set_ring(c.ring)
        for view, r, c, lbl, text in ((self.my_draw, lay.my_draw, board.draws[0], self.draw_lbls[0], board.draw_labels[0]),
                                      (self.opp_draw, lay.opp_draw, board.draws[1], self.draw_lbls[1],
                                       board.draw_labels[1])):
            view.show(c.card, c.style, r.w, r.h, mid=c.mid)
            view.move(r.x, r.y)
            set_text(lbl, text)
        set_text(self.score_lbl, board.score)
        set_text(self.info_lbl, board.info)
        self._place_info()
        for p, lbl in enumerate(self.pile_lbls):  # each within its pile's column
            fit_label(lbl, board.pile_labels[p], lay.card_w + (lay.piles[1].left - lay.piles[0].right) * 0.9,
                      round(lay.font * 0.9, 1), min_size=round(lay.font * 0.7, 1))
        set_text(self.opp_name_lbl, board.opp_name)
        set_text(self.opp_info_lbl, "")
        set_text(self.hint_lbl, board.hint if self.app.overlay is None else texts.replay_hint(board.hint))

    def _place_info(self) -> None:
        """The info line ("game 1 · best of 3 · match CODE") in the top bar, centred when it fits
        between the score line and the corner HUD, else on a line of its own under the score (a
        narrow window): it never runs into either."""
        lay, lbl = self.layout, self.info_lbl
        f = lay.font
        free_left = f + self.score_lbl.content_width + f * 1.5
        free_right = lay.w - self.app.hud_room - f
        iw = lbl.content_width
        if lay.w / 2 - iw / 2 >= free_left and lay.w / 2 + iw / 2 <= free_right:
            where: tuple[str, float, float] = ("center", lay.w / 2, lay.top_bar_y)
        elif free_right - free_left >= iw:
            where = ("center", (free_left + free_right) / 2, lay.top_bar_y)
        else:
            where = ("left", f, lay.top_bar_y - f * 1.6)
        if lbl.anchor_x != where[0]:
            lbl.anchor_x = where[0]  # type: ignore[assignment]
        if lbl.position != (where[1], where[2], 0):
            lbl.position = (where[1], where[2], 0)

    # ------------------------------------------------------------------ per-frame animation

    def _animate(self, now_ns: int) -> None:
        lay = self.layout
        vm = self.vm
        # a bounced card returning to the hand
        flying = vm.flight(now_ns)
        if flying is None:
            if self.ghost.style != "none":
                self.ghost.show(None, "none", 10, 10)
                self.ghost.set_ring(None)
        else:
            f, prog, target = flying
            start = lay.piles[f.pile]
            r = lay.hand[target] if target is not None and target < len(lay.hand) else \
                Rect(lay.w / 2, lay.hand[0].y, lay.card_w, lay.card_h)
            e = _ease_out(prog)
            x = start.x + (r.x - start.x) * e
            y = start.y + (r.y - start.y) * e + lay.card_h * 0.35 * (1 - (2 * prog - 1) ** 2)
            self.ghost.show(f.card, "face", lay.card_w, lay.card_h)
            self.ghost.move(x, y)
            self.ghost.set_ring("bounce")
        # rings that fade: landed / opponent play on a pile, bounce on a hand slot
        for p, view in enumerate(self.piles):
            if p not in vm.flash or view.ring_kind == "pending":
                continue
            fl = vm.pile_flash(p, now_ns)
            view.set_ring(None) if fl is None else view.set_ring(*fl)
        for s in list(vm.slot_flash):
            fl = vm.hand_flash(s, now_ns)
            if s < len(self.hand) and s != vm.selected:
                self.hand[s].set_ring(None) if fl is None else self.hand[s].set_ring(*fl)
        # a locally refused play shakes its card
        sh = vm.shake(now_ns)
        if sh is not None:
            slot, dx = sh
            if slot < len(self.hand) and slot < len(lay.hand):
                r = lay.hand[slot]
                self.hand[slot].move(r.x + dx * lay.card_w, r.y + (r.h * 0.08 if slot == vm.selected else 0.0))
        # dragging
        card = vm.slots[self.drag_slot] if self.dragging and self.drag_slot is not None and \
            self.drag_slot < len(vm.slots) else None
        if isinstance(card, blink.Card):
            self.drag.show(card, "face", lay.card_w, lay.card_h)
            self.drag.move(*self.drag_pos)
            self.drag.set_ring("select")
        elif self.drag.style != "none":
            self.drag.show(None, "none", 10, 10)
            self.drag.set_ring(None)
        # the message line
        text, colour = vm.message(now_ns)
        set_text(self.msg_lbl, text)
        if text:
            set_color(self.msg_lbl, colour)

    def _overlay(self, band: Band) -> None:
        """The text band: over the piles for connection status, the countdown and a game's result;
        between the piles and your hand (``status``) for GO, a stalemate and the pick timer, so the
        cards stay in view while they matter."""
        lay = self.layout
        where, timer = band.where, band.timer
        big_lbl, sub_lbl = (self.big_s, self.sub_s) if where == "status" else (self.big_c, self.sub_c)
        for lbl in (self.big_c, self.sub_c, self.big_s, self.sub_s):
            if lbl is not big_lbl and lbl is not sub_lbl:
                set_text(lbl, "")
        f = lay.font
        for lbl, text in ((big_lbl, band.big), (sub_lbl, band.sub)):  # never wider than the band's panel
            set_text(lbl, text)
            if lbl.content_width > lay.w * 0.94 - f * 2:
                set_text(lbl, fit_text(text, lay.w * 0.94 - f * 2, partial(_width, lbl)))
        if where == "status":
            band_y, band_h = lay.status_y, lay.status_h * 0.98
        elif where == "centre":
            band_y, band_h = lay.centre_y, f * 7.6
        elif where == "screen":
            band_y, band_h = lay.h / 2, f * 9.0
        else:
            band_y, band_h = lay.centre_y, 0.0
        self.band_where = where
        self.band_rect = Rect(lay.w / 2, band_y, lay.w * 0.94, band_h) if band_h > 0 else None
        band_key = (where, lay, timer is not None, bool(band.sub))
        if band_key != self._band_key:
            self._band_key = band_key
            if band_h > 0:
                self.band.set(_panel(lay.w * 0.94, band_h, (8, 20, 16, 205)))
                self.band.move(lay.w / 2, band_y)
            else:
                self.band.set(None)
            if where == "status":  # two lines in a low band: apart, the timer bar along its bottom edge
                big_lbl.position = (lay.w / 2, band_y + f * (0.9 if band.sub or timer is not None else 0.0), 0)
                sub_lbl.position = (lay.w / 2, band_y - f * 1.05, 0)
                self._bar_y = band_y - band_h / 2 + f * 0.3
            else:
                big_lbl.position = (lay.w / 2, band_y + band_h * 0.14, 0)
                sub_lbl.position = (lay.w / 2, band_y - band_h * 0.3, 0)
                self._bar_y = band_y - band_h / 2 + f * 0.5
            if timer is not None:
                self.bar_bg.set(_panel(lay.w * 0.5, f * 0.35, (255, 255, 255, 60)))
                self.bar_bg.move(lay.w / 2, self._bar_y)
            else:
                self.bar_bg.set(None)
                self.bar.set(None)
                self._bar_key = None
        if timer is not None:
            wfull = lay.w * 0.5
            wnow = max(f * 0.35, wfull * timer)
            key_now = (round(wnow), timer > 0.3)
            if key_now != self._bar_key:
                self._bar_key = key_now
                t = geo.Tris()
                geo.rounded_rect(t, wnow, f * 0.35, f * 0.17, (255, 200, 60, 255) if timer > 0.3 else (255, 80, 60, 255))
                self.bar.set(t)
            self.bar.move(lay.w / 2 - wfull / 2 + wnow / 2, self._bar_y)

    # ------------------------------------------------------------------ input -> actions

    def _send(self, step: Step) -> m.Act | Rejected | None:
        """Carry out what the view-model made of an input: note it, send its action."""
        if step.noted:
            self.app.note_input()
        if step.action is None:
            return None
        result = self.app.session.act_now(step.action)
        self.vm.sent(step, result, time.time_ns())
        return result

    @property
    def selected(self) -> int | None:
        return self.vm.selected

    @property
    def slots(self) -> list[Slot]:
        return self.vm.slots

    def select(self, slot: int) -> m.Act | Rejected | None:
        """Key 1/2/3: select that hand card (or, during a stalemate pick, place it)."""
        return self._send(self.vm.select(self.app.session.model, slot, time.time_ns()))

    def play(self, pile: int, slot: int | None = None) -> m.Act | Rejected | None:
        """Left/Right (A/D): play the selected card (or ``slot``) on pile 0/1. Returns the result."""
        return self._send(self.vm.play(self.app.session.model, pile, slot, time.time_ns()))

    def pick(self, slot: int) -> m.Act | Rejected | None:
        return self._send(self.vm.pick(self.app.session.model, slot))

    def on_key_press(self, symbol: int, modifiers: int) -> bool:
        if symbol in KEYS_SLOT:
            self.select(KEYS_SLOT[symbol])
            return True
        if symbol in KEYS_PILE:
            self.play(KEYS_PILE[symbol])
            return True
        if symbol == key.ESCAPE:
            model = self.app.session.model
            running = model is not None and MatchState.read(model.match_state).status in ("playing", "between")
            now = time.time_ns()
            if running and now - self.esc_at > 2 * NS:
                self.esc_at = now
                self.vm.say("press Esc again to leave this match (you forfeit it)", now, (255, 220, 120, 255))
            else:
                self.app.back_to_menu()
            return True
        if symbol == key.P:  # the HUD's second line: the last play's time in parts
            self.app.toggle_play_parts()
            return True
        if symbol == key.R and self.app.session.player is not None and self.app.session.player.match_over():
            self.app.goto("results")
            return True
        return False

    def on_mouse_press(self, x: int, y: int, button: int, modifiers: int) -> bool:
        if button != mouse.LEFT:
            return False
        model = self.app.session.model
        state = self.vm.playing_state(model)
        if state is None:
            return False
        slot = self.layout.hand_slot_at(x, y)
        if slot is not None:
            if state.phase == "picking":
                self.pick(slot)
                return True
            before = self.vm.selected
            if self.vm.hold(model, slot):
                if before != slot:
                    self.app.note_input()
                self.drag_slot, self.drag_from, self.drag_pos = slot, (x, y), (float(x), float(y))
            return True
        pile = self.layout.pile_at(x, y)
        if pile is not None and self.vm.selected is not None:
            self.play(pile)
            return True
        return False

    def on_mouse_drag(self, x: int, y: int, dx: int, dy: int, buttons: int, modifiers: int) -> bool:
        if self.drag_slot is None or self.drag_from is None:
            return False
        if not self.dragging and abs(x - self.drag_from[0]) + abs(y - self.drag_from[1]) > 8:
            self.dragging = True
        if self.dragging:
            self.drag_pos = (float(x), float(y))
        return True

    def on_mouse_release(self, x: int, y: int, button: int, modifiers: int) -> bool:
        if self.drag_slot is None:
            return False
        slot, was_dragging = self.drag_slot, self.dragging
        self.drag_slot, self.drag_from, self.dragging = None, None, False
        if was_dragging:
            pile = self.layout.pile_at(x, y)
            if pile is not None:
                self.play(pile, slot)
        return True

    # ------------------------------------------------------------------ for tests

    def describe(self) -> dict[str, object]:
        """What is drawn right now, as data."""
        def show(v: CardView) -> str | None:
            if v.style == "face":
                return str(v.card)
            return {"back": "back", "unknown": "?", "slot": None, "none": None}[v.style]

        return {
            "scene": self.name,
            "phase": self.board.phase if self.board is not None else None,
            "piles": [show(v) for v in self.piles],
            "pile_rings": [v.ring_kind for v in self.piles],
            "hand": [show(v) for v in self.hand],
            "opp_hand": sum(1 for v in self.opp if v.style == "back"),
            "draw": [self.my_draw.mid.text, self.opp_draw.mid.text],
            "message": self.msg_lbl.text,
            "big": self.big_c.text or self.big_s.text,
            "sub": self.sub_c.text or self.sub_s.text,
            "flights": [str(f.card) for f in self.vm.flights],
            "ghost": show(self.ghost),
            "timer_bar": self.bar.used > 0,
        }
