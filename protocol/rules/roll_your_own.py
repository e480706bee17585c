"""Roll Your Own, custom dice duels (docs/RULES.md section 4), as a pure, immutable rule engine.

How this works
--------------
One state covers a whole MATCH (games of rounds of rolls), so ``best_of`` is 1 for the relay.

    build --every seat BuildDie (secret)--> [dice_revealed] rolling --RyoRoll (SYSTEM)--> rolling ...
      ^                                                         |  a seat reaches rolls_per_round
      |                                                         v
      |     (2 players) choice <--------------- round won ------+--(>2 players)--> rolloff --RyoRoll--> choice
      |        |  RaiseFace(face) --> next round (rolling)                                    (lowest roll chooses)
      |        |  LowerWinner --> lower --LowerFace(face) by the round's winner--> next round (rolling)
      +-- a seat reaches rounds_per_game (new dice; no choice after a game's last round)
          ... a seat reaches games_per_match --> over

Builds are secret: ``view`` hides every other seat's die (and a finite tile pool, which would give
them away) until all have built; the ``die_built`` event names the player only. Then the
``dice_revealed`` event shows all dice at once.

Every roll is the SYSTEM action ``RyoRoll`` that ``timers`` asks for (delay 0); ``complete`` fills
in one face index (0-5) per rolling seat, so a client can never choose dice, and the values are in
the ``dice_rolled`` event. Ties: with two players a tie is ignored (both roll again); with more, the
tied-highest roll again alone. In the losers' roll-off the lowest roll wins the right to choose
(tied-lowest roll again). When the seats still rolling all have the same one-valued die (say two
all-3 dice), no roll can ever separate them: ``complete`` then draws a lot instead (``lot``), and
the ``lot_drawn`` event says so -- otherwise such a game would never end.

An impossible option (no face can go up / none of the winner's can go down, or -- with a finite
pool -- no tile for it) cannot be chosen; when neither is possible the round passes without a
choice (``no_choice``). With ``turn_timer_s`` on, ``RyoTimeout`` builds a balanced default die for
whoever has not built, and makes the default choice (raise the chooser's lowest face; else have the
winner lower; the winner's highest face drops).

A player leaving a match of three or more (``PlayerLeft``, the relay's) is out of every roll, round
and game after it: their die leaves the table (its tiles go back to a finite pool; a die built in
secret is shown in the ``player_left`` event, so a log stays checkable), a build everyone else has
finished is revealed at once, a roll-off or tie they were in is settled by those left in it, and a
choice they were to make -- or a lowering of their die -- passes without one (the next round
starts). With two left, ties are ignored as in a duel. The leaver is never a winner; when one player
is left, they win the match (reason ``forfeit``).
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field, replace
from fractions import Fraction
from functools import lru_cache
from typing import get_args, Iterable, Literal, Mapping, Sequence, TypedDict, TypeVar

from protocol.codec import message, to_dict
from protocol.events import ABSENT, BadEvent, EventTypes, PublicEvent, TypedEvent, event, part
from protocol.match import FORFEIT, MATCH_EVENTS, GameResult
from protocol.rules.base import (
    is_number,
    CommonCode,
    labels,
    one_of,
    SYSTEM,
    Accepted,
    Chance,
    Outcome,
    PlayerLeft,
    Rejected,
    Timer,
    decode_action,
    Game,
    settings_map,
    wire_int,
    wire_list,
)

NAME = "ryo"
NS = 1_000_000_000
T = TypeVar("T")
FACES = 6
MAX_PLAYERS = 8

#: Building dice, a round's roll, a roll-off of the tied, the winner's choice, lowering a face, the end.
Phase = Literal["build", "rolling", "rolloff", "choice", "lower", "over"]
PHASES: tuple[Phase, ...] = get_args(Phase)
#: Why a game of this kind ends (``Outcome.reason``, as on the wire).
Reason = Literal["match_won", "forfeit"]
#: The rejection codes of this game (besides the common ones of every game).
Code = Literal["already_built", "bad_build", "pool_short", "incomplete"]
RejectCode = CommonCode | Code
#: In a few words, for the window.
REASON_LABELS: dict[Reason, str] = {"match_won": "match won", "forfeit": "the others left"}
#: The codes left out are the relay's own moves, or say best what went wrong in their detail.
CODE_LABELS: dict[Code, str] = {}


def _no(code: RejectCode, detail: str) -> Rejected:
    """A rejection with one of this game's codes (the type checker holds the code to them)."""
    return Rejected(code, detail)


Die = tuple[int, ...]

# --- dice maths -----------------------------------------------------------------------------------


def is_valid_build(faces: object, budget: int = 21, max_face: int = 9) -> bool:
    """Six whole numbers from 0 to ``max_face`` totalling at most ``budget``."""
    if not isinstance(faces, (list, tuple)) or len(faces) != FACES:
        return False
    if not all(type(f) is int and 0 <= f <= max_face for f in faces):
        return False
    return sum(faces) <= budget


def _wins(a: Sequence[int], b: Sequence[int]) -> int:
    """How many of the len(a)*len(b) equally likely pairs have a's face strictly higher."""
    bs = sorted(b)
    return sum(bisect_left(bs, x) for x in a)


def beat_probability(a: Sequence[int], b: Sequence[int]) -> float:
    """The exact probability that die ``a`` shows a strictly higher face than die ``b``."""
    a, b = list(a), list(b)
    if not a or not b:
        raise ValueError("a die needs at least one face")
    return float(Fraction(_wins(a, b), len(a) * len(b)))


def advantage(a: Sequence[int], b: Sequence[int]) -> float:
    """P(a beats b) - P(b beats a): how much better ``a`` is in a head-to-head roll."""
    return (_wins(a, b) - _wins(b, a)) / (len(a) * len(b))


# --- settings -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    budget: int = 21
    max_face: int = 9
    rolls_per_round: int = 6
    rounds_per_game: int = 6
    games_per_match: int = 3
    tile_pool: tuple[int, ...] | None = None  # tiles per pip value 0..max_face; None: unlimited
    turn_timer_s: float = 0.0

    def to_wire(self) -> dict[str, object]:
        return {
            "budget": self.budget,
            "max_face": self.max_face,
            "rolls_per_round": self.rolls_per_round,
            "rounds_per_game": self.rounds_per_game,
            "games_per_match": self.games_per_match,
            "tile_pool": None if self.tile_pool is None else list(self.tile_pool),
            "turn_timer_s": self.turn_timer_s,
        }


class _Chosen(TypedDict, total=False):
    """The settings a map chose (``make_settings``), by their ``Settings`` names."""

    budget: int
    max_face: int
    rolls_per_round: int
    rounds_per_game: int
    games_per_match: int
    tile_pool: tuple[int, ...]
    turn_timer_s: float


#: The whole-number settings, each with its bounds.
_COUNTS: tuple[tuple[Literal["budget", "max_face", "rolls_per_round", "rounds_per_game", "games_per_match"], int, int],
               ...] = (("budget", 0, 60), ("max_face", 1, 20), ("rolls_per_round", 1, 99), ("rounds_per_game", 1, 99),
                       ("games_per_match", 1, 99))


