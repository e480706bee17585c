"""BLINK, the speed-card race (docs/RULES.md section 1), as a pure, immutable rule engine.

How this works
--------------
The state is a frozen dataclass: two draw piles (index 0 is the top), two hands, two centre piles
(the last card is the top), and a phase:

    countdown --StartRace--> running --(no one can play)--> stalled --ResolveStalemate--> running
                                 |                                        \\--> picking --both picked / PickTimeout--> running
                                 +--(a hand and draw pile run out)--> over      (or over: a win or the one-card tie)

The engine never looks at a clock. The relay reads ``timers(state)`` to know what to do after a
delay (the start countdown, the stalemate pause, the pick time limit) and applies the named system
action with ``player=SYSTEM`` when the time comes.

Hidden cards are ``None``. ``view(state, seat)`` returns the same state type with the opponent's
hand, both draw piles and (before the start) the face-down centre cards replaced by ``None``; the
client feeds that view to ``apply`` to predict its own plays. A card drawn from a hidden pile is
simply ``None`` (unknown) until the relay says what it was. Where a decision depends on a hidden
card (can the opponent play?) the engine assumes it might, so a view never predicts a stalemate
the relay would not declare.

Conflicts are not the engine's business: the relay orders plays and calls ``apply`` one at a time,
each against the state as it is then.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import get_args, Literal, Mapping, TypedDict, TypeVar

from protocol.codec import message, to_dict
from protocol.events import ABSENT, EventTypes, TypedEvent, event
from protocol.rules.base import (
    is_number,
    CommonCode,
    wire_int,
    wire_list,
    labels,
    one_of,
    SYSTEM,
    Accepted,
    Chance,
    Outcome,
    Rejected,
    Timer,
    Game,
    RaceKey,
    RaceRule,
    shuffled,
    decode_action,
    settings_map,
)

NAME = "blink"
NS = 1_000_000_000
T = TypeVar("T")
#: The largest custom deck (the standard one has 60 cards): a game's cost grows with its deck, and
#: settings are checked, and refused, before a deck is ever built.
MAX_DECK_CARDS = 240

#: A race counts down, runs, stalls (a stalemate pause), has both players pick a card, and ends.
Phase = Literal["countdown", "running", "stalled", "picking", "over"]
PHASES: tuple[Phase, ...] = get_args(Phase)
#: How a stalemate is resolved: turn the draw piles over onto the centre, or each player picks a card.
Resolution = Literal["", "flip", "pick"]
RESOLUTIONS: tuple[Resolution, ...] = get_args(Resolution)
#: Why a game of this kind ends (``Outcome.reason``, as on the wire).
Reason = Literal["out_of_cards", "tie"]
#: The rejection codes of this game (besides the common ones of every game).
Code = Literal[
    "pile_changed", "no_match", "not_running", "stalemate", "not_in_hand", "bad_pile", "already_picked",
    "not_stalemate", "auto_refill", "hand_full", "draw_empty", "not_countdown", "not_stalled", "not_picking"
]
RejectCode = CommonCode | Code
#: In a few words, for the window.
REASON_LABELS: dict[Reason, str] = {"out_of_cards": "out of cards", "tie": "tie"}
#: The codes left out are the relay's own moves, or say best what went wrong in their detail.
CODE_LABELS: dict[Code, str] = {
    "pile_changed": "too slow — pile changed", "no_match": "doesn't match", "not_running": "wait for the start",
    "stalemate": "paused — stalemate", "not_in_hand": "that card is not in your hand", "bad_pile": "no such pile",
    "already_picked": "you already chose a card", "not_stalemate": "no stalemate to choose for",
    "auto_refill": "hands refill by themselves", "hand_full": "your hand is full",
    "draw_empty": "your draw pile is empty"
}


def _no(code: RejectCode, detail: str) -> Rejected:
    """A rejection with one of this game's codes (the type checker holds the code to them)."""
    return Rejected(code, detail)


# --- cards ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Deck:
    """The deck as data: every combination of colour, shape and count is one card."""

    colours: tuple[str, ...] = ("red", "yellow", "green", "blue")
    shapes: tuple[str, ...] = ("star", "triangle", "moon")
    counts: tuple[int, ...] = (1, 2, 3, 4, 5)

    @property
    def size(self) -> int:
        """How many cards ``cards()`` would build -- known without building them."""
        return len(self.colours) * len(self.shapes) * len(self.counts)

    def cards(self) -> tuple[Card, ...]:
        # Built once per deck object and shared (cards are immutable): every game dealt from this
        # deck holds the same card objects, and ``Card.parse`` hands back these very objects, so the
        # engine's comparisons mostly stop at identity and many matches share 60 cards, not 60 each.
        cached: tuple[Card, ...] | None = self.__dict__.get("_cards")
        if cached is None:
            cached = tuple(Card(n, c, s) for c in self.colours for s in self.shapes for n in self.counts)
            object.__setattr__(self, "_cards", cached)
            object.__setattr__(self, "_by_text", {str(card): card for card in cached})
        return cached

    def by_text(self) -> dict[str, Card]:
        """Each card of the deck under its canonical text (``"4-yellow-star"``)."""
        table: dict[str, Card] | None = self.__dict__.get("_by_text")
        if table is None:
            self.cards()
            table = self.__dict__["_by_text"]
        return table

    def __getstate__(self) -> dict[str, object]:
        # The caches above are rebuilt on demand: a pickled deck (journal snapshots) stays its fields.
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_")}

    def to_wire(self) -> dict[str, object]:
        return {"colours": list(self.colours), "shapes": list(self.shapes), "counts": list(self.counts)}

    @classmethod
    def from_wire(cls, data: object) -> Deck:
        if not isinstance(data, dict):
            raise ValueError("deck must be a map of colours, shapes and counts")
        # Bounded before anything is converted or built: a description a few bytes long could
        # otherwise ask for millions of cards (colours x shapes x counts).
        lengths = []
        for key in ("colours", "shapes", "counts"):
            values = data.get(key)
            if not isinstance(values, (list, tuple)) or not 0 < len(values) <= MAX_DECK_CARDS:
                raise ValueError(f"deck {key} must be a list of 1 to {MAX_DECK_CARDS} values")
            lengths.append(len(values))
        if lengths[0] * lengths[1] * lengths[2] > MAX_DECK_CARDS:
            raise ValueError(f"a deck has at most {MAX_DECK_CARDS} cards, not {lengths[0] * lengths[1] * lengths[2]}")
        try:
            colours = tuple(str(c) for c in data["colours"])
            shapes = tuple(str(s) for s in data["shapes"])
            counts = tuple(data["counts"])
        except (KeyError, TypeError) as exc:
            raise ValueError(f"deck: {exc}") from exc
        if not all(type(n) is int and 0 < n < 100 for n in counts):
            raise ValueError("deck counts must be small positive integers")
        for name, values in (("colours", colours), ("shapes", shapes), ("counts", counts)):
            if not values or len(set(values)) != len(values):
                raise ValueError(f"deck {name} must be non-empty and distinct")
        for word in colours + shapes:
            if not word or len(word) > 24 or "-" in word or not word.isalpha():
                raise ValueError(f"deck names must be single words: {word!r}")
        deck = cls(colours, shapes, counts)
        # The standard deck comes back as the one shared object: its cards and their lookup table
        # (``cards``) are then built once per process, not once per match's settings.
        return STANDARD_DECK if cls is Deck and deck == STANDARD_DECK else deck


