"""Takeaway Dice, a cluster of Blinks (docs/RULES.md section 2), as a pure, immutable rule engine.

How this works
--------------
The cluster is a set of cells on a hex grid in axial coordinates ``(q, r)``; each cell shows a die
face. The six faces of a cell, in order, are the directions

    (+1,0) (+1,-1) (0,-1) (-1,0) (-1,+1) (0,+1)        face i and face i+3 (mod 6) are opposing.

The layout (a named one, a custom list of cells, or a random connected one grown from ``chance``)
is made by ``new_game``; everything after that is driven by actions:

    setup --StartTakeaway (SYSTEM)--> turn --ClaimBlink--> turn ... --last Blink claimed--> over
                                        |  ^
                                 Reroll |  | RollCluster (SYSTEM)
                                        v  |
                                      rolling

Every die roll is a SYSTEM action that the relay asks for through ``timers`` (delay 0) and fills
with dice through ``complete``: ``StartTakeaway`` (the random player order and the first roll) and
``RollCluster`` (a re-roll the current player asked for). A client never sends dice: ``Reroll``
carries none, and system actions are refused from a seat. The rolled values are in the
``dice_rolled`` event, so a log replays exactly.

A Blink is *locked* (``is_locked``) when it has neighbours on both faces of an opposing pair, or
when removing it leaves the rest of the cluster in more than two connected pieces (read literally:
a split into two is allowed). Score (``score``): each claimed face is worth itself, except that
every repeat of a face after the first is worth 10. Equal highest totals share the win.

With the ``turn_timer_s`` setting on, ``timers`` also asks for a ``TakeawayTimeout`` for the current
turn; it claims the unlocked Blink worth most to the player (no re-roll) and says it was a timeout.
There is nothing secret in this game: ``view`` returns the state itself.

A player leaving a game of three or more (``PlayerLeft``, the relay's) is taken out of ``order``,
which is turned so that the player on turn keeps it -- or, when the leaver was on turn, the next
in order starts the next turn at once (``_leaving``, shared with ``apply_event``). The leaver's
claims stay on record but they are out of the standings; when one player is left, they win
(reason ``forfeit``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import get_args, Iterable, Literal, Mapping, Sequence, TypedDict

from protocol.codec import message, to_dict
from protocol.events import ABSENT, EventTypes, TypedEvent, event
from protocol.match import FORFEIT
from protocol.rules.base import (
    is_number,
    CommonCode,
    wire_int,
    wire_ints,
    wire_list,
    labels,
    one_of,
    SYSTEM,
    Accepted,
    Chance,
    Outcome,
    PlayerLeft,
    Rejected,
    Timer,
    roll_die,
    shuffled,
    decode_action,
    Game,
    settings_map,
)

NAME = "takeaway"
NS = 1_000_000_000

#: Before the first roll, a player's turn, a re-roll being made, the end.
Phase = Literal["setup", "turn", "rolling", "over"]
PHASES: tuple[Phase, ...] = get_args(Phase)
#: Why a game of this kind ends (``Outcome.reason``, as on the wire).
Reason = Literal["highest_score", "shared_win", "forfeit"]
#: The rejection codes of this game (besides the common ones of every game).
Code = Literal["locked", "no_such_cell", "already_rerolled", "reroll_used", "incomplete"]
RejectCode = CommonCode | Code
#: In a few words, for the window.
REASON_LABELS: dict[Reason, str] = {"highest_score": "highest score", "shared_win": "shared win",
                                    "forfeit": "the others left"}
#: The codes left out are the relay's own moves, or say best what went wrong in their detail.
CODE_LABELS: dict[Code, str] = {
    "locked": "that Blink is locked", "no_such_cell": "there is no Blink there",
    "already_rerolled": "one re-roll per turn", "reroll_used": "your once-per-game re-roll is spent"
}


def _no(code: RejectCode, detail: str) -> Rejected:
    """A rejection with one of this game's codes (the type checker holds the code to them)."""
    return Rejected(code, detail)


#: The six face directions, in face order; face i and face i+3 are opposing.
DIRECTIONS: tuple[tuple[int, int], ...] = ((1, 0), (1, -1), (0, -1), (-1, 0), (-1, 1), (0, 1))

MIN_CELLS = 12
MAX_CELLS = 127
MAX_PLAYERS = 6

Coord = tuple[int, int]

# --- geometry -------------------------------------------------------------------------------------


def neighbours(cell: Coord) -> tuple[Coord, ...]:
    q, r = cell
    return tuple((q + dq, r + dr) for dq, dr in DIRECTIONS)


def _as_cells(cells: Iterable[Sequence[int]]) -> set[Coord]:
    return {(int(c[0]), int(c[1])) for c in cells}


