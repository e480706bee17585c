"""Sequence Dice (docs/RULES.md section 3), as a pure, immutable rule engine.

How this works
--------------
The board is data: rows of numbers (``DEFAULT_BOARD`` below, or the ``board`` setting). A chip on
the board belongs to a *colour* (0 green, 1 blue, 2 red). With two or three players each seat has
its own colour; with four, seats 0 and 2 share colour 0 and seats 1 and 3 share colour 1 (teams).

    rolloff --RollOff (SYSTEM, until one highest)--> roll --RollDice (SYSTEM)--> move --PlaceChip / RemoveChip--> roll ...
                                                       ^                        |  (no possible move: the turn ends at once)
                                                       +------------------------+
    ... --a SEQUENCE after a placement, or max_turns turns--> over

Every roll is a SYSTEM action the relay is asked for through ``timers`` (delay 0) and fills with
dice through ``complete``; the dice are in the ``rolloff`` / ``dice_rolled`` events, so a log
replays, and a client can never choose them (system actions are refused from a seat).

After a roll of ``total``:
- 2..9 or 12: place on an open space showing ``total``; if all such spaces are covered, replace an
  opponent's chip on one of them (PlaceChip on that space); if all are the player's own, nothing.
- 10: remove an opponent's chip that is not on a 2 or 12 space (RemoveChip); none: nothing.
- 11: place on any open space; on a full board, replace any opponent's chip.
- 2 and 12: then the same player takes another turn (even when nothing could be placed).
A colour with all its chips on the board cannot place (nor replace); its 10s still remove.
When the roll leaves no possible move the turn ends at once (event ``no_move``).

The first player or team with ``sequence_length`` of their own chips in a row, column or diagonal
(checked after every placement) wins; after ``max_turns`` turns the game is a draw. With
``turn_timer_s`` on, ``timers`` asks for a ``SequenceTimeout``: the first possible move in
row-major order is made for the player, and the events say so. Nothing is secret: ``view`` is the
state itself.

A player leaving a game of three or four (``PlayerLeft``, the relay's) is out: turns go round the
seats still playing, a turn the leaver was on ends at once (no bonus), and the leaver's chips stay
on the board as an opponent's chips to everyone (with four, the team-mate plays on for the team
and the colour). The leaver is never a winner; when the seats still playing are one colour, they
win (reason ``forfeit``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import get_args, Iterable, Literal, Mapping, Sequence, TypedDict

from protocol.codec import message, to_dict
from protocol.events import ABSENT, EventTypes, TypedEvent, event, part
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
    decode_action,
    Game,
    settings_map,
)

NAME = "sequence"
NS = 1_000_000_000

#: Deciding who starts, a turn's roll, its move, the end.
Phase = Literal["rolloff", "roll", "move", "over"]
PHASES: tuple[Phase, ...] = get_args(Phase)
#: Why a game of this kind ends (``Outcome.reason``, as on the wire).
Reason = Literal["sequence", "max_turns", "forfeit"]
REASONS: tuple[Reason, ...] = get_args(Reason)
STATE_REASONS: tuple[Reason | Literal[""], ...] = ("", *REASONS)  # a state's: "" while the game runs
#: The rejection codes of this game (besides the common ones of every game).
Code = Literal["no_such_cell", "incomplete"]
RejectCode = CommonCode | Code
#: In a few words, for the window.
REASON_LABELS: dict[Reason, str] = {"sequence": "SEQUENCE", "max_turns": "turn limit", "forfeit": "the others left"}
#: The codes left out are the relay's own moves, or say best what went wrong in their detail.
CODE_LABELS: dict[Code, str] = {"no_such_cell": "there is no space there"}


def _no(code: RejectCode, detail: str) -> Rejected:
    """A rejection with one of this game's codes (the type checker holds the code to them)."""
    return Rejected(code, detail)


#: The default board of RULES.md: corners 2, centre 12, each of 3..9 once per quarter.
DEFAULT_BOARD: tuple[tuple[int, ...], ...] = (
    (2, 7, 4, 8, 5, 2),
    (5, 9, 3, 6, 9, 7),
    (8, 6, 12, 12, 3, 4),
    (4, 3, 12, 12, 6, 8),
    (7, 9, 6, 3, 9, 5),
    (2, 5, 8, 4, 7, 2),
)

#: The chips' colours, one a side (a team shares one).
Colour = Literal["green", "blue", "red"]
COLOURS: tuple[Colour, ...] = get_args(Colour)
BOARD_NUMBERS = frozenset({2, 3, 4, 5, 6, 7, 8, 9, 12})
BONUS_TOTALS = (2, 12)  # the same player rolls again
DEFENSIVE = 10
WILD = 11
LINE_DIRECTIONS = ((0, 1), (1, 0), (1, 1), (1, -1))

Coord = tuple[int, int]