def make_settings(data: object = None) -> Settings:
    """Validated settings from a map (or the ``Settings`` themselves); unknown keys or bad values raise ValueError."""
    if isinstance(data, Settings):
        return data
    data = settings_map(data, Settings, "roll-your-own")
    kw: _Chosen = {}
    for key, lo, hi in _COUNTS:
        if key in data:
            v = data[key]
            if type(v) is not int or not lo <= v <= hi:
                raise ValueError(f"{key} must be an integer from {lo} to {hi}")
            kw[key] = v
    max_face = kw.get("max_face", Settings.max_face)
    pool = data.get("tile_pool")
    if pool is not None:
        if type(pool) is int:
            pool = [pool] * (max_face + 1)
        if not isinstance(pool, (list, tuple)) or len(pool) != max_face + 1:
            raise ValueError(f"tile_pool must list {max_face + 1} counts (pip values 0 to {max_face}), or be one count")
        if not all(type(n) is int and 0 <= n <= 999 for n in pool):
            raise ValueError("tile_pool counts must be integers from 0 to 999")
        kw["tile_pool"] = tuple(pool)
    if "turn_timer_s" in data:
        v = data["turn_timer_s"]
        if not is_number(v) or not 0 <= v <= 3600:
            raise ValueError("turn_timer_s must be a number from 0 (off) to 3600")
        kw["turn_timer_s"] = float(v)
    return Settings(**kw)


def _check_players(players: int, s: Settings) -> None:
    if type(players) is not int or not 2 <= players <= MAX_PLAYERS:
        raise ValueError(f"Roll Your Own is for 2 to {MAX_PLAYERS} players, not {players!r}")
    if s.tile_pool is not None:
        # Whatever the others take, the last builder must still find six tiles within the budget:
        # the worst case is that the others took the cheapest 6*(players-1) tiles.
        # Walked by value rather than spelled out tile by tile: a pool may hold ~20,000 tiles.
        skip = FACES * (players - 1)  # the tiles the others may take, cheapest first
        last: list[int] = []
        for v, n in enumerate(s.tile_pool):
            taken = min(skip, n)
            skip -= taken
            last.extend([v] * min(n - taken, FACES - len(last)))
            if len(last) == FACES:
                break
        if len(last) < FACES or sum(last) > s.budget:
            raise ValueError(f"the tile pool is too small for {players} players to build dice within the budget")


# --- state ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class State:
    settings: Settings
    players: int
    phase: Phase = "build"
    game: int = 1  # the game being played (1-based)
    round: int = 1  # the round being played in this game (1-based)
    rolls: int = 0  # rolls made in the whole match: keys the roll timers
    rounds_played: int = 0  # rounds finished in the whole match: keys the choice timers
    dice: tuple[Die | None, ...] = ()  # per seat; None: not built yet, or hidden in a view
    built: tuple[bool, ...] = ()
    pool: tuple[int, ...] | None = None  # tiles left (finite pool only; None in a view while building)
    rolling: tuple[int, ...] = ()  # who rolls next
    roll_wins: tuple[int, ...] = ()  # in this round
    round_wins: tuple[int, ...] = ()  # in this game
    game_wins: tuple[int, ...] = ()  # in this match
    rounds_total: tuple[int, ...] = ()  # rounds won in the whole match
    round_winner: int | None = None  # while choosing
    chooser: int | None = None  # the round's loser who chooses
    last_roll: tuple[tuple[int, int, int], ...] = ()  # (seat, face index, value) of the latest roll
    previous: tuple[Die | None, ...] = ()  # everyone's die at the end of the previous game (public)
    winner: int | None = None  # of the match
    gone: tuple[int, ...] = ()  # seats that left, in leaving order: out of every roll and the standings

    def standing(self) -> tuple[int, ...]:
        """The seats still playing."""
        return tuple(p for p in range(self.players) if p not in self.gone)


def _zeros(n: int) -> tuple[int, ...]:
    return tuple(0 for _ in range(n))


def _set(t: tuple[T, ...], i: int, v: T) -> tuple[T, ...]:
    return t[:i] + (v,) + t[i + 1:]


# --- actions --------------------------------------------------------------------------------------


@message("BuildDie")
@dataclass(frozen=True)
class BuildDie:
    faces: tuple[int, ...]


@message("RaiseFace")
@dataclass(frozen=True)
class RaiseFace:
    """Option (a): one face of the chooser's own die goes up one pip."""

    face: int  # index 0-5


@message("LowerWinner")
@dataclass(frozen=True)
class LowerWinner:
    """Option (b): the round's winner must lower one of their own faces by one pip."""


@message("LowerFace")
@dataclass(frozen=True)
class LowerFace:
    """The round's winner picks which of their faces drops one pip (after LowerWinner)."""

    face: int  # index 0-5


# System actions.
@message("RyoRoll")
@dataclass(frozen=True)
class RyoRoll:
    roll: int  # State.rolls when it was asked for
    values: tuple[int, ...] | None = None  # filled by complete(): a face index per rolling seat
    lot: int | None = None  # filled by complete() instead, when no roll can separate the seats


@message("RyoTimeout")
@dataclass(frozen=True)
class RyoTimeout:
    key: str  # the timer's name: build-<game>, choice-<round>, lower-<round>


PLAYER_ACTIONS = (BuildDie, RaiseFace, LowerWinner, LowerFace)
SYSTEM_ACTIONS = (RyoRoll, RyoTimeout, PlayerLeft)
Action = BuildDie | RaiseFace | LowerWinner | LowerFace | RyoRoll | RyoTimeout | PlayerLeft


def action_from_wire(data: Mapping[str, object], *, system: bool = False) -> Action:
    """A player's action from its wire map (``system=True`` also admits system actions, for logs)."""
    action = decode_action(data, PLAYER_ACTIONS + SYSTEM_ACTIONS if system else PLAYER_ACTIONS, "Roll Your Own")
    assert isinstance(action, PLAYER_ACTIONS + SYSTEM_ACTIONS)  # decode_action admits no other class
    return action


def action_to_wire(action: Action) -> dict[str, object]:
    return to_dict(action)


# --- setup ----------------------------------------------------------------------------------------


def new_game(settings: Settings | Mapping[str, object] | None, players: int = 2, chance: Chance | None = None) -> State:
    """A match starts with everyone building a die; no chance is needed until the first roll."""
    s = make_settings(settings)
    _check_players(players, s)
    z = _zeros(players)
    return State(settings=s, players=players, dice=tuple(None for _ in range(players)),
                 built=tuple(False for _ in range(players)), pool=s.tile_pool, roll_wins=z, round_wins=z,
                 game_wins=z, rounds_total=z, previous=tuple(None for _ in range(players)))


# --- events ---------------------------------------------------------------------------------------
# What happened, in public (protocol/events.py): a die built in secret appears only when all are
# revealed (or when its builder leaves, or the game ends). ``player`` is a seat; ``ryo_game`` the
# number of the Roll Your Own game within the relay's one game (``game`` is the envelope's).

#: A roll to win a round, or a roll-off among a round's losers for who chooses.
RollKind = Literal["roll", "rolloff"]


@event("build_started")
@dataclass(frozen=True, kw_only=True)
class BuildStarted(TypedEvent):
    """A new Roll Your Own game: every player builds a new die (all tiles back in the pool)."""

    ryo_game: int


@event("die_built")
@dataclass(frozen=True, kw_only=True)
class DieBuilt(TypedEvent):
    player: int
    timeout: bool  # built by the relay when the time to build ran out


@event("dice_revealed")
@dataclass(frozen=True, kw_only=True)
class DiceRevealed(TypedEvent):
    ryo_game: int
    dice: tuple[Die | None, ...]  # per seat (None: a seat out of the game)


