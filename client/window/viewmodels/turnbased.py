"""What the three turn-based scenes (Takeaway, Sequence, Roll Your Own) show, as data.

How this works
--------------
``TurnViewModel`` is the part every turn-based game shares; a game's view-model subclasses it,
typed in the game's state class (``TurnViewModel[takeaway.State]``), with what only that game knows (who is to act, what you may do, its announcements, its result
line, the spots you may click). Fed the ``ClientModel`` each frame (``observe``), it keeps:

- the *message line*: a refused move in red with its reason (``refused``: a local refusal, or the
  relay's bounce -- "it has been undone"), an announcement in yellow (``say``), gone after a while.
  An announcement about one turn ("BONUS TURN for ann!", "bob rolled 11: WILD") is said for that
  turn (``say(..., turn=...)``, the game's ``turn_of``) and goes as soon as the state is in another,
  so it never sits under a banner naming the next player;
- the refused move itself for a moment (``rejected_now``), so the board can mark its spot;
- the *turn clock* (``turn_clock``): with the ``turn_timer_s`` setting on, the seconds left to act,
  counted from the local receive time of the event that started the wait (``timer_events``);
- ``over_at``: when the match was seen to be over (the scene goes to the results a moment later).

``banner`` answers what the turn banner says (amber "YOUR TURN" and what you may do; "<name>'s
turn" and what they do; GAME OVER and the result; WATCHING for a spectator) and ``rows`` what the
player list says per seat. Events are read through ``EventFeed``: the current game's only, so a
rematch never replays the previous match's announcements.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, Literal, Protocol, TypeVar

from protocol import messages as m
from protocol.events import TypedEvent
from protocol.rules import AnyGame, game_for
from client.matchstate import MatchState
from client.model import Bounce
from client.window import texts
from client.window.sounds import Cue
from client.window.viewmodels.clientview import ClientView, state_of
from client.window.viewmodels.feed import EventFeed, Feed

if TYPE_CHECKING:
    from client.window.session import SessionStatus

NS = 1_000_000_000
MESSAGE_S = 3.5
REJECT_S = 2.5
RESULTS_AFTER_S = 3.0

RGBA = tuple[int, int, int, int]
WHITE: RGBA = (255, 255, 255, 255)
DIM: RGBA = (200, 210, 220, 255)
AMBER: RGBA = (255, 176, 0, 255)
RED: RGBA = (235, 60, 55, 255)
YELLOW: RGBA = (255, 225, 110, 255)
GREEN: RGBA = (90, 230, 120, 255)
SOFT: RGBA = (255, 200, 120, 255)  # a gentle refusal (a button that cannot be used now)
INFO: RGBA = (200, 220, 255, 255)  # what another player did
GONE: RGBA = (110, 110, 110, 255)  # a seat that left a game playing on without it

#: one colour and one mark per seat (the mark tells seats apart without colour)
SEAT_COLOURS: tuple[RGBA, ...] = (
    (70, 200, 110, 255), (80, 150, 255, 255), (240, 90, 80, 255), (240, 190, 60, 255),
    (190, 110, 240, 255), (80, 210, 210, 255), (240, 140, 200, 255), (170, 170, 170, 255))
SEAT_MARKS = ("●", "■", "▲", "◆", "★", "✚", "♥", "♣")

#: The client's own codes (a game's codes are labelled by the game: ``Game.code_label``).
REASONS = {
    "spectator": "spectators only watch",
}

PENDING_LINE = "PENDING — your move is shown; waiting for the relay to confirm it"


def reason_text(code: str, detail: str = "", game: AnyGame | None = None) -> str:
    """A refusal in words: the label of its code, else the engine's detail (which says what exactly
    was not allowed), else the code's words."""
    return REASONS.get(code) or texts.label(code, game) or detail or code.replace("_", " ")


def game_of(model: ClientView) -> AnyGame | None:
    """The game a model plays, for its labels (None when it has none yet)."""
    if model.game is None:
        return None
    try:
        return game_for(model.game)
    except ValueError:
        return None


class TurnState(Protocol):
    """What every turn-based game's state has."""

    @property
    def phase(self) -> str: ...

    @property
    def players(self) -> int: ...

    @property
    def gone(self) -> tuple[int, ...]: ...  # seats that left a game playing on without them


