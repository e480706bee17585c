"""The one engine surface that all four games share.

How this works
--------------
A game is a module (``protocol.rules.blink``, ``.takeaway``, ``.sequence``, ``.roll_your_own``)
ending in one typed ``GAME: Game[State, Action] = Game(...)`` (below): its facts (name, title,
player counts, whether it is a race) and its functions, typed in the game's own state and action
union, so a checker holds ``apply(state, player, action)`` to the game's actions. The registry (``protocol.rules.GAMES``, ``game_for(name)``) maps names
to these objects; the relay, the bots, the match runner and the window ask the ``Game`` and never
compare a game's name. The functions:

- ``new_game(settings, players, chance) -> state``: ``players`` is the number of seats; all
  randomness is drawn from ``chance`` (a ``Chance``: ``randbelow(n)``), which the relay seeds and
  writes to the log, so a game replays exactly.
- ``apply(state, player, action) -> Accepted | Rejected``: ``player`` is a seat index, or
  ``SYSTEM`` (None) for what the relay does on its own (start the race, resolve a stalemate, roll
  dice, a turn timer's default move). A rejection never changes anything: states are immutable.
- ``complete(state, player, action, chance) -> action``: fills in the chance an action needs (the
  dice of a re-roll) before ``apply``; the relay calls it, a client never does.
- ``view(state, player) -> state``: the same state type with everything that seat may not see
  replaced by ``None`` (opponent's hand, the order of draw piles, secret builds). ``player=None``
  is the spectators' view. Views can be fed back into ``apply`` -- that is how clients predict.
- ``legal_actions(state, player)``, ``outcome(state) -> Outcome | None``.
- ``to_wire(state) / from_wire(data)``: a state (or a view) as a msgpack/JSON-friendly map.
- ``action_from_wire(data) / action_to_wire(action)``: game actions as nested wire maps;
  ``action_from_wire`` raises ``ValueError`` for anything malformed.
- ``timers(state) -> tuple[Timer, ...]``: what the relay must do after a delay in this state
  (``Timer(name, delay_ns, action)``), e.g. the stalemate pause; the relay owns the clock.
- ``bot_action(state, seat, chance) -> action | None``: the bots' policy, on the bot's own view.
- ``check_settings(settings, players)`` / ``default_settings()`` / ``best_of(settings)``: settings
  as checked wire maps, and how many games a match is the best of. A new match's settings may also
  hold those of every match (``MATCH_SETTINGS``: ``grace_s``), which the relay takes out first;
  ``Game.check_new_match`` checks both.
- ``leave``: the relay's own action for a seat that left a match of three or more (``PlayerLeft``),
  or None for a game in which any leave ends the match. The engine takes the seat out of play
  (turns skip it, a move it owed is passed, it is never a winner) and, when one side is left,
  ends the game with the reason ``FORFEIT`` (``protocol/match.py``), which ends the match ``forfeit``.
- ``race``: an optional ``RaceRule`` for fair ordering -- which plays race each other (BLINK: plays
  for the same pile top) and who could still join a race; the relay's scheduler knows nothing else
  about the game.

Events are typed, frozen classes each game owns (``protocol/events.py``): ``apply`` returns them,
``Game.events`` is the game's registry of them by wire name, and ``Game.decode_event`` /
``read_event`` read one back from the wire, the match's own events (``protocol.match.MATCH_EVENTS``)
included. They are public by construction: an engine never puts a hidden card into an event.

Named values are ``Literal`` types owned by each game (its ``Phase``, its outcome ``Reason``, its
rejection ``Code``, combined with the ``CommonCode`` every engine may give), with the wire strings
as their values; how a match of games ends (``MatchReason``, ``FORFEIT``) is ``protocol/match.py``'s.
Each game labels its reasons and codes for people (``reason_labels``, ``code_labels``: the window
shows them), so a fifth game brings its own words and no table elsewhere needs to know it. Values read from the wire are
``object`` until checked (``one_of``, ``wire_int``, ``wire_list``, ``wire_ints``, ``is_number``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable, Generic, Literal, Mapping, Protocol, Sequence, TypeGuard, TypeVar

from protocol.codec import DecodeError, fast_init, from_dict, message
from protocol.events import EventTypes, PublicEvent, TypedEvent
from protocol.match import MATCH_EVENTS, MATCH_REASON_LABELS

S = TypeVar("S")  # a game's state
A = TypeVar("A")  # a game's action (the union of its action classes)
T = TypeVar("T")
#: A game's outcome reason (its own ``Reason`` literal); an ``Outcome[Reason]`` is an ``Outcome[str]``.
R = TypeVar("R", bound=str, covariant=True)

#: The ``player`` argument for actions the relay takes itself.
SYSTEM = None

#: The rejection codes every engine may give, whatever the game: the seat is not in the game, the
#: action is the relay's own or no action of this game, its fields cannot be read, the game is over,
#: it is not now (phase) or not this seat's turn.
CommonCode = Literal["not_a_player", "not_allowed", "unknown_action", "malformed", "game_over", "wrong_phase",
                     "not_your_turn"]
#: Labels for the common codes, in the few words a player reads at a glance.
#: (``not_allowed`` and ``unknown_action`` have none: their detail says what is not allowed.)
COMMON_CODE_LABELS: Mapping[str, str] = {
    "not_a_player": "you are not playing in this match",
    "malformed": "the relay could not read that",
    "game_over": "the game is over",
    "wrong_phase": "not now",
    "not_your_turn": "it is not your turn",
}


class Chance(Protocol):
    """Where randomness comes from: the relay's seeded generator, or a test's fixed values."""

    def randbelow(self, n: int) -> int: ...


class FixedChance:
    """Chance that replays a given list of values (each taken modulo ``n``); for tests and replays."""

    def __init__(self, values: list[int] | tuple[int, ...]) -> None:
        self._values = list(values)
        self._i = 0

    def randbelow(self, n: int) -> int:
        if self._i >= len(self._values):
            raise IndexError("FixedChance ran out of values")
        v = self._values[self._i] % n
        self._i += 1
        return v


@message("PlayerLeft")
@dataclass(frozen=True)
class PlayerLeft:
    """The relay's own action (``player=SYSTEM``): ``seat`` left a running match of three or more
    players, or its rejoin grace ran out. A game with ``Game.leave`` takes it out of play."""

    seat: int


def shuffled(items: tuple[T, ...] | list[T], chance: Chance) -> tuple[T, ...]:
    """Fisher-Yates with the given chance: the same chance values give the same order."""
    out = list(items)
    for i in range(len(out) - 1, 0, -1):
        j = chance.randbelow(i + 1)
        out[i], out[j] = out[j], out[i]
    return tuple(out)


def roll_die(chance: Chance, sides: int = 6) -> int:
    return chance.randbelow(sides) + 1


#: Settings every match takes, whatever its game, with their defaults: the relay takes them out of a
#: new match's settings before its game checks the rest (``relay/judge/lobby.py``). ``grace_s``: how
#: long, in seconds, a dropped player's seat waits for them to rejoin.
MATCH_SETTINGS: Mapping[str, object] = {"grace_s": 30}
MAX_GRACE_S = 600  # the longest ``grace_s``


def check_match_settings(settings: Mapping[str, object]) -> None:
    """Raise ValueError, in the relay's words, for a bad value of one of ``MATCH_SETTINGS``."""
    value = settings.get("grace_s")
    if value is not None:  # None (JSON null) is the default, as leaving it out is
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= MAX_GRACE_S:
            raise ValueError(f"grace_s must be a number of seconds from 0 to {MAX_GRACE_S:g}")