@event("round_started")
@dataclass(frozen=True, kw_only=True)
class RoundStarted(TypedEvent):
    ryo_game: int
    round: int


@part
@dataclass(frozen=True, kw_only=True)
class FaceRolled:
    """One seat's roll: the face that came up (an index) and its value."""

    player: int
    face: int
    value: int


@event("dice_rolled")
@dataclass(frozen=True, kw_only=True)
class RyoDiceRolled(TypedEvent):
    kind: RollKind
    roll: int  # the rolls of the game so far
    rolls: tuple[FaceRolled, ...]


@event("lot_drawn")
@dataclass(frozen=True, kw_only=True)
class LotDrawn(TypedEvent):
    """Dice that can never differ: the relay drew lots among ``players`` instead of rolling."""

    kind: RollKind
    roll: int
    players: tuple[int, ...]
    player: int  # who the lot chose
    reason: Literal["identical_one_valued_dice"]


@event("roll_tied")
@dataclass(frozen=True, kw_only=True)
class RollTied(TypedEvent):
    """The highest roll was tied: ``rerolling`` roll again (``ignored``: a tie of two that does not count)."""

    players: tuple[int, ...]
    ignored: bool
    rerolling: tuple[int, ...]


@event("roll_won")
@dataclass(frozen=True, kw_only=True)
class RollWon(TypedEvent):
    player: int
    wins: tuple[int, ...]  # per seat: rolls won this round


@event("round_won")
@dataclass(frozen=True, kw_only=True)
class RoundWon(TypedEvent):
    player: int
    ryo_game: int
    round: int
    rounds: tuple[int, ...]  # per seat: rounds won this game


@event("rolloff_started")
@dataclass(frozen=True, kw_only=True)
class RolloffStarted(TypedEvent):
    """The round's losers roll off for who chooses (the lowest roll does)."""

    players: tuple[int, ...]
    winner: int  # the round's winner


@event("rolloff_tied")
@dataclass(frozen=True, kw_only=True)
class RolloffTied(TypedEvent):
    players: tuple[int, ...]
    rerolling: tuple[int, ...]


@event("rolloff_won")
@dataclass(frozen=True, kw_only=True)
class RolloffWon(TypedEvent):
    player: int  # who chooses


@event("choice_started")
@dataclass(frozen=True, kw_only=True)
class ChoiceStarted(TypedEvent):
    """``player`` chooses: raise a face of their own die, or have the round's ``winner`` lower one."""

    player: int
    winner: int
    can_raise: bool
    can_lower: bool


@event("no_choice")
@dataclass(frozen=True, kw_only=True)
class NoChoice(TypedEvent):
    """Nothing can be raised or lowered: the next round starts."""

    player: int
    winner: int


@event("face_raised")
@dataclass(frozen=True, kw_only=True)
class FaceRaised(TypedEvent):
    player: int
    face: int
    value: int
    die: Die  # the die after the change
    timeout: bool


@event("lower_chosen")
@dataclass(frozen=True, kw_only=True)
class LowerChosen(TypedEvent):
    player: int
    winner: int  # who lowers a face of their own die
    timeout: bool


@event("face_lowered")
@dataclass(frozen=True, kw_only=True)
class FaceLowered(TypedEvent):
    player: int
    face: int
    value: int
    die: Die
    timeout: bool


@event("turn_timeout")
@dataclass(frozen=True, kw_only=True)
class RyoTurnTimeout(TypedEvent):
    """A time limit ran out: the relay acts for the player (the event that follows)."""

    player: int
    phase: Literal["build", "choice", "lower"]


@event("game_won")
@dataclass(frozen=True, kw_only=True)
class GameWon(TypedEvent):
    """A Roll Your Own game was won (the relay's game, the match of them, goes on unless decided)."""

    player: int
    ryo_game: int
    games: tuple[int, ...]  # per seat: games won


@event("player_left")
@dataclass(frozen=True, kw_only=True)
class RyoPlayerLeft(TypedEvent):
    player: int
    ryo_game: int
    die: Die | None  # a die built in secret, shown as its builder leaves


@event("game_over")
@dataclass(frozen=True, kw_only=True)
class RyoGameOver(TypedEvent):
    """The match of games is decided (or forfeited: then with every die as it is)."""

    winner: int
    winners: tuple[int, ...]
    scores: tuple[int, ...]  # per seat: games won
    rounds: tuple[int, ...]  # per seat: rounds won in all
    reason: Reason
    dice: tuple[Die | None, ...] | None = field(default=None, metadata=ABSENT)


#: Roll Your Own's events by wire name.
EVENTS = EventTypes(BuildStarted, DieBuilt, DiceRevealed, RoundStarted, RyoDiceRolled, LotDrawn, RollTied, RollWon,
                    RoundWon, RolloffStarted, RolloffTied, RolloffWon, ChoiceStarted, NoChoice, FaceRaised,
                    LowerChosen, FaceLowered, RyoTurnTimeout, GameWon, RyoPlayerLeft, RyoGameOver)


# --- the rules ------------------------------------------------------------------------------------


def _pool_has(pool: tuple[int, ...] | None, value: int) -> bool:
    return pool is None or pool[value] > 0


def _pool_short(pool: tuple[int, ...] | None, faces: Iterable[int]) -> int | None:
    """The first pip value the pool cannot supply for ``faces``, or None."""
    if pool is None:
        return None
    need: dict[int, int] = {}
    for f in faces:
        need[f] = need.get(f, 0) + 1
    for v in sorted(need):
        if pool[v] < need[v]:
            return v
    return None


def _pool_take(pool: tuple[int, ...] | None, faces: Iterable[int], sign: int = -1) -> tuple[int, ...] | None:
    if pool is None:
        return None
    out = list(pool)
    for f in faces:
        out[f] += sign
    return tuple(out)


def _swap(pool: tuple[int, ...] | None, old: int, new: int) -> tuple[int, ...] | None:
    """A face changes from ``old`` to ``new``: the new tile comes from the pool, the old goes back."""
    if pool is None:
        return None
    out = list(pool)
    out[new] -= 1
    out[old] += 1
    return tuple(out)


def raisable(state: State, seat: int) -> list[int]:
    """Face indices of ``seat``'s die that may go up one pip."""
    die = state.dice[seat]
    if die is None:
        return []
    return [i for i, f in enumerate(die) if f < state.settings.max_face and _pool_has(state.pool, f + 1)]


def lowerable(state: State, seat: int) -> list[int]:
    die = state.dice[seat]
    if die is None:
        return []
    return [i for i, f in enumerate(die) if f > 0 and _pool_has(state.pool, f - 1)]


def _deadlocked(state: State) -> bool:
    """No roll can ever separate the seats still rolling: they all have the same one-valued die."""
    values: set[int] = set()
    for p in state.rolling:
        die = state.dice[p]
        if die is None:
            return False
        values.update(die)
    return len(values) == 1 and len(state.rolling) > 1