STANDARD_DECK = Deck()


@dataclass(frozen=True, order=True)
class Card:
    count: int
    colour: str
    shape: str

    @classmethod
    def parse(cls, text: object, deck: Deck = STANDARD_DECK) -> Card:
        """``"4-yellow-star"`` -> Card(4, "yellow", "star"); anything else raises ValueError."""
        if not isinstance(text, str):
            raise ValueError(f"a card is written count-colour-shape, not {type(text).__name__}")
        if cls is Card:  # the canonical text of a card of the deck: one lookup (anything else is checked below)
            known = deck.by_text().get(text)
            if known is not None:
                return known
        parts = text.split("-")
        if len(parts) != 3:
            raise ValueError(f"a card is written count-colour-shape, e.g. 4-yellow-star: {text!r}")
        count_s, colour, shape = parts
        if not count_s.isdigit() or not count_s.isascii():
            raise ValueError(f"card count must be a number: {text!r}")
        count = int(count_s)
        if count not in deck.counts:
            raise ValueError(f"card count {count} is outside {min(deck.counts)}-{max(deck.counts)}: {text!r}")
        if colour not in deck.colours:
            raise ValueError(f"unknown colour {colour!r} in {text!r}")
        if shape not in deck.shapes:
            raise ValueError(f"unknown shape {shape!r} in {text!r}")
        return cls(count, colour, shape)

    def __str__(self) -> str:
        # Asked for on every play (events, views, private hands): made once per card object (a
        # deck's cards are shared by every match dealt from it).
        text: str | None = self.__dict__.get("_text")
        if text is None:
            text = f"{self.count}-{self.colour}-{self.shape}"
            object.__setattr__(self, "_text", text)
        return text

    def __getstate__(self) -> dict[str, object]:
        # A pickled card (journal snapshots) stays its fields; the text is made again on demand.
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_")}

    def __eq__(self, other: object) -> bool:
        # What the generated one does (equal fields, same class), without building two tuples:
        # hands are compared card by card on every play. (The generated hash stays: same fields.)
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self is other or (self.count == other.count and self.colour == other.colour
                                 and self.shape == other.shape)


def standard_deck() -> tuple[Card, ...]:
    """The 60 cards: 4 colours x 3 shapes x counts 1-5, each exactly once."""
    return STANDARD_DECK.cards()


def cards_match(a: Card, b: Card) -> bool:
    """Two cards match when they share at least one of colour, shape or count."""
    return a.colour == b.colour or a.shape == b.shape or a.count == b.count


def _may_match(card: Card | None, top: Card | None) -> bool:
    """Match test when either card may be hidden: unknown means 'perhaps'."""
    if card is None or top is None:
        return True
    return cards_match(card, top)


# --- settings --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    deck: Deck = STANDARD_DECK
    hand_size: int = 3
    auto_refill: bool = True  # False: drawing is an explicit DrawCard action
    countdown_s: float = 3.0
    stalemate_pause_s: float = 1.0
    pick_time_s: float = 5.0
    best_of: int = 3

    def to_wire(self) -> dict[str, object]:
        return {
            "deck": self.deck.to_wire(),
            "hand_size": self.hand_size,
            "auto_refill": self.auto_refill,
            "countdown_s": self.countdown_s,
            "stalemate_pause_s": self.stalemate_pause_s,
            "pick_time_s": self.pick_time_s,
            "best_of": self.best_of,
        }


class _Chosen(TypedDict, total=False):
    """The settings a map chose (``make_settings``), by their ``Settings`` names."""

    deck: Deck
    hand_size: int
    auto_refill: bool
    countdown_s: float
    stalemate_pause_s: float
    pick_time_s: float
    best_of: int


#: The settings in seconds, each with its bounds.
_SECONDS: tuple[tuple[Literal["countdown_s", "stalemate_pause_s", "pick_time_s"], float, float], ...] = (
    ("countdown_s", 0.0, 60.0), ("stalemate_pause_s", 0.0, 30.0), ("pick_time_s", 0.1, 120.0))