def settings_map(data: object, known: type, game: str) -> dict[str, object]:
    """The first checks of every game's settings: a map (or nothing), with no key the game's
    ``Settings`` dataclass (``known``) does not have. Returns a copy to read values from."""
    if data is not None and not isinstance(data, dict):
        raise ValueError(f"{game} settings must be a map")
    data = dict(data or {})
    fields = getattr(known, "__dataclass_fields__")
    unknown = set(data) - set(fields)
    if unknown:  # naming the keys there are: a typo is then one look away from its fix
        raise ValueError(f"unknown {game} settings: {', '.join(sorted(map(str, unknown)))} "
                         f"(the settings are {', '.join(fields)}, and {', '.join(MATCH_SETTINGS)} of every match)")
    return data


K = TypeVar("K", bound=str)


def one_of(value: object, choices: tuple[K, ...], what: str) -> K:
    """``value`` as the one of ``choices`` it equals (a wire string read back as a game's
    ``Literal``); ValueError for anything else."""
    for choice in choices:
        if value == choice and type(value) is str:
            return choice
    raise ValueError(f"unknown {what} {value!r}")


def labels(table: Mapping[K, str]) -> Mapping[str, str]:
    """A game's table of labels (keyed by its own ``Literal`` reasons or codes) as ``Game`` holds it."""
    return {str(k): v for k, v in table.items()}