def components(cells: Iterable[Coord]) -> int:
    """The number of connected pieces of a set of cells."""
    left = set(cells)
    count = 0
    while left:
        count += 1
        stack = [left.pop()]
        while stack:
            for n in neighbours(stack.pop()):
                if n in left:
                    left.remove(n)
                    stack.append(n)
    return count


def is_connected(cells: Iterable[Coord]) -> bool:
    return components(cells) <= 1


def is_locked(cells: Iterable[Sequence[int]], cell: Sequence[int]) -> bool:
    """Is ``cell`` locked in the cluster ``cells`` (a set of ``(q, r)``)?

    Locked when it has neighbours on both faces of at least one opposing pair, or when removing it
    would leave the rest of the cluster in more than two connected pieces."""
    cs = _as_cells(cells)
    c = (int(cell[0]), int(cell[1]))
    q, r = c
    for i in range(3):
        (dq1, dr1), (dq2, dr2) = DIRECTIONS[i], DIRECTIONS[i + 3]
        if (q + dq1, r + dr1) in cs and (q + dq2, r + dr2) in cs:
            return True
    return components(cs - {c}) > 2


def free_cells(cells: Iterable[Sequence[int]]) -> list[Coord]:
    """The cells that may be removed now, in (q, r) order."""
    cs = _as_cells(cells)
    return sorted(c for c in cs if not is_locked(cs, c))


# --- layouts --------------------------------------------------------------------------------------


def _hexagon(radius: int) -> tuple[Coord, ...]:
    return tuple(sorted((q, r) for q in range(-radius, radius + 1) for r in range(-radius, radius + 1)
                        if abs(q + r) <= radius))


def _ring(radius: int) -> tuple[Coord, ...]:
    return tuple(sorted(c for c in _hexagon(radius) if max(abs(c[0]), abs(c[1]), abs(c[0] + c[1])) == radius))


LAYOUTS: dict[str, tuple[Coord, ...]] = {
    "hex19": _hexagon(2),  # a hexagon of radius 2: 19 Blinks
    "hex37": _hexagon(3),  # a hexagon of radius 3: 37 Blinks
    "ring": _ring(2),  # the outer ring of hex19: 12 Blinks
    "triangle": tuple(sorted((q, r) for q in range(5) for r in range(5) if q + r <= 4)),  # 15 Blinks
    "parallelogram": tuple(sorted((q, r) for q in range(4) for r in range(4))),  # 16 Blinks
}
SPECIAL_LAYOUTS = ("random", "custom")


def random_layout(size: int, chance: Chance) -> tuple[Coord, ...]:
    """A connected cluster of ``size`` cells grown from (0, 0): each step adds one random cell that
    touches the cluster (the frontier is taken in sorted order, so the same chance gives the same
    cluster)."""
    cells: set[Coord] = {(0, 0)}
    while len(cells) < size:
        frontier = sorted({n for c in cells for n in neighbours(c)} - cells)
        cells.add(frontier[chance.randbelow(len(frontier))])
    return tuple(sorted(cells))


# --- scoring --------------------------------------------------------------------------------------


def score(faces: Iterable[int]) -> int:
    """Each face is worth itself; every repeat of a face after the first is worth 10.
    ``[4, 5, 6]`` -> 15, ``[4, 4, 4]`` -> 24."""
    seen: set[int] = set()
    total = 0
    for f in faces:
        total += 10 if f in seen else f
        seen.add(f)
    return total


def gain(claimed: Iterable[int], face: int) -> int:
    """What claiming ``face`` adds to a player who already holds ``claimed``."""
    return 10 if face in set(claimed) else face


# --- settings -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    layout: str = "hex19"
    size: int = 19  # for layout "random"
    cells: tuple[Coord, ...] | None = None  # for layout "custom"
    reroll_once_per_game: bool = False
    turn_timer_s: float = 0.0  # 0: no turn timer

    def to_wire(self) -> dict[str, object]:
        return {
            "layout": self.layout,
            "size": self.size,
            "cells": None if self.cells is None else [list(c) for c in self.cells],
            "reroll_once_per_game": self.reroll_once_per_game,
            "turn_timer_s": self.turn_timer_s,
        }


class _Chosen(TypedDict, total=False):
    """The settings a map chose (``make_settings``), by their ``Settings`` names."""

    layout: str
    size: int
    cells: tuple[Coord, ...]
    reroll_once_per_game: bool
    turn_timer_s: float


