"""The client's pure core: what one player knows, and the optimistic prediction of their own moves.

How this works
--------------
``Predictor`` keeps the last *confirmed* state (the relay's ``ViewUpdated``, by ``seq``) and the
list of this player's actions the relay has not yet answered. What the client draws,
``predicted()``, is the confirmed state with those pending actions applied, in order, by the same
rule engine the relay uses. When the relay answers:

- ``ActionAccepted(id, seq)``: the action is kept (it is already drawn) until a confirmed view at
  or after ``seq`` arrives; then it is dropped, because the confirmed state now contains it;
- ``ActionRejected(id, code)``: it is dropped at once and recorded in ``bounces`` so the window can
  animate the card back to the hand with its reason.
Any pending action that no longer applies to the newer confirmed state is simply skipped when
predicting (it will bounce when the relay's answer comes).

``ClientModel`` wraps a predictor with everything else a player's client tracks from messages:
the match it is in, the public event stream (with gap detection: a gap asks for a resync), the
clock filter (round-trip time and offset from pings) and the receive time of each seq, used for
the reaction time a play carries to the relay (fair ordering). It is pure: time comes in as
``now_ns``; it returns the messages to send and never touches the network.

Healing. ``resends(now_ns)`` returns the own actions still unanswered whose resend is due -- the
same ``Act`` with the same id (the relay answers a duplicate without applying it twice), first after
``RESEND_FIRST_NS``, the wait doubling up to ``RESEND_MAX_NS``; an action unanswered ``GIVE_UP_NS``
after it was first sent is dropped and bounces with code ``no_answer``. ``connection`` follows the
networking shell (``Reconnecting`` / ``Reconnected`` / ``ConnectionLost``): after a reconnect, a seat
is asked back with its token (``Rejoin``), and the view resynced; the relay's status coming back
online also asks for a resync, and so does a seated player's confirmed view found behind the match's
retained snapshot (events lost while the game waits for us, so no later one shows the gap). The seat
token from ``MatchJoined`` is kept in ``token``. A seat request (``JoinMatch``, ``Rejoin``; QoS 0
like everything) is sent again until it is answered -- ``asks_again``, after ``ASK_AGAIN_FIRST_NS``
doubling, and at once after a reconnect or when a shard comes online: a relay killed between
seating a player and sending its ``MatchJoined`` took the answer with it, and the shard's new owner
answers only what it is asked (the seat is in its journal).

Shards (several relays on one broker): ``MatchJoined`` names the match's shard (``shard``). Each
shard has its own status, relay id ``shard-{n}`` (``relay/runtime.py``): only the own shard's
counts, and it coming online again -- a relay took the shard over, or its owner reconnected --
heals at once and makes every unanswered action due for resending now (the new owner has its
journal; a duplicate is answered, never applied twice). Other relays' statuses are ignored.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from protocol import messages as m
from protocol.clock import ClockFilter, sample
from protocol.rules import game_for
from protocol.rules.base import Accepted, Game, Rejected


RESEND_FIRST_NS = 500_000_000  # an unanswered action is sent again after this ...
RESEND_MAX_NS = 4_000_000_000  # ... the wait doubling up to this ...
GIVE_UP_NS = 30_000_000_000  # ... and it is given up (bounces ``no_answer``) this long after it was first sent
#: An unanswered seat request (join, rejoin) is sent again after this, the wait doubling up to
#: ``RESEND_MAX_NS``, until answered or given up by its caller; at once when a shard comes online.
ASK_AGAIN_FIRST_NS = 2_000_000_000


def resend_wait_ns(tries: int) -> int:
    """The wait before the resend that follows ``tries`` sends (1, 2, ...): 0.5 s, 1 s, 2 s, 4 s, 4 s..."""
    return min(RESEND_MAX_NS, RESEND_FIRST_NS << min(max(tries - 1, 0), 16))


TAMPERED_RESYNC_NS = 1_000_000_000  # a view asked again for dropped sealed messages, at most this often
PAST_KEPT = 4096  # events a spectator keeps (the relay re-sends at most this many past ones)
STUCK_EVERY = 8  # events: how often a client whose confirmed view is stuck asks again for a resync


@dataclass
class Pending:
    id: int
    action: Any
    seq: int  # the confirmed seq it was made against
    sent_ns: int
    accepted_seq: int | None = None
    act: Any = None  # the wire ``Act`` (an ``m.Act``), resent as is while unanswered
    sends: int = 1
    resend_at_ns: int = 0


@dataclass
class Asking:
    """A seat request sent and not answered yet (``ClientModel.ask``)."""

    request: Any  # a JoinMatch or a Rejoin: the relay answers a repeat with the same seat
    resend_at_ns: int
    sends: int = 1


@dataclass(frozen=True)
class Bounce:
    id: int
    action: Any
    code: str
    detail: str
    at_ns: int


@dataclass(frozen=True)
class ConnectionLost:
    """Not a wire message: the networking shell's word that the broker connection has ended."""

    reason: str