def apply(state: State, player: int | None, action: Action) -> Accepted[State] | Rejected:
    if player is SYSTEM:
        return _apply_system(state, action)
    if type(player) is not int or not 0 <= player < state.players:
        return _no("not_a_player", f"no seat {player!r} in this game")
    if isinstance(action, SYSTEM_ACTIONS):
        return _no("not_allowed", f"{type(action).__name__} is the relay's to make")
    if not isinstance(action, PLAYER_ACTIONS):
        return _no("unknown_action", f"{type(action).__name__} is not a Roll Your Own action")
    if state.phase == "over":
        return _no("game_over", "the match is over")
    if player in state.gone:
        return _no("not_a_player", "you have left this match")
    if isinstance(action, BuildDie):
        return _build(state, player, action)
    if isinstance(action, (RaiseFace, LowerWinner)):
        if state.phase != "choice":
            return _no("wrong_phase", "there is no choice to make now")
        if player != state.chooser:
            return _no("not_your_turn", f"seat {state.chooser} chooses")
        if isinstance(action, LowerWinner):
            assert state.round_winner is not None
            if not lowerable(state, state.round_winner):
                return _no("not_allowed", "none of the winner's faces can go down")
            return Accepted(*_lower_chosen(state, [], timeout=False))
        return _raise(state, player, action.face, timeout=False)
    assert isinstance(action, LowerFace)
    if state.phase != "lower":
        return _no("wrong_phase", "no face is to be lowered now")
    if player != state.round_winner:
        return _no("not_your_turn", f"seat {state.round_winner} lowers a face")
    return _lower(state, player, action.face, timeout=False)


def _build(state: State, player: int, action: BuildDie, events: list[TypedEvent] | None = None,
           timeout: bool = False) -> Accepted[State] | Rejected:
    if state.phase != "build":
        return _no("wrong_phase", "dice are built before a game starts")
    if state.built[player]:
        return _no("already_built", "you have built your die for this game")
    s = state.settings
    faces = action.faces
    if not is_valid_build(faces, s.budget, s.max_face):
        return _no("bad_build", f"six whole numbers from 0 to {s.max_face}, totalling at most {s.budget}")
    short = _pool_short(state.pool, faces)
    if short is not None:
        return _no("pool_short", f"the pool has too few tiles of {short}")
    events = list(events or [])
    if timeout:
        events.append(RyoTurnTimeout(player=player, phase="build"))
    events.append(DieBuilt(player=player, timeout=timeout))
    state = replace(state, dice=_set(state.dice, player, tuple(faces)), built=_set(state.built, player, True),
                    pool=_pool_take(state.pool, faces))
    return Accepted(_reveal_if_built(state, events), tuple(events))


def _reveal_if_built(state: State, events: list[TypedEvent]) -> State:
    """Once every seat still playing has built, all dice are shown and the first round starts."""
    if not all(state.built[p] for p in state.standing()):
        return state
    events.append(DiceRevealed(ryo_game=state.game, dice=state.dice))
    return _start_round(state, events)


def _start_round(state: State, events: list[TypedEvent]) -> State:
    events.append(RoundStarted(ryo_game=state.game, round=state.round))
    return replace(state, phase="rolling", rolling=state.standing(), roll_wins=_zeros(state.players),
                   round_winner=None, chooser=None)


def _next_round(state: State, events: list[TypedEvent]) -> tuple[State, tuple[TypedEvent, ...]]:
    state = replace(state, round=state.round + 1)
    return _start_round(state, events), tuple(events)


def _raise(state: State, player: int, face: object, timeout: bool) -> Accepted[State] | Rejected:
    if type(face) is not int or not 0 <= face < FACES:
        return _no("malformed", "face is an index from 0 to 5")
    die = state.dice[player]
    assert die is not None
    if face not in raisable(state, player):
        if die[face] >= state.settings.max_face:
            return _no("not_allowed", f"that face is already {state.settings.max_face}")
        return _no("pool_short", f"the pool has no tile of {die[face] + 1}")
    new = _set(die, face, die[face] + 1)
    events: list[TypedEvent] = []
    if timeout:
        events.append(RyoTurnTimeout(player=player, phase="choice"))
    events.append(FaceRaised(player=player, face=face, value=new[face], die=new, timeout=timeout))
    state = replace(state, dice=_set(state.dice, player, new), pool=_swap(state.pool, die[face], new[face]))
    return Accepted(*_next_round(state, events))


def _lower_chosen(state: State, events: list[TypedEvent], timeout: bool) -> tuple[State, tuple[TypedEvent, ...]]:
    chooser, winner = state.chooser, state.round_winner
    assert chooser is not None and winner is not None, "a choice is made after a round is won"
    if timeout:
        events.append(RyoTurnTimeout(player=chooser, phase="choice"))
    events.append(LowerChosen(player=chooser, winner=winner, timeout=timeout))
    return replace(state, phase="lower"), tuple(events)


def _lower(state: State, player: int, face: object, timeout: bool) -> Accepted[State] | Rejected:
    if type(face) is not int or not 0 <= face < FACES:
        return _no("malformed", "face is an index from 0 to 5")
    die = state.dice[player]
    assert die is not None
    if face not in lowerable(state, player):
        if die[face] <= 0:
            return _no("not_allowed", "that face is already 0")
        return _no("pool_short", f"the pool has no tile of {die[face] - 1}")
    new = _set(die, face, die[face] - 1)
    events: list[TypedEvent] = []
    if timeout:
        events.append(RyoTurnTimeout(player=player, phase="lower"))
    events.append(FaceLowered(player=player, face=face, value=new[face], die=new, timeout=timeout))
    state = replace(state, dice=_set(state.dice, player, new), pool=_swap(state.pool, die[face], new[face]))
    return Accepted(*_next_round(state, events))


def _offer_choice(state: State, chooser: int, events: list[TypedEvent]) -> tuple[State, tuple[TypedEvent, ...]]:
    winner = state.round_winner
    assert winner is not None
    state = replace(state, chooser=chooser)
    can_raise = bool(raisable(state, chooser))
    can_lower = bool(lowerable(state, winner))
    if not can_raise and not can_lower:
        events.append(NoChoice(player=chooser, winner=winner))
        return _next_round(state, events)
    events.append(ChoiceStarted(player=chooser, winner=winner, can_raise=can_raise, can_lower=can_lower))
    return replace(state, phase="choice", rolling=()), tuple(events)


def _roll_won(state: State, w: int, events: list[TypedEvent]) -> tuple[State, tuple[TypedEvent, ...]]:
    s = state.settings
    roll_wins = _set(state.roll_wins, w, state.roll_wins[w] + 1)
    events.append(RollWon(player=w, wins=roll_wins))
    state = replace(state, roll_wins=roll_wins, rolling=state.standing())
    if roll_wins[w] < s.rolls_per_round:
        return state, tuple(events)
    round_wins = _set(state.round_wins, w, state.round_wins[w] + 1)
    state = replace(state, round_wins=round_wins, rounds_total=_set(state.rounds_total, w, state.rounds_total[w] + 1),
                    rounds_played=state.rounds_played + 1, round_winner=w)
    events.append(RoundWon(player=w, ryo_game=state.game, round=state.round, rounds=round_wins))
    if round_wins[w] < s.rounds_per_game:
        losers = tuple(p for p in state.standing() if p != w)
        if len(losers) == 1:
            return _offer_choice(state, losers[0], events)
        events.append(RolloffStarted(players=losers, winner=w))
        return replace(state, phase="rolloff", rolling=losers), tuple(events)
    game_wins = _set(state.game_wins, w, state.game_wins[w] + 1)
    events.append(GameWon(player=w, ryo_game=state.game, games=game_wins))
    state = replace(state, game_wins=game_wins)
    if game_wins[w] >= s.games_per_match:
        state = replace(state, phase="over", winner=w, rolling=(), round_winner=None)
        events.append(RyoGameOver(winner=w, winners=(w,), scores=game_wins, rounds=state.rounds_total,
                                  reason="match_won"))
        return state, tuple(events)
    # Between games every player builds a new die; all tiles go back to the pool.
    z = _zeros(state.players)
    state = replace(state, phase="build", game=state.game + 1, round=1, previous=state.dice,
                    dice=tuple(None for _ in range(state.players)), built=tuple(False for _ in range(state.players)),
                    pool=s.tile_pool, rolling=(), roll_wins=z, round_wins=z, round_winner=None, chooser=None)
    events.append(BuildStarted(ryo_game=state.game))
    return state, tuple(events)


