"""A toy game in a few lines, to show that a game is nothing but a ``Game``: registered, it is played
through the real relay, bots and brokers with no change to any of them (tests/test_toy_game.py).

Pile: two players take turns taking 1 or 2 from a pile (7 to start); whoever takes the last wins.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from protocol.codec import message, to_dict
from protocol.events import EventTypes, TypedEvent, event
from protocol.rules.base import Accepted, Chance, Game, Outcome, Rejected, Timer, decode_action, settings_map


@dataclass(frozen=True)
class Settings:
    pile: int = 7


@dataclass(frozen=True)
class State:
    left: int
    turn: int = 0  # whose turn it is
    winner: int | None = None


@message("ToyTake")
@dataclass(frozen=True)
class Take:
    n: int


@event("taken")
@dataclass(frozen=True, kw_only=True)
class Taken(TypedEvent):
    player: int  # the seat that took
    n: int
    left: int


def check_settings(settings: dict[str, Any], players: int) -> dict[str, Any]:
    data = settings_map(settings, Settings, "toy")
    pile = data.get("pile", Settings.pile)
    if type(pile) is not int or not 1 <= pile <= 100:
        raise ValueError("pile must be a whole number from 1 to 100")
    if players != 2:
        raise ValueError("the toy game is for two players")
    return {"pile": pile}


def new_game(settings: dict[str, Any], players: int, chance: Chance) -> State:
    return State(left=check_settings(settings, players)["pile"])


def apply(state: State, player: int | None, action: Any) -> Accepted[State] | Rejected:
    if state.winner is not None:
        return Rejected("game_over", "the pile is gone")
    if player != state.turn:
        return Rejected("not_your_turn", f"it is seat {state.turn}'s turn")
    if not isinstance(action, Take) or type(action.n) is not int or not 1 <= action.n <= min(2, state.left):
        return Rejected("bad_take", f"take 1 or 2, and no more than the {state.left} left")
    left = state.left - action.n
    event = Taken(player=player, n=action.n, left=left)
    if left == 0:
        return Accepted(replace(state, left=0, winner=player), (event,))
    return Accepted(replace(state, left=left, turn=1 - state.turn), (event,))


def legal_actions(state: State, player: int) -> list[Take]:
    if state.winner is not None or player != state.turn:
        return []
    return [Take(n) for n in (1, 2) if n <= state.left]


def bot_action(state: State, seat: int, chance: Chance) -> Take | None:
    """Leave the opponent a multiple of three when possible; else take one."""
    if not legal_actions(state, seat):
        return None
    return Take(state.left % 3 or 1)


def outcome(state: State) -> Outcome | None:
    return None if state.winner is None else Outcome(winners=(state.winner,), reason="took_last")


def from_wire(data: dict[str, Any]) -> State:
    try:
        return State(left=int(data["left"]), turn=int(data["turn"]),
                     winner=None if data["winner"] is None else int(data["winner"]))
    except (KeyError, TypeError) as exc:
        raise ValueError(f"malformed toy state: {exc!r}") from exc


def no_timers(state: State) -> tuple[Timer[Take], ...]:
    return ()


TOY: Game[State, Take] = Game(
    name="toy",
    title="Toy Pile",
    min_players=2,
    max_players=2,
    default_settings=lambda: {"pile": Settings.pile},
    check_settings=check_settings,
    new_game=new_game,
    apply=apply,
    complete=lambda state, player, action, chance: action,
    view=lambda state, player: state,  # nothing is secret
    legal_actions=legal_actions,
    outcome=outcome,
    timers=no_timers,
    to_wire=lambda state: {"left": state.left, "turn": state.turn, "winner": state.winner},
    from_wire=from_wire,
    action_from_wire=lambda data: decode_action(data, (Take,), "toy"),
    action_to_wire=to_dict,
    bot_action=bot_action,
    events=EventTypes(Taken),
)