# --- lines ----------------------------------------------------------------------------------------


def find_sequence(owned: Iterable[Sequence[int]], length: int = 5) -> tuple[Coord, ...] | None:
    """The first line of ``length`` adjacent cells of ``owned`` (row, column or diagonal), or None."""
    cells = {(int(c[0]), int(c[1])) for c in owned}
    for r, c in sorted(cells):
        for dr, dc in LINE_DIRECTIONS:
            if (r - dr, c - dc) in cells:
                continue  # not the start of this line
            line = [(r, c)]
            while (line[-1][0] + dr, line[-1][1] + dc) in cells:
                line.append((line[-1][0] + dr, line[-1][1] + dc))
            if len(line) >= length:
                return tuple(line[:length]) if len(line) == length else tuple(line)
    return None


def has_sequence(owned: Iterable[Sequence[int]], length: int = 5) -> bool:
    """Are there ``length`` cells of ``owned`` (a set of ``(row, col)``) adjacent in one straight
    line: a row, a column or a diagonal?"""
    return find_sequence(owned, length) is not None


# --- settings -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    board: tuple[tuple[int, ...], ...] = DEFAULT_BOARD
    sequence_length: int = 5
    max_turns: int = 400
    chips_per_colour: int = 20
    turn_timer_s: float = 0.0

    @property
    def rows(self) -> int:
        return len(self.board)

    @property
    def cols(self) -> int:
        return len(self.board[0])

    def to_wire(self) -> dict[str, object]:
        return {
            "board": [list(row) for row in self.board],
            "sequence_length": self.sequence_length,
            "max_turns": self.max_turns,
            "chips_per_colour": self.chips_per_colour,
            "turn_timer_s": self.turn_timer_s,
        }


class _Chosen(TypedDict, total=False):
    """The settings a map chose (``make_settings``), by their ``Settings`` names."""

    board: tuple[tuple[int, ...], ...]
    sequence_length: int
    max_turns: int
    chips_per_colour: int
    turn_timer_s: float


#: The whole-number settings, each with its bounds.
_COUNTS: tuple[tuple[Literal["sequence_length", "max_turns", "chips_per_colour"], int, int], ...] = (
    ("sequence_length", 3, 12), ("max_turns", 1, 100_000), ("chips_per_colour", 1, 144))


def make_settings(data: object = None) -> Settings:
    if isinstance(data, Settings):
        return data
    data = settings_map(data, Settings, "sequence")
    kw: _Chosen = {}
    if "board" in data:
        b = data["board"]
        if not isinstance(b, (list, tuple)) or not 3 <= len(b) <= 12:
            raise ValueError("board must be a list of 3 to 12 rows")
        rows = []
        for row in b:
            if not isinstance(row, (list, tuple)) or not 3 <= len(row) <= 12:
                raise ValueError("each board row must be a list of 3 to 12 numbers")
            if not all(type(x) is int and x in BOARD_NUMBERS for x in row):
                raise ValueError("board spaces must be numbers 2-9 or 12")
            rows.append(tuple(row))
        if len({len(r) for r in rows}) != 1:
            raise ValueError("board rows must all have the same length")
        kw["board"] = tuple(rows)
    for key, lo, hi in _COUNTS:
        if key in data:
            v = data[key]
            if type(v) is not int or not lo <= v <= hi:
                raise ValueError(f"{key} must be an integer from {lo} to {hi}")
            kw[key] = v
    if "turn_timer_s" in data:
        v = data["turn_timer_s"]
        if not is_number(v) or not 0 <= v <= 3600:
            raise ValueError("turn_timer_s must be a number from 0 (off) to 3600")
        kw["turn_timer_s"] = float(v)
    s = Settings(**kw)
    if s.sequence_length > max(s.rows, s.cols):
        raise ValueError("sequence_length is longer than the board")
    return s


# --- state ----------------------------------------------------------------------------------------

Chips = tuple[tuple[int | None, ...], ...]  # per space: the colour of its chip, or None


def team_of(seat: int, players: int) -> int:
    """The colour a seat plays: its own, or with four players the team colour (seats 0&2, 1&3)."""
    return seat % 2 if players == 4 else seat


def seats_of(colour: int, players: int) -> tuple[int, ...]:
    return tuple(p for p in range(players) if team_of(p, players) == colour)