def make_settings(data: object = None) -> Settings:
    """Validated settings from a map (or the ``Settings`` themselves); unknown keys or bad values raise ValueError."""
    if isinstance(data, Settings):
        return data
    data = settings_map(data, Settings, "takeaway")
    kw: _Chosen = {}
    layout = data.get("layout", "hex19")
    if not isinstance(layout, str) or (layout not in LAYOUTS and layout not in SPECIAL_LAYOUTS):
        names = ", ".join(list(LAYOUTS) + list(SPECIAL_LAYOUTS))
        raise ValueError(f"layout must be one of {names}, not {layout!r}")
    kw["layout"] = layout
    if "size" in data:
        v = data["size"]
        if type(v) is not int or not MIN_CELLS <= v <= MAX_CELLS:
            raise ValueError(f"size must be an integer from {MIN_CELLS} to {MAX_CELLS}")
        kw["size"] = v
    cells = data.get("cells")
    if cells is not None:
        if not isinstance(cells, (list, tuple)) or len(cells) > MAX_CELLS:
            raise ValueError(f"cells must be a list of at most {MAX_CELLS} [q, r] pairs")
        out = []
        for c in cells:
            if not isinstance(c, (list, tuple)) or len(c) != 2 or not all(type(x) is int for x in c):
                raise ValueError(f"cells must be [q, r] pairs of integers, not {c!r}")
            if not all(-50 <= x <= 50 for x in c):
                raise ValueError("cell coordinates must be from -50 to 50")
            out.append((c[0], c[1]))
        if len(set(out)) != len(out):
            raise ValueError("cells must be distinct")
        kw["cells"] = tuple(sorted(out))
    if layout == "custom":
        cs = kw.get("cells")
        if cs is None:
            raise ValueError('layout "custom" needs cells: a list of [q, r] pairs')
        if not MIN_CELLS <= len(cs) <= MAX_CELLS:
            raise ValueError(f"a cluster has {MIN_CELLS} to {MAX_CELLS} Blinks, not {len(cs)}")
        if not is_connected(cs):
            raise ValueError("the cluster must be connected when the game starts")
    elif kw.get("cells") is not None:
        raise ValueError('cells are only for layout "custom"')
    if "reroll_once_per_game" in data:
        if type(data["reroll_once_per_game"]) is not bool:
            raise ValueError("reroll_once_per_game must be true or false")
        kw["reroll_once_per_game"] = data["reroll_once_per_game"]
    if "turn_timer_s" in data:
        v = data["turn_timer_s"]
        if not is_number(v) or not 0 <= v <= 3600:
            raise ValueError("turn_timer_s must be a number from 0 (off) to 3600")
        kw["turn_timer_s"] = float(v)
    return Settings(**kw)


# --- state ----------------------------------------------------------------------------------------

Cell = tuple[int, int, int | None]  # (q, r, face); face None before the first roll


@dataclass(frozen=True)
class State:
    settings: Settings
    players: int
    cells: tuple[Cell, ...]  # the Blinks still in the cluster, sorted by (q, r)
    order: tuple[int, ...] = ()  # seats in playing order (decided by StartTakeaway)
    turn: int = 0  # turns taken so far; the current player is order[turn % players]
    phase: Phase = "setup"
    rerolled: bool = False  # has the current player re-rolled this turn?
    rerolls_used: tuple[int, ...] = ()  # per seat, over the whole game
    claims: tuple[tuple[int, int, int, int], ...] = ()  # (seat, q, r, face), in claiming order
    gone: tuple[int, ...] = ()  # seats that left, in leaving order (out of ``order`` and the standings)

    @property
    def current(self) -> int | None:
        if self.phase not in ("turn", "rolling") or not self.order:
            return None
        return self.order[self.turn % len(self.order)]

    def standing(self) -> tuple[int, ...]:
        """The seats still in the game (all of them before the order is decided)."""
        return tuple(p for p in range(self.players) if p not in self.gone)

    def coords(self) -> set[Coord]:
        return {(q, r) for q, r, _ in self.cells}

    def face_at(self, cell: Coord) -> int | None:
        for q, r, f in self.cells:
            if (q, r) == cell:
                return f
        return None

    def claimed(self, seat: int) -> tuple[int, ...]:
        return tuple(f for p, _, _, f in self.claims if p == seat)

    def scores(self) -> tuple[int, ...]:
        return tuple(score(self.claimed(p)) for p in range(self.players))


# --- actions --------------------------------------------------------------------------------------


@message("Reroll")
@dataclass(frozen=True)
class Reroll:
    """Re-roll every die still in the cluster (the relay rolls them)."""


@message("ClaimBlink")
@dataclass(frozen=True)
class ClaimBlink:
    q: int
    r: int


# System actions: the relay applies them with player=SYSTEM when a timer asks for them.
@message("StartTakeaway")
@dataclass(frozen=True)
class StartTakeaway:
    order: tuple[int, ...] | None = None  # filled by complete(): the playing order
    faces: tuple[int, ...] | None = None  # filled by complete(): one face per cell, in (q, r) order


