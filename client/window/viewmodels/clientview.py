"""What the window reads of the client model: ``ClientView``, a read-only protocol.

How this works
--------------
The viewmodels and scenes never change the model: they read it each frame and hand actions to the
session. ``ClientView`` names exactly what they read -- the match and seat, the players, the wire's
match state and settings, the event history, the verdicts and bounces, the predictor's confirmed
and pending moves, the clock offset -- as read-only properties. ``client.model.ClientModel`` has all
of it (a checker holds it to this protocol wherever a model is handed to a viewmodel), and a test
may hand in anything else that has it.

A game's state is the game's own class: ``state()`` gives it as ``object``, and each viewmodel
narrows it to the class of the game it draws (``state_of``), so a viewmodel never reads another
game's state as its own.
"""

from __future__ import annotations

from typing import Container, Mapping, Protocol, Sequence, TypeVar

from protocol import messages as m
from protocol.rules import AnyGame
from client.model import Bounce, ConnectionState, Verdict
from client.predictor import Pending

S = TypeVar("S")


class PredictorView(Protocol):
    """The predictor's confirmed view and the own moves the relay has not confirmed yet."""

    @property
    def game(self) -> int: ...

    @property
    def confirmed(self) -> object: ...

    @property
    def confirmed_seq(self) -> int: ...

    @property
    def pending(self) -> Sequence[Pending]: ...


class ClockView(Protocol):
    @property
    def rtt_ns(self) -> int | None: ...

    @property
    def offset_ns(self) -> int | None: ...


class ClientView(Protocol):
    """What a viewmodel reads of the client model (``client.model.ClientModel``)."""

    @property
    def match(self) -> str | None: ...

    @property
    def seat(self) -> int | None: ...

    @property
    def game(self) -> str | None: ...

    @property
    def players(self) -> tuple[str, ...]: ...

    @property
    def spectating(self) -> bool: ...

    @property
    def settings(self) -> Mapping[str, object]: ...

    @property
    def match_state(self) -> Mapping[str, object]: ...

    @property
    def version(self) -> int: ...

    @property
    def predictor(self) -> PredictorView | None: ...

    @property
    def rules(self) -> AnyGame | None: ...

    @property
    def events(self) -> Sequence[m.Event]: ...

    @property
    def history(self) -> Container[int]: ...

    @property
    def bounces(self) -> Sequence[Bounce]: ...

    @property
    def verdicts(self) -> Sequence[Verdict]: ...

    @property
    def seq_received_ns(self) -> Mapping[int, int]: ...

    @property
    def away(self) -> Mapping[int, tuple[int, float]]: ...

    @property
    def clock(self) -> ClockView: ...

    @property
    def connection(self) -> ConnectionState: ...

    @property
    def lost(self) -> str | None: ...

    def state(self) -> object: ...


def state_of(model: ClientView | None, kind: type[S]) -> S | None:
    """The state ``model`` draws, if it is one of ``kind`` (the game a viewmodel draws); else None."""
    state = model.state() if model is not None else None
    return state if isinstance(state, kind) else None