def make_settings(data: object = None) -> Settings:
    """Validated settings from a map; unknown keys or out-of-range values raise ValueError."""
    data = settings_map(data, Settings, "blink")
    kw: _Chosen = {}
    if "deck" in data:
        kw["deck"] = data["deck"] if isinstance(data["deck"], Deck) else Deck.from_wire(data["deck"])
    if "hand_size" in data:
        v = data["hand_size"]
        if type(v) is not int or not 1 <= v <= 10:
            raise ValueError("hand_size must be an integer from 1 to 10")
        kw["hand_size"] = v
    if "auto_refill" in data:
        if type(data["auto_refill"]) is not bool:
            raise ValueError("auto_refill must be true or false")
        kw["auto_refill"] = data["auto_refill"]
    for key, lo, hi in _SECONDS:
        if key in data:
            v = data[key]
            if not is_number(v) or not lo <= v <= hi:
                raise ValueError(f"{key} must be a number from {lo:g} to {hi:g}")
            kw[key] = float(v)
    if "best_of" in data:
        v = data["best_of"]
        if type(v) is not int or v < 1 or v % 2 == 0 or v > 9:
            raise ValueError("best_of must be an odd number from 1 to 9")
        kw["best_of"] = v
    s = Settings(**kw)
    if s.deck.size > MAX_DECK_CARDS:  # an in-process Deck: still never built when too big
        raise ValueError(f"a deck has at most {MAX_DECK_CARDS} cards, not {s.deck.size}")
    if s.deck.size < 2 * (s.hand_size + 1) + 2:
        raise ValueError("the deck is too small for two players with this hand size")
    return s


# --- state -----------------------------------------------------------------------------------------

Hand = tuple[Card | None, ...]


@dataclass(frozen=True)
class State:
    settings: Settings
    draw: tuple[Hand, Hand]  # index 0 is the top of the draw pile
    hands: tuple[Hand, Hand]
    piles: tuple[Hand, Hand]  # the last card is the top
    phase: Phase = "countdown"
    resolution: Resolution = ""  # while stalled: how the stalemate is to be resolved
    picked: tuple[bool, bool] = (False, False)
    picks: tuple[Card | None, Card | None] = (None, None)  # chosen cards, hidden until both are placed
    winner: int | None = None
    tie: bool = False
    stalemates: int = 0  # how many stalemates this game has had; keys the relay's timers

    def top(self, pile: int) -> Card | None:
        return self.piles[pile][-1] if self.piles[pile] else None

    def counts(self) -> dict[str, list[int]]:
        return {
            "hand": [len(h) for h in self.hands],
            "draw": [len(d) for d in self.draw],
            "pile": [len(p) for p in self.piles],
        }


# --- actions ---------------------------------------------------------------------------------------


@message("PlayCard")
@dataclass(frozen=True)
class PlayCard:
    card: str
    pile: int


@message("DrawCard")
@dataclass(frozen=True)
class DrawCard:
    pass


@message("PickCard")
@dataclass(frozen=True)
class PickCard:
    card: str


# System actions: the relay applies them with player=SYSTEM when a timer fires.
@message("StartRace")
@dataclass(frozen=True)
class StartRace:
    pass


@message("ResolveStalemate")
@dataclass(frozen=True)
class ResolveStalemate:
    stalemate: int  # which stalemate this resolves (ignored if it is stale)


@message("PickTimeout")
@dataclass(frozen=True)
class PickTimeout:
    stalemate: int


PLAYER_ACTIONS = (PlayCard, DrawCard, PickCard)
SYSTEM_ACTIONS = (StartRace, ResolveStalemate, PickTimeout)
Action = PlayCard | DrawCard | PickCard | StartRace | ResolveStalemate | PickTimeout


def action_from_wire(data: Mapping[str, object]) -> Action:
    action = decode_action(data, PLAYER_ACTIONS, "BLINK")
    assert isinstance(action, PLAYER_ACTIONS + SYSTEM_ACTIONS)  # decode_action admits no other class
    return action


def action_to_wire(action: Action) -> dict[str, object]:
    return to_dict(action)


# --- events ----------------------------------------------------------------------------------------
# What the race says happened, in public (protocol/events.py): a seat's hidden cards never appear;
# the counts of a hand and a draw pile do. ``player`` is a seat.

#: How a stalemate is resolved, as its event says: flip the draw piles, pick a card each, or a tie
#: (both players down to one card and no draw: the game ends).
StalemateResolution = Literal["tie", "flip", "pick"]


@event("card_revealed")
@dataclass(frozen=True, kw_only=True)
class CardRevealed(TypedEvent):
    """At the start, the top card of each centre pile is turned face up."""

    player: int
    card: str
    pile: int


@event("race_started")
@dataclass(frozen=True, kw_only=True)
class RaceStarted(TypedEvent):
    pass


@event("card_played")
@dataclass(frozen=True, kw_only=True)
class CardPlayed(TypedEvent):
    player: int
    card: str
    pile: int


@event("hand_refilled")
@dataclass(frozen=True, kw_only=True)
class HandRefilled(TypedEvent):
    """``count`` cards went from the seat's draw pile into its hand (which cards: its private update)."""

    player: int
    count: int
    hand: int  # cards in the hand now
    draw: int  # cards left in the draw pile


@event("card_drawn")
@dataclass(frozen=True, kw_only=True)
class CardDrawn(TypedEvent):
    player: int
    hand: int
    draw: int


@event("stalemate")
@dataclass(frozen=True, kw_only=True)
class Stalemate(TypedEvent):
    """Nobody can play: the ``stalemate``-th of the game, resolved after ``pause_s`` (a tie has none)."""

    resolution: StalemateResolution
    stalemate: int
    pause_s: float | None = field(default=None, metadata=ABSENT)


@event("card_flipped")
@dataclass(frozen=True, kw_only=True)
class CardFlipped(TypedEvent):
    """A stalemate's flip: the seat's top draw card onto its centre pile."""

    player: int
    card: str | None
    pile: int


@event("pick_started")
@dataclass(frozen=True, kw_only=True)
class PickStarted(TypedEvent):
    """A stalemate's pick: each player has ``seconds`` to choose a card for their own pile."""

    seconds: float
    stalemate: int