@message("RollCluster")
@dataclass(frozen=True)
class RollCluster:
    turn: int
    faces: tuple[int, ...] | None = None  # filled by complete()


@message("TakeawayTimeout")
@dataclass(frozen=True)
class TakeawayTimeout:
    turn: int


PLAYER_ACTIONS = (Reroll, ClaimBlink)
SYSTEM_ACTIONS = (StartTakeaway, RollCluster, TakeawayTimeout, PlayerLeft)
Action = Reroll | ClaimBlink | StartTakeaway | RollCluster | TakeawayTimeout | PlayerLeft


def action_from_wire(data: Mapping[str, object], *, system: bool = False) -> Action:
    """A player's action from its wire map (``system=True`` also admits system actions, for logs)."""
    action = decode_action(data, PLAYER_ACTIONS + SYSTEM_ACTIONS if system else PLAYER_ACTIONS, "Takeaway")
    assert isinstance(action, PLAYER_ACTIONS + SYSTEM_ACTIONS)  # decode_action admits no other class
    return action


def action_to_wire(action: Action) -> dict[str, object]:
    return to_dict(action)


# --- setup ----------------------------------------------------------------------------------------


def new_game(settings: Settings | Mapping[str, object] | None, players: int = 2, chance: Chance | None = None) -> State:
    """Lay out the cluster (a random layout draws on ``chance``); the order and the first roll
    follow as the system action ``StartTakeaway``."""
    s = make_settings(settings)
    _check_players(players)
    if s.layout == "random":
        if chance is None:
            raise ValueError("a random layout needs chance (the relay's seeded generator)")
        coords = random_layout(s.size, chance)
    elif s.layout == "custom":
        assert s.cells is not None
        coords = s.cells
    else:
        coords = LAYOUTS[s.layout]
    return State(settings=s, players=players, cells=tuple((q, r, None) for q, r in sorted(coords)),
                 rerolls_used=tuple(0 for _ in range(players)))


def _check_players(players: int) -> None:
    if type(players) is not int or not 2 <= players <= MAX_PLAYERS:
        raise ValueError(f"Takeaway Dice is for 2 to {MAX_PLAYERS} players, not {players!r}")


# --- events ---------------------------------------------------------------------------------------
# What happened, in public (protocol/events.py): nothing in this game is secret. ``player`` is a seat.

#: Why the cluster was rolled: the first roll of the game, or a player's re-roll.
RollReason = Literal["setup", "reroll"]


@event("order_decided")
@dataclass(frozen=True, kw_only=True)
class OrderDecided(TypedEvent):
    order: tuple[int, ...]  # seats in playing order


@event("dice_rolled")
@dataclass(frozen=True, kw_only=True)
class TakeawayDiceRolled(TypedEvent):
    """The whole cluster was rolled: every cell with its new face (a setup roll is no one's)."""

    reason: RollReason
    player: int | None
    turn: int | None = field(default=None, metadata=ABSENT)  # a re-roll's turn
    cells: tuple[Cell, ...]


@event("turn_started")
@dataclass(frozen=True, kw_only=True)
class TakeawayTurnStarted(TypedEvent):
    player: int
    turn: int


@event("reroll_requested")
@dataclass(frozen=True, kw_only=True)
class RerollRequested(TypedEvent):
    player: int
    turn: int


@event("turn_timeout")
@dataclass(frozen=True, kw_only=True)
class TakeawayTurnTimeout(TypedEvent):
    """The turn's time ran out: the relay claims for the player (the ``blink_claimed`` that follows)."""

    player: int
    turn: int


@event("blink_claimed")
@dataclass(frozen=True, kw_only=True)
class BlinkClaimed(TypedEvent):
    player: int
    q: int
    r: int
    face: int
    turn: int
    timeout: bool  # claimed by the relay when the turn's time ran out


@event("player_left")
@dataclass(frozen=True, kw_only=True)
class TakeawayPlayerLeft(TypedEvent):
    """A seat left a game of three or more: it is out of the order of play."""

    player: int
    turn: int


@event("game_over")
@dataclass(frozen=True, kw_only=True)
class TakeawayGameOver(TypedEvent):
    winner: int | None
    winners: tuple[int, ...]
    scores: tuple[int, ...]
    reason: Literal["all_claimed", "forfeit"]


#: Takeaway Dice's events by wire name.
EVENTS = EventTypes(OrderDecided, TakeawayDiceRolled, TakeawayTurnStarted, RerollRequested, TakeawayTurnTimeout,
                    BlinkClaimed, TakeawayPlayerLeft, TakeawayGameOver)


# --- the rules ------------------------------------------------------------------------------------