S = TypeVar("S", bound=TurnState)

#: The banner's kind (its colour): nobody to act, the game over, your turn, another's turn.
BannerKind = Literal["idle", "over", "mine", "theirs"]


@dataclass(frozen=True)
class Banner:
    """The turn banner: its ``kind``, the big line, the small line under it."""

    kind: BannerKind
    big: str
    small: str


@dataclass(frozen=True)
class Row:
    """One seat in the player list."""

    seat: int
    name: str  # with "  (you)" for your own seat (unless the name already says "you")
    acting: bool
    mine: bool
    score: str
    colour: RGBA
    mark: str


class TurnViewModel(Generic[S]):
    #: the public events that start the wait for a player's move (the turn timer counts from the
    #: local receive time of the latest of them; see ``turn_clock``): the game's event classes
    timer_events: tuple[type[TypedEvent], ...] = ()

    def __init__(self, title: str, state_class: type[S]) -> None:
        self.title = title
        self.state_class = state_class  # the game's state: what ``state`` reads of a model
        self.msg: tuple[str, int, RGBA] = ("", 0, RED)
        self._msg_turn: tuple[int, int] | None = None  # (game, turn) the message is about, or None: not one turn's
        self.rejected: tuple[object, int] | None = None  # (action, start ns)
        self.over_at: int | None = None
        self.cues: list[Cue] = []
        self.version = 0  # bumped by local changes (messages, a refused move, a builder's face)
        self._seen_game = -1
        self._bounces: Feed[Bounce] = Feed()
        self._events = EventFeed()
        self._clock: tuple[tuple[int, str], int, int] | None = None  # (timer id, confirmed seq when first seen, prev seq)
        self._clock_seq = -1

    def state(self, model: ClientView | None) -> S | None:
        """The state ``model`` draws, if it is this game's (None: no model, no game yet, another game)."""
        return state_of(model, self.state_class)

    # ------------------------------------------------------------------ what a game says (overridden)

    def acting(self, state: S) -> list[int]:
        """Seats that are to act now."""
        return []

    def prompt(self, model: ClientView, state: S, now_ns: int) -> tuple[str, str]:
        """(what you may do when you act, what the others are doing) as short lines."""
        return "", ""

    def score_text(self, state: S, seat: int) -> str:
        return ""

    def idle_banner(self, state: S) -> str:
        """The banner when no player is to act (the relay is rolling, say)."""
        return "waiting for the relay"

    def seat_colour(self, state: S, seat: int) -> RGBA:
        return SEAT_COLOURS[seat % len(SEAT_COLOURS)]

    def seat_mark(self, state: S, seat: int) -> str:
        return SEAT_MARKS[seat % len(SEAT_MARKS)]

    def hints(self, state: S, me: int | None) -> str:
        return "Esc  menu"

    def animating(self, state: S, now_ns: int) -> object:
        """A value that changes while something animates (the picture is redrawn when it does)."""
        return None

    def on_event(self, ev: m.Event, what: TypedEvent, model: ClientView, state: S | None, now_ns: int) -> None:
        """A public event of the current game arrived (announcements): ``what`` is its typed class."""

    def leaver(self, what: TypedEvent) -> int | None:
        """The seat an event of the game says left a game that plays on without it (None: not one)."""
        return None

    def result_line(self, model: ClientView, state: S) -> str:
        return ""

    def turn_of(self, state: S) -> int | None:
        """The turn ``state`` is in, for announcements about one turn (None: the game has no turns
        such announcements are about)."""
        return None

    # ------------------------------------------------------------------ reading the model

    @staticmethod
    def me(model: ClientView | None) -> int | None:
        """Your seat, or None when watching."""
        if model is None or model.spectating:
            return None
        return model.seat

    def pname(self, model: ClientView | None, seat: object) -> str:
        if type(seat) is not int:
            return str(seat)
        names = list(model.players) if model is not None else []
        if 0 <= seat < len(names):
            return "you" if seat == self.me(model) else str(names[seat])
        return f"seat {seat + 1}"

    def observe(self, model: ClientView | None, now_ns: int) -> None:
        """New bounces and public events since the last frame."""
        if model is None:
            return
        state = self.state(model)
        if state is None:
            return
        if model.predictor is not None and model.predictor.game != self._seen_game:
            self._seen_game = model.predictor.game
            self.over_at = None
        for b in self._bounces.take(model.bounces):
            self.refused(b.action, b.code, b.detail, now_ns, by_relay=True, game=game_of(model))
        for ev, what in self._events.take_current(model):
            gone = self.leaver(what)
            if gone is not None:  # a dice game of three or more plays on without them
                self.say(f"{self.pname(model, gone)} left: the game goes on without them", now_ns, INFO)
            self.on_event(ev, what, model, state, now_ns)
        if self._msg_turn is not None and self._msg_turn != (self._seen_game, self.turn_of(state)):
            self.msg, self._msg_turn = ("", 0, RED), None  # that turn is over: so is what was said about it
            self.version += 1
        if self.over_at is None and MatchState.read(model.match_state).over:
            self.over_at = now_ns

    def results_due(self, model: ClientView | None, now_ns: int) -> bool:
        """Time to show the results scene (players and spectators alike)."""
        return self.over_at is not None and now_ns - self.over_at > RESULTS_AFTER_S * NS

    def game_over(self, model: ClientView, state: S | None) -> bool:
        return state is not None and (state.phase == "over" or MatchState.read(model.match_state).decided)

    def banner(self, model: ClientView | None, now_ns: int) -> Banner:
        state = self.state(model)
        if model is None or state is None:
            return Banner("idle", self.title, "")
        if self.game_over(model, state):
            return Banner("over", "GAME OVER", self.result_line(model, state))
        me = self.me(model)
        acting = self.acting(state)
        mine, others = self.prompt(model, state, now_ns)
        if me is not None and me in acting:
            return Banner("mine", "YOUR TURN", mine)
        who = ", ".join(self.pname(model, s) for s in acting)
        now = (f"{who}'s turn" if len(acting) == 1 else f"waiting for {who}") if acting else self.idle_banner(state)
        return Banner("theirs", (f"WATCHING {model.match} — " if model.spectating else "") + now, others)

    def rows(self, model: ClientView | None) -> list[Row]:
        state = self.state(model)
        if model is None or state is None:
            return []
        names = list(model.players)
        me = self.me(model)
        acting = self.acting(state)
        over = self.game_over(model, state)
        out = []
        gone = state.gone
        for seat in range(state.players):
            name = texts.with_you(names[seat] if seat < len(names) else f"seat {seat + 1}", seat == me)
            if seat in gone:  # out of play: still listed (their claims, chips, wins stay), dimmed
                out.append(Row(seat, f"{name}  — left", False, seat == me, self.score_text(state, seat), GONE, "×"))
                continue
            out.append(Row(seat, name, seat in acting and not over, seat == me, self.score_text(state, seat),
                           self.seat_colour(state, seat), self.seat_mark(state, seat)))
        return out

    def hint_line(self, model: ClientView | None) -> str:
        state = self.state(model)
        if model is None or state is None:
            return "Esc  menu"
        if model.spectating:
            return "spectating a match: read-only     Esc  menu"
        return self.hints(state, self.me(model))

    def status(self, status: SessionStatus, message: str, join_command: str,
               model: ClientView | None) -> tuple[str, str]:
        """Before a game: the big and small line of the status overlay (``join_command``: what a
        friend types to join here, up to the code)."""
        if status == "error":  # a spectator (a bad watch code) was not going to play
            return ("Cannot watch" if model is not None and model.spectating else "Cannot play"), message
        if status == "waiting" and model is not None and model.match:
            if model.spectating:
                return f"Match code  {model.match}", "waiting for the players to join — you are watching"
            return (f"Match code  {model.match}",
                    f"waiting for players — they run:  {join_command} --match {model.match}")
        return self.title, message or "connecting…"

    def tally(self, model: ClientView, state: S | None = None) -> str:
        """Games won per player, and what comes next (the result overlay's second line).

        ``state`` is the state the overlay's first line comes from. When it is a finished game the
        relay has not counted yet (a predicted end: the relay's tally still says "playing"), its
        winners are counted here, so that "You win with 78 points" never sits beside "you: 0"."""
        ms = MatchState.read(model.match_state)
        names = list(model.players)
        wins = list(ms.wins)
        if state is not None and ms.status in (None, "playing") and state.phase == "over":
            game = game_of(model)
            try:
                outcome = game.outcome(state) if game is not None else None
            except (ValueError, AttributeError):
                outcome = None
            if outcome is not None:
                wins += [0] * (max(len(names), state.players) - len(wins))
                for w in outcome.winners:
                    if 0 <= w < len(wins):
                        wins[w] += 1
        tally = "   ".join(f"{names[i] if i < len(names) else i}: {w}" for i, w in enumerate(wins))
        tail = "match over — results follow" if ms.over else "next game starting…"
        return f"games won  {tally}   ·   {tail}"

    @staticmethod
    def pending(model: ClientView | None) -> list[object]:
        """Your moves the relay has not answered yet."""
        if model is None or model.predictor is None:
            return []
        return [p.action for p in model.predictor.pending]

    def turn_clock(self, model: ClientView | None, now_ns: int) -> tuple[float, float] | None:
        """(seconds left, seconds in all) on the running turn timer, or None when there is none.

        The game's rules say which timed wait the confirmed state is in (``timers``: the timer with
        a delay); when that wait is first seen, its start is the local receive time of the latest
        event that starts a wait (``timer_events``) among those that came with it, else the receive
        time of the state update itself."""
        if model is None or model.predictor is None or model.rules is None:
            return None
        timer = model.settings.get("turn_timer_s") or 0
        if not isinstance(timer, (int, float, str)):
            return None
        try:
            total = float(timer)
        except ValueError:
            return None
        state = model.predictor.confirmed
        if total <= 0 or state is None or MatchState.read(model.match_state).status not in (None, "playing"):
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
        types = model.rules.all_events
        for ev in reversed(model.events):
            if ev.seq <= prev_seq:
                break
            if ev.seq <= key_seq and isinstance(types.read(ev), self.timer_events):
                start = model.seq_received_ns.get(ev.seq)
                if start is not None:
                    break
        if start is None:
            start = model.seq_received_ns.get(key_seq, now_ns)
        left = total - (now_ns - start) / NS
        return max(0.0, min(total, left)), total

    # ------------------------------------------------------------------ messages

    def refused(self, action: object, code: str, detail: str, now_ns: int, by_relay: bool = False,
                game: AnyGame | None = None) -> None:
        why = reason_text(code, detail, game)
        text = f"✗ the relay refused your move: {why} — it has been undone" if by_relay else f"✗ {why}"
        self.say(text, now_ns, RED)
        self.rejected = (action, now_ns)
        self.cues.append("bounce")

    def say(self, text: str, now_ns: int, colour: RGBA = YELLOW, turn: int | None = None) -> None:
        """Show ``text`` on the message line; ``turn`` (what ``turn_of`` says of the state it is about)
        makes it go when the state moves on to another turn."""
        self.msg = (text, now_ns, colour)
        self._msg_turn = None if turn is None else (self._seen_game, turn)
        self.version += 1

    def message(self, now_ns: int) -> tuple[str, RGBA]:
        text, t0, colour = self.msg
        if text and now_ns - t0 >= MESSAGE_S * NS:
            self.msg = ("", 0, RED)
            return "", RED
        return text, colour

    def rejected_now(self, now_ns: int) -> object:
        """The move refused a moment ago (its spot is marked), or None."""
        if self.rejected is not None and now_ns - self.rejected[1] >= REJECT_S * NS:
            self.rejected = None
        return None if self.rejected is None else self.rejected[0]

    def live(self, now_ns: int) -> tuple[bool, bool]:
        """Whether the message and the refused mark are still showing (they expire by time)."""
        return (bool(self.msg[0]) and now_ns - self.msg[1] < MESSAGE_S * NS,
                self.rejected is not None and now_ns - self.rejected[1] < REJECT_S * NS)

    def drain_cues(self) -> list[Cue]:
        cues, self.cues = self.cues, []
        return cues
