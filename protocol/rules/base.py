"""The one engine surface that all four games share.

How this works
--------------
A game is a module (``protocol.rules.blink``, ``.takeaway``, ``.sequence``, ``.roll_your_own``)
exposing a ``RULES`` object that satisfies ``GameRules``:

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

Events are plain maps ``{"type": "card_played", ...}``; they are public by construction: an engine
never puts a hidden card into an event.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from protocol.codec import DecodeError, from_dict

S = TypeVar("S")

#: The ``player`` argument for actions the relay takes itself.
SYSTEM = None

EventData = dict[str, Any]


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


def shuffled(items: tuple[Any, ...] | list[Any], chance: Chance) -> tuple[Any, ...]:
    """Fisher-Yates with the given chance: the same chance values give the same order."""
    out = list(items)
    for i in range(len(out) - 1, 0, -1):
        j = chance.randbelow(i + 1)
        out[i], out[j] = out[j], out[i]
    return tuple(out)


def roll_die(chance: Chance, sides: int = 6) -> int:
    return chance.randbelow(sides) + 1


def settings_map(data: Any, known: Any, game: str) -> dict[str, Any]:
    """The first checks of every game's settings: a map (or nothing), with no key the game's
    ``Settings`` dataclass (``known``) does not have. Returns a copy to read values from."""
    if data is not None and not isinstance(data, dict):
        raise ValueError(f"{game} settings must be a map")
    data = dict(data or {})
    unknown = set(data) - set(known.__dataclass_fields__)
    if unknown:
        raise ValueError(f"unknown {game} settings: {', '.join(sorted(map(str, unknown)))}")
    return data


def decode_action(data: dict[str, Any], allowed: tuple[type, ...], game: str) -> Any:
    """A game action from its nested wire map; ValueError (the relay answers ``malformed``) for
    anything that is not one of ``allowed`` -- a player can never send the relay's own actions."""
    try:
        action = from_dict(data)
    except DecodeError as exc:
        raise ValueError(exc.detail) from exc
    if not isinstance(action, allowed):
        raise ValueError(f"{type(action).__name__} is not a {game} player action")
    return action


@dataclass(frozen=True)
class Accepted(Generic[S]):
    state: S
    events: tuple[EventData, ...] = ()


@dataclass(frozen=True)
class Rejected:
    code: str  # short stable reason code, e.g. "no_match", "not_your_turn"
    detail: str = ""


@dataclass(frozen=True)
class Outcome:
    winners: tuple[int, ...]  # seats; empty for a draw/tie with no winner; several for a shared win
    reason: str = ""
    scores: tuple[int, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Timer:
    name: str
    delay_ns: int
    action: Any  # applied with player=SYSTEM when the timer fires, if the state still asks for it


class RulesModule:
    """Base of each game module's ``RULES`` object: the module's engine functions, found by name in
    the module's namespace (``RULES = _Rules(globals())``); a subclass adds the game's facts
    (``name``, player counts, ``stale_code``, ``realtime``) and its settings checks."""

    FUNCTIONS = ("new_game", "apply", "complete", "view", "legal_actions", "outcome", "timers",
                 "to_wire", "from_wire", "action_from_wire", "action_to_wire")

    def __init__(self, namespace: dict[str, Any], extra: tuple[str, ...] = ()) -> None:
        for fn in self.FUNCTIONS + extra:
            setattr(self, fn, namespace[fn])


class GameRules(Protocol):
    name: str

    def default_settings(self) -> dict[str, Any]: ...
    def check_settings(self, settings: dict[str, Any], players: int) -> dict[str, Any]: ...
    def new_game(self, settings: dict[str, Any], players: int, chance: Chance) -> Any: ...
    def apply(self, state: Any, player: int | None, action: Any) -> Accepted[Any] | Rejected: ...
    def complete(self, state: Any, player: int | None, action: Any, chance: Chance) -> Any: ...
    def view(self, state: Any, player: int | None) -> Any: ...
    def legal_actions(self, state: Any, player: int) -> list[Any]: ...
    def outcome(self, state: Any) -> Outcome | None: ...
    def timers(self, state: Any) -> tuple[Timer, ...]: ...
    def to_wire(self, state: Any) -> dict[str, Any]: ...
    def from_wire(self, data: dict[str, Any]) -> Any: ...
    def action_from_wire(self, data: dict[str, Any]) -> Any: ...
    def action_to_wire(self, action: Any) -> dict[str, Any]: ...