@dataclass(frozen=True)
class State:
    settings: Settings
    players: int
    chips: Chips
    phase: Phase = "rolloff"
    current: int | None = None  # whose turn it is (None during the roll-off)
    turn: int = 0  # turns started so far, bonus turns included (turn N is the N+1th)
    dice: tuple[int, int] | None = None  # the current turn's roll, in phase move
    contenders: tuple[int, ...] = ()  # who rolls in the current roll-off round
    rolloff_round: int = 0
    winners: tuple[int, ...] = ()  # seats, when over
    line: tuple[Coord, ...] = ()  # the winning SEQUENCE
    reason: Reason | Literal[""] = ""  # why it is over
    gone: tuple[int, ...] = ()  # seats that left, in leaving order: out of the turns and the standings

    @property
    def total(self) -> int | None:
        return None if self.dice is None else self.dice[0] + self.dice[1]

    def colour(self, seat: int) -> int:
        return team_of(seat, self.players)

    def standing(self) -> tuple[int, ...]:
        """The seats still playing."""
        return tuple(p for p in range(self.players) if p not in self.gone)

    def after(self, seat: int) -> int:
        """The seat still playing that comes after ``seat`` in turn order."""
        for k in range(1, self.players + 1):
            p = (seat + k) % self.players
            if p not in self.gone:
                return p
        return seat

    def count(self, colour: int) -> int:
        return sum(1 for row in self.chips for x in row if x == colour)

    def owned(self, colour: int) -> set[Coord]:
        return {(r, c) for r, row in enumerate(self.chips) for c, x in enumerate(row) if x == colour}


# --- actions --------------------------------------------------------------------------------------


@message("PlaceChip")
@dataclass(frozen=True)
class PlaceChip:
    """Place a chip on an open space, or (when the rules say so) replace an opponent's chip."""

    row: int
    col: int


@message("RemoveChip")
@dataclass(frozen=True)
class RemoveChip:
    """The defensive 10: remove an opponent's chip (not from a 2 or 12 space)."""

    row: int
    col: int


# System actions.
@message("RollOff")
@dataclass(frozen=True)
class RollOff:
    round: int
    dice: tuple[tuple[int, ...], ...] | None = None  # filled by complete(): two dice per contender


@message("RollDice")
@dataclass(frozen=True)
class RollDice:
    turn: int
    dice: tuple[int, ...] | None = None  # filled by complete(): two dice


@message("SequenceTimeout")
@dataclass(frozen=True)
class SequenceTimeout:
    turn: int


PLAYER_ACTIONS = (PlaceChip, RemoveChip)
SYSTEM_ACTIONS = (RollOff, RollDice, SequenceTimeout, PlayerLeft)
Action = PlaceChip | RemoveChip | RollOff | RollDice | SequenceTimeout | PlayerLeft


def action_from_wire(data: Mapping[str, object], *, system: bool = False) -> Action:
    """A player's action from its wire map (``system=True`` also admits system actions, for logs)."""
    action = decode_action(data, PLAYER_ACTIONS + SYSTEM_ACTIONS if system else PLAYER_ACTIONS, "Sequence")
    assert isinstance(action, PLAYER_ACTIONS + SYSTEM_ACTIONS)  # decode_action admits no other class
    return action


def action_to_wire(action: Action) -> dict[str, object]:
    return to_dict(action)


# --- setup ----------------------------------------------------------------------------------------


def _check_players(players: int) -> None:
    if type(players) is not int or not 2 <= players <= 4:
        raise ValueError(f"Sequence Dice is for 2 to 4 players, not {players!r}")


def new_game(settings: Settings | Mapping[str, object] | None, players: int = 2, chance: Chance | None = None) -> State:
    """An empty board; who goes first is decided by the roll-off (system actions)."""
    s = make_settings(settings)
    _check_players(players)
    chips = tuple(tuple(None for _ in range(s.cols)) for _ in range(s.rows))
    return State(settings=s, players=players, chips=chips, contenders=tuple(range(players)))


# --- events ---------------------------------------------------------------------------------------
# What happened, in public (protocol/events.py): nothing in this game is secret. ``player`` is a seat.

#: Why a rolled total gives no move (``no_move``).
NoMoveReason = Literal["no_chip_to_remove", "out_of_chips", "board_full", "no_such_space", "all_own"]


@part
@dataclass(frozen=True, kw_only=True)
class RollOffRoll:
    """One contender's two dice in a roll-off for the first turn."""

    player: int
    dice: tuple[int, int]
    total: int


@event("rolloff")
@dataclass(frozen=True, kw_only=True)
class RolledOff(TypedEvent):
    """The contenders rolled for the first turn; the tied highest (``tied``) roll again."""

    round: int
    rolls: tuple[RollOffRoll, ...]
    tied: tuple[int, ...]


@event("first_player")
@dataclass(frozen=True, kw_only=True)
class FirstPlayer(TypedEvent):
    player: int


@event("turn_started")
@dataclass(frozen=True, kw_only=True)
class SequenceTurnStarted(TypedEvent):
    player: int
    turn: int
    bonus: bool  # the same player again, after a 2 or a 12


@event("dice_rolled")
@dataclass(frozen=True, kw_only=True)
class SequenceDiceRolled(TypedEvent):
    player: int
    turn: int
    dice: tuple[int, int]
    total: int


