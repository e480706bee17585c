"""The BLINK table's view-model: what the table shows, from the client model and the time.

How this works
--------------
``TableViewModel`` is fed the session's ``ClientModel`` once per frame (``observe``): new bounces,
verdicts and public events become *cues* (sounds for the renderer to play), bounce flights, ring
flashes, the message line, and the times the countdown ends, GO was called and the stalemate pick
ends. From that it answers, as plain data:

- ``board(model)``: the static picture -- your hand in stable slots (a selected card raised, a
  pending stalemate pick ringed), the opponent's hand as backs, the pile tops (a play of yours the
  relay has not answered yet -- predicted, pending -- half faded with a dashed ring), the draw
  piles with their counts, the score line, the info line and the key hints. It changes only when
  the model, the selection or a flight changes (``board_key``), so the renderer rebuilds only then;
- ``band(model, session, now)``: the text band -- "Cannot play"/"Match code"/"BLINK" before a game,
  the countdown ("3", "2", "1", "GO!") over the face-down piles; GO!, the stalemate and the pick
  with its timer fraction, a game's result with the score line in the status band under the piles;
- ``flight(now)``, ``pile_flash(now)``, ``slot_flash``, ``shake(now)``, ``message(now)``: the
  animations, each as where/how far it is at ``now``;
- ``over_at``: when the match was seen to be over (the scene goes to the results 1.6 s later).

Input is asked here too: ``select``/``play``/``pick`` turn a slot or pile into the action to send
(or a message saying why not), and ``refused`` records a local refusal. Nothing here touches
pyglet, the network or a clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from protocol import messages as m
from protocol.events import TypedEvent
from protocol.match import GameResult, GameStarted, MatchOver
from protocol.rules import blink
from protocol.rules.base import Rejected
from client.matchstate import MatchState
from client.model import Bounce, Verdict
from client.window import texts
from client.window.layout import EMPTY, Empty, stable_slots
from client.window.sounds import Cue
from client.window.viewmodels.clientview import ClientView, state_of
from client.window.viewmodels.feed import EventFeed, Feed

if TYPE_CHECKING:
    from client.window.session import SessionStatus

NS = 1_000_000_000
BOUNCE_S = 0.42
FLASH_S = 0.45
MESSAGE_S = 2.2
SHAKE_S = 0.3
GO_S = 0.7
RESULTS_AFTER_S = 1.6

RED = (255, 90, 80, 255)
AMBER_MSG = (255, 220, 120, 255)
RGBA = tuple[int, int, int, int]

#: How a card place is drawn: a card's face, its back, a back with "?" (a card being drawn), an
#: empty slot's outline, or nothing.
CardStyle = Literal["face", "back", "unknown", "slot", "none"]
#: The ring around a hand card or a pile top: selected, to pick (a stalemate), your play waiting
#: for the relay's answer.
HandRing = Literal["select", "pick", "pending"]
#: A ring that flashes and fades: your play landed, another play on a pile, a card bounced back.
FlashRing = Literal["landed", "flash", "bounce"]
RingKind = HandRing | FlashRing
#: Where the text band is drawn: over the whole screen (before a game), over the piles, in the
#: status band between the piles and your hand, or nowhere.
BandPlace = Literal["screen", "centre", "status", ""]
#: A hand slot: a card, a card not known yet (being drawn), or no card.
Slot = blink.Card | None | Empty


@dataclass(frozen=True)
class Flight:
    """A card flying from a pile back to your hand (a bounce)."""

    card: blink.Card
    pile: int
    t0: int


@dataclass(frozen=True)
class CardShow:
    """One card place: how it is drawn, its ring, and ``mid`` the text in its middle (a draw pile's
    count)."""

    card: blink.Card | None = None
    style: CardStyle = "none"
    alpha: float = 1.0
    ring: HandRing | None = None
    raised: bool = False
    mid: str = ""


@dataclass(frozen=True)
class TableBoard:
    playing: bool
    hand: tuple[CardShow, ...]
    keys: tuple[tuple[str, bool], ...]  # the label under each hand slot, and whether it is selected
    opp_hand: tuple[CardShow, ...]
    piles: tuple[CardShow, ...]
    pile_labels: tuple[str, ...]
    draws: tuple[CardShow, CardShow]  # yours, theirs
    draw_labels: tuple[str, str]
    score: str
    info: str
    opp_name: str
    hint: str
    phase: str | None = None  # the phase of the state drawn


def waiting_text(model: ClientView, now_ns: int) -> str | None:
    """"waiting for X to reconnect (25 s)" while another player's connection is down (their seat
    is kept for the match's grace period), or None. ``now_ns`` is the client's clock, as the
    model's ``away`` times are."""
    for seat, (since_ns, grace_s) in sorted(model.away.items()):
        if seat == model.seat:
            continue
        left = max(0.0, grace_s - (now_ns - since_ns) / NS)
        return f"waiting for {name_of(model, seat)} to reconnect ({left:.0f} s)"
    return None