def is_number(value: object) -> TypeGuard[int | float]:
    """Is a wire value a number (an integer or a float; a bool is neither)?"""
    return type(value) is int or type(value) is float


def wire_int(value: object, what: str) -> int:
    """A wire value that must be an integer (a bool is not one); ValueError otherwise."""
    if type(value) is not int:
        raise ValueError(f"{what} is not an integer: {value!r}")
    return value


def wire_list(value: object, what: str) -> list[object]:
    """A wire value that must be a list (a tuple, made in-process, is one too); ValueError otherwise."""
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"{what} is not a list: {value!r}")
    return list(value)


def wire_ints(value: object, what: str, length: int | None = None) -> tuple[int, ...]:
    """A wire list of integers (of ``length`` of them, if given); ValueError otherwise."""
    items = wire_list(value, what)
    if (length is not None and len(items) != length) or not all(type(x) is int for x in items):
        raise ValueError(f"{what} is not a list of {length or 'some'} integers: {value!r}")
    return tuple(x for x in items if type(x) is int)


def decode_action(data: Mapping[str, object], allowed: tuple[type, ...], game: str) -> object:
    """A game action from its nested wire map; ValueError (the relay answers ``malformed``) for
    anything that is not one of ``allowed`` -- a player can never send the relay's own actions."""
    try:
        action = from_dict(data)
    except DecodeError as exc:
        raise ValueError(exc.detail) from exc
    if not isinstance(action, allowed):
        raise ValueError(f"{type(action).__name__} is not a {game} player action")
    return action


@fast_init  # built on every play: see protocol.codec.fast_init
@dataclass(frozen=True)
class Accepted(Generic[S]):
    state: S
    events: tuple[TypedEvent, ...] = ()  # each of the game's own event classes (``Game.events``)


@fast_init  # built on every play: see protocol.codec.fast_init
@dataclass(frozen=True)
class Rejected:
    code: str  # short stable reason code, e.g. "no_match", "not_your_turn"
    detail: str = ""


@dataclass(frozen=True)
class Outcome(Generic[R]):
    """How a game ended, by its engine: ``reason`` is one of the game's own ``Reason`` values
    (``protocol.match.FORFEIT`` when all but one side left it)."""

    winners: tuple[int, ...]  # seats; empty for a draw/tie with no winner; several for a shared win
    reason: R
    scores: tuple[int, ...] = ()
    extra: dict[str, object] = field(default_factory=dict)


@fast_init  # built on every play: see protocol.codec.fast_init
@dataclass(frozen=True)
class Timer(Generic[A]):
    name: str
    delay_ns: int
    action: A  # applied with player=SYSTEM when the timer fires, if the state still asks for it


#: What makes two plays race each other in fair ordering (e.g. BLINK's ``(pile, top card seen)``).
#: Written to the log as a list, so its parts are plain ints and strings.
RaceKey = tuple[int | str, ...]