@event("no_move")
@dataclass(frozen=True, kw_only=True)
class NoMove(TypedEvent):
    """The total rolled allows no move: the turn ends."""

    player: int
    turn: int
    total: int
    reason: NoMoveReason


@event("turn_timeout")
@dataclass(frozen=True, kw_only=True)
class SequenceTurnTimeout(TypedEvent):
    """The turn's time ran out: the relay moves for the player (the chip event that follows)."""

    player: int
    turn: int


@event("chip_placed")
@dataclass(frozen=True, kw_only=True)
class ChipPlaced(TypedEvent):
    player: int
    row: int
    col: int
    colour: Colour
    replaced: Colour | None  # an opponent's chip it took the place of (a wild 11)
    timeout: bool


@event("chip_removed")
@dataclass(frozen=True, kw_only=True)
class ChipRemoved(TypedEvent):
    """A defensive 10: an opponent's chip taken off the board."""

    player: int
    row: int
    col: int
    colour: Colour  # the removed chip's
    timeout: bool


@event("player_left")
@dataclass(frozen=True, kw_only=True)
class SequencePlayerLeft(TypedEvent):
    player: int
    turn: int


@event("game_over")
@dataclass(frozen=True, kw_only=True)
class SequenceGameOver(TypedEvent):
    """The game ended: with a SEQUENCE (its colour and ``line``), a forfeit (the colour left, no
    line), or the turn limit (neither)."""

    winner: int | None
    winners: tuple[int, ...]
    colour: Colour | None = field(default=None, metadata=ABSENT)
    line: tuple[Coord, ...] | None = field(default=None, metadata=ABSENT)
    reason: Reason
    scores: tuple[int, ...]


#: Sequence Dice's events by wire name.
EVENTS = EventTypes(RolledOff, FirstPlayer, SequenceTurnStarted, SequenceDiceRolled, NoMove, SequenceTurnTimeout,
                    ChipPlaced, ChipRemoved, SequencePlayerLeft, SequenceGameOver)


# --- the rules ------------------------------------------------------------------------------------


def moves(state: State, seat: int) -> list[PlaceChip | RemoveChip]:
    """What ``seat`` may do with the current roll, in row-major order (empty: nothing possible)."""
    total = state.total
    if total is None:
        return []
    me = state.colour(seat)
    board, chips = state.settings.board, state.chips
    spaces = [(r, c) for r in range(state.settings.rows) for c in range(state.settings.cols)]
    opponent = [(r, c) for r, c in spaces if chips[r][c] is not None and chips[r][c] != me]
    if total == DEFENSIVE:
        return [RemoveChip(r, c) for r, c in opponent if board[r][c] not in BONUS_TOTALS]
    if state.count(me) >= state.settings.chips_per_colour:
        return []  # all this colour's chips are on the board: no placing, no replacing
    if total == WILD:
        open_ = [(r, c) for r, c in spaces if chips[r][c] is None]
        return [PlaceChip(r, c) for r, c in (open_ or opponent)]
    numbered = [(r, c) for r, c in spaces if board[r][c] == total]
    open_ = [(r, c) for r, c in numbered if chips[r][c] is None]
    if open_:
        return [PlaceChip(r, c) for r, c in open_]
    return [PlaceChip(r, c) for r, c in numbered if (r, c) in set(opponent)]


def _set_chip(chips: Chips, r: int, c: int, v: int | None) -> Chips:
    row = chips[r][:c] + (v,) + chips[r][c + 1 :]
    return chips[:r] + (row,) + chips[r + 1 :]


def apply(state: State, player: int | None, action: Action) -> Accepted[State] | Rejected:
    if player is SYSTEM:
        return _apply_system(state, action)
    if type(player) is not int or not 0 <= player < state.players:
        return _no("not_a_player", f"no seat {player!r} in this game")
    if isinstance(action, SYSTEM_ACTIONS):
        return _no("not_allowed", f"{type(action).__name__} is the relay's to make")
    if not isinstance(action, PLAYER_ACTIONS):
        return _no("unknown_action", f"{type(action).__name__} is not a Sequence action")
    if state.phase == "over":
        return _no("game_over", "the game is over")
    if player in state.gone:
        return _no("not_a_player", "you have left this game")
    if state.phase == "rolloff":
        return _no("wrong_phase", "the first player is still being decided")
    if player != state.current:
        return _no("not_your_turn", f"it is seat {state.current}'s turn")
    if state.phase != "move":
        return _no("wrong_phase", "the dice have not been rolled yet")
    if type(action.row) is not int or type(action.col) is not int:
        return _no("malformed", "row and col must be integers")
    s = state.settings
    if not (0 <= action.row < s.rows and 0 <= action.col < s.cols):
        return _no("no_such_cell", f"there is no space at row {action.row}, column {action.col}")
    if action not in moves(state, player):
        return _no("not_allowed", _why_not(state, player, action))
    return _move(state, player, action, timeout=False)