def _apply_system(state: State, action: Action) -> Accepted[State] | Rejected:
    if isinstance(action, RyoRoll):
        return _roll(state, action)
    if isinstance(action, RyoTimeout):
        if action.key != _timer_key(state):
            return _no("wrong_phase", "that time limit is no longer running")
        if state.phase == "build":
            events: list[TypedEvent] = []
            for p in state.standing():
                if not state.built[p]:
                    result = _build(state, p, BuildDie(default_build(state.settings, state.pool)), events, timeout=True)
                    assert isinstance(result, Accepted), result
                    state, events = result.state, list(result.events)
            return Accepted(state, tuple(events))
        if state.phase == "choice":
            assert state.chooser is not None
            up = raisable(state, state.chooser)
            if up:
                die = state.dice[state.chooser]
                assert die is not None
                faces: Die = die
                face = min(up, key=lambda i: (faces[i], i))  # the lowest face goes up
                return _raise(state, state.chooser, face, timeout=True)
            return Accepted(*_lower_chosen(state, [], timeout=True))
        if state.phase == "lower":
            w = state.round_winner
            assert w is not None
            die = state.dice[w]
            assert die is not None
            face = min(lowerable(state, w), key=lambda i: (-die[i], i))  # the highest face drops
            return _lower(state, w, face, timeout=True)
    if isinstance(action, PlayerLeft):
        return _leave(state, action.seat)
    if isinstance(action, PLAYER_ACTIONS):
        return _no("not_allowed", f"{type(action).__name__} is a player's action")
    return _no("unknown_action", f"{type(action).__name__} is not a Roll Your Own system action")


def _leaving(state: State, seat: int) -> State:
    """``state`` with ``seat`` out: its die off the table (tiles back to a finite pool), out of the
    roll. (Shared with ``apply_event``: a view hiding the pool keeps it hidden.)"""
    die = state.dice[seat]
    pool = state.pool if die is None else _pool_take(state.pool, die, sign=1)
    return replace(state, gone=state.gone + (seat,), dice=_set(state.dice, seat, None), pool=pool,
                   rolling=tuple(p for p in state.rolling if p != seat))


def _leave(state: State, seat: int) -> Accepted[State] | Rejected:
    if type(seat) is not int or not 0 <= seat < state.players or seat in state.gone:
        return _no("not_a_player", f"seat {seat!r} is not in this match")
    if state.players < 3:
        return _no("not_allowed", "a two-player match ends when a player leaves (the relay's forfeit)")
    if state.phase == "over":
        return _no("game_over", "the match is over")
    phase = state.phase
    owed = (phase == "choice" and seat in (state.chooser, state.round_winner)) or (
        phase == "lower" and seat == state.round_winner)
    secret = state.dice[seat] if phase == "build" else None  # built in secret: shown now, or never
    state = _leaving(state, seat)
    events: list[TypedEvent] = [RyoPlayerLeft(player=seat, ryo_game=state.game, die=secret)]
    standing = state.standing()
    if len(standing) == 1:
        w = standing[0]
        state = replace(state, phase="over", winner=w, rolling=(), round_winner=None)
        # the dice as they are: a build still secret is shown with the end (a log explains it so)
        events.append(RyoGameOver(winner=w, winners=(w,), scores=state.game_wins, rounds=state.rounds_total,
                                  reason=FORFEIT, dice=state.dice))
        return Accepted(state, tuple(events))
    if phase == "build":
        return Accepted(_reveal_if_built(state, events), tuple(events))
    if phase in ("rolling", "rolloff") and len(state.rolling) == 1:  # the one left in a tie or roll-off takes it
        if phase == "rolling":
            return Accepted(*_roll_won(state, state.rolling[0], events))
        events.append(RolloffWon(player=state.rolling[0]))
        return Accepted(*_offer_choice(state, state.rolling[0], events))
    if owed:  # the choice, or the lowering, was the leaver's or about their die: the round passes
        return Accepted(*_next_round(state, events))
    return Accepted(state, tuple(events))


def _roll(state: State, action: RyoRoll) -> Accepted[State] | Rejected:
    if state.phase not in ("rolling", "rolloff") or action.roll != state.rolls:
        return _no("wrong_phase", "no roll is waiting")
    kind: RollKind = "roll" if state.phase == "rolling" else "rolloff"
    events: list[TypedEvent] = []
    rolling = state.rolling
    if _deadlocked(state):
        if type(action.lot) is not int:
            return _no("incomplete", "these dice can never differ: RyoRoll needs a lot (complete() draws it)")
        if not 0 <= action.lot < len(rolling):
            return _no("malformed", "the lot names one of the rolling seats")
        chosen = rolling[action.lot]
        events.append(LotDrawn(kind=kind, roll=state.rolls, players=rolling, player=chosen,
                               reason="identical_one_valued_dice"))
        state = replace(state, rolls=state.rolls + 1)
        if kind == "roll":
            return Accepted(*_roll_won(state, chosen, events))
        events.append(RolloffWon(player=chosen))
        return Accepted(*_offer_choice(state, chosen, events))
    if action.values is None:
        return _no("incomplete", "RyoRoll needs its dice (complete() fills them)")
    if len(action.values) != len(rolling) or not all(type(v) is int and 0 <= v < FACES for v in action.values):
        return _no("malformed", "one face index from 0 to 5 per rolling seat")
    results = []
    for p, i in zip(rolling, action.values):
        die = state.dice[p]
        assert die is not None
        results.append((p, i, die[i]))
    events.append(RyoDiceRolled(kind=kind, roll=state.rolls,
                                rolls=tuple(FaceRolled(player=p, face=i, value=v) for p, i, v in results)))
    state = replace(state, rolls=state.rolls + 1, last_roll=tuple(results))
    if kind == "roll":
        best = max(v for _, _, v in results)
        top = tuple(p for p, _, v in results if v == best)
        if len(top) == 1:
            return Accepted(*_roll_won(state, top[0], events))
        duel = state.standing()
        if len(duel) == 2:
            events.append(RollTied(players=top, ignored=True, rerolling=duel))
            return Accepted(replace(state, rolling=duel), tuple(events))
        events.append(RollTied(players=top, ignored=False, rerolling=top))
        return Accepted(replace(state, rolling=top), tuple(events))
    low = min(v for _, _, v in results)
    bottom = tuple(p for p, _, v in results if v == low)
    if len(bottom) == 1:
        events.append(RolloffWon(player=bottom[0]))
        return Accepted(*_offer_choice(state, bottom[0], events))
    events.append(RolloffTied(players=bottom, rerolling=bottom))
    return Accepted(replace(state, rolling=bottom), tuple(events))


def complete(state: State, player: int | None, action: Action, chance: Chance) -> Action:
    if player is not SYSTEM or not isinstance(action, RyoRoll):
        return action
    if action.values is not None or action.lot is not None:
        return action
    if _deadlocked(state):
        return RyoRoll(action.roll, None, chance.randbelow(len(state.rolling)))
    return RyoRoll(action.roll, tuple(chance.randbelow(FACES) for _ in state.rolling))