@event("pick_made")
@dataclass(frozen=True, kw_only=True)
class PickMade(TypedEvent):
    """The seat chose its card (which one stays secret until both have chosen)."""

    player: int


@event("card_picked")
@dataclass(frozen=True, kw_only=True)
class CardPicked(TypedEvent):
    """A chosen card goes face up on its owner's pile (``auto``: the relay chose it when time ran out)."""

    player: int
    card: str | None
    pile: int
    auto: bool


@event("race_resumed")
@dataclass(frozen=True, kw_only=True)
class RaceResumed(TypedEvent):
    pass


@event("game_over")
@dataclass(frozen=True, kw_only=True)
class BlinkGameOver(TypedEvent):
    winner: int | None
    reason: Reason


#: BLINK's events by wire name.
EVENTS = EventTypes(CardRevealed, RaceStarted, CardPlayed, HandRefilled, CardDrawn, Stalemate, CardFlipped,
                    PickStarted, PickMade, CardPicked, RaceResumed, BlinkGameOver)


# --- setup -----------------------------------------------------------------------------------------


def new_game(settings: Settings | Mapping[str, object] | None, players: int = 2, chance: Chance | None = None) -> State:
    """Shuffle (with the given chance), deal two equal draw piles, one face-down centre card each
    from the top of the player's own pile, then a hand of ``hand_size`` each."""
    if players != 2:
        raise ValueError("BLINK is a game for two players")
    s = settings if isinstance(settings, Settings) else make_settings(settings)
    if chance is None:
        raise ValueError("new_game needs chance (the relay's seeded generator)")
    deck = shuffled(s.deck.cards(), chance)
    return deal(s, deck)


def deal(s: Settings, deck: tuple[Card, ...]) -> State:
    """Set up from a known deck order (the first half is player 0's draw pile, top first)."""
    half = len(deck) // 2
    piles_src = (deck[:half], deck[half : 2 * half])
    a, b = piles_src
    centre: tuple[Hand, Hand] = ((a[0],), (b[0],))
    hands: tuple[Hand, Hand] = (a[1 : 1 + s.hand_size], b[1 : 1 + s.hand_size])
    draw: tuple[Hand, Hand] = (a[1 + s.hand_size :], b[1 + s.hand_size :])
    # An odd deck leaves one card out of the game; the standard deck is even.
    return State(settings=s, draw=draw, hands=hands, piles=centre)


# --- the rules -------------------------------------------------------------------------------------


def _evolve(state: State, **changes: object) -> State:
    """``dataclasses.replace`` for a ``State`` without its cost (a field walk and a frozen
    ``__init__`` per call, about 5 us; the engine makes one or two per play): a ``State`` has no
    ``__post_init__`` and no init-only fields, so copying its attribute map and overriding the
    changed entries builds the very object ``replace`` would. The old state is never touched."""
    new = object.__new__(type(state))
    attrs = new.__dict__
    attrs.update(state.__dict__)
    attrs.update(changes)
    return new


def _set(t: tuple[T, T], i: int, v: T) -> tuple[T, T]:
    return (v, t[1]) if i == 0 else (t[0], v)


def _remove(hand: Hand, card: Card) -> Hand | None:
    for i, c in enumerate(hand):
        if c is card or c == card:  # cards parsed from the deck's text are the deck's own objects
            return hand[:i] + hand[i + 1 :]
    return None


def can_play(state: State, player: int) -> bool:
    """Might ``player`` have a legal play? (Unknown cards count as possibly playable.)"""
    for card in state.hands[player]:
        for pile in (0, 1):
            if _may_match(card, state.top(pile)):
                return True
    return False


def _can_draw(state: State, player: int) -> bool:
    return not state.settings.auto_refill and len(state.hands[player]) < state.settings.hand_size and bool(state.draw[player])


def _refill(state: State, player: int, events: list[TypedEvent]) -> State:
    need = state.settings.hand_size - len(state.hands[player])
    take = state.draw[player][: max(0, need)]
    if not take:
        return state
    state = _evolve(
        state,
        hands=_set(state.hands, player, state.hands[player] + take),
        draw=_set(state.draw, player, state.draw[player][len(take) :]),
    )
    events.append(HandRefilled(player=player, count=len(take), hand=len(state.hands[player]),
                               draw=len(state.draw[player])))
    return state


def _out_of_cards(state: State, player: int) -> bool:
    return not state.hands[player] and not state.draw[player]


def _anyone_can_move(state: State) -> bool:
    """``can_play or _can_draw`` for either player, the pile tops looked up once (this runs after
    every play): a card that is unknown, or an unknown top, counts as possibly playable."""
    piles = state.piles
    t0 = piles[0][-1] if piles[0] else None
    t1 = piles[1][-1] if piles[1] else None
    for hand in state.hands:
        if hand and (t0 is None or t1 is None):
            return True
        for card in hand:
            if card is None:
                return True
            for top in (t0, t1):
                if top is not None and (card.colour == top.colour or card.shape == top.shape or card.count == top.count):
                    return True
    return _can_draw(state, 0) or _can_draw(state, 1)


def _after_change(state: State, events: list[TypedEvent]) -> State:
    """Check for a winner, then for a stalemate; called after every change in the running phase."""
    hands, draw = state.hands, state.draw
    for p in (0, 1):
        if not hands[p] and not draw[p]:  # out of cards
            events.append(BlinkGameOver(winner=p, reason="out_of_cards"))
            return _evolve(state, phase="over", winner=p)
    if _anyone_can_move(state):
        return _evolve(state, phase="running") if state.phase != "running" else state
    # Nobody can play: a stalemate (RULES.md: the relay detects it itself).
    n = state.stalemates + 1
    if all(len(state.hands[p]) == 1 and not state.draw[p] for p in (0, 1)):
        events.append(Stalemate(resolution="tie", stalemate=n))
        events.append(BlinkGameOver(winner=None, reason="tie"))
        return _evolve(state, phase="over", tie=True, stalemates=n)
    resolution: Literal["flip", "pick"] = "flip" if all(state.draw[p] for p in (0, 1)) else "pick"
    events.append(Stalemate(resolution=resolution, stalemate=n, pause_s=state.settings.stalemate_pause_s))
    return _evolve(state, phase="stalled", resolution=resolution, stalemates=n)