def _why_not(state: State, player: int, action: PlaceChip | RemoveChip) -> str:
    total = state.total
    number = state.settings.board[action.row][action.col]
    chip = state.chips[action.row][action.col]
    me = state.colour(player)
    if isinstance(action, RemoveChip):
        if total != DEFENSIVE:
            return f"you rolled {total}: place a chip, removing is for a 10"
        if chip is None or chip == me:
            return "remove an opponent's chip"
        return "chips on 2 and 12 spaces cannot be removed"
    if total == DEFENSIVE:
        return "you rolled 10: remove an opponent's chip"
    if state.count(me) >= state.settings.chips_per_colour:
        return "all your colour's chips are on the board"
    if total != WILD and number != total:
        return f"you rolled {total}; that space is a {number}"
    if chip == me:
        return "that space holds your own chip"
    return "that space is covered, and an open space is available"


def _move(state: State, player: int, action: PlaceChip | RemoveChip, timeout: bool) -> Accepted[State]:
    r, c = action.row, action.col
    me = state.colour(player)
    events: list[TypedEvent] = []
    if timeout:
        events.append(SequenceTurnTimeout(player=player, turn=state.turn))
    old = state.chips[r][c]
    if isinstance(action, RemoveChip):
        chips = _set_chip(state.chips, r, c, None)
        assert old is not None  # a RemoveChip among the moves names an opponent's chip
        events.append(ChipRemoved(player=player, row=r, col=c, colour=COLOURS[old], timeout=timeout))
        return Accepted(*_end_turn(replace(state, chips=chips), events))
    chips = _set_chip(state.chips, r, c, me)
    events.append(ChipPlaced(player=player, row=r, col=c, colour=COLOURS[me],
                             replaced=None if old is None else COLOURS[old], timeout=timeout))
    state = replace(state, chips=chips)
    line = find_sequence(state.owned(me), state.settings.sequence_length)
    if line is not None:
        winners = tuple(p for p in seats_of(me, state.players) if p not in state.gone)
        state = replace(state, phase="over", winners=winners, line=line, reason="sequence", dice=None)
        events.append(SequenceGameOver(winner=winners[0] if len(winners) == 1 else None, winners=winners,
                                       colour=COLOURS[me], line=line, reason="sequence", scores=_scores(state)))
        return Accepted(state, tuple(events))
    return Accepted(*_end_turn(state, events))


def _end_turn(state: State, events: list[TypedEvent]) -> tuple[State, tuple[TypedEvent, ...]]:
    """The turn is over: a 2 or 12 gives the same player another turn; check max_turns."""
    assert state.current is not None
    again = state.total in BONUS_TOTALS
    nxt = state.current if again else state.after(state.current)
    turn = state.turn + 1
    if turn >= state.settings.max_turns:
        state = replace(state, phase="over", winners=(), reason="max_turns", dice=None, turn=turn)
        events.append(SequenceGameOver(winner=None, winners=(), reason="max_turns", scores=_scores(state)))
        return state, tuple(events)
    state = replace(state, phase="roll", current=nxt, turn=turn, dice=None)
    events.append(SequenceTurnStarted(player=nxt, turn=turn, bonus=again))
    return state, tuple(events)


def _scores(state: State) -> tuple[int, ...]:
    """Per seat: the number of their colour's chips on the board (team-mates share)."""
    return tuple(state.count(state.colour(p)) for p in range(state.players))


def _valid_die(x: object) -> bool:
    return type(x) is int and 1 <= x <= 6