@dataclass(frozen=True)
class Band:
    """The text band: ``where`` it is drawn; ``timer`` the pick timer's fraction left, or None."""

    big: str = ""
    sub: str = ""
    where: BandPlace = ""
    timer: float | None = None


@dataclass(frozen=True)
class Step:
    """What an input did: ``action`` to send (None: nothing), ``noted`` whether the picture changed
    because of it (it must show on the next frame)."""

    action: blink.Action | None = None
    noted: bool = False
    slot: int | None = None  # the hand slot the action plays from


class TableViewModel:
    def __init__(self) -> None:
        self.slots: list[Slot] = [EMPTY] * 3
        self.selected: int | None = None
        self.flights: list[Flight] = []
        self.flash: dict[int, tuple[FlashRing, int]] = {}  # pile -> (ring kind, start ns)
        self.slot_flash: dict[int, tuple[FlashRing, int]] = {}
        self.shaking: tuple[int, int] | None = None  # (slot, start ns): a locally refused play
        self.msg: tuple[str, int, RGBA] = ("", 0, RED)
        self.over_at: int | None = None
        self.start_at: int | None = None  # when the countdown ends (local clock)
        self.go_at: int | None = None
        self.pick_deadline: int | None = None
        self.cues: list[Cue] = []  # sounds to play, drained by the renderer
        self.version = 0  # bumped by local changes the board or the message line shows
        self._last_tick = -1
        self._seen_game = -1
        self._bounces: Feed[Bounce] = Feed()
        self._verdicts: Feed[Verdict] = Feed()
        self._events = EventFeed()

    # ------------------------------------------------------------------ reading the model

    def observe(self, model: ClientView | None, now_ns: int) -> None:
        """New bounces, verdicts and public events since the last frame."""
        if model is None:
            return
        state = model.state()
        if state is None:
            return
        if model.predictor is not None and model.predictor.game != self._seen_game:
            self._seen_game = model.predictor.game
            self.over_at = None
            self.selected = None
            self.flights.clear()
            self.version += 1
        for b in self._bounces.take(model.bounces):
            if isinstance(b.action, blink.PlayCard):
                try:
                    card = blink.Card.parse(b.action.card, state.settings.deck) if isinstance(state, blink.State) else None
                except ValueError:
                    card = None
                if card is not None:
                    self.flights.append(Flight(card, b.action.pile if b.action.pile in (0, 1) else 0, now_ns))
            self.say(texts.reason_text(b.code, blink.GAME), now_ns)
            self.cues.append("bounce")
        for v in self._verdicts.take(model.verdicts):
            if v.ok and isinstance(v.action, blink.PlayCard):
                self.cues.append("land")
                self.flash[v.action.pile] = ("landed", now_ns)
        for ev, what in self._events.take_current(model):
            self._on_event(ev, what, model, state, now_ns)
        if self.over_at is None and MatchState.read(model.match_state).over:
            self.over_at = now_ns

    def _on_event(self, ev: m.Event, what: TypedEvent, model: ClientView, state: object, now_ns: int) -> None:
        offset = model.clock.offset_ns or 0
        match what:
            case GameStarted():
                cd = int(state.settings.countdown_s * NS) if isinstance(state, blink.State) else 3 * NS
                self.start_at = ev.ts - offset + cd
                self.go_at = None
                self._last_tick = -1
            case blink.RaceStarted():
                self.go_at = now_ns
                self.start_at = None
                self.cues.append("go")
            case blink.CardPlayed(player=who, pile=pile) if who != model.seat:
                self.flash[pile % 2] = ("flash", now_ns)
            case blink.CardFlipped(pile=pile) | blink.CardPicked(pile=pile):
                self.flash[pile % 2] = ("flash", now_ns)
            case blink.Stalemate():
                self.cues.append("stalemate")
            case blink.PickStarted(seconds=seconds):
                self.pick_deadline = ev.ts - offset + int(seconds * NS)
            case GameResult(winner=winner):
                if winner == model.seat:
                    self.cues.append("win")
            case MatchOver():
                self.over_at = now_ns

    def results_due(self, now_ns: int) -> bool:
        """Time to show the results scene: the match has been over for a moment."""
        return self.over_at is not None and now_ns - self.over_at > RESULTS_AFTER_S * NS

    def drain_cues(self) -> list[Cue]:
        cues, self.cues = self.cues, []
        return cues

    @staticmethod
    def playing_state(model: ClientView | None) -> blink.State | None:
        """The BLINK state you play in, or None (no model, no game yet, spectating, another game)."""
        state = state_of(model, blink.State)
        if state is None or model is None or model.seat is None:
            return None
        return state

    @staticmethod
    def watched_state(model: ClientView | None) -> blink.State | None:
        """The BLINK state a spectator sees (hands and draw piles hidden), or None."""
        state = state_of(model, blink.State)
        if state is None or model is None or not model.spectating:
            return None
        return state

    # ------------------------------------------------------------------ the static picture

    def board_key(self, model: ClientView | None) -> object:
        """Changes whenever ``board`` would say something else."""
        state = model.state() if model is not None else None
        return (None if model is None else model.version, id(state), self.selected, self.version,
                tuple(f.card for f in self.flights))

    def board(self, model: ClientView | None, dragging: int | None = None) -> TableBoard:
        """What the table shows; ``dragging`` is the hand slot being dragged with the mouse (faded)."""
        state = self.playing_state(model)
        watching = state is None and self.watched_state(model) is not None
        if watching:
            state = self.watched_state(model)
        if state is None or model is None:
            seen = model.state() if model is not None else None
            return TableBoard(False, (CardShow(),) * len(self.slots), (("", False),) * len(self.slots),
                              (CardShow(),) * 3, (CardShow(), CardShow()), ("", ""), (CardShow(), CardShow()),
                              ("", ""), "", "BLINK", "", "Esc  menu", getattr(seen, "phase", None))
        seat = 0 if watching or model.seat is None else model.seat  # a spectator sees the first seat at the bottom
        opp = 1 - seat
        names = list(model.players) + ["", ""]
        ms = MatchState.read(model.match_state)
        wins = list(ms.wins) or [0, 0]
        size = max(3, state.settings.hand_size)
        self.slots = stable_slots(self.slots, state.hands[seat], size)
        picking = state.phase == "picking" and not state.picked[seat]
        my_pick = state.picks[seat] if state.phase == "picking" else None
        flying = {f.card for f in self.flights}
        hand: list[CardShow] = []
        keys: list[tuple[str, bool]] = []
        for i, card in enumerate(self.slots):
            style: CardStyle = "face" if isinstance(card, blink.Card) else (
                ("back" if watching else "unknown") if card is None else "slot")
            alpha = 0.3 if (dragging == i) or (isinstance(card, blink.Card) and card in flying) else 1.0
            ring: HandRing | None = None
            if i == self.selected:
                ring = "select"
            elif picking and style == "face":
                ring = "pick"
            elif my_pick is not None and card == my_pick:
                ring = "pending"
            hand.append(CardShow(card if isinstance(card, blink.Card) else None, style, alpha, ring, i == self.selected))
            keys.append((str(i + 1) if style != "slot" and i < 9 and not watching else "", i == self.selected))
        n_opp = len(state.hands[opp])
        opp_hand = tuple(CardShow(None, "back" if i < n_opp else "slot") for i in range(max(3, n_opp)))
        pending = pending_plays(model)
        piles: list[CardShow] = []
        labels: list[str] = []
        for p in (0, 1):
            top = state.top(p)
            is_pending = top is not None and (str(top), p) in pending
            if not state.piles[p]:
                piles.append(CardShow(None, "slot"))
            elif top is None:
                piles.append(CardShow(None, "back"))
            else:
                piles.append(CardShow(top, "face", 0.82 if is_pending else 1.0, "pending" if is_pending else None))
            owner = "your" if p == seat and not watching else texts.possessive(names[p])
            # no changing numbers here: a new text is a new text layout, and this is every play.
            # The keys only for a player: a spectator (and a replay, whose ← → step) plays no pile.
            if watching:
                labels.append(f"{owner} pile")
            else:
                labels.append(f"←  A    {owner} pile" if p == 0 else f"{owner} pile    D  →")
        draws = tuple(CardShow(None, "back", mid=str(len(state.draw[who]))) if state.draw[who]
                      else CardShow(None, "slot", mid="0") for who in (seat, opp))
        best_of = ms.best_of or state.settings.best_of
        gi = ms.game_number(ms.game_index or 0) - 1
        if watching:
            hint = f"watching {names[seat]} (bottom) and {names[opp]} (top)     Esc  menu"
        elif state.phase == "picking" and not state.picked[seat]:
            hint = texts.PICK_HINTS
        elif state.phase == "over" or ms.over:
            hint = "Esc  menu"
        else:
            hint = texts.KEY_HINTS
        return TableBoard(
            True, tuple(hand), tuple(keys), opp_hand, tuple(piles), tuple(labels),
            (draws[0], draws[1]), (f"{texts.possessive(names[seat])} draw pile" if watching else "your draw pile",
                                   "draw pile"),
            texts.score_line(names[:2], wins, seat), f"game {gi + 1} · best of {best_of} · match {model.match or ''}",
            names[opp] or "opponent", hint, state.phase)

    # ------------------------------------------------------------------ the text band

    def band(self, model: ClientView | None, status: SessionStatus, message: str, join_command: str,
             now_ns: int) -> Band:
        """The band's texts now (``status``/``message``/``join_command`` are the session's)."""
        state = state_of(model, blink.State)
        if model is None or state is None:
            if status == "error":  # a spectator (a bad watch code) was not going to play
                return Band("Cannot watch" if model is not None and model.spectating else "Cannot play", message,
                            "screen")
            if status == "waiting" and model is not None and model.match:
                if model.spectating:
                    return Band(f"Match code  {model.match}", "waiting for the players to join — you are watching",
                                "screen")
                return Band(f"Match code  {model.match}",
                            f"waiting for an opponent — they run:  {join_command} --match {model.match}", "screen")
            return Band("BLINK", message or "connecting…", "screen")
        seat = model.seat if model.seat is not None else -1  # -1: a spectator, nobody is "you"
        ms = MatchState.read(model.match_state)
        away = waiting_text(model, now_ns)
        if away is not None and not ms.over:
            return Band("Opponent away", away, "status")
        if state.phase == "countdown":
            if self.start_at is None:
                return Band("Get ready", "match any colour, shape or count", "centre")
            left = (self.start_at - now_ns) / NS
            n = max(1, int(left) + 1) if left > 0 else 0
            if n != self._last_tick and n > 0:
                self._last_tick = n
                self.cues.append("tick")
            return Band(str(n) if n else "GO!", "match any colour, shape or count", "centre")
        if state.phase == "running" and self.go_at is not None and now_ns - self.go_at < GO_S * NS:
            return Band("GO!", "", "status")
        if state.phase == "stalled":
            return Band("Stalemate", "nobody can play — both flip a new card onto their own pile"
                        if state.resolution == "flip" else "nobody can play — each places a hand card on their own pile",
                        "status")
        if state.phase == "picking":
            left = max(0.0, ((self.pick_deadline or now_ns) - now_ns) / NS)
            total = state.settings.pick_time_s
            timer = max(0.0, min(1.0, left / total)) if total > 0 else 0.0
            if 0 <= seat < len(state.picked) and state.picked[seat]:
                return Band("Card chosen", f"waiting for {name_of(model, 1 - seat)} — {left:.1f} s", "status", timer)
            return Band("Stalemate: choose a card",
                        f"press 1 2 3 (or click) to place it on your own pile — {left:.1f} s", "status", timer)
        if state.phase == "over" or ms.decided:
            if state.tie or state.winner is None:
                big = "Tie game"
            else:
                big = "You win the game!" if state.winner == seat else f"{name_of(model, state.winner)} wins the game"
            sub = texts.score_line(list(model.players), list(ms.wins) or [0, 0], seat)
            sub += "   ·   match over" if ms.over else "   ·   next game starting…"
            return Band(big, sub, "status")  # under the piles: the cards that decided it stay in view
        return Band()

    # ------------------------------------------------------------------ animations

    def flight(self, now_ns: int) -> tuple[Flight, float, int | None] | None:
        """The bounce in flight now: (flight, progress 0..1, the hand slot it returns to). A flight
        that has landed is dropped here and its slot flashes."""
        while self.flights:
            f = self.flights[0]
            prog = (now_ns - f.t0) / (BOUNCE_S * NS)
            target = self.slot_of(f.card)
            if prog < 1.0:
                return f, prog, target
            self.flights.pop(0)
            if target is not None:
                self.slot_flash[target] = ("bounce", now_ns)
            self.version += 1
        return None

    def pile_flash(self, pile: int, now_ns: int) -> tuple[FlashRing, float] | None:
        """A fading ring on a pile (your play landed, the opponent played, a flip): (kind, alpha)."""
        if pile not in self.flash:
            return None
        kind, t0 = self.flash[pile]
        a = 1.0 - (now_ns - t0) / (FLASH_S * NS)
        if a <= 0:
            del self.flash[pile]
            return None
        return kind, a

    def hand_flash(self, slot: int, now_ns: int) -> tuple[FlashRing, float] | None:
        """A fading ring on a hand slot a bounced card came back to: (kind, alpha)."""
        if slot not in self.slot_flash:
            return None
        kind, t0 = self.slot_flash[slot]
        a = 1.0 - (now_ns - t0) / (FLASH_S * 2 * NS)
        if a <= 0 or slot == self.selected or slot >= len(self.slots):
            del self.slot_flash[slot]
            return None
        return kind, a

    def shake(self, now_ns: int) -> tuple[int, float] | None:
        """A locally refused play shakes its card: (slot, offset in card widths)."""
        if self.shaking is None:
            return None
        slot, t0 = self.shaking
        prog = (now_ns - t0) / (SHAKE_S * NS)
        if prog >= 1:
            self.shaking = None
            return slot, 0.0
        return slot, 0.08 * (1 - prog) * (1 if int(prog * 10) % 2 else -1)

    def message(self, now_ns: int) -> tuple[str, RGBA]:
        """The message line (a bounce's reason, a hint) with its colour, fading out at the end."""
        text, t0, colour = self.msg
        if not text:
            return "", colour
        age = (now_ns - t0) / NS
        if age > MESSAGE_S:
            self.msg = ("", 0, colour)
            return "", colour
        a = 255 if age < MESSAGE_S - 0.5 else int(255 * (MESSAGE_S - age) / 0.5)
        return text, (colour[0], colour[1], colour[2], max(0, a))

    def slot_of(self, card: blink.Card) -> int | None:
        for i, c in enumerate(self.slots):
            if c == card and isinstance(c, blink.Card):
                return i
        return None

    def say(self, text: str, now_ns: int, colour: RGBA = RED) -> None:
        self.msg = (text, now_ns, colour)
        self.version += 1

    # ------------------------------------------------------------------ input -> actions

    def select(self, model: ClientView | None, slot: int, now_ns: int) -> Step:
        """Key 1/2/3 or a click on a hand card: select it (or, in a stalemate pick, choose it)."""
        state = self.playing_state(model)
        if state is None:
            return Step()
        if state.phase == "picking":
            return self.pick(model, slot)
        if slot >= len(self.slots) or not isinstance(self.slots[slot], blink.Card):
            self.say("no card there yet", now_ns, AMBER_MSG)
            return Step()
        self.selected = None if self.selected == slot else slot
        self.version += 1
        return Step(noted=True)

    def hold(self, model: ClientView | None, slot: int) -> bool:
        """A mouse press on a hand card: select it (no toggling). True if it is a card."""
        if self.playing_state(model) is None or slot >= len(self.slots) or not isinstance(self.slots[slot], blink.Card):
            return False
        self.selected = slot
        self.version += 1
        return True

    def play(self, model: ClientView | None, pile: int, slot: int | None, now_ns: int) -> Step:
        """Left/Right (A/D) or a drop: the selected card (or ``slot``) on pile 0/1."""
        if self.playing_state(model) is None:
            return Step()
        slot = self.selected if slot is None else slot
        if slot is None:
            self.say("choose a card first: 1 2 3", now_ns, AMBER_MSG)
            return Step()
        card = self.slots[slot] if slot < len(self.slots) else EMPTY
        if not isinstance(card, blink.Card):
            self.say("that card is still being drawn", now_ns, AMBER_MSG)
            return Step()
        return Step(blink.PlayCard(str(card), pile), noted=True, slot=slot)

    def pick(self, model: ClientView | None, slot: int) -> Step:
        if self.playing_state(model) is None:
            return Step()
        card = self.slots[slot] if slot < len(self.slots) else EMPTY
        if not isinstance(card, blink.Card):
            return Step()
        return Step(blink.PickCard(str(card)), noted=True, slot=slot)

    def sent(self, step: Step, result: object, now_ns: int) -> None:
        """What happened to an action the renderer sent: a local refusal shows its reason (and a
        refused play shakes its card); a play taken clears the selection."""
        if isinstance(result, Rejected):
            self.say(texts.reason_text(result.code, blink.GAME), now_ns)
            if isinstance(step.action, blink.PlayCard):
                if step.slot is not None:
                    self.shaking = (step.slot, now_ns)
                self.cues.append("bounce")
        elif isinstance(step.action, blink.PlayCard):
            self.selected = None
        self.version += 1


def pending_plays(model: ClientView | None) -> set[tuple[str, int]]:
    """Your plays the relay has not answered yet, as (card, pile)."""
    pred = model.predictor if model is not None else None
    if pred is None:
        return set()
    return {(p.action.card, p.action.pile) for p in pred.pending
            if isinstance(p.action, blink.PlayCard) and p.accepted_seq is None}


def name_of(model: ClientView, seat: int) -> str:
    names = list(model.players)
    return names[seat] if 0 <= seat < len(names) else "opponent"