def _on_turn(state: State) -> int:
    """The seat on turn in a state whose turn has begun (``turn`` phase, order decided)."""
    p = state.current
    assert p is not None, "a turn begins only once the order is decided"
    return p


def _valid_faces(faces: object, n: int) -> bool:
    return isinstance(faces, tuple) and len(faces) == n and all(type(f) is int and 1 <= f <= 6 for f in faces)


def apply(state: State, player: int | None, action: Action) -> Accepted[State] | Rejected:
    """Apply one action; a rejection leaves ``state`` untouched (it is immutable anyway)."""
    if player is SYSTEM:
        return _apply_system(state, action)
    if type(player) is not int or not 0 <= player < state.players:
        return _no("not_a_player", f"no seat {player!r} in this game")
    if isinstance(action, SYSTEM_ACTIONS):
        return _no("not_allowed", f"{type(action).__name__} is the relay's to make")
    if not isinstance(action, PLAYER_ACTIONS):
        return _no("unknown_action", f"{type(action).__name__} is not a Takeaway action")
    if state.phase == "over":
        return _no("game_over", "the game is over")
    if player in state.gone:
        return _no("not_a_player", "you have left this game")
    if state.phase == "setup":
        return _no("wrong_phase", "the dice have not been rolled yet")
    if player != state.current:
        return _no("not_your_turn", f"it is seat {state.current}'s turn")
    if state.phase == "rolling":
        return _no("wrong_phase", "the dice are being re-rolled")
    if isinstance(action, Reroll):
        if state.rerolled:
            return _no("already_rerolled", "one re-roll per turn")
        if state.settings.reroll_once_per_game and state.rerolls_used[player] > 0:
            return _no("reroll_used", "each player may re-roll only once per game")
        used = tuple(n + (p == player) for p, n in enumerate(state.rerolls_used))
        new = replace(state, phase="rolling", rerolled=True, rerolls_used=used)
        return Accepted(new, (RerollRequested(player=player, turn=state.turn),))
    return _claim(state, player, action, timeout=False)


def _claim(state: State, player: int, action: ClaimBlink, timeout: bool) -> Accepted[State] | Rejected:
    if type(action.q) is not int or type(action.r) is not int:
        return _no("malformed", "q and r must be integers")
    cell = (action.q, action.r)
    coords = state.coords()
    if cell not in coords:
        return _no("no_such_cell", f"there is no Blink at {list(cell)}")
    if is_locked(coords, cell):
        return _no("locked", f"the Blink at {list(cell)} is locked")
    face = state.face_at(cell)
    assert face is not None
    cells = tuple(c for c in state.cells if (c[0], c[1]) != cell)
    claims = state.claims + ((player, cell[0], cell[1], face),)
    events: list[TypedEvent] = []
    if timeout:
        events.append(TakeawayTurnTimeout(player=player, turn=state.turn))
    events.append(BlinkClaimed(player=player, q=cell[0], r=cell[1], face=face, turn=state.turn, timeout=timeout))
    state = replace(state, cells=cells, claims=claims)
    if not cells:
        state = replace(state, phase="over")
        scores = list(state.scores())
        best = max(scores[p] for p in state.order)
        winners = [p for p, sc in enumerate(scores) if sc == best and p in state.order]
        events.append(TakeawayGameOver(winner=winners[0] if len(winners) == 1 else None, winners=tuple(winners),
                                       scores=tuple(scores), reason="all_claimed"))
        return Accepted(state, tuple(events))
    state = replace(state, turn=state.turn + 1, rerolled=False)
    events.append(TakeawayTurnStarted(player=_on_turn(state), turn=state.turn))
    return Accepted(state, tuple(events))