def _apply_system(state: State, action: Action) -> Accepted[State] | Rejected:
    if isinstance(action, RollOff):
        if state.phase != "rolloff" or action.round != state.rolloff_round:
            return _no("wrong_phase", "no roll-off is waiting")
        if action.dice is None:
            return _no("incomplete", "RollOff needs its dice (complete() fills them)")
        if len(action.dice) != len(state.contenders) or not all(
                len(d) == 2 and all(_valid_die(x) for x in d) for d in action.dice):
            return _no("malformed", "two dice from 1 to 6 per contender")
        totals = [a + b for a, b in action.dice]
        best = max(totals)
        tied = tuple(p for p, t in zip(state.contenders, totals) if t == best)
        rolls = tuple(RollOffRoll(player=p, dice=(d[0], d[1]), total=t)
                      for p, d, t in zip(state.contenders, action.dice, totals))
        events: list[TypedEvent] = [RolledOff(round=state.rolloff_round, rolls=rolls, tied=tied if len(tied) > 1 else ())]
        if len(tied) > 1:
            return Accepted(replace(state, contenders=tied, rolloff_round=state.rolloff_round + 1), tuple(events))
        first = tied[0]
        events.append(FirstPlayer(player=first))
        events.append(SequenceTurnStarted(player=first, turn=0, bonus=False))
        return Accepted(replace(state, phase="roll", current=first, contenders=(), turn=0), tuple(events))
    if isinstance(action, RollDice):
        if state.phase != "roll" or action.turn != state.turn:
            return _no("wrong_phase", "no roll is waiting")
        if action.dice is None:
            return _no("incomplete", "RollDice needs its dice (complete() fills them)")
        if len(action.dice) != 2 or not all(_valid_die(x) for x in action.dice):
            return _no("malformed", "two dice from 1 to 6")
        player = state.current
        assert player is not None
        dice = (action.dice[0], action.dice[1])
        state = replace(state, dice=dice, phase="move")
        events = [SequenceDiceRolled(player=player, turn=state.turn, dice=dice, total=sum(dice))]
        if not moves(state, player):
            events.append(NoMove(player=player, turn=state.turn, total=sum(dice), reason=_no_move_reason(state, player)))
            return Accepted(*_end_turn(state, events))
        return Accepted(state, tuple(events))
    if isinstance(action, SequenceTimeout):
        if state.phase != "move" or action.turn != state.turn:
            return _no("wrong_phase", "that turn is over")
        player = state.current
        assert player is not None
        return _move(state, player, moves(state, player)[0], timeout=True)
    if isinstance(action, PlayerLeft):
        return _leave(state, action.seat)
    if isinstance(action, PLAYER_ACTIONS):
        return _no("not_allowed", f"{type(action).__name__} is a player's action")
    return _no("unknown_action", f"{type(action).__name__} is not a Sequence system action")


def _leave(state: State, seat: int) -> Accepted[State] | Rejected:
    if type(seat) is not int or not 0 <= seat < state.players or seat in state.gone:
        return _no("not_a_player", f"seat {seat!r} is not in this game")
    if state.players < 3:
        return _no("not_allowed", "a two-player game ends when a player leaves (the relay's forfeit)")
    if state.phase == "over":
        return _no("game_over", "the game is over")
    if state.phase == "rolloff":  # (a zero-delay roll: the relay never waits in it)
        return _no("wrong_phase", "the first player is still being decided")
    on_turn = state.current == seat
    state = replace(state, gone=state.gone + (seat,))
    events: list[TypedEvent] = [SequencePlayerLeft(player=seat, turn=state.turn)]
    colours = {state.colour(p) for p in state.standing()}
    if len(colours) == 1:
        winners = state.standing()
        state = replace(state, phase="over", winners=winners, line=(), reason=FORFEIT, dice=None)
        events.append(SequenceGameOver(winner=winners[0] if len(winners) == 1 else None, winners=winners,
                                       colour=COLOURS[colours.pop()], line=(), reason=FORFEIT, scores=_scores(state)))
        return Accepted(state, tuple(events))
    if on_turn:  # the leaver's turn ends now, as if nothing could be done (and no bonus turn)
        return Accepted(*_end_turn(replace(state, dice=None), events))
    return Accepted(state, tuple(events))


def _no_move_reason(state: State, player: int) -> NoMoveReason:
    total = state.total
    if total == DEFENSIVE:
        return "no_chip_to_remove"
    if state.count(state.colour(player)) >= state.settings.chips_per_colour:
        return "out_of_chips"
    if total == WILD:
        return "board_full"
    if not any(total == x for row in state.settings.board for x in row):
        return "no_such_space"
    return "all_own"


def complete(state: State, player: int | None, action: Action, chance: Chance) -> Action:
    if player is not SYSTEM:
        return action
    if isinstance(action, RollOff) and action.dice is None:
        return RollOff(action.round, tuple((roll_die(chance), roll_die(chance)) for _ in state.contenders))
    if isinstance(action, RollDice) and action.dice is None:
        return RollDice(action.turn, (roll_die(chance), roll_die(chance)))
    return action


def timers(state: State) -> tuple[Timer[Action], ...]:
    if state.phase == "rolloff":
        return (Timer(f"rolloff-{state.rolloff_round}", 0, RollOff(state.rolloff_round)),)
    if state.phase == "roll":
        return (Timer(f"roll-{state.turn}", 0, RollDice(state.turn)),)
    if state.phase == "move" and state.settings.turn_timer_s > 0:
        return (Timer(f"turn-{state.turn}", int(state.settings.turn_timer_s * NS), SequenceTimeout(state.turn)),)
    return ()


def legal_actions(state: State, player: int) -> list[Action]:
    if state.phase != "move" or player != state.current:
        return []
    return list(moves(state, player))


def outcome(state: State) -> Outcome[Reason] | None:
    if state.phase != "over" or state.reason == "":  # (a game over always says why)
        return None
    extra: dict[str, object] = {"line": [list(x) for x in state.line]}
    if state.winners:
        extra["colour"] = COLOURS[state.colour(state.winners[0])]
    return Outcome(winners=state.winners, reason=state.reason, scores=_scores(state), extra=extra)