def apply(state: State, player: int | None, action: Action) -> Accepted[State] | Rejected:
    """Apply one action; a rejection leaves ``state`` untouched (it is immutable anyway)."""
    if player is SYSTEM:
        return _apply_system(state, action)
    if player not in (0, 1):
        return _no("not_a_player", f"no seat {player!r} in BLINK")
    if isinstance(action, PlayCard):
        return _play(state, player, action)
    if isinstance(action, DrawCard):
        return _draw(state, player)
    if isinstance(action, PickCard):
        return _pick(state, player, action)
    if isinstance(action, SYSTEM_ACTIONS):
        return _no("not_allowed", f"{type(action).__name__} is the relay's to make")
    return _no("unknown_action", f"{type(action).__name__} is not a BLINK action")


def _parse_card(state: State, text: str) -> Card | Rejected:
    try:
        return Card.parse(text, state.settings.deck)
    except ValueError as exc:
        return _no("malformed", str(exc))


def _phase_rejection(state: State) -> Rejected:
    if state.phase == "countdown":
        return _no("not_running", "the race has not started yet")
    if state.phase == "stalled":
        return _no("stalemate", "play is paused for a stalemate")
    if state.phase == "picking":
        return _no("stalemate", "choose a card for your own pile (stalemate)")
    return _no("game_over", "the game is over")


def _play(state: State, player: int, action: PlayCard) -> Accepted[State] | Rejected:
    # Everything is checked first (in the order the reasons have always been given), then the new
    # state is built once: the played card and, with auto refill, the cards drawn after it.
    if state.phase != "running":
        return _phase_rejection(state)
    text = action.card
    # A card's canonical text is one lookup; anything else goes through ``Card.parse`` (and its errors).
    card = state.settings.deck.by_text().get(text) if type(text) is str else None
    if card is None:
        parsed = _parse_card(state, text)
        if isinstance(parsed, Rejected):
            return parsed
        card = parsed
    pile = action.pile
    if type(pile) is not int or pile not in (0, 1):
        return _no("bad_pile", f"pile must be 0 or 1, not {pile!r}")
    own = state.hands[player]
    hand = _remove(own, card)
    if hand is None:
        if None in own:
            # A prediction on a view: the card may be one of our unknown draws; the relay will say.
            idx = own.index(None)
            hand = own[:idx] + own[idx + 1 :]
        else:
            return _no("not_in_hand", f"{card} is not in your hand")
    on = state.piles[pile]
    top = on[-1] if on else None
    if top is not None and not cards_match(card, top):
        return _no("no_match", f"{card} does not match {top}")
    events: list[TypedEvent] = [CardPlayed(player=player, card=str(card), pile=pile)]
    settings = state.settings
    draw = state.draw
    if settings.auto_refill:  # what ``_refill`` does, without building the in-between state
        take = draw[player][: max(0, settings.hand_size - len(hand))]
        if take:
            hand = hand + take
            draw = _set(draw, player, draw[player][len(take) :])
            events.append(HandRefilled(player=player, count=len(take), hand=len(hand), draw=len(draw[player])))
    state = _evolve(state, hands=_set(state.hands, player, hand), piles=_set(state.piles, pile, on + (card,)),
                    draw=draw)
    state = _after_change(state, events)
    return Accepted(state, tuple(events))


def _draw(state: State, player: int) -> Accepted[State] | Rejected:
    if state.settings.auto_refill:
        return _no("auto_refill", "hands are refilled automatically in this match")
    if state.phase != "running":
        return _phase_rejection(state)
    if len(state.hands[player]) >= state.settings.hand_size:
        return _no("hand_full", f"your hand already holds {state.settings.hand_size} cards")
    if not state.draw[player]:
        return _no("draw_empty", "your draw pile is empty")
    card = state.draw[player][0]
    state = _evolve(state, hands=_set(state.hands, player, state.hands[player] + (card,)),
                    draw=_set(state.draw, player, state.draw[player][1:]))
    events: list[TypedEvent] = [CardDrawn(player=player, hand=len(state.hands[player]), draw=len(state.draw[player]))]
    state = _after_change(state, events)
    return Accepted(state, tuple(events))


def _pick(state: State, player: int, action: PickCard) -> Accepted[State] | Rejected:
    if state.phase != "picking":
        if state.phase == "running":
            return _no("not_stalemate", "choosing a card is only for a stalemate")
        return _phase_rejection(state)
    if state.picked[player]:
        return _no("already_picked", "you have already chosen your card")
    card = _parse_card(state, action.card)
    if isinstance(card, Rejected):
        return card
    if card not in state.hands[player] and None not in state.hands[player]:
        return _no("not_in_hand", f"{card} is not in your hand")
    state = _evolve(state, picked=_set(state.picked, player, True), picks=_set(state.picks, player, card))
    events: list[TypedEvent] = [PickMade(player=player)]
    if all(state.picked):
        state = _place_picks(state, events, auto=(False, False))
    return Accepted(state, tuple(events))