@dataclass(frozen=True)
class RaceRule(Generic[S, A]):
    """A realtime game's rule for fair ordering (see relay/fair.py): which plays race each other,
    and who could still join a race. A game without one is judged in arrival order."""

    #: The race a player's action enters, from the state the player saw when sending it (``None``
    #: when the relay no longer remembers that state); ``None`` for an action that races no one.
    key: Callable[[S | None, A], RaceKey | None]
    #: Could ``seat`` still send a play for race ``key``, as far as the state as it is now says?
    could_race: Callable[[S | None, int, RaceKey], bool]


#: A game's own part of a match summary: from the match's public events (in order), the players'
#: names and the runner's one entry per relay game, the entries to report (see client/matchrun.py).
GamesSummary = Callable[[Sequence[PublicEvent], Sequence[str], list[dict[str, object]]], list[dict[str, object]]]


def one_game(settings: Mapping[str, object]) -> int:
    """``best_of`` for a game whose match is a single game (the dice games)."""
    return 1


@dataclass(frozen=True, eq=False)
class Game(Generic[S, A]):
    """Everything the relay, the bots, the match runner and the window need to know about one game,
    with ``S`` its state type and ``A`` its action type (the union of its action classes, the
    relay's own included). Each engine module ends with one ``GAME: Game[State, Action] = Game(...)``;
    the registry in ``protocol/rules/__init__.py`` finds it by name. Compared by identity (``eq=False``)."""

    name: str  # canonical, as on the wire and the command line
    title: str  # for people: "BLINK", "Takeaway Dice"
    min_players: int
    max_players: int
    default_settings: Callable[[], dict[str, object]]
    #: The settings as a checked wire map; raises ValueError (or TypeError) for a bad map or player count.
    check_settings: Callable[[Mapping[str, object], int], dict[str, object]]
    new_game: Callable[[Mapping[str, object], int, Chance], S]
    apply: Callable[[S, int | None, A], Accepted[S] | Rejected]
    complete: Callable[[S, int | None, A, Chance], A]
    view: Callable[[S, int | None], S]
    legal_actions: Callable[[S, int], Sequence[A]]
    outcome: Callable[[S], Outcome[str] | None]
    timers: Callable[[S], tuple[Timer[A], ...]]
    to_wire: Callable[[S], dict[str, object]]
    from_wire: Callable[[Mapping[str, object]], S]
    action_from_wire: Callable[[Mapping[str, object]], A]
    action_to_wire: Callable[[A], dict[str, object]]
    #: The bots' policy: an action for ``seat`` in (its view of) the state, or None to wait.
    bot_action: Callable[[S, int, Chance], A | None]
    #: Games in a match (the relay plays a best-of-N); the dice games play one.
    best_of: Callable[[Mapping[str, object]], int] = one_game
    #: The rejection code for an action that was legal in the state its player saw but lost to a change.
    stale_code: str = "stale"
    realtime: bool = False  # players act at the same time (a race), not in turns
    race: RaceRule[S, A] | None = None  # fair ordering's rule; None: arrival order only
    #: The relay's action for ``seat`` leaving a match of three or more (see the module header);
    #: None: a leave ends the match for everyone.
    leave: Callable[[int], A] | None = None
    invariant_ok: Callable[[S], bool] | None = None  # a whole-state check for property tests
    summarise_games: GamesSummary | None = None  # the match runner's per-game entries, if the game has its own
    #: Settings that make a match short (quick tests and measurements); merged over the defaults.
    quick_settings: Mapping[str, object] = field(default_factory=dict)
    # -- Sending less (optional, all three or none). With them the relay publishes, after a change,
    # -- only the public events and, to each player whose private part changed beyond what the events
    # -- say, a ``PrivateUpdate``; a client builds its confirmed view by applying both in ``seq``
    # -- order with the same engine code. Without them every player gets a whole view after each
    # -- change.
    #: ``apply_event(view, seat, event) -> view``: one public event (decoded: ``decode_event``)
    #: applied to ``seat``'s view (None: a spectator's); an event of no concern to the view (the
    #: match's own) leaves it as it is. Raises ValueError when the event does not fit the view (the
    #: client then resyncs).
    apply_event: Callable[[S, int | None, TypedEvent], S] | None = None
    #: ``private_delta(before, after, seat) -> delta | None``: what ``seat`` must be told privately
    #: after a change from the full state ``before`` to ``after`` (None: the events say it all).
    private_delta: Callable[[S, S, int], dict[str, object] | None] | None = None
    #: ``apply_private(view, seat, delta) -> view``; raises ValueError when it does not fit.
    apply_private: Callable[[S, int, Mapping[str, object]], S] | None = None
    #: ``secret_choice(state, seat, events, pos) -> actions | None``: for a log checker, the actions
    #: a seat's secret choice can have been, read from the reveal among the public ``events`` after
    #: ``pos`` (None: try ``legal_actions``) -- a choice too large to enumerate (a Roll Your Own die).
    secret_choice: Callable[[S, int, Sequence[PublicEvent], int], list[A] | None] | None = None
    #: ``private_complete(view, seat) -> bool``: does the view hold all ``seat`` may know (no card of
    #: its own hand unknown)? False after the events means a private update was lost: resync.
    private_complete: Callable[[S, int], bool] | None = None
    #: Human labels of the game's outcome reasons (``Outcome.reason``: ``"out_of_cards"``, ...) and
    #: of its rejection codes (the common ones are in ``COMMON_CODE_LABELS``); the window shows them.
    reason_labels: Mapping[str, str] = field(default_factory=dict)
    code_labels: Mapping[str, str] = field(default_factory=dict)
    #: The game's own event classes by wire name (``protocol/events.py``): what ``apply`` returns.
    events: EventTypes = field(default_factory=EventTypes)

    @cached_property
    def all_events(self) -> EventTypes:
        """Every event a match of this game publishes: the match's own and the game's."""
        return MATCH_EVENTS | self.events

    def decode_event(self, ev: PublicEvent) -> TypedEvent:
        """A public event of a match of this game as its class (``UnknownEvent`` for a wire name
        neither the match nor the game makes); ``BadEvent`` (a ValueError) when its map does not fit."""
        return self.all_events.decode(ev.type, ev.data)

    def read_event(self, ev: PublicEvent) -> TypedEvent:
        """``decode_event`` for a reader that passes over what it cannot read (an ``UnknownEvent``)."""
        return self.all_events.read(ev)

    @property
    def all_reason_labels(self) -> Mapping[str, str]:
        """The labels of this game's outcome reasons and of the relay's match reasons."""
        return {**MATCH_REASON_LABELS, **self.reason_labels}

    def reason_label(self, reason: str) -> str:
        """An outcome (or match) reason in words; one without a label is shown as its words."""
        return self.all_reason_labels.get(reason) or reason.replace("_", " ")

    def code_label(self, code: str) -> str | None:
        """A rejection code of this game (or a common one) in words; None for a code it does not know."""
        return self.code_labels.get(code) or COMMON_CODE_LABELS.get(code)

    @property
    def sends_less(self) -> bool:
        return self.apply_event is not None and self.private_delta is not None and self.apply_private is not None

    def check_new_match(self, settings: Mapping[str, object], players: int) -> dict[str, object]:
        """The settings of a new match checked as the relay checks them: those of every match
        (``MATCH_SETTINGS``) first, the rest by ``check_settings``; returns the game's part, checked.
        Raises ValueError (or TypeError) naming the setting."""
        check_match_settings(settings)
        return self.check_settings({k: v for k, v in settings.items() if k not in MATCH_SETTINGS}, players)

    def seats_problem(self, seats: int) -> str | None:
        """Why ``seats`` players cannot play this game (one readable line), or None if they can."""
        if self.min_players <= seats <= self.max_players:
            return None
        if self.min_players == self.max_players:
            return f"{self.title} is for {self.min_players} players, not {seats}"
        return f"{self.title} is for {self.min_players} to {self.max_players} players, not {seats}"