@dataclass(frozen=True)
class Reconnecting:
    """Not a wire message: the broker connection dropped; the shell is reconnecting."""

    reason: str


@dataclass(frozen=True)
class Tampered:
    """Not a wire message: a sealed connection dropped a message meant for this client (cut, altered,
    replayed, sealed for someone else or under another start of the relay). If it was a true one
    that something spoilt on its way, what it said is lost: the model asks for its view again."""

    topic: str
    reason: str


@dataclass(frozen=True)
class Reconnected:
    """Not a wire message: the broker connection is back (subscriptions renewed)."""


@dataclass(frozen=True)
class Verdict:
    id: int
    ok: bool
    code: str
    sent_ns: int
    answered_ns: int
    action: Any = None
    # The verdict's own stamps (relay wall clock) and the clock offset then: the play's time in parts.
    hold_ns: int = 0
    recv_ns: int = 0
    relay_sent_ns: int = 0
    offset_ns: int | None = None

    @property
    def confirm_ns(self) -> int:
        return self.answered_ns - self.sent_ns


class Predictor:
    def __init__(self, rules: Game[Any, Any], seat: int) -> None:
        self.rules = rules
        self.seat = seat
        self.confirmed: Any = None
        self.confirmed_seq = -1
        self.game = 0
        self.pending: list[Pending] = []
        self._predicted: Any = None
        self._dirty = True

    def confirm(self, state: Any, seq: int, game: int) -> bool:
        """A confirmed view from the relay; older or equal seqs are ignored. Returns True if taken."""
        if seq <= self.confirmed_seq and game == self.game:
            return False
        if game != self.game:
            self.pending.clear()  # a new game: nothing from the old one can still apply
        self.confirmed, self.confirmed_seq, self.game = state, seq, game
        self.pending = [p for p in self.pending if p.accepted_seq is None or p.accepted_seq > seq]
        self._dirty = True
        return True

    def advance(self, state: Any, seq: int) -> None:
        """The confirmed view moved on by applying events (and private updates) up to ``seq``."""
        self.confirmed, self.confirmed_seq = state, seq
        self.pending = [p for p in self.pending if p.accepted_seq is None or p.accepted_seq > seq]
        self._dirty = True

    def local(self, pending: Pending) -> Accepted[Any] | Rejected:
        """Try an own action against what is drawn now; if the engine accepts it, it becomes pending."""
        current = self.predicted()
        if current is None:
            return Rejected("no_game", "not in a running game")
        result = self.rules.apply(current, self.seat, pending.action)
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

    def predicted(self) -> Any:
        if self._dirty:
            state = self.confirmed
            if state is not None:
                for p in self.pending:
                    result = self.rules.apply(state, self.seat, p.action)
                    if isinstance(result, Accepted):
                        state = result.state
            self._predicted, self._dirty = state, False
        return self._predicted