def _apply_system(state: State, action: Action) -> Accepted[State] | Rejected:
    if isinstance(action, StartTakeaway):
        if state.phase != "setup":
            return _no("wrong_phase", "the game has already started")
        if action.order is None or action.faces is None:
            return _no("incomplete", "StartTakeaway needs its order and dice (complete() fills them)")
        if sorted(action.order) != list(range(state.players)):
            return _no("malformed", "order must list every seat once")
        if not _valid_faces(action.faces, len(state.cells)):
            return _no("malformed", "one face from 1 to 6 per cell")
        cells = tuple((q, r, f) for (q, r, _), f in zip(state.cells, action.faces))
        state = replace(state, cells=cells, order=tuple(action.order), phase="turn", turn=0, rerolled=False)
        events: tuple[TypedEvent, ...] = (
            OrderDecided(order=tuple(action.order)),
            TakeawayDiceRolled(reason="setup", player=None, cells=cells),
            TakeawayTurnStarted(player=_on_turn(state), turn=0),
        )
        return Accepted(state, events)
    if isinstance(action, RollCluster):
        if state.phase != "rolling" or action.turn != state.turn:
            return _no("wrong_phase", "no re-roll is waiting")
        if action.faces is None:
            return _no("incomplete", "RollCluster needs its dice (complete() fills them)")
        if not _valid_faces(action.faces, len(state.cells)):
            return _no("malformed", "one face from 1 to 6 per cell")
        cells = tuple((q, r, f) for (q, r, _), f in zip(state.cells, action.faces))
        player = state.current
        state = replace(state, cells=cells, phase="turn")
        return Accepted(state, (TakeawayDiceRolled(reason="reroll", player=player, turn=state.turn, cells=cells),))
    if isinstance(action, TakeawayTimeout):
        if state.phase != "turn" or action.turn != state.turn:
            return _no("wrong_phase", "that turn is over")
        player = state.current
        assert player is not None
        q, r = default_claim(state, player)
        return _claim(state, player, ClaimBlink(q, r), timeout=True)
    if isinstance(action, PlayerLeft):
        return _leave(state, action.seat)
    if isinstance(action, PLAYER_ACTIONS):
        return _no("not_allowed", f"{type(action).__name__} is a player's action")
    return _no("unknown_action", f"{type(action).__name__} is not a Takeaway system action")


def _leaving(state: State, seat: int) -> tuple[State, bool]:
    """``state`` with ``seat`` out of play, and whether its turn passed. The order keeps its cycle
    without the leaver, turned so that ``order[turn % len(order)]`` is whoever plays now: the
    same player, or -- when the leaver was on turn -- the next in order at the next turn (the
    turn number itself moves on with the ``turn_started`` that follows)."""
    order, k = state.order, len(state.order)
    i = order.index(seat)
    now = state.turn % k
    rest = order[i + 1:] + order[:i]  # the cycle from the seat after the leaver
    passes = now == i
    nxt, turn = (rest[0], state.turn + 1) if passes else (order[now], state.turn)
    shift = (rest.index(nxt) - turn) % len(rest)
    new = replace(state, order=rest[shift:] + rest[:shift], gone=state.gone + (seat,))
    if passes:
        new = replace(new, phase="turn", rerolled=False)
    return new, passes


def _leave(state: State, seat: int) -> Accepted[State] | Rejected:
    if type(seat) is not int or not 0 <= seat < state.players or seat in state.gone:
        return _no("not_a_player", f"seat {seat!r} is not in this game")
    if state.players < 3:
        return _no("not_allowed", "a two-player game ends when a player leaves (the relay's forfeit)")
    if state.phase == "over":
        return _no("game_over", "the game is over")
    if state.phase == "setup":
        return _no("wrong_phase", "the order of play is not decided yet")
    state, passes = _leaving(state, seat)
    events: list[TypedEvent] = [TakeawayPlayerLeft(player=seat, turn=state.turn)]
    if len(state.order) == 1:
        state = replace(state, phase="over")
        events.append(TakeawayGameOver(winner=state.order[0], winners=(state.order[0],), scores=tuple(state.scores()),
                                       reason=FORFEIT))
    elif passes:
        state = replace(state, turn=state.turn + 1)
        events.append(TakeawayTurnStarted(player=_on_turn(state), turn=state.turn))
    return Accepted(state, tuple(events))


def default_claim(state: State, player: int) -> Coord:
    """The timeout move: the unlocked Blink worth most to ``player`` (first in (q, r) order on ties)."""
    claimed = state.claimed(player)
    best: tuple[int, Coord] | None = None
    for cell in free_cells(state.coords()):
        face = state.face_at(cell) or 0
        g = gain(claimed, face)
        if best is None or g > best[0]:
            best = (g, cell)
    assert best is not None, "a connected cluster always has a free Blink"
    return best[1]


def complete(state: State, player: int | None, action: Action, chance: Chance) -> Action:
    """Fill in the dice (and the order) of the relay's roll actions; other actions pass unchanged."""
    if player is not SYSTEM:
        return action
    if isinstance(action, StartTakeaway) and (action.order is None or action.faces is None):
        order = shuffled(tuple(range(state.players)), chance)
        faces = tuple(roll_die(chance) for _ in state.cells)
        return StartTakeaway(order=order, faces=faces)
    if isinstance(action, RollCluster) and action.faces is None:
        return RollCluster(action.turn, tuple(roll_die(chance) for _ in state.cells))
    return action


def timers(state: State) -> tuple[Timer[Action], ...]:
    if state.phase == "setup":
        return (Timer("start", 0, StartTakeaway()),)
    out: list[Timer[Action]] = []
    if state.phase == "rolling":
        out.append(Timer(f"reroll-{state.turn}", 0, RollCluster(state.turn)))
    if state.phase in ("turn", "rolling") and state.settings.turn_timer_s > 0:
        out.append(Timer(f"turn-{state.turn}", int(state.settings.turn_timer_s * NS), TakeawayTimeout(state.turn)))
    return tuple(out)