def _place_picks(state: State, events: list[TypedEvent], auto: tuple[bool, bool]) -> State:
    """Both chosen cards go face up on their owners' piles at once; then refill and carry on."""
    hands = list(state.hands)
    piles = list(state.piles)
    for p in (0, 1):
        card = state.picks[p]
        hand = _remove(hands[p], card) if card is not None else None
        if hand is None:  # a view that does not know the card: drop an unknown one
            idx = hands[p].index(None) if None in hands[p] else 0
            hand = hands[p][:idx] + hands[p][idx + 1 :]
        hands[p] = hand
        piles[p] = piles[p] + (card,)
        events.append(CardPicked(player=p, card=None if card is None else str(card), pile=p, auto=auto[p]))
    state = _evolve(state, hands=(hands[0], hands[1]), piles=(piles[0], piles[1]),
                    picked=(False, False), picks=(None, None), resolution="", phase="running")
    # RULES.md: a player who empties their hand by a stalemate placement wins.
    for p in (0, 1):
        if _out_of_cards(state, p):
            events.append(BlinkGameOver(winner=p, reason="out_of_cards"))
            return _evolve(state, phase="over", winner=p)
    for p in (0, 1):
        state = _refill(state, p, events)
    events.append(RaceResumed())
    return _after_change(state, events)


def _apply_system(state: State, action: Action) -> Accepted[State] | Rejected:
    events: list[TypedEvent] = []
    if isinstance(action, StartRace):
        if state.phase != "countdown":
            return _no("not_countdown", "the race has already started")
        for p in (0, 1):
            events.append(CardRevealed(player=p, card=str(state.top(p)), pile=p))
        events.append(RaceStarted())
        state = _evolve(state, phase="running")
        return Accepted(_after_change(state, events), tuple(events))
    if isinstance(action, ResolveStalemate):
        if state.phase != "stalled" or action.stalemate != state.stalemates:
            return _no("not_stalled", "no stalemate is waiting to be resolved")
        if state.resolution == "flip":
            draw, piles = list(state.draw), list(state.piles)
            for p in (0, 1):
                card = draw[p][0]
                draw[p] = draw[p][1:]
                piles[p] = piles[p] + (card,)
                events.append(CardFlipped(player=p, card=None if card is None else str(card), pile=p))
            state = _evolve(state, draw=(draw[0], draw[1]), piles=(piles[0], piles[1]), phase="running",
                            resolution="")
            events.append(RaceResumed())
            return Accepted(_after_change(state, events), tuple(events))
        events.append(PickStarted(seconds=state.settings.pick_time_s, stalemate=state.stalemates))
        return Accepted(_evolve(state, phase="picking"), tuple(events))
    if isinstance(action, PickTimeout):
        if state.phase != "picking" or action.stalemate != state.stalemates:
            return _no("not_picking", "no one is choosing a card")
        # RULES.md (decided): when time runs out the relay chooses the first card of the hand.
        picks = tuple(state.picks[p] if state.picked[p] else state.hands[p][0] for p in (0, 1))
        auto = (not state.picked[0], not state.picked[1])
        state = _evolve(state, picks=picks, picked=(True, True))
        return Accepted(_place_picks(state, events, auto=auto), tuple(events))
    return _no("unknown_action", f"{type(action).__name__} is not a BLINK system action")


def complete(state: State, player: int | None, action: Action, chance: Chance) -> Action:
    return action  # BLINK needs no chance after the shuffle


def timers(state: State) -> tuple[Timer[Action], ...]:
    s = state.settings
    if state.phase == "countdown":
        return (Timer("start", int(s.countdown_s * NS), StartRace()),)
    if state.phase == "stalled":
        return (Timer(f"stalemate-{state.stalemates}", int(s.stalemate_pause_s * NS), ResolveStalemate(state.stalemates)),)
    if state.phase == "picking":
        return (Timer(f"pick-{state.stalemates}", int(s.pick_time_s * NS), PickTimeout(state.stalemates)),)
    return ()


def legal_actions(state: State, player: int) -> list[Action]:
    out: list[Action] = []
    if state.phase == "running":
        for card in state.hands[player]:
            if card is None:
                continue
            for pile in (0, 1):
                top = state.top(pile)
                if top is None or cards_match(card, top):
                    out.append(PlayCard(str(card), pile))
        if _can_draw(state, player):
            out.append(DrawCard())
    elif state.phase == "picking" and not state.picked[player]:
        out.extend(PickCard(str(c)) for c in state.hands[player] if c is not None)
    return out


def outcome(state: State) -> Outcome[Reason] | None:
    if state.phase != "over":
        return None
    if state.tie:
        return Outcome(winners=(), reason="tie")
    assert state.winner is not None
    return Outcome(winners=(state.winner,), reason="out_of_cards")


def view(state: State, player: int | None) -> State:
    """What ``player`` may see (None: a spectator): no opponent hand, no draw order, no secret pick."""
    hands = (_own_or_hidden(state.hands[0], player == 0), _own_or_hidden(state.hands[1], player == 1))
    draw = (_hidden(state.draw[0]), _hidden(state.draw[1]))
    piles = state.piles
    if state.phase == "countdown":
        piles = (_hidden(piles[0]), _hidden(piles[1]))
    picks = (state.picks[0] if player == 0 else None, state.picks[1] if player == 1 else None)
    return _evolve(state, hands=hands, draw=draw, piles=piles, picks=picks)


def _hidden(cards: Hand) -> Hand:
    return tuple(None for _ in cards)


def _own_or_hidden(cards: Hand, own: bool) -> Hand:
    return cards if own else _hidden(cards)


# --- sending less: a view kept up to date from the public events plus private updates -------------


def _seat(p: int) -> int:
    if p not in (0, 1):
        raise ValueError(f"an event of a seat BLINK has not: {p!r}")
    return p


def _pile(pile: int) -> int:
    if pile not in (0, 1):
        raise ValueError(f"an event of a pile BLINK has not: {pile!r}")
    return pile


def _card_or_none(view: State, text: object) -> Card | None:
    return None if text is None else Card.parse(str(text), view.settings.deck)


def _take_from_draw(view: State, p: int, count: int) -> State:
    if not 0 <= count <= len(view.draw[p]):
        raise ValueError(f"cannot take {count!r} cards from a draw pile of {len(view.draw[p])}")
    moved = view.draw[p][:count]
    hidden = tuple(None for _ in moved)  # own cards are named by the private update that follows
    return _evolve(view, hands=_set(view.hands, p, view.hands[p] + hidden),
                   draw=_set(view.draw, p, view.draw[p][count:]))