def view(state: State, player: int | None) -> State:
    """Nothing is secret in Sequence Dice."""
    return state


# --- sending less: a view kept up to date from the public events ----------------------------------
# Nothing is secret here, so no private update is ever needed: each event says its whole change.


def _event_seat(state: State, p: int) -> int:
    if not 0 <= p < state.players:
        raise ValueError(f"an event of a seat this game has not: {p!r}")
    return p


def _event_space(state: State, r: int, c: int) -> tuple[int, int]:
    if not (0 <= r < state.settings.rows and 0 <= c < state.settings.cols):
        raise ValueError(f"an event of a space off the board: {r}, {c}")
    return r, c


def _seats(state: State, xs: tuple[int, ...]) -> tuple[int, ...]:
    if not all(0 <= p < state.players for p in xs):
        raise ValueError(f"not a list of seats: {xs!r}")
    return xs


def apply_event(view: State, seat: int | None, ev: TypedEvent) -> State:
    """One public event applied to a view (see ``Game.apply_event``): the changes ``apply`` makes,
    read back from the event. Events the game does not make (seats, results) change nothing."""
    match ev:
        case RolledOff(round=rnd, tied=tied):
            if view.phase != "rolloff" or rnd != view.rolloff_round:
                raise ValueError(f"bad rolloff {ev!r}")
            if tied:  # the tied-highest roll again; a single winner follows as first_player
                return replace(view, contenders=_seats(view, tied), rolloff_round=view.rolloff_round + 1)
            return view
        case FirstPlayer(player=p):
            return replace(view, phase="roll", current=_event_seat(view, p), contenders=(), turn=0)
        case SequenceTurnStarted(player=p, turn=turn):
            if view.phase == "over":
                raise ValueError(f"bad turn_started {ev!r}")
            return replace(view, phase="roll", current=_event_seat(view, p), turn=turn, dice=None)
        case SequenceDiceRolled(player=p, dice=dice):
            if view.phase != "roll" or _event_seat(view, p) != view.current or not all(_valid_die(x) for x in dice):
                raise ValueError(f"bad dice_rolled {ev!r}")
            return replace(view, dice=dice, phase="move")
        case ChipRemoved(row=row, col=col):
            r, c = _event_space(view, row, col)
            if view.chips[r][c] is None:
                raise ValueError(f"no chip to remove at {r}, {c}")
            return replace(view, chips=_set_chip(view.chips, r, c, None))
        case ChipPlaced(player=p, row=row, col=col):
            r, c = _event_space(view, row, col)
            return replace(view, chips=_set_chip(view.chips, r, c, view.colour(_event_seat(view, p))))
        case SequencePlayerLeft(player=p):
            p = _event_seat(view, p)
            if p in view.gone:
                raise ValueError(f"bad player_left {ev!r}")
            # the turn it ends, if it was the leaver's, follows as its own events
            return replace(view, gone=view.gone + (p,), dice=None if p == view.current else view.dice)
        case SequenceGameOver(winners=winners, line=line, reason=reason):
            # Running out of turns ends the turn first (``_end_turn`` counts it); a SEQUENCE ends the game mid-turn.
            turn = view.turn + 1 if reason == "max_turns" else view.turn
            return replace(view, phase="over", winners=_seats(view, winners), line=line or (), reason=reason, dice=None,
                           turn=turn)
    return view


def private_delta(before: State, after: State, seat: int) -> dict[str, object] | None:
    """Nothing is private in Sequence Dice: the events say it all."""
    return None


def apply_private(view: State, seat: int, delta: Mapping[str, object]) -> State:
    raise ValueError("Sequence Dice has no private updates")


# --- wire form ------------------------------------------------------------------------------------


def to_wire(state: State) -> dict[str, object]:
    return {
        "settings": state.settings.to_wire(),
        "players": state.players,
        "chips": [list(row) for row in state.chips],
        "phase": state.phase,
        "current": state.current,
        "turn": state.turn,
        "dice": None if state.dice is None else list(state.dice),
        "contenders": list(state.contenders),
        "rolloff_round": state.rolloff_round,
        "winners": list(state.winners),
        "line": [list(x) for x in state.line],
        "reason": state.reason,
        # only once someone has left: a state without leavers keeps the form older logs have
        **({"gone": list(state.gone)} if state.gone else {}),
    }


def _coord(xs: tuple[int, ...]) -> Coord:
    return (xs[0], xs[1])


