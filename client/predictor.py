"""Optimistic prediction of one player's own moves: the confirmed state with the unanswered ones on top.

How this works
--------------
``Predictor`` keeps the last *confirmed* state (the relay's ``ViewUpdated``, by ``seq``, or the view
the client brought there by applying public events) and the list of this player's actions the relay
has not yet answered (``Pending``). What the client draws, ``predicted()``, is the confirmed state
with those pending actions applied, in order, by the same rule engine the relay uses. When the
relay answers:

- ``accepted(id, seq)``: the action is kept (it is already drawn) until a confirmed view at or
  after ``seq`` arrives; then it is dropped, because the confirmed state now contains it;
- ``rejected(id)``: it is dropped at once (the model records the bounce).

A pending action that no longer applies to a newer confirmed state is simply skipped when
predicting (it bounces when the relay's answer comes). The predicted state is computed lazily and
kept until the confirmed state or the pending list changes: a frame asks for it many times.

States and actions are the game's own (``Game.apply`` takes them back); the predictor never looks
inside them, so it holds them as ``object`` and the game as ``AnyGame``.
"""

from __future__ import annotations

from dataclasses import dataclass

from protocol import messages as m
from protocol.rules import AnyGame
from protocol.rules.base import Accepted, Rejected


@dataclass
class Pending:
    """An own action the relay has not answered (or has accepted, and no confirmed view holds yet)."""

    id: int
    action: object  # the game's action
    seq: int  # the confirmed seq it was made against
    sent_ns: int
    accepted_seq: int | None = None
    act: m.Act | None = None  # the wire ``Act``, resent as is while unanswered
    sends: int = 1
    resend_at_ns: int = 0


class Predictor:
    def __init__(self, rules: AnyGame, seat: int) -> None:
        self.rules = rules
        self.seat = seat
        self.confirmed: object = None
        self.confirmed_seq = -1
        self.game = 0
        self.pending: list[Pending] = []
        self._predicted: object = None
        self._dirty = True

    def confirm(self, state: object, seq: int, game: int) -> bool:
        """A confirmed view from the relay; older or equal seqs are ignored. Returns True if taken."""
        if seq <= self.confirmed_seq and game == self.game:
            return False
        if game != self.game:
            self.pending.clear()  # a new game: nothing from the old one can still apply
        self.confirmed, self.confirmed_seq, self.game = state, seq, game
        self.pending = [p for p in self.pending if p.accepted_seq is None or p.accepted_seq > seq]
        self._dirty = True
        return True

    def advance(self, state: object, seq: int) -> None:
        """The confirmed view moved on by applying events (and private updates) up to ``seq``."""
        self.confirmed, self.confirmed_seq = state, seq
        self.pending = [p for p in self.pending if p.accepted_seq is None or p.accepted_seq > seq]
        self._dirty = True

    def local(self, pending: Pending) -> Accepted[object] | Rejected:
        """Try an own action against what is drawn now; if the engine accepts it, it becomes pending."""
        current = self.predicted()
        if current is None:
            return Rejected("no_game", "not in a running game")
        result: Accepted[object] | Rejected = self.rules.apply(current, self.seat, pending.action)
        if isinstance(result, Accepted):
            self.pending.append(pending)
            self._predicted, self._dirty = result.state, False
        return result

    def accepted(self, action_id: int, seq: int) -> Pending | None:
        """The pending action the relay accepted, the first time it says so; None for one not pending
        or an acceptance heard before (QoS 1 delivers at least once, and a resent action is answered
        again: one play is one verdict)."""
        for p in self.pending:
            if p.id == action_id:
                first = p.accepted_seq is None
                if seq <= self.confirmed_seq:
                    self.pending.remove(p)
                    self._dirty = True
                else:
                    p.accepted_seq = seq
                return p if first else None
        return None

    def rejected(self, action_id: int) -> Pending | None:
        for p in self.pending:
            if p.id == action_id:
                self.pending.remove(p)
                self._dirty = True
                return p
        return None

    def predicted(self) -> object:
        if self._dirty:
            state = self.confirmed
            if state is not None:
                for p in self.pending:
                    result = self.rules.apply(state, self.seat, p.action)
                    if isinstance(result, Accepted):
                        state = result.state
            self._predicted, self._dirty = state, False
        return self._predicted