def _take_from_hand(view: State, seat: int | None, p: int, card: Card | None) -> Hand:
    hand = view.hands[p]
    if p == seat and card is not None:
        rest = _remove(hand, card)
        if rest is None:
            raise ValueError(f"{card} is not in the hand this view holds")
        return rest
    if not hand:
        raise ValueError("a card left an empty hand")
    return hand[1:]  # a hidden hand: all unknown


def apply_event(view: State, seat: int | None, ev: TypedEvent) -> State:
    """One public event applied to ``seat``'s view (see ``Game.apply_event``): the same changes the
    rules make, with what a view cannot know (the cards drawn into a hand) left unknown until the
    private update names them. Events the game does not make (seats, results) change nothing."""
    match ev:
        case CardPlayed(player=p, card=text, pile=pile):
            played = Card.parse(text, view.settings.deck)
            hand = _take_from_hand(view, seat, _seat(p), played)
            return _evolve(view, hands=_set(view.hands, p, hand), piles=_set(view.piles, _pile(pile), view.piles[pile] + (played,)))
        case HandRefilled(player=p, count=count):
            return _take_from_draw(view, _seat(p), count)
        case CardDrawn(player=p):
            return _take_from_draw(view, _seat(p), 1)
        case CardRevealed(player=p, card=shown, pile=pile):
            _seat(p)
            if not view.piles[_pile(pile)]:
                raise ValueError(f"a card revealed on an empty pile: {ev!r}")
            return _evolve(view, piles=_set(view.piles, pile, view.piles[pile][:-1] + (_card_or_none(view, shown),)))
        case RaceStarted():
            return _evolve(view, phase="running")
        case Stalemate(resolution="tie", stalemate=n):
            return _evolve(view, tie=True, stalemates=n)
        case Stalemate(resolution=("flip" | "pick") as resolution, stalemate=n):
            return _evolve(view, phase="stalled", resolution=resolution, stalemates=n)
        case BlinkGameOver(winner=winner):
            # A stalemate's picks may have just been placed: the game ends with them cleared.
            return _evolve(view, phase="over", winner=None if winner is None else _seat(winner),
                           picked=(False, False), picks=(None, None), resolution="")
        case CardFlipped(player=p, card=flipped, pile=pile):
            p, pile = _seat(p), _pile(pile)
            if not view.draw[p]:
                raise ValueError(f"a card flipped from an empty draw pile: {ev!r}")
            return _evolve(view, draw=_set(view.draw, p, view.draw[p][1:]),
                           piles=_set(view.piles, pile, view.piles[pile] + (_card_or_none(view, flipped),)))
        case RaceResumed():
            return _evolve(view, phase="running", resolution="", picked=(False, False), picks=(None, None))
        case PickStarted():
            return _evolve(view, phase="picking")
        case PickMade(player=p):
            return _evolve(view, picked=_set(view.picked, _seat(p), True))
        case CardPicked(player=p, card=picked, pile=pile):
            p, pile, card = _seat(p), _pile(pile), _card_or_none(view, picked)
            hand = _take_from_hand(view, seat, p, card)
            # The picks are cleared (and play resumes) by the race_resumed or game_over that follows.
            return _evolve(view, hands=_set(view.hands, p, hand), piles=_set(view.piles, pile, view.piles[pile] + (card,)))
    return view


def private_delta(before: State, after: State, seat: int) -> dict[str, object] | None:
    """Tell ``seat`` its hand when cards it has not seen came into it, and its pick when it changed;
    a card leaving the hand is in a public event already."""
    old, new = before.hands[seat], after.hands[seat]
    # A deck's cards are all different: something came in when the hand grew or holds a card the
    # old one did not (the same hand object: nothing changed; ``in`` stops at identity first).
    came = False
    if new is not old:
        if len(new) > len(old):
            came = True
        else:
            same = set(map(id, old))  # the cards that stayed are mostly the very same objects
            for c in new:
                if id(c) not in same and c not in old:
                    came = True
                    break
    if not came and (before.picks is after.picks or before.picks[seat] == after.picks[seat]):
        return None
    pick = after.picks[seat]
    return {"hand": _cards_out(new), "pick": None if pick is None else str(pick)}


def private_complete(view: State, seat: int) -> bool:
    """Every card of the seat's own hand is known (a lost ``PrivateUpdate`` leaves one unknown)."""
    return seat not in (0, 1) or None not in view.hands[seat]


def apply_private(view: State, seat: int, delta: Mapping[str, object]) -> State:
    try:
        hand = tuple(_card_or_none(view, c) for c in wire_list(delta["hand"], "hand"))
        pick = _card_or_none(view, delta["pick"])
    except (KeyError, TypeError) as exc:
        raise ValueError(f"malformed BLINK private update: {exc!r}") from exc
    if seat not in (0, 1) or len(hand) != len(view.hands[seat]) or None in hand:
        raise ValueError("the private update does not fit this view's hand")
    return _evolve(view, hands=_set(view.hands, seat, hand), picks=_set(view.picks, seat, pick))


# --- wire form -------------------------------------------------------------------------------------


def _cards_out(cards: Hand) -> list[str | None]:
    return [None if c is None else str(c) for c in cards]


def to_wire(state: State) -> dict[str, object]:
    """A state or view as a plain map. Draw piles of a view are sent as counts only."""
    draw: list[int | list[str | None]] = [len(d) if all(c is None for c in d) else _cards_out(d) for d in state.draw]
    return {
        "settings": state.settings.to_wire(),
        "draw": draw,
        "hands": [_cards_out(h) for h in state.hands],
        "piles": [_cards_out(p) for p in state.piles],
        "phase": state.phase,
        "resolution": state.resolution,
        "picked": list(state.picked),
        "picks": [None if c is None else str(c) for c in state.picks],
        "winner": state.winner,
        "tie": state.tie,
        "stalemates": state.stalemates,
    }


