"""The BLINK table: draw the predicted state, turn keys and mouse into plays, animate what the relay says.

How this works
--------------
Every frame ``update`` reads the session's ``ClientModel``: ``model.state()`` is the *predicted*
state (the relay's last confirmed view with your unanswered plays applied), so a play made by a key
press in this frame's event dispatch is already in it. When anything that is drawn changed (the
model's version, the selection, the window size) the drawables are brought in line with it
(``_sync``); in between, only animations move (``_animate``). Nothing is recreated per frame.

What is drawn:
- both centre piles with their top cards (a pending play -- predicted, not yet confirmed -- has a
  dashed amber ring), your hand face up in stable slots (keys 1 2 3 under them), the opponent's hand
  as backs, both draw piles with their counts;
- a bounced play flies back from the pile to its hand slot with a red ring, and the reason
  (``texts.reason_text``) is written above your hand; landed plays click, bounces buzz;
- the countdown, the stalemate pause and its resolution (a flip, or choosing a card with a timer
  bar during ``picking``), the result of each game; at the end of the match the app switches to
  the results scene.

Input becomes actions: 1/2/3 select a hand card (during a stalemate pick they choose it), Left/Right
or A/D play the selected card on pile 0/1; the mouse can click a card then a pile, or drag a card
onto a pile. A play goes through ``Session.act_now`` (predict now, publish in the background).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import pyglet
from pyglet.window import key, mouse

from protocol.rules import blink
from protocol.rules.base import Rejected
from client.window.cards import FELT, FONT, CardView, Layer, glyph_font, label, set_color, set_text
from client.window.layout import EMPTY, Rect, TableLayout, stable_slots, table_layout
from client.window.mesh import Mesh, mix
from client.window import geometry as geo
from client.window.scenes.base import Scene, newer
from client.window import texts

NS = 1_000_000_000
BOUNCE_S = 0.42
FLASH_S = 0.45
MESSAGE_S = 2.2
SHAKE_S = 0.3
WARM_BUDGET_S = 0.0015  # start-up work done in quiet frames (see _warm_steps)

KEYS_SLOT = {key._1: 0, key._2: 1, key._3: 2, key._4: 3, key._5: 4, key._6: 5, key._7: 6, key._8: 7, key._9: 8,
             key.NUM_1: 0, key.NUM_2: 1, key.NUM_3: 2, key.NUM_4: 3, key.NUM_5: 4, key.NUM_6: 5, key.NUM_7: 6,
             key.NUM_8: 7, key.NUM_9: 8}
KEYS_PILE = {key.LEFT: 0, key.A: 0, key.RIGHT: 1, key.D: 1}


@dataclass
class Flight:
    """A card flying from a pile back to your hand (a bounce)."""

    card: blink.Card
    start: tuple[float, float]
    t0: int
    slot_card: Any  # the card to look for in the hand slots when computing the target


def _ease_out(f: float) -> float:
    f = max(0.0, min(1.0, f))
    return 1 - (1 - f) ** 3


def _panel(w: float, h: float, rgba: tuple[int, int, int, int]) -> geo.Tris:
    t = geo.Tris()
    geo.rounded_rect(t, w, h, min(h / 2, 18.0), rgba)
    return t


class TableScene(Scene):
    name = "table"
    clear_colour = (0.06, 0.30, 0.20, 1.0)  # card-table felt

    def __init__(self, app: Any) -> None:
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
        self.slots: list[Any] = [EMPTY] * 3
        self.selected: int | None = None
        self.flights: list[Flight] = []
        self.flash: dict[int, tuple[str, int]] = {}  # pile -> (ring kind, start ns)
        self.slot_flash: dict[int, tuple[str, int]] = {}
        self.shake: tuple[int, int] | None = None  # (slot, start ns): a locally refused play
        self.message = ("", 0, (255, 90, 80, 255))  # text, start ns, colour
        self.drag_slot: int | None = None
        self.drag_from: tuple[float, float] | None = None
        self.dragging = False
        self.drag_pos = (0.0, 0.0)
        self.esc_at = 0
        self.over_at: int | None = None  # when the match was seen to be over
        self._key: Any = None
        self._local = 0  # bumped by local changes that must redraw (messages, selection)
        self._last_bounce: Any = None
        self._last_verdict: Any = None
        self._last_event: Any = None
        self._seen_game = -1
        self._pick_deadline: int | None = None
        self._go_at: int | None = None
        self._start_at: int | None = None
        self._last_tick = -1
        self._warm: Any = None
        self._band_key: Any = None
        self._bar_key: Any = None
        self._bar_y = 0.0
        self.state: Any = None
        self.seat: int | None = None
        self.resize(*app.size)

    # ------------------------------------------------------------------ frame

    def resize(self, width: int, height: int) -> None:
        hand_size = max(3, len(self.hand))
        self.layout = table_layout(width, height, hand_size)
        lay = self.layout
        f = lay.font
        for lbl, size in ((self.score_lbl, f * 1.15), (self.info_lbl, f * 0.95), (self.opp_name_lbl, f * 1.05),
                          (self.opp_info_lbl, f * 0.85), (self.msg_lbl, f * 1.3), (self.hint_lbl, f * 0.9),
                          (self.big_c, f * 3.2), (self.sub_c, f * 1.15), (self.big_s, f * 1.6),
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

    def _warm_up(self, lay: TableLayout) -> Any:
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

    def _warm_steps(self, faces: list[tuple[Any, ...]]) -> Any:
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

    def update(self, now_ns: int) -> None:
        session = self.app.session
        model = session.model
        if model is not None and model.game and model.game != "blink":
            self.app.goto("table")  # a match of another game (joined or watched by code)
            return
        state = model.state() if model is not None else None
        if model is not None and state is not None:
            self._watch(model, state, now_ns)
        key_now = (None if model is None else model.version, id(state), session.status, session.message,
                   self.layout, self.selected, self.dragging, self._local)
        if key_now != self._key:
            self._key = key_now
            self._sync(model, state, now_ns)
            self.display_version += 1
        elif self._warm is not None:
            until = time.perf_counter() + WARM_BUDGET_S  # a little of it in each quiet frame
            while time.perf_counter() < until:
                if next(self._warm, StopIteration) is StopIteration:
                    self._warm = None
                    break
        self._animate(model, state, now_ns)
        if self.over_at is not None and now_ns - self.over_at > 1.6 * NS:
            self.app.goto("results")

    # ------------------------------------------------------------------ reading the model

    def _watch(self, model: Any, state: Any, now_ns: int) -> None:
        """New bounces, verdicts and public events since the last frame: sounds and animations."""
        sounds = self.app.sounds
        if model.predictor is not None and model.predictor.game != self._seen_game:
            self._seen_game = model.predictor.game
            self.over_at = None
            self.selected = None
            self.flights.clear()
        new_b = newer(model.bounces, self._last_bounce)
        if model.bounces:
            self._last_bounce = model.bounces[-1]
        for b in new_b:
            if isinstance(b.action, blink.PlayCard):
                try:
                    card = blink.Card.parse(b.action.card, state.settings.deck)
                except ValueError:
                    continue
                pile = self.layout.piles[b.action.pile if b.action.pile in (0, 1) else 0]
                self.flights.append(Flight(card, (pile.x, pile.y), now_ns, card))
            self._say(texts.reason_text(b.code), now_ns)
            sounds.play("bounce")
        new_v = newer(model.verdicts, self._last_verdict)
        if model.verdicts:
            self._last_verdict = model.verdicts[-1]
        for v in new_v:
            if v.ok and isinstance(v.action, blink.PlayCard):
                sounds.play("land")
                self.flash[v.action.pile] = ("landed", now_ns)
        new_e = newer(model.events, self._last_event)
        if model.events:
            self._last_event = model.events[-1]
        for ev in new_e:
            self._on_event(ev, model, state, now_ns)
        if self.over_at is None and (model.match_state or {}).get("status") == "over":
            self.over_at = now_ns

    def _on_event(self, ev: Any, model: Any, state: Any, now_ns: int) -> None:
        sounds = self.app.sounds
        offset = model.clock.offset_ns or 0
        d = ev.data
        if ev.type == "game_started":
            cd = int(state.settings.countdown_s * NS) if state is not None else 3 * NS
            self._start_at = ev.ts - offset + cd
            self._go_at = None
            self._last_tick = -1
        elif ev.type == "race_started":
            self._go_at = now_ns
            self._start_at = None
            sounds.play("go")
        elif ev.type == "card_played" and d.get("seat") != model.seat:
            self.flash[int(d.get("pile", 0)) % 2] = ("flash", now_ns)
        elif ev.type == "card_flipped" or ev.type == "card_picked":
            self.flash[int(d.get("pile", 0)) % 2] = ("flash", now_ns)
        elif ev.type == "stalemate":
            sounds.play("stalemate")
        elif ev.type == "pick_started":
            self._pick_deadline = ev.ts - offset + int(float(d.get("seconds", 5.0)) * NS)
        elif ev.type == "game_result":
            if d.get("winner_seat") == model.seat:
                sounds.play("win")
        elif ev.type == "match_over":
            self.over_at = now_ns

    def _pending_plays(self, model: Any) -> set[tuple[str, int]]:
        pred = model.predictor
        if pred is None:
            return set()
        return {(p.action.card, p.action.pile) for p in pred.pending
                if isinstance(p.action, blink.PlayCard) and p.accepted_seq is None}

    # ------------------------------------------------------------------ drawing the state

    def _sync(self, model: Any, state: Any, now_ns: int) -> None:
        lay = self.layout
        self.state = state
        if model is None or state is None or model.seat is None or not isinstance(state, blink.State):
            self._sync_waiting(model)
            return
        seat = self.seat = model.seat
        opp = 1 - seat
        names = list(model.players) + ["", ""]
        ms = model.match_state or {}
        wins = list(ms.get("wins") or [0, 0])
        # your hand, in stable slots
        size = max(3, state.settings.hand_size)
        while len(self.hand) < size:
            self.hand.append(CardView(self.batch, self.l_table))
            self.key_lbls.append(label(self.batch, self.l_table.text, 13, (210, 230, 220, 255), "center", "center",
                                       bold=True))
        if len(lay.hand) < size:
            self.resize(lay.w, lay.h)
            lay = self.layout
        self.slots = stable_slots(self.slots, state.hands[seat], size)
        picking = state.phase == "picking" and not state.picked[seat]
        my_pick = state.picks[seat] if state.phase == "picking" else None
        for i, view in enumerate(self.hand):
            r = lay.hand[i] if i < len(lay.hand) else lay.hand[-1]
            card = self.slots[i] if i < len(self.slots) else EMPTY
            style = "face" if isinstance(card, blink.Card) else ("unknown" if card is None else "slot")
            alpha = 1.0
            if (self.dragging and i == self.drag_slot) or (isinstance(card, blink.Card) and any(
                    f.card == card for f in self.flights)):
                alpha = 0.3
            view.show(card, style, r.w, r.h, alpha)
            view.move(r.x, r.y + (r.h * 0.08 if i == self.selected else 0.0))
            ring = None
            if i == self.selected:
                ring = "select"
            elif picking and style == "face":
                ring = "pick"
            elif my_pick is not None and card == my_pick:
                ring = "pending"
            view.set_ring(ring)
            kl = self.key_lbls[i]
            set_text(kl, str(i + 1) if style != "slot" and i < 9 else "")
            set_color(kl, (255, 255, 255, 255) if i == self.selected else (190, 215, 200, 255))
        # the opponent's hand
        n_opp = len(state.hands[opp])
        for i, view in enumerate(self.opp):
            r = lay.opp_hand[i] if i < len(lay.opp_hand) else lay.opp_hand[-1]
            view.show(None, "back" if i < n_opp else "slot", r.w, r.h)
            view.move(r.x, r.y)
        # the centre piles
        pending = self._pending_plays(model)
        for p, view in enumerate(self.piles):
            r = lay.piles[p]
            top = state.top(p)
            is_pending = top is not None and (str(top), p) in pending
            if not state.piles[p]:
                view.show(None, "slot", r.w, r.h)
            elif top is None:
                view.show(None, "back", r.w, r.h)
            else:
                view.show(top, "face", r.w, r.h, 0.82 if is_pending else 1.0)
            view.move(r.x, r.y)
            view.set_ring("pending" if is_pending else None)
            owner = "your" if p == seat else f"{names[p]}'s"
            # no changing numbers here: a new text is a new text layout, and this is every play
            set_text(self.pile_lbls[p], f"←  A    {owner} pile" if p == 0 else f"{owner} pile    D  →")
        # draw piles
        for view, r, who, lbl in ((self.my_draw, lay.my_draw, seat, self.draw_lbls[0]),
                                  (self.opp_draw, lay.opp_draw, opp, self.draw_lbls[1])):
            n = len(state.draw[who])
            if n:
                view.show(None, "back", r.w, r.h, mid=str(n))
            else:
                view.show(None, "slot", r.w, r.h, mid="0")
            view.move(r.x, r.y)
            set_text(lbl, "your draw pile" if who == seat else "draw pile")
        # text
        set_text(self.score_lbl, texts.score_line(names[:2], wins, seat))
        best_of = ms.get("best_of") or state.settings.best_of
        gi = ms.get("game_index", 0) or 0
        code = model.match or ""
        set_text(self.info_lbl, f"game {gi + 1} · best of {best_of} · match {code}")
        set_text(self.opp_name_lbl, names[opp] or "opponent")
        set_text(self.opp_info_lbl, "")
        if state.phase == "picking" and not state.picked[seat]:
            set_text(self.hint_lbl, texts.PICK_HINTS)
        elif state.phase == "over" or ms.get("status") == "over":
            set_text(self.hint_lbl, "Esc  menu")
        else:
            set_text(self.hint_lbl, texts.KEY_HINTS)

    def _sync_waiting(self, model: Any) -> None:
        for view in self.hand + self.opp + self.piles + [self.my_draw, self.opp_draw]:
            view.show(None, "none", 10, 10)
            view.set_ring(None)
        for lbl in self.key_lbls + self.pile_lbls + self.draw_lbls + [self.score_lbl, self.opp_name_lbl,
                                                                      self.opp_info_lbl]:
            set_text(lbl, "")
        set_text(self.hint_lbl, "Esc  menu")
        set_text(self.info_lbl, "BLINK")

    # ------------------------------------------------------------------ per-frame animation

    def _animate(self, model: Any, state: Any, now_ns: int) -> None:
        lay = self.layout
        # flights: bounced cards returning to the hand
        if self.flights:
            f = self.flights[0]
            prog = (now_ns - f.t0) / (BOUNCE_S * NS)
            if prog >= 1.0:
                self.flights.pop(0)
                target = self._slot_of(f.card)
                if target is not None:
                    self.slot_flash[target] = ("bounce", now_ns)
                self.ghost.show(None, "none", 10, 10)
                self.ghost.set_ring(None)
                self._local += 1
            else:
                target = self._slot_of(f.card)
                r = lay.hand[target] if target is not None else Rect(lay.w / 2, lay.hand[0].y, lay.card_w, lay.card_h)
                e = _ease_out(prog)
                x = f.start[0] + (r.x - f.start[0]) * e
                y = f.start[1] + (r.y - f.start[1]) * e + lay.card_h * 0.35 * (1 - (2 * prog - 1) ** 2)
                self.ghost.show(f.card, "face", lay.card_w, lay.card_h)
                self.ghost.move(x, y)
                self.ghost.set_ring("bounce")
        # rings that fade: landed / opponent play on a pile, bounce on a hand slot
        for p in list(self.flash):
            kind, t0 = self.flash[p]
            a = 1.0 - (now_ns - t0) / (FLASH_S * NS)
            view = self.piles[p]
            if view.ring_kind == "pending":
                continue
            if a <= 0:
                del self.flash[p]
                view.set_ring(None)
            else:
                view.set_ring(kind, a)
        for s in list(self.slot_flash):
            kind, t0 = self.slot_flash[s]
            a = 1.0 - (now_ns - t0) / (FLASH_S * 2 * NS)
            if s >= len(self.hand):
                del self.slot_flash[s]
                continue
            view = self.hand[s]
            if a <= 0 or s == self.selected:
                del self.slot_flash[s]
                if s != self.selected:
                    view.set_ring(None)
            else:
                view.set_ring(kind, a)
        # a locally refused play shakes its card
        if self.shake is not None:
            slot, t0 = self.shake
            prog = (now_ns - t0) / (SHAKE_S * NS)
            if slot < len(self.hand) and slot < len(lay.hand):
                r = lay.hand[slot]
                dx = 0.0 if prog >= 1 else (lay.card_w * 0.08) * (1 - prog) * (1 if int(prog * 10) % 2 else -1)
                self.hand[slot].move(r.x + dx, r.y + (r.h * 0.08 if slot == self.selected else 0.0))
            if prog >= 1:
                self.shake = None
        # dragging
        if self.dragging and self.drag_slot is not None and self.drag_slot < len(self.slots):
            card = self.slots[self.drag_slot]
            if isinstance(card, blink.Card):
                self.drag.show(card, "face", lay.card_w, lay.card_h)
                self.drag.move(*self.drag_pos)
                self.drag.set_ring("select")
        elif self.drag.style != "none":
            self.drag.show(None, "none", 10, 10)
            self.drag.set_ring(None)
        # the message line
        text, t0, colour = self.message
        if text:
            age = (now_ns - t0) / NS
            if age > MESSAGE_S:
                self.message = ("", 0, colour)
                set_text(self.msg_lbl, "")
            else:
                set_text(self.msg_lbl, text)
                a = 255 if age < MESSAGE_S - 0.5 else int(255 * (MESSAGE_S - age) / 0.5)
                set_color(self.msg_lbl, (colour[0], colour[1], colour[2], max(0, a)))
        elif self.msg_lbl.text:
            set_text(self.msg_lbl, "")
        self._overlay(model, state, now_ns)

    def _slot_of(self, card: Any) -> int | None:
        for i, c in enumerate(self.slots):
            if c == card and isinstance(c, blink.Card):
                return i
        return None

    def _overlay(self, model: Any, state: Any, now_ns: int) -> None:
        """The text band: over the piles for connection status, the countdown and a game's result;
        between the piles and your hand (``status``) for GO, a stalemate and the pick timer, so the
        cards stay in view while they matter."""
        lay = self.layout
        session = self.app.session
        big, sub, where, timer = "", "", "", None
        if model is None or state is None or not isinstance(state, blink.State):
            if session.status == "error":
                big, sub = "Cannot play", session.message
            elif session.status == "waiting" and model is not None and model.match:
                big = f"Match code  {model.match}"
                sub = (f"waiting for an opponent — they run:  blink play --server {session.server_url} "
                       f"--match {model.match}")
            else:
                big, sub = "BLINK", session.message or "connecting…"
            where = "screen"
        else:
            seat = model.seat if model.seat is not None else 0
            ms = model.match_state or {}
            if state.phase == "countdown":
                if self._start_at is not None:
                    left = (self._start_at - now_ns) / NS
                    n = max(1, int(left) + 1) if left > 0 else 0
                    big = str(n) if n else "GO!"
                    if n != self._last_tick and n > 0:
                        self._last_tick = n
                        self.app.sounds.play("tick")
                else:
                    big = "Get ready"
                sub, where = "match any colour, shape or count", "centre"
            elif state.phase == "running" and self._go_at is not None and now_ns - self._go_at < 0.7 * NS:
                big, where = "GO!", "status"
            elif state.phase == "stalled":
                big = "Stalemate"
                sub = ("nobody can play — both flip a new card onto their own pile" if state.resolution == "flip"
                       else "nobody can play — each places a hand card on their own pile")
                where = "status"
            elif state.phase == "picking":
                left = max(0.0, ((self._pick_deadline or now_ns) - now_ns) / NS)
                total = state.settings.pick_time_s
                if state.picked[seat]:
                    big = "Card chosen"
                    sub = f"waiting for {self._name(model, 1 - seat)} — {left:.1f} s"
                else:
                    big = "Stalemate: choose a card"
                    sub = f"press 1 2 3 (or click) to place it on your own pile — {left:.1f} s"
                where = "status"
                timer = max(0.0, min(1.0, left / total)) if total > 0 else 0.0
            elif state.phase == "over" or ms.get("status") in ("between", "over"):
                if state.tie or state.winner is None:
                    big = "Tie game"
                else:
                    big = "You win the game!" if state.winner == seat else f"{self._name(model, state.winner)} wins the game"
                sub = texts.score_line(list(model.players), list(ms.get("wins") or [0, 0]), seat)
                sub += "   ·   match over" if ms.get("status") == "over" else "   ·   next game starting…"
                where = "centre"
        big_lbl, sub_lbl = (self.big_s, self.sub_s) if where == "status" else (self.big_c, self.sub_c)
        for lbl in (self.big_c, self.sub_c, self.big_s, self.sub_s):
            if lbl is not big_lbl and lbl is not sub_lbl:
                set_text(lbl, "")
        set_text(big_lbl, big)
        set_text(sub_lbl, sub)
        f = lay.font
        if where == "status":
            band_y, band_h = lay.status_y, lay.status_h * 0.98
        elif where == "centre":
            band_y, band_h = lay.centre_y, f * 7.6
        elif where == "screen":
            band_y, band_h = lay.h / 2, f * 9.0
        else:
            band_y, band_h = lay.centre_y, 0.0
        band_key = (where, lay, timer is not None, bool(sub))
        if band_key != self._band_key:
            self._band_key = band_key
            if band_h > 0:
                self.band.set(_panel(lay.w * 0.94, band_h, (8, 20, 16, 205)))
                self.band.move(lay.w / 2, band_y)
            else:
                self.band.set(None)
            if where == "status":
                big_lbl.position = (lay.w / 2, band_y + f * (0.95 if sub or timer is not None else 0.0), 0)
                sub_lbl.position = (lay.w / 2, band_y - f * 0.55, 0)
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

    def _name(self, model: Any, seat: int) -> str:
        names = list(model.players)
        return names[seat] if 0 <= seat < len(names) else "opponent"

    def _say(self, text: str, now_ns: int, colour: tuple[int, int, int, int] = (255, 90, 80, 255)) -> None:
        self.message = (text, now_ns, colour)
        self._local += 1

    # ------------------------------------------------------------------ input -> actions

    def _playable_state(self) -> tuple[Any, Any] | None:
        model = self.app.session.model
        state = model.state() if model is not None else None
        if state is None or model.seat is None or not isinstance(state, blink.State):
            return None
        return model, state

    def select(self, slot: int) -> None:
        """Key 1/2/3: select that hand card (or, during a stalemate pick, place it)."""
        ms = self._playable_state()
        if ms is None:
            return
        model, state = ms
        now = time.time_ns()
        if state.phase == "picking":
            self.pick(slot)
            return
        if slot >= len(self.slots) or not isinstance(self.slots[slot], blink.Card):
            self._say("no card there yet", now, (255, 220, 120, 255))
            return
        self.app.note_input()
        self.selected = None if self.selected == slot else slot

    def play(self, pile: int, slot: int | None = None) -> Any:
        """Left/Right (A/D): play the selected card (or ``slot``) on pile 0/1. Returns the result."""
        ms = self._playable_state()
        if ms is None:
            return None
        model, state = ms
        now = time.time_ns()
        slot = self.selected if slot is None else slot
        if slot is None:
            self._say("choose a card first: 1 2 3", now, (255, 220, 120, 255))
            return None
        card = self.slots[slot] if slot < len(self.slots) else EMPTY
        if not isinstance(card, blink.Card):
            self._say("that card is still being drawn", now, (255, 220, 120, 255))
            return None
        self.app.note_input()
        result = self.app.session.act_now(blink.PlayCard(str(card), pile))
        if isinstance(result, Rejected):
            self._say(texts.reason_text(result.code), now)
            self.shake = (slot, now)
            self.app.sounds.play("bounce")
        else:
            self.selected = None
        self._local += 1
        return result

    def pick(self, slot: int) -> Any:
        ms = self._playable_state()
        if ms is None:
            return None
        model, state = ms
        now = time.time_ns()
        card = self.slots[slot] if slot < len(self.slots) else EMPTY
        if not isinstance(card, blink.Card):
            return None
        self.app.note_input()
        result = self.app.session.act_now(blink.PickCard(str(card)))
        if isinstance(result, Rejected):
            self._say(texts.reason_text(result.code), now)
        self._local += 1
        return result

    def on_key_press(self, symbol: int, modifiers: int) -> bool:
        if symbol in KEYS_SLOT:
            self.select(KEYS_SLOT[symbol])
            return True
        if symbol in KEYS_PILE:
            self.play(KEYS_PILE[symbol])
            return True
        if symbol == key.ESCAPE:
            model = self.app.session.model
            running = (model is not None and (model.match_state or {}).get("status") in ("playing", "between"))
            now = time.time_ns()
            if running and now - self.esc_at > 2 * NS:
                self.esc_at = now
                self._say("press Esc again to leave this match (you forfeit it)", now, (255, 220, 120, 255))
            else:
                self.app.back_to_menu()
            return True
        if symbol == key.R and self.app.session.player is not None and self.app.session.player.match_over():
            self.app.goto("results")
            return True
        return False

    def on_mouse_press(self, x: int, y: int, button: int, modifiers: int) -> bool:
        if button != mouse.LEFT:
            return False
        ms = self._playable_state()
        if ms is None:
            return False
        model, state = ms
        slot = self.layout.hand_slot_at(x, y)
        if slot is not None:
            if state.phase == "picking":
                self.pick(slot)
                return True
            if slot < len(self.slots) and isinstance(self.slots[slot], blink.Card):
                if self.selected != slot:
                    self.app.note_input()
                self.selected = slot
                self.drag_slot, self.drag_from, self.drag_pos = slot, (x, y), (float(x), float(y))
            return True
        pile = self.layout.pile_at(x, y)
        if pile is not None and self.selected is not None:
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
            self._local += 1
        return True

    # ------------------------------------------------------------------ for tests

    def describe(self) -> dict[str, Any]:
        """What is drawn right now, as data."""
        def show(v: CardView) -> Any:
            if v.style == "face":
                return str(v.card)
            return {"back": "back", "unknown": "?", "slot": None, "none": None}[v.style]

        return {
            "scene": self.name,
            "phase": getattr(self.state, "phase", None),
            "piles": [show(v) for v in self.piles],
            "pile_rings": [v.ring_kind for v in self.piles],
            "hand": [show(v) for v in self.hand],
            "opp_hand": sum(1 for v in self.opp if v.style == "back"),
            "draw": [self.my_draw.mid.text, self.opp_draw.mid.text],
            "message": self.msg_lbl.text,
            "big": self.big_c.text or self.big_s.text,
            "sub": self.sub_c.text or self.sub_s.text,
            "flights": [str(f.card) for f in self.flights],
            "ghost": show(self.ghost),
            "timer_bar": self.bar.used > 0,
        }