def _timer_key(state: State) -> str | None:
    if state.phase == "build":
        return f"build-{state.game}"
    if state.phase == "choice":
        return f"choice-{state.rounds_played}"
    if state.phase == "lower":
        return f"lower-{state.rounds_played}"
    return None


def timers(state: State) -> tuple[Timer[Action], ...]:
    if state.phase in ("rolling", "rolloff"):
        return (Timer(f"roll-{state.rolls}", 0, RyoRoll(state.rolls)),)
    key = _timer_key(state)
    if key is not None and state.settings.turn_timer_s > 0:
        return (Timer(key, int(state.settings.turn_timer_s * NS), RyoTimeout(key)),)
    return ()


# --- builds ---------------------------------------------------------------------------------------


def _multisets(target: int, max_face: int, pool: tuple[int, ...] | None, limit: int = 20000) -> list[Die]:
    """Non-decreasing six-face dice with faces summing to exactly ``target`` that the pool allows."""
    out: list[Die] = []

    def go(prefix: list[int], lo: int, left: int, slots: int) -> None:
        if len(out) >= limit:
            return
        if slots == 0:
            if left == 0:
                out.append(tuple(prefix))
            return
        for v in range(lo, min(max_face, left // slots) + 1):
            if pool is not None and prefix.count(v) + 1 > pool[v]:
                continue
            if v + max_face * (slots - 1) < left:
                continue
            prefix.append(v)
            go(prefix, v, left - v, slots - 1)
            prefix.pop()

    go([], 0, target, FACES)
    return out


@lru_cache(maxsize=64)
def candidate_builds(budget: int, max_face: int, pool: tuple[int, ...] | None = None) -> tuple[Die, ...]:
    """The strongest-looking builds: dice (faces ascending) using as many pips as the budget and the
    pool allow. A build below that total is legal too, just never better in total."""
    for target in range(min(budget, FACES * max_face), -1, -1):
        found = _multisets(target, max_face, pool)
        if found:
            return tuple(found)
    return ()


def default_build(settings: Settings, pool: tuple[int, ...] | None = None) -> Die:
    """A balanced die: the budget spread as evenly as the faces (and the pool) allow."""
    target = min(settings.budget, FACES * settings.max_face)
    base, extra = divmod(target, FACES)
    die = tuple([base] * (FACES - extra) + [base + 1] * extra)
    if _pool_short(pool, die) is None:
        return die
    options = candidate_builds(settings.budget, settings.max_face, pool)
    if not options:
        raise ValueError("the tile pool cannot make a die")  # excluded by the settings check
    return min(options, key=lambda d: (sum(x * x for x in d), d))


# --- the rest of the surface ----------------------------------------------------------------------

LEGAL_BUILDS_SHOWN = 400


def build_pool(state: State) -> tuple[int, ...] | None:
    """The tiles a build may count on: the pool itself when it is known; in a view that hides a
    finite pool, a fair share of the starting pool (what no other fair builder can take away)."""
    if state.pool is not None or state.settings.tile_pool is None:
        return state.pool
    return tuple(n // state.players for n in state.settings.tile_pool)


def _build_options(state: State) -> tuple[Die, ...]:
    s = state.settings
    options = candidate_builds(s.budget, s.max_face, build_pool(state))
    if not options and s.tile_pool is not None:
        options = candidate_builds(s.budget, s.max_face, s.tile_pool)
    return options


def legal_actions(state: State, player: int) -> list[Action]:
    """What ``player`` may do now. For a build, the strongest-total dice only (ascending faces; a
    sample when there are very many): every valid die may be built, but listing them all is
    pointless. (In a view that hides a finite pool, the builds within a fair share of it.)"""
    if player in state.gone:
        return []
    if state.phase == "build" and not state.built[player]:
        builds = _build_options(state)
        if len(builds) > LEGAL_BUILDS_SHOWN:
            step = len(builds) / LEGAL_BUILDS_SHOWN
            builds = tuple(builds[int(i * step)] for i in range(LEGAL_BUILDS_SHOWN))
        return [BuildDie(b) for b in builds]
    if state.phase == "choice" and player == state.chooser:
        out: list[Action] = [RaiseFace(i) for i in raisable(state, player)]
        assert state.round_winner is not None
        if lowerable(state, state.round_winner):
            out.append(LowerWinner())
        return out
    if state.phase == "lower" and player == state.round_winner:
        return [LowerFace(i) for i in lowerable(state, player)]
    return []


def outcome(state: State) -> Outcome[Reason] | None:
    if state.phase != "over":
        return None
    assert state.winner is not None
    reason: Reason = FORFEIT if len(state.standing()) == 1 else "match_won"
    return Outcome(winners=(state.winner,), reason=reason, scores=state.game_wins,
                   extra={"games": list(state.game_wins), "rounds": list(state.rounds_total)})


def view(state: State, player: int | None) -> State:
    """Before the reveal, every die but the viewer's own is hidden, and so is a finite pool."""
    if state.phase != "build":
        return state
    dice = tuple(d if p == player else None for p, d in enumerate(state.dice))
    return replace(state, dice=dice, pool=None)


# --- sending less: a view kept up to date from the public events plus private updates -------------
# The one secret is a die while it is being built: ``die_built`` names only the builder, so the
# builder's own faces go to that seat alone (``private_delta``) until ``dice_revealed`` shows all.


def _event_seat(state: State, p: int) -> int:
    if not 0 <= p < state.players:
        raise ValueError(f"an event of a seat this match has not: {p!r}")
    return p


def _event_seats(state: State, xs: tuple[int, ...]) -> tuple[int, ...]:
    if not all(0 <= p < state.players for p in xs):
        raise ValueError(f"not a list of seats: {xs!r}")
    return xs


def _event_ints(xs: object, n: int) -> tuple[int, ...]:
    if not isinstance(xs, (list, tuple)) or len(xs) != n or not all(type(x) is int for x in xs):
        raise ValueError(f"not {n} integers: {xs!r}")
    return tuple(xs)


def _face_changed(view: State, ev: FaceRaised | FaceLowered, step: int) -> State:
    """``face_raised`` (step 1) / ``face_lowered`` (-1): the die as shown, one tile swapped in the pool."""
    p, face = _event_seat(view, ev.player), ev.face
    die = _event_ints(ev.die, FACES)
    old = view.dice[p]
    if old is None or not 0 <= face < FACES or die[face] != old[face] + step:
        raise ValueError(f"the changed face does not fit this view's die: {ev!r}")
    return replace(view, dice=_set(view.dice, p, die), pool=_swap(view.pool, old[face], die[face]))


def _revealed(view: State, dice: tuple[Die | None, ...]) -> State:
    """The dice shown (all built, or a forfeit while building): the view's dice and the pool they leave."""
    if view.phase != "build" or len(dice) != view.players:
        raise ValueError(f"dice revealed that do not fit this view: {dice!r}")
    shown = tuple(None if d is None and (p in view.gone or not view.built[p]) else _event_ints(d, FACES)
                  for p, d in enumerate(dice))
    pool = view.settings.tile_pool
    for d in shown:
        if d is not None:
            pool = _pool_take(pool, d)
    return replace(view, dice=shown, pool=pool)


def apply_event(view: State, seat: int | None, ev: TypedEvent) -> State:
    """One public event applied to ``seat``'s view (see ``Game.apply_event``): the changes the rules
    make, read back from the event; the seat's own new die comes as its private update. Events the
    game does not make (seats, results) change nothing."""
    n = view.players
    match ev:
        case DieBuilt(player=p):
            p = _event_seat(view, p)
            if view.phase != "build" or view.built[p]:
                raise ValueError(f"bad die_built {ev!r}")
            return replace(view, built=_set(view.built, p, True))
        case DiceRevealed(dice=dice):
            return _revealed(view, dice)
        case RoundStarted(round=rnd):
            return replace(view, round=rnd, phase="rolling", rolling=view.standing(), roll_wins=_zeros(n),
                           round_winner=None, chooser=None)
        case FaceRaised():
            return _face_changed(view, ev, 1)
        case FaceLowered():
            return _face_changed(view, ev, -1)
        case LowerChosen():
            return replace(view, phase="lower")
        case NoChoice(player=p):
            return replace(view, chooser=_event_seat(view, p))  # the next round_started follows
        case ChoiceStarted(player=p):
            return replace(view, chooser=_event_seat(view, p), phase="choice", rolling=())
        case RollWon(wins=wins):
            return replace(view, roll_wins=_event_ints(wins, n), rolling=view.standing())
        case RoundWon(player=w, rounds=rounds):
            w = _event_seat(view, w)
            return replace(view, round_wins=_event_ints(rounds, n), round_winner=w,
                           rounds_total=_set(view.rounds_total, w, view.rounds_total[w] + 1),
                           rounds_played=view.rounds_played + 1)
        case RolloffStarted(players=players):
            return replace(view, phase="rolloff", rolling=_event_seats(view, players))
        case GameWon(games=games):
            return replace(view, game_wins=_event_ints(games, n))
        case RyoGameOver(winner=w, dice=dice):
            if view.phase == "build" and dice is not None:  # a forfeit while building shows the builds with the end
                view = _revealed(view, dice)
            return replace(view, phase="over", winner=_event_seat(view, w), rolling=(), round_winner=None)
        case BuildStarted(ryo_game=game):
            z = _zeros(n)
            # A view while building holds no pool (it would give the others' dice away).
            return replace(view, phase="build", game=game, round=1, previous=view.dice, dice=tuple(None for _ in range(n)),
                           built=tuple(False for _ in range(n)), pool=None, rolling=(), roll_wins=z, round_wins=z,
                           round_winner=None, chooser=None)
        case LotDrawn(roll=roll) | RyoDiceRolled(roll=roll) if roll != view.rolls or view.phase not in ("rolling", "rolloff"):
            raise ValueError(f"bad {ev.TYPE} {ev!r}")
        case LotDrawn():
            return replace(view, rolls=view.rolls + 1)
        case RyoDiceRolled(rolls=rolls):
            last = tuple((_event_seat(view, x.player), x.face, x.value) for x in rolls)
            return replace(view, rolls=view.rolls + 1, last_roll=last)
        case RollTied(rerolling=rerolling) | RolloffTied(rerolling=rerolling):
            return replace(view, rolling=_event_seats(view, rerolling))
        case RyoPlayerLeft(player=p):
            p = _event_seat(view, p)
            if p in view.gone:
                raise ValueError(f"bad player_left {ev!r}")
            return _leaving(view, p)  # what follows (a reveal, a roll won, the next round) comes as its own events
    return view


def private_delta(before: State, after: State, seat: int) -> dict[str, object] | None:
    """Tell ``seat`` its own die when it was built (by the player or by a timeout); every other change
    is in the public events. Sent even when the same change revealed all dice: the client's view
    after the ``die_built`` event (before the reveal that follows) must not lack it."""
    if before.phase != "build" or before.built[seat] or not (after.phase != "build" or after.built[seat]):
        return None
    die = after.dice[seat]
    return None if die is None else {"die": list(die)}


def private_complete(view: State, seat: int) -> bool:
    """While building, the seat's own die is known once it is built (a lost update leaves it unknown)."""
    return not (0 <= seat < view.players and view.phase == "build" and view.built[seat] and view.dice[seat] is None
                and seat not in view.gone)  # a leaver's die is off the table


def apply_private(view: State, seat: int, delta: Mapping[str, object]) -> State:
    try:
        die = _event_ints(delta["die"], FACES)
    except (KeyError, TypeError) as exc:
        raise ValueError(f"malformed Roll Your Own private update: {exc!r}") from exc
    if not 0 <= seat < view.players:
        raise ValueError("no such seat")
    if view.phase == "build" and view.built[seat] and view.dice[seat] in (None, die):
        return replace(view, dice=_set(view.dice, seat, die))
    if view.phase != "build" and view.dice[seat] == die:
        return view  # already shown to all by the reveal
    raise ValueError("the private update does not fit this view")


# --- wire form ------------------------------------------------------------------------------------


def _die_out(d: Die | None) -> list[int] | None:
    return None if d is None else list(d)


def to_wire(state: State) -> dict[str, object]:
    return {
        "settings": state.settings.to_wire(),
        "players": state.players,
        "phase": state.phase,
        "game": state.game,
        "round": state.round,
        "rolls": state.rolls,
        "rounds_played": state.rounds_played,
        "dice": [_die_out(d) for d in state.dice],
        "built": list(state.built),
        "pool": None if state.pool is None else list(state.pool),
        "rolling": list(state.rolling),
        "roll_wins": list(state.roll_wins),
        "round_wins": list(state.round_wins),
        "game_wins": list(state.game_wins),
        "rounds_total": list(state.rounds_total),
        "round_winner": state.round_winner,
        "chooser": state.chooser,
        "last_roll": [list(x) for x in state.last_roll],
        "previous": [_die_out(d) for d in state.previous],
        "winner": state.winner,
        # only once someone has left: a state without leavers keeps the form older logs have
        **({"gone": list(state.gone)} if state.gone else {}),
    }


def from_wire(data: Mapping[str, object]) -> State:
    try:
        s = make_settings(data["settings"])
        n = wire_int(data["players"], "players")
        _check_players(n, s)

        def ints(xs: object, length: int | None = None) -> tuple[int, ...]:
            if not isinstance(xs, (list, tuple)) or (length is not None and len(xs) != length):
                raise ValueError("expected a list of integers")
            if not all(type(x) is int for x in xs):
                raise ValueError("expected integers")
            return tuple(xs)

        def seat(x: object) -> int | None:
            return None if x is None else player(x)

        def player(x: object) -> int:
            if type(x) is not int or not 0 <= x < n:
                raise ValueError("bad seat")
            return x

        def rolled(x: object) -> tuple[int, int, int]:
            seat_, face, value = ints(x, 3)
            return (seat_, face, value)

        def dice(xs: object) -> tuple[Die | None, ...]:
            if not isinstance(xs, list) or len(xs) != n:
                raise ValueError("one die per seat")
            return tuple(None if d is None else ints(d, FACES) for d in xs)

        phase = one_of(data["phase"], PHASES, "phase")
        flags = wire_list(data["built"], "built")
        built = tuple(b for b in flags if type(b) is bool)
        if len(flags) != n or len(built) != n:
            raise ValueError("built: one flag per seat")
        return State(
            settings=s,
            players=n,
            phase=phase,
            game=ints([data["game"]])[0],
            round=ints([data["round"]])[0],
            rolls=ints([data["rolls"]])[0],
            rounds_played=ints([data["rounds_played"]])[0],
            dice=dice(data["dice"]),
            built=built,
            pool=None if data["pool"] is None else ints(data["pool"], s.max_face + 1),
            rolling=tuple(player(x) for x in wire_list(data["rolling"], "rolling")),
            roll_wins=ints(data["roll_wins"], n),
            round_wins=ints(data["round_wins"], n),
            game_wins=ints(data["game_wins"], n),
            rounds_total=ints(data["rounds_total"], n),
            round_winner=seat(data["round_winner"]),
            chooser=seat(data["chooser"]),
            last_roll=tuple(rolled(x) for x in wire_list(data["last_roll"], "last_roll")),
            previous=dice(data["previous"]),
            winner=seat(data["winner"]),
            gone=tuple(player(x) for x in wire_list(data.get("gone", []), "gone")),
        )
    except (KeyError, TypeError, IndexError, AttributeError) as exc:
        raise ValueError(f"malformed Roll Your Own state: {exc!r}") from exc


# --- a bot ----------------------------------------------------------------------------------------

FIELD_SIZE = 120
CANDIDATES_SCORED = 600


@lru_cache(maxsize=16)
def _field_scores(budget: int, max_face: int) -> dict[Die, float]:
    """Each full-budget die's mean advantage against a spread of full-budget dice."""
    builds = candidate_builds(budget, max_face, None)
    if len(builds) > CANDIDATES_SCORED:  # very large budgets: score an even sample only
        builds = builds[:: len(builds) // CANDIDATES_SCORED + 1]
    step = max(1, len(builds) // FIELD_SIZE)
    field = builds[::step]
    return {b: sum(advantage(b, f) for f in field) / len(field) for b in builds}


def _versus(die: Die, dice: tuple[Die | None, ...], me: int) -> float:
    return sum(advantage(die, d) for p, d in enumerate(dice) if p != me and d is not None)


def bot_action(state: State, player: int, chance: Chance | None = None) -> Action | None:
    """Build a die that does well against the field (and against what the others built last game);
    choose the option that leaves our die best placed against everyone; as the winner, drop the face
    that costs us least."""
    s = state.settings
    if player in state.gone:
        return None
    if state.phase == "build" and not state.built[player]:
        scores = _field_scores(s.budget, s.max_face)
        options = _build_options(state)
        options = tuple(o for o in options if o in scores) or options
        known = [d for p, d in enumerate(state.previous) if p != player and d is not None]

        def value(d: Die) -> float:
            v = scores.get(d, 0.0)
            if known:
                v += 0.5 * sum(advantage(d, k) for k in known) / len(known)
            return v

        # Bots in one match should not all build the very same die (every roll would tie): each
        # seat takes a different one of the few best builds, and the pick moves on each game.
        ranked = sorted(options, key=lambda d: (value(d), d), reverse=True)
        top = ranked[: min(5, len(ranked))]
        return BuildDie(top[(player + state.game) % len(top)])
    if state.phase == "choice" and player == state.chooser:
        w = state.round_winner
        assert w is not None
        mine = state.dice[player]
        assert mine is not None
        best: tuple[float, Action] | None = None
        for i in raisable(state, player):
            raised = _set(mine, i, mine[i] + 1)
            v = _versus(raised, _set(state.dice, player, raised), player)
            if best is None or v > best[0]:
                best = (v, RaiseFace(i))
        if lowerable(state, w):
            j = _best_lower(state, w)
            theirs = state.dice[w]
            assert theirs is not None
            dice = _set(state.dice, w, _set(theirs, j, theirs[j] - 1))
            v = _versus(mine, dice, player)
            if best is None or v > best[0]:
                best = (v, LowerWinner())
        return None if best is None else best[1]
    if state.phase == "lower" and player == state.round_winner:
        return LowerFace(_best_lower(state, player)) if lowerable(state, player) else None
    return None


def _best_lower(state: State, w: int) -> int:
    """The face whose drop hurts seat ``w`` least against everyone else."""
    die = state.dice[w]
    assert die is not None

    def value(i: int) -> tuple[float, int]:
        new = _set(die, i, die[i] - 1)
        return (_versus(new, state.dice, w), -i)

    return max(lowerable(state, w), key=value)


# --- settings as wire maps -------------------------------------------------------------------------


def default_settings() -> dict[str, object]:
    return Settings().to_wire()


def check_settings(settings: Mapping[str, object], players: int) -> dict[str, object]:
    s = make_settings(settings)
    _check_players(players, s)
    return s.to_wire()


# --- the match runner's summary ---------------------------------------------------------------------


def summarise_games(events: Sequence[PublicEvent], players: Sequence[str],
                    games: list[dict[str, object]]) -> list[dict[str, object]]:
    """One relay game holds a whole Roll Your Own match: list its own games (``game_won`` events) as
    a player counts them, numbered from 0 like every ``game`` field, each with its ``winner``,
    ``winners``, ``reason`` and the games won so far; the last one also carries the relay game's
    result (its reason, scores and each player's rounds won)."""
    read = [GAME.read_event(ev) for ev in events]
    entries = [dict(g) for g in games]
    for entry, result in zip(entries, (r for r in read if isinstance(r, GameResult))):
        won, rounds = result.extra.get("games"), result.extra.get("rounds")
        if isinstance(won, list):
            entry["games_won"] = dict(zip(players, won))
        if isinstance(rounds, list):
            entry["rounds_won"] = dict(zip(players, rounds))
    inner: list[dict[str, object]] = []
    for won in read:
        if not isinstance(won, GameWon):
            continue
        winner = players[won.player] if 0 <= won.player < len(players) else won.player
        inner.append({"game": won.ryo_game - 1, "winner": winner, "winners": [winner], "reason": "game_won",
                      "games_won": dict(zip(players, won.games))})
    if not inner:
        return entries
    if entries:
        last = {k: v for k, v in entries[-1].items() if k not in ("game", "winner", "winners")}
        inner[-1] = {**inner[-1], **last}
    return inner


# --- the game -------------------------------------------------------------------------------------

def revealed_build(state: State, seat: int, events: Sequence[PublicEvent], pos: int) -> list[Action] | None:
    """For a log checker: a die is built in secret and revealed (``dice_revealed``) once all are
    built, so the seat's build is the revealed die, not one of the thousands of legal ones."""
    if state.phase != "build" or state.built[seat]:
        return None
    for rec in events[pos:]:
        if rec.type not in (DiceRevealed.TYPE, RyoPlayerLeft.TYPE, RyoGameOver.TYPE):
            continue
        try:
            ev = EVENTS.decode(rec.type, rec.data)
        except BadEvent:
            return []
        shown: Die | None
        match ev:
            case RyoPlayerLeft(player=p, die=die) if p == seat:  # left before the reveal: shown then
                shown = die
            case DiceRevealed(dice=dice) | RyoGameOver(dice=tuple() as dice):
                shown = dice[seat] if seat < len(dice) else None
            case _:
                continue
        return [] if shown is None else [BuildDie(shown)]
    return []  # never revealed in this log: no build can be checked


GAME: Game[State, Action] = Game(
    name=NAME,
    title="Roll Your Own",
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
    summarise_games=summarise_games,
    leave=PlayerLeft,
    secret_choice=revealed_build,
    events=EVENTS,
    apply_event=apply_event,
    private_delta=private_delta,
    apply_private=apply_private,
    private_complete=private_complete,
    reason_labels=labels(REASON_LABELS),
    code_labels=labels(CODE_LABELS),
)