def from_wire(data: Mapping[str, object]) -> State:
    """Inverse of ``to_wire``; raises ValueError on anything malformed."""
    try:
        s = make_settings(data["settings"])
        deck = s.deck

        def cards(xs: object) -> Hand:
            if isinstance(xs, int):
                if not 0 <= xs <= 1000:
                    raise ValueError("bad pile size")
                return tuple(None for _ in range(xs))
            if not isinstance(xs, (list, tuple)):
                raise ValueError("a pile is a list of cards or a number of hidden ones")
            return tuple(None if x is None else Card.parse(x, deck) for x in xs)

        def pair(xs: object) -> tuple[object, object]:
            if not isinstance(xs, list) or len(xs) != 2:
                raise ValueError("expected two entries")
            return (xs[0], xs[1])

        def two_piles(xs: object) -> tuple[Hand, Hand]:
            a, b = pair(xs)
            return (cards(a), cards(b))

        picks = pair(data["picks"])
        picked = pair(data["picked"])
        winner = data["winner"]
        return State(
            settings=s,
            draw=two_piles(data["draw"]),
            hands=two_piles(data["hands"]),
            piles=two_piles(data["piles"]),
            phase=one_of(data["phase"], PHASES, "phase"),
            resolution=one_of(data["resolution"], RESOLUTIONS, "resolution"),
            picked=(bool(picked[0]), bool(picked[1])),
            picks=(None if picks[0] is None else Card.parse(picks[0], deck),
                   None if picks[1] is None else Card.parse(picks[1], deck)),
            winner=None if winner is None else wire_int(winner, "winner"),
            tie=bool(data["tie"]),
            stalemates=wire_int(data["stalemates"], "stalemates"),
        )
    except (KeyError, TypeError, IndexError, AttributeError) as exc:
        raise ValueError(f"malformed BLINK state: {exc!r}") from exc


# --- settings as wire maps --------------------------------------------------------------------------


def default_settings() -> dict[str, object]:
    return Settings().to_wire()


def check_settings(settings: Mapping[str, object], players: int) -> dict[str, object]:
    if players != 2:
        raise ValueError("BLINK is a game for two players")
    return make_settings(settings).to_wire()


def best_of(settings: Mapping[str, object]) -> int:
    return make_settings(settings).best_of


def invariant_ok(state: State) -> bool:
    """The cards are exactly partitioned between draw piles, hands and centre piles."""
    seen = [c for group in (state.draw, state.hands, state.piles) for part in group for c in part]
    if any(c is None for c in seen):
        return False  # a view, not a state: it cannot be checked
    deck = state.settings.deck.cards()
    return sorted(c for c in seen if c is not None) == sorted(deck[: 2 * (len(deck) // 2)])


# --- fair ordering: who races whom ------------------------------------------------------------------


def race_key(seen: State | None, action: Action) -> tuple[int, str] | None:
    """A play races every other play for the same pile top -- the top its player saw, so two plays
    against the same card compete even when one of them has already landed."""
    if not isinstance(action, PlayCard):
        return None
    pile = action.pile if action.pile in (0, 1) else 0
    top = seen.top(pile) if seen is not None else None
    return (pile, str(top))


def could_race(state: State | None, seat: int, key: RaceKey) -> bool:
    """Could ``seat`` still send a play for this pile top (so a play already here must wait)?"""
    if state is None or state.phase != "running":
        return False
    top = state.top(int(key[0]))
    if str(top) != key[1]:
        return True  # the pile moved on; a rival's play against the old top may still be coming
    return top is not None and any(c is not None and cards_match(c, top) for c in state.hands[seat])


# --- a bot ------------------------------------------------------------------------------------------


def bot_action(state: State, seat: int, chance: Chance) -> Action | None:
    """Choosing the pile that leaves the opponent the fewest options is beyond a person at speed,
    so: any legal play, chosen at random. With manual refills, draw first. During a stalemate pick,
    place the card that is least useful to keep (the one matching the fewest of the others)."""
    actions = legal_actions(state, seat)
    if not actions:
        return None
    draws = [a for a in actions if isinstance(a, DrawCard)]
    if draws:
        return draws[0]
    picks = [a for a in actions if isinstance(a, PickCard)]
    if picks:
        hand = [c for c in state.hands[seat] if c is not None]

        def usefulness(pick: PickCard) -> int:
            card = Card.parse(pick.card, state.settings.deck)
            return sum(cards_match(card, other) for other in hand if other != card)

        return min(picks, key=usefulness)
    return actions[chance.randbelow(len(actions))]


# --- the game ---------------------------------------------------------------------------------------

GAME: Game[State, Action] = Game(
    name=NAME,
    title="BLINK",
    min_players=2,
    max_players=2,
    default_settings=default_settings,
    check_settings=check_settings,
    new_game=new_game,
    apply=apply,
    complete=complete,
    view=view,
    legal_actions=legal_actions,
    outcome=outcome,
    timers=timers,
    to_wire=to_wire,
    from_wire=from_wire,
    action_from_wire=action_from_wire,
    action_to_wire=action_to_wire,
    bot_action=bot_action,
    best_of=best_of,
    stale_code="pile_changed",  # a play that matched the pile top its player saw, but lost the race
    realtime=True,
    race=RaceRule(key=race_key, could_race=could_race),
    invariant_ok=invariant_ok,
    events=EVENTS,
    apply_event=apply_event,
    private_delta=private_delta,
    apply_private=apply_private,
    private_complete=private_complete,
    # Many short games: one game per match; a short countdown and stalemate pause.
    quick_settings={"best_of": 1, "countdown_s": 0.5, "stalemate_pause_s": 0.3},
    reason_labels=labels(REASON_LABELS),
    code_labels=labels(CODE_LABELS),
)