def legal_actions(state: State, player: int) -> list[Action]:
    if state.phase != "turn" or player != state.current:
        return []
    out: list[Action] = []
    if not state.rerolled and not (state.settings.reroll_once_per_game and state.rerolls_used[player] > 0):
        out.append(Reroll())
    out.extend(ClaimBlink(q, r) for q, r in free_cells(state.coords()))
    return out


def outcome(state: State) -> Outcome[Reason] | None:
    if state.phase != "over":
        return None
    scores = state.scores()
    standing = state.standing()
    best = max(scores[p] for p in standing)
    winners = tuple(p for p in standing if scores[p] == best)
    reason = FORFEIT if len(standing) == 1 else "shared_win" if len(winners) > 1 else "highest_score"
    return Outcome(winners=winners, reason=reason, scores=scores,
                   extra={"claimed": [list(state.claimed(p)) for p in range(state.players)]})


def view(state: State, player: int | None) -> State:
    """Nothing is secret in Takeaway Dice: every seat and spectator sees the whole state."""
    return state


# --- wire form ------------------------------------------------------------------------------------


def _cells_wire(cells: tuple[Cell, ...]) -> list[list[int | None]]:
    return [[q, r, f] for q, r, f in cells]


def to_wire(state: State) -> dict[str, object]:
    return {
        "settings": state.settings.to_wire(),
        "players": state.players,
        "cells": _cells_wire(state.cells),
        "order": list(state.order),
        "turn": state.turn,
        "phase": state.phase,
        "rerolled": state.rerolled,
        "rerolls_used": list(state.rerolls_used),
        "claims": [list(c) for c in state.claims],
        # only once someone has left: a state without leavers keeps the form older logs have
        **({"gone": list(state.gone)} if state.gone else {}),
    }


def _claim_of(xs: tuple[int, ...]) -> tuple[int, int, int, int]:
    return (xs[0], xs[1], xs[2], xs[3])


def from_wire(data: Mapping[str, object]) -> State:
    """Inverse of ``to_wire``; raises ValueError on anything malformed."""
    try:
        s = make_settings(data["settings"])
        players = wire_int(data["players"], "players")
        _check_players(players)

        def ints(xs: object, n: int | None = None) -> tuple[int, ...]:
            if not isinstance(xs, (list, tuple)) or (n is not None and len(xs) != n):
                raise ValueError("expected a list of integers")
            if not all(type(x) is int for x in xs):
                raise ValueError("expected integers")
            return tuple(xs)

        cells: list[Cell] = []
        for c in wire_list(data["cells"], "cells"):
            if not isinstance(c, (list, tuple)) or len(c) != 3:
                raise ValueError("a cell is [q, r, face]")
            q, r = ints(c[:2])
            f = c[2]
            if f is not None and (type(f) is not int or not 1 <= f <= 6):
                raise ValueError("a face is 1 to 6")
            cells.append((q, r, f))
        phase = one_of(data["phase"], PHASES, "phase")
        gone = ints(data.get("gone", []))
        if len(set(gone)) != len(gone) or not all(0 <= p < players for p in gone):
            raise ValueError("gone lists seats once each")
        order = ints(data["order"])
        if order and sorted(order) != [p for p in range(players) if p not in gone]:
            raise ValueError("order must list every seat still playing once")
        return State(
            settings=s,
            players=players,
            cells=tuple(sorted(cells, key=lambda c: (c[0], c[1]))),
            order=order,
            turn=ints([data["turn"]])[0],
            phase=phase,
            rerolled=bool(data["rerolled"]),
            rerolls_used=ints(data["rerolls_used"], players),
            claims=tuple(_claim_of(ints(c, 4)) for c in wire_list(data["claims"], "claims")),
            gone=gone,
        )
    except (KeyError, TypeError, IndexError, AttributeError) as exc:
        raise ValueError(f"malformed Takeaway state: {exc!r}") from exc


# --- sending less: a view kept up to date from the public events ----------------------------------
# Nothing is secret here, so no private update is ever needed: each event says its whole change.


def _event_seat(state: State, p: int) -> int:
    if not 0 <= p < state.players:
        raise ValueError(f"an event of a seat this game has not: {p!r}")
    return p


def _rolled(view: State, cells: tuple[Cell, ...]) -> tuple[Cell, ...]:
    """The cluster as a ``dice_rolled`` event shows it: the same cells, new faces."""
    if [(q, r) for q, r, _ in cells] != [(q, r) for q, r, _ in view.cells] or not _valid_faces(
            tuple(f for _, _, f in cells), len(view.cells)):
        raise ValueError("the rolled cells are not this view's cluster")
    return cells