@dataclass
class ClientModel:
    client_id: str
    name: str
    match: str | None = None
    seat: int | None = None
    game: str | None = None
    players: tuple[str, ...] = ()
    settings: dict[str, Any] = field(default_factory=dict)
    match_state: dict[str, Any] = field(default_factory=dict)
    predictor: Predictor | None = None
    clock: ClockFilter = field(default_factory=ClockFilter)
    events: deque[m.Event] = field(default_factory=lambda: deque(maxlen=256))  # PAST_KEPT when spectating
    last_event_seq: int = 0
    #: seqs of events filed in ``events`` after the model had passed them (re-sent past events): the
    #: record of the match, not news -- the window reads them but does not animate them.
    history: set[int] = field(default_factory=set)
    bounces: deque[Bounce] = field(default_factory=lambda: deque(maxlen=32))
    verdicts: deque[Verdict] = field(default_factory=lambda: deque(maxlen=100_000))
    errors: deque[m.RequestRejected] = field(default_factory=lambda: deque(maxlen=32))
    next_id: int = 1
    seq_received_ns: dict[int, int] = field(default_factory=dict)
    resyncs: int = 0
    version: int = 0  # bumped on every change the screen or a bot should react to
    spectating: bool = False  # watching a match by code: read-only, state from the public snapshot
    lost: str | None = None  # set when the connection to the broker has ended
    #: Sending less (a game with ``apply_event``): public events and private updates not yet applied
    #: to the confirmed view, by seq, and the seq of the last whole view.
    ahead: dict[int, m.Event] = field(default_factory=dict)
    private: dict[int, m.PrivateUpdate] = field(default_factory=dict)
    view_seq: int = -1
    #: The buffered-event count (or seq) at the last resync asked for because the confirmed view is
    #: stuck (an event or a private update lost, or the Resync itself lost): asked again every
    #: ``STUCK_EVERY`` events more, so a lossy network cannot leave the view behind for good.
    stuck_asked: int | None = None
    connection: str = "connected"  # connected | reconnecting | lost
    token: str = ""  # this seat's secret (MatchJoined): Rejoin(match, token) takes the seat back
    relay_online: bool | None = None  # the relay's retained status, once heard
    shard: str = "0"  # the shard of the match (MatchJoined)
    #: Every shard's status heard (``shard-{n}`` -> online): a change of owner is a fresh "online".
    shard_status: dict[str, bool] = field(default_factory=dict)
    #: Seats whose player's connection dropped: seat -> (our ns when we heard it, grace seconds).
    away: dict[int, tuple[int, float]] = field(default_factory=dict)
    resent: int = 0
    failed: int = 0  # own actions given up without an answer
    asking: Asking | None = None  # a join or rejoin not answered yet (sent again while it is not)
    #: When a dropped sealed message last made us ask for the view again (``Tampered``).
    tampered_at: int | None = None

    def heal(self) -> list[Any]:
        """What to ask the relay after the connection (or the relay) came back: the seat (if held)
        and the views and snapshot; missed public events from the relay's past ones."""
        if self.match is None:
            return []
        self.resyncs += 1
        if self.token and not self.spectating:
            return [m.Rejoin(self.match, self.token), m.Resync(self.match, from_seq=self.last_event_seq + 1)]
        return [m.Resync(self.match, from_seq=self.last_event_seq + 1 if self.last_event_seq else 0)]

    def ask(self, request: Any, now_ns: int) -> Any:
        """A lobby request about to be sent: returned as is. A join or a rejoin is remembered until
        answered (``MatchJoined`` or ``RequestRejected``) or ``stop_asking``, and ``asks_again`` sends
        it again meanwhile: the relay answers a repeat with the seat already given, so a request or
        an answer lost (QoS 0; the shard's relay killed after seating us and before its answer left,
        or nobody serving the shard for a moment) costs a resend, not the seat. A create or a quick
        match is not repeated: a second one would make a second match."""
        repeatable = isinstance(request, (m.JoinMatch, m.Rejoin))
        self.asking = Asking(request, now_ns + ASK_AGAIN_FIRST_NS) if repeatable else None
        return request

    def stop_asking(self) -> None:
        """The caller stopped waiting for the answer (it came, or it gave up)."""
        self.asking = None

    def asks_again(self, now_ns: int) -> list[Any]:
        """The unanswered join or rejoin, when it is due to be sent again (a list of at most one)."""
        a = self.asking
        if a is None or now_ns < a.resend_at_ns or self.connection != "connected":
            return []
        a.sends += 1
        a.resend_at_ns = now_ns + min(RESEND_MAX_NS, ASK_AGAIN_FIRST_NS << min(a.sends - 1, 16))
        return [a.request]

    def _ask_now(self, now_ns: int) -> None:
        if self.asking is not None:
            self.asking.resend_at_ns = min(self.asking.resend_at_ns, now_ns)

    def resends(self, now_ns: int) -> list[m.Act]:
        """Own actions due to be sent again (same id); gives up those unanswered for too long."""
        if self.predictor is None:
            return []
        due: list[m.Act] = []
        for p in list(self.predictor.pending):
            if p.accepted_seq is not None or p.act is None:
                continue
            if now_ns - p.sent_ns >= GIVE_UP_NS:
                self.predictor.rejected(p.id)
                detail = f"no answer from the relay in {GIVE_UP_NS // 1_000_000_000} s ({p.sends} sends)"
                self.bounces.append(Bounce(p.id, p.action, "no_answer", detail, now_ns))
                self.verdicts.append(Verdict(p.id, False, "no_answer", p.sent_ns, now_ns, p.action))
                self.failed += 1
                self.version += 1
            elif now_ns >= p.resend_at_ns and self.connection == "connected":
                p.sends += 1
                p.resend_at_ns = now_ns + resend_wait_ns(p.sends)
                self.resent += 1
                due.append(p.act)
        return due

    def spectate(self, code: str) -> None:
        """Watch ``code``: ask the relay ``watch_from()`` so the history starts at the match's beginning."""
        self.match, self.seat, self.spectating = code, None, True
        if self.events.maxlen is not None and self.events.maxlen < PAST_KEPT:
            self.events = deque(self.events, maxlen=PAST_KEPT)

    def watch_from(self) -> m.Resync:
        """The request that starts watching: the views and snapshot, and the match's past events from
        seq 1 (those the relay still keeps), which ``on_message`` files as history (``_past``)."""
        assert self.match is not None
        return m.Resync(self.match, from_seq=1)

    def _past(self, ev: m.Event) -> None:
        """An event at or below ``last_event_seq``: the relay re-sent it (``Resync`` from a seq) or it
        came late. Its effect on the state is already in the snapshot or view that moved
        ``last_event_seq`` past it, so it is not applied again; if the history lacks it, it takes its
        place there in seq order (and in ``history``, so the window does not announce it as news)."""
        events = self.events
        if events and ev.seq > events[-1].seq:
            at = len(events)
        else:
            at = len(events)
            while at > 0 and events[at - 1].seq > ev.seq:
                at -= 1
            if at > 0 and events[at - 1].seq == ev.seq:
                return  # already there
            if at == 0 and events.maxlen is not None and len(events) >= events.maxlen:
                return  # older than everything a full history keeps
        if events.maxlen is not None and len(events) >= events.maxlen:
            events.popleft()
            at -= 1
        events.insert(at, ev)
        if len(self.history) >= PAST_KEPT:
            self.history.clear()
        self.history.add(ev.seq)
        self.version += 1

    @property
    def rules(self) -> Game[Any, Any] | None:
        """The game being played (or watched), once the relay has said which."""
        return self.predictor.rules if self.predictor else None

    def state(self) -> Any:
        return self.predictor.predicted() if self.predictor else None

    def on_message(self, msg: Any, now_ns: int) -> list[Any]:
        """Take one message from the relay; return requests to send back (e.g. a Resync)."""
        out: list[Any] = []
        if isinstance(msg, ConnectionLost):
            self.lost = msg.reason
            self.connection = "lost"
            self.version += 1
        elif isinstance(msg, Reconnecting):
            self.connection = "reconnecting"
            self.version += 1
        elif isinstance(msg, Tampered):
            # Only what may have been a true message spoilt on its way (a plain one or a replay is
            # someone else's, and the true one came too), at most once a second.
            lost = msg.reason in ("cut", "forged", "other_epoch")
            if lost and self.match is not None and (self.tampered_at is None
                                                    or now_ns - self.tampered_at >= TAMPERED_RESYNC_NS):
                self.tampered_at = now_ns
                self.resyncs += 1
                out.append(m.Resync(self.match, from_seq=self.last_event_seq + 1 if self.last_event_seq else 0))
        elif isinstance(msg, Reconnected):
            self.connection = "connected"
            self.version += 1
            out.extend(self.heal())
            self._ask_now(now_ns)
        elif isinstance(msg, m.RelayStatus) and msg.relay.startswith("shard-"):
            heard = msg.relay in self.shard_status
            self.shard_status[msg.relay] = msg.online
            if msg.online and heard:  # a shard served again (which one a request goes to is the relays' to say)
                self._ask_now(now_ns)
            if self.match is not None and msg.relay == f"shard-{self.shard}":
                self.relay_online = msg.online
                if msg.online and heard:  # the shard is served (again): catch up, resend now
                    out.extend(self.heal())
                    if self.predictor is not None:
                        for waiting in self.predictor.pending:
                            waiting.resend_at_ns = min(waiting.resend_at_ns, now_ns)
                self.version += 1
        elif isinstance(msg, m.RelayStatus):
            was, self.relay_online = self.relay_online, msg.online
            if msg.online and was is False:  # the relay is back (restarted, reconnected): catch up
                out.extend(self.heal())
                self._ask_now(now_ns)
            self.version += 1
        elif isinstance(msg, m.Pong):
            self.clock.add(sample(msg.t0, msg.t1, msg.t2, now_ns))
        elif isinstance(msg, m.Probe):
            out.append(m.ProbeReply(msg.sent_ns))  # answered at once: the relay times the round trip
        elif isinstance(msg, m.MatchJoined):
            self.asking = None
            same = self.predictor is not None and (self.match, self.seat) == (msg.match, msg.seat)
            self.match, self.seat, self.game = msg.match, msg.seat, msg.game
            self.players, self.settings = msg.players, msg.settings
            self.token = msg.token or self.token
            self.shard = msg.shard
            if not same:  # a repeated answer (a join sent twice) must not forget pending actions
                self.predictor = Predictor(game_for(msg.game), msg.seat)
            self.version += 1
        elif isinstance(msg, m.ViewUpdated) and msg.match == self.match and self.predictor:
            try:
                state = self.predictor.rules.from_wire(msg.state)
            except ValueError:
                out.append(m.Resync(msg.match))
                return out
            fresh = msg.seq >= self.predictor.confirmed_seq or msg.game != self.predictor.game
            if self.predictor.confirm(state, msg.seq, msg.game):
                self.seq_received_ns.setdefault(msg.seq, now_ns)
                self.view_seq = msg.seq
                self._catch_up(out)
            if fresh:
                self.match_state = msg.match_state
                if msg.match_state.get("players"):
                    self.players = tuple(msg.match_state["players"])
                self.version += 1
        elif isinstance(msg, m.PrivateUpdate) and msg.match == self.match and self.predictor:
            pred = self.predictor
            if msg.game == pred.game and msg.seq > self.view_seq:
                self.private[msg.seq] = msg
                if msg.seq <= pred.confirmed_seq:  # it came after its event: apply it now
                    self._apply_private(msg.seq, out)
                self._catch_up(out)
                self.version += 1
        elif isinstance(msg, m.Snapshot) and msg.match == self.match:
            if msg.seq > self.last_event_seq:
                self.last_event_seq = msg.seq
            self.players = msg.players
            mine = self.predictor
            if (not self.spectating and mine is not None and mine.rules.sends_less and mine.confirmed is not None
                    and msg.game == mine.game and msg.seq > mine.confirmed_seq
                    and mine.confirmed_seq + 1 not in self.ahead):
                # The relay publishes a snapshot after the events it covers: events up to its seq that
                # never came were lost, and when the game waits for us no later event shows the gap.
                self._stuck(out, msg.seq)
            if self.spectating and msg.game_name and msg.state:
                # A spectator's confirmed state is the public snapshot (nothing hidden is in it).
                if self.predictor is None or self.game != msg.game_name:
                    self.game = msg.game_name
                    self.predictor = Predictor(game_for(msg.game_name), -1)
                try:
                    state = self.predictor.rules.from_wire(msg.state)
                except ValueError:
                    return out
                # A game that sends less has brought the view to this seq by its events already:
                # the snapshot still tells the match's status (over, between games).
                fresh = msg.seq >= self.predictor.confirmed_seq or msg.game != self.predictor.game
                if self.predictor.confirm(state, msg.seq, msg.game):
                    self.match_state = msg.match_state
                    self.seq_received_ns.setdefault(msg.seq, now_ns)
                    self.view_seq = msg.seq
                    self._catch_up(out)
                    self.version += 1
                elif fresh:
                    self.match_state = msg.match_state
                    self.version += 1
        elif isinstance(msg, m.Event) and msg.match == self.match:
            known = self.predictor
            if known is not None and known.rules.sends_less and msg.seq > known.confirmed_seq and len(self.ahead) < 4096:
                self.ahead[msg.seq] = msg  # kept even if a snapshot said this seq already: the view needs it
                self._catch_up(out)
            if msg.seq <= self.last_event_seq:
                self._past(msg)
                return out
            if self.last_event_seq and msg.seq > self.last_event_seq + 1:
                self.resyncs += 1
                out.append(m.Resync(msg.match))
            self.last_event_seq = msg.seq
            self.seq_received_ns.setdefault(msg.seq, now_ns)
            if len(self.seq_received_ns) > 4096:
                for k in sorted(self.seq_received_ns)[:2048]:
                    del self.seq_received_ns[k]
            self.events.append(msg)
            seat = msg.data.get("seat")
            if msg.type == "player_dropped" and type(seat) is int:
                grace = msg.data.get("grace_s")
                self.away[seat] = (now_ns, float(grace) if isinstance(grace, (int, float)) else 30.0)
                if seat == self.seat and self.token and self.connection == "connected" and not self.spectating:
                    # We are here: a stale last will (a broker taking over our old session) -- take it back.
                    out.append(m.Rejoin(msg.match, self.token))
            elif msg.type == "player_returned" and type(seat) is int:
                self.away.pop(seat, None)
            elif msg.type in ("match_over", "rematch_started"):
                self.away.clear()
            self.version += 1
        elif isinstance(msg, m.ActionAccepted) and self.predictor:
            p = self.predictor.accepted(msg.id, msg.seq)
            if p is not None:
                self.verdicts.append(Verdict(msg.id, True, "accepted", p.sent_ns, now_ns, p.action, msg.hold_ns,
                                             msg.recv_ns, msg.sent_ns, self.clock.offset_ns))
            self.version += 1
        elif isinstance(msg, m.ActionRejected) and self.predictor:
            p = self.predictor.rejected(msg.id)
            if p is not None:
                self.bounces.append(Bounce(msg.id, p.action, msg.code, msg.detail, now_ns))
                self.verdicts.append(Verdict(msg.id, False, msg.code, p.sent_ns, now_ns, p.action, msg.hold_ns,
                                             msg.recv_ns, msg.sent_ns, self.clock.offset_ns))
            self.version += 1
        elif isinstance(msg, m.RequestRejected):
            self.errors.append(msg)
            self.asking = None  # refused, not lost: asking again would be refused again
            self.version += 1
        return out

    def _catch_up(self, out: list[Any]) -> None:
        """Apply the buffered events (and the private update after each) that follow the confirmed
        view, in seq order, with the game's own applier. An event of another game waits for that
        game's whole view; one that does not fit (a doubt) asks for a resync."""
        p = self.predictor
        if p is None or p.confirmed is None or not p.rules.sends_less:
            return
        for seq in [s for s in self.ahead if s <= p.confirmed_seq]:
            del self.ahead[seq]
        for seq in [s for s in self.private if s <= self.view_seq]:
            del self.private[seq]
        apply_event = p.rules.apply_event
        assert apply_event is not None
        seat = p.seat if p.seat >= 0 else None
        while (ev := self.ahead.get(p.confirmed_seq + 1)) is not None:
            if ev.game != p.game:  # a new game: its whole view comes as ViewUpdated, right after its
                if len(self.ahead) >= STUCK_EVERY:  # first events; asked for if it never comes
                    self._stuck(out, p.confirmed_seq + len(self.ahead))
                return
            del self.ahead[ev.seq]
            try:
                state = apply_event(p.confirmed, seat, ev.type, ev.data)
            except (ValueError, KeyError, TypeError, IndexError) as exc:
                self._doubt(out, exc)
                return
            p.advance(state, ev.seq)
            if ev.seq in self.private and not self._apply_private(ev.seq, out):
                return
            self.version += 1
        complete = p.rules.private_complete
        # An update comes before the events it belongs to: one still held for a later seq will fill
        # the hand when its event is applied; with none held, the hand's unknown cards mean it was lost.
        missing_private = (complete is not None and seat is not None and not self.private
                           and not complete(p.confirmed, seat))
        if self.ahead or missing_private:  # blocked on a lost event, or a lost private update
            self._stuck(out, p.confirmed_seq + len(self.ahead))
        else:
            self.stuck_asked = None

    def _stuck(self, out: list[Any], mark: int) -> None:
        if self.stuck_asked is None or mark - self.stuck_asked >= STUCK_EVERY:
            self.stuck_asked = mark
            self._doubt(out, ValueError("the confirmed view is stuck"))

    def _apply_private(self, seq: int, out: list[Any]) -> bool:
        p = self.predictor
        update = self.private.pop(seq)
        apply_private = p.rules.apply_private if p is not None else None
        if p is None or apply_private is None or p.seat < 0:
            return True
        try:
            p.advance(apply_private(p.confirmed, p.seat, update.delta), p.confirmed_seq)
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            self._doubt(out, exc)
            return False
        return True

    def _doubt(self, out: list[Any], exc: Exception) -> None:
        """The confirmed view and the relay's disagree: ask for the whole view again."""
        if self.match is not None:
            self.resyncs += 1
            out.append(m.Resync(self.match))

    def act(self, action: Any, now_ns: int, seen_seq: int | None = None) -> m.Act | Rejected:
        """An own action: predicted at once; returns the ``Act`` to send, or the local rejection.

        ``seen_seq`` is the seq of the state the player was looking at when they decided (a bot
        decides, then takes its reaction time to act); by default the latest confirmed seq."""
        if self.predictor is None or self.match is None:
            return Rejected("no_match", "not in a match")
        if self.spectating:
            return Rejected("spectator", "spectators watch; they do not play")
        seq = self.predictor.confirmed_seq if seen_seq is None else min(seen_seq, self.predictor.confirmed_seq)
        pending = Pending(self.next_id, action, seq, now_ns)
        result = self.predictor.local(pending)
        if isinstance(result, Rejected):
            return result
        self.next_id += 1
        self.version += 1
        seen = self.seq_received_ns.get(seq)
        reaction = now_ns - seen if seen is not None else None
        act = m.Act(id=pending.id, seq=seq, action=self.predictor.rules.action_to_wire(action), reaction_ns=reaction)
        pending.act, pending.resend_at_ns = act, now_ns + resend_wait_ns(1)
        return act

    def ping(self, now_ns: int) -> m.Ping:
        return m.Ping(t0=now_ns)