def from_wire(data: Mapping[str, object]) -> State:
    try:
        s = make_settings(data["settings"])
        players = wire_int(data["players"], "players")
        _check_players(players)
        colours = 2 if players in (2, 4) else 3
        rows = [wire_list(row, "a row of chips") for row in wire_list(data["chips"], "chips")]
        if len(rows) != s.rows or any(len(row) != s.cols for row in rows):
            raise ValueError("chips do not fit the board")

        def chip(x: object) -> int | None:
            if x is not None and (type(x) is not int or not 0 <= x < colours):
                raise ValueError("a chip is a colour number or null")
            return x

        chips = tuple(tuple(chip(x) for x in row) for row in rows)
        phase = one_of(data["phase"], PHASES, "phase")
        current = data["current"]
        if current is not None and (type(current) is not int or not 0 <= current < players):
            raise ValueError("bad current seat")
        dice: tuple[int, int] | None = None
        if data["dice"] is not None:
            rolled = wire_ints(data["dice"], "dice", 2)
            if not all(_valid_die(x) for x in rolled):
                raise ValueError("bad dice")
            dice = (rolled[0], rolled[1])

        def seats(xs: object) -> tuple[int, ...]:
            if not isinstance(xs, (list, tuple)) or not all(type(x) is int and 0 <= x < players for x in xs):
                raise ValueError("bad seat list")
            return tuple(xs)

        return State(
            settings=s,
            players=players,
            chips=chips,
            phase=phase,
            current=current,
            turn=wire_int(data["turn"], "turn"),
            dice=dice,
            contenders=seats(data["contenders"]),
            rolloff_round=wire_int(data["rolloff_round"], "rolloff_round"),
            winners=seats(data["winners"]),
            line=tuple(_coord(wire_ints(x, "a space of the line", 2)) for x in wire_list(data["line"], "line")),
            reason=one_of(data["reason"], STATE_REASONS, "reason"),
            gone=seats(data.get("gone", [])),
        )
    except (KeyError, TypeError, IndexError, AttributeError) as exc:
        raise ValueError(f"malformed Sequence state: {exc!r}") from exc


# --- a bot ----------------------------------------------------------------------------------------


def _windows(rows: int, cols: int, length: int) -> tuple[tuple[Coord, ...], ...]:
    out = []
    for r in range(rows):
        for c in range(cols):
            for dr, dc in LINE_DIRECTIONS:
                cells = tuple((r + i * dr, c + i * dc) for i in range(length))
                if all(0 <= a < rows and 0 <= b < cols for a, b in cells):
                    out.append(cells)
    return tuple(out)


def _strength(chips: Chips, colour: int, windows: tuple[tuple[Coord, ...], ...], length: int) -> float:
    """How close ``colour`` is to a SEQUENCE: every line window free of other colours counts,
    the more of its own chips the (much) more."""
    total = 0.0
    for w in windows:
        own = 0
        for r, c in w:
            x = chips[r][c]
            if x is None:
                continue
            if x != colour:
                own = -1
                break
            own += 1
        if own >= length:
            return 1e12
        if own > 0:
            total += 6.0 ** own
    return total


def bot_action(state: State, player: int, chance: Chance | None = None) -> Action | None:
    """Extend our own lines and block the opponents': try each possible move and keep the one that
    leaves our position strongest against the strongest opponent."""
    options = legal_actions(state, player)
    if not options:
        return None
    s = state.settings
    windows = _windows(s.rows, s.cols, s.sequence_length)
    me = state.colour(player)
    others = sorted({state.colour(p) for p in state.standing()} - {me})

    def value(action: Action) -> float:
        assert isinstance(action, (PlaceChip, RemoveChip))
        chips = _set_chip(state.chips, action.row, action.col, me if isinstance(action, PlaceChip) else None)
        mine = _strength(chips, me, windows, s.sequence_length)
        if mine >= 1e12:
            return 1e15
        theirs = max((_strength(chips, o, windows, s.sequence_length) for o in others), default=0.0)
        return mine - 1.5 * theirs

    return max(options, key=lambda a: (value(a), -a.row, -a.col))  # type: ignore[union-attr]


# --- settings as wire maps -------------------------------------------------------------------------


def default_settings() -> dict[str, object]:
    return Settings().to_wire()


def check_settings(settings: Mapping[str, object], players: int) -> dict[str, object]:
    _check_players(players)
    return make_settings(settings).to_wire()


def invariant_ok(state: State) -> bool:
    """No colour has more chips on the board than it owns."""
    return all(state.count(c) <= state.settings.chips_per_colour for c in range(len(COLOURS)))


# --- the game -------------------------------------------------------------------------------------

GAME: Game[State, Action] = Game(
    name=NAME,
    title="Sequence Dice",
    min_players=2,
    max_players=4,
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
    invariant_ok=invariant_ok,
    events=EVENTS,
    apply_event=apply_event,
    private_delta=private_delta,
    apply_private=apply_private,
    reason_labels=labels(REASON_LABELS),
    code_labels=labels(CODE_LABELS),
)