def apply_event(view: State, seat: int | None, ev: TypedEvent) -> State:
    """One public event applied to a view (see ``Game.apply_event``): the changes ``apply`` makes,
    read back from the event. Events the game does not make (seats, results) change nothing."""
    match ev:
        case OrderDecided(order=order):
            if sorted(order) != list(range(view.players)) or view.phase != "setup":
                raise ValueError(f"bad order_decided {ev!r}")
            return replace(view, order=order)
        case TakeawayDiceRolled(cells=cells):
            if view.phase not in ("setup", "rolling"):
                raise ValueError("dice rolled outside a roll")
            return replace(view, cells=_rolled(view, cells), phase="turn")
        case TakeawayTurnStarted(player=p, turn=turn):
            p = _event_seat(view, p)
            if view.phase not in ("turn", "setup") or not view.order or view.order[turn % len(view.order)] != p:
                raise ValueError(f"bad turn_started {ev!r}")
            return replace(view, turn=turn, rerolled=False, phase="turn")
        case RerollRequested(player=p):
            p = _event_seat(view, p)
            if p != view.current or view.phase != "turn":
                raise ValueError(f"bad reroll_requested {ev!r}")
            used = tuple(n + (s == p) for s, n in enumerate(view.rerolls_used))
            return replace(view, phase="rolling", rerolled=True, rerolls_used=used)
        case BlinkClaimed(player=p, q=q, r=r, face=face):
            p = _event_seat(view, p)
            if view.face_at((q, r)) != face or p != view.current:
                raise ValueError(f"bad blink_claimed {ev!r}")
            return replace(view, cells=tuple(c for c in view.cells if (c[0], c[1]) != (q, r)),
                           claims=view.claims + ((p, q, r, face),))
        case TakeawayPlayerLeft(player=p):
            p = _event_seat(view, p)
            if p in view.gone or p not in view.order:
                raise ValueError(f"bad player_left {ev!r}")
            left, _ = _leaving(view, p)
            return left
        case TakeawayGameOver():
            return replace(view, phase="over")
    return view


def private_delta(before: State, after: State, seat: int) -> dict[str, object] | None:
    """Nothing is private in Takeaway Dice: the events say it all."""
    return None


def apply_private(view: State, seat: int, delta: Mapping[str, object]) -> State:
    raise ValueError("Takeaway Dice has no private updates")


# --- a bot ----------------------------------------------------------------------------------------


def bot_action(state: State, player: int, chance: Chance | None = None) -> Action | None:
    """A sensible policy from what the view shows: take the free Blink worth most to us (a repeat of
    a face we hold is worth 10); if the best is poor and a re-roll is allowed, re-roll first."""
    if state.phase != "turn" or player != state.current:
        return None
    claimed = state.claimed(player)
    free = free_cells(state.coords())
    if not free:
        return None

    def value(cell: Coord) -> tuple[int, int]:
        face = state.face_at(cell) or 0
        # Prefer what we gain; among equals, deny the next player what they would gain most from.
        nxt = state.order[(state.turn + 1) % len(state.order)] if state.order else player
        return (gain(claimed, face), gain(state.claimed(nxt), face) if nxt != player else 0)

    best = max(free, key=lambda c: (value(c), (-c[0], -c[1])))
    best_gain = value(best)[0]
    may_reroll = not state.rerolled and not (state.settings.reroll_once_per_game and state.rerolls_used[player] > 0)
    # A fresh die is worth 3.5 on average and more once we hold faces; the once-per-game re-roll is
    # kept for a really poor choice.
    threshold = 2 if state.settings.reroll_once_per_game else 4
    if may_reroll and best_gain < threshold and len(state.cells) > 1:
        return Reroll()
    return ClaimBlink(best[0], best[1])


# --- settings as wire maps -------------------------------------------------------------------------


def default_settings() -> dict[str, object]:
    return Settings().to_wire()


def check_settings(settings: Mapping[str, object], players: int) -> dict[str, object]:
    _check_players(players)
    return make_settings(settings).to_wire()


# --- the game -------------------------------------------------------------------------------------

GAME: Game[State, Action] = Game(
    name=NAME,
    title="Takeaway Dice",
    min_players=2,
    max_players=MAX_PLAYERS,
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
    stale_code="stale",  # an action made against a state that has since moved on
    realtime=False,
    leave=PlayerLeft,
    events=EVENTS,
    apply_event=apply_event,
    private_delta=private_delta,
    apply_private=apply_private,
    reason_labels=labels(REASON_LABELS),
    code_labels=labels(CODE_LABELS),
)
