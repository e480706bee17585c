"""The client's pure core: what one player knows of their match, from the relay's messages.

How this works
--------------
``ClientModel`` holds everything a player's client tracks from messages: the match it is in, the
seat, the public event stream (with gap detection: a gap asks for a resync), the clock filter
(round-trip time and offset: a sample from each own play's verdict while the player plays, from
the networking shell's pongs while it is idle; ``protocol/clock.py``), the receive time of each seq (the reaction time a play
carries to the relay, for fair ordering), and a ``Predictor`` (``client/predictor.py``) that draws
the player's own moves at once, on top of the last confirmed state. It is pure: time comes in as
``now_ns``; it returns the messages to send and never touches the network.

``on_message`` hands each message to the one handler registered for its class (``handles``); a
handler returns whether what is drawn changed, and ``on_message`` then bumps ``version`` -- the
number the screen and the bots compare to know there is something new. ``act`` and ``resends``
bump it the same way (``_changed``), and nothing else does.

An own action's answer: ``ActionAccepted(id, seq)`` keeps it drawn until a confirmed view at or
after ``seq`` holds it; ``ActionRejected(id, code)`` drops it at once and records it in
``bounces`` so the window can animate the card back to the hand with its reason (and in
``verdicts``: every play's round trip, for the HUD and the latency harness).

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

Sending less (a game with ``Game.apply_event``): the relay sends a seated player its whole view
only now and then; in between the model applies the public events (and the player's
``PrivateUpdate`` after each) to the confirmed view itself, in seq order (``_catch_up``), and asks
for the whole view again when it cannot (an event or update lost, or one that does not fit).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Literal, TypeVar, cast

from protocol import messages as m
from protocol.clock import ClockFilter, ping_due, sample, verdict_sample
from protocol.match import MATCH_EVENTS, MatchOver, PlayerDropped, PlayerReturned, RematchStarted
from protocol.rules import AnyGame, game_for
from protocol.rules.base import Rejected
from client.predictor import Pending, Predictor

if TYPE_CHECKING:  # (the seal's cryptography stays out of the pure core)
    from protocol.seal import Reason as SealReason


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

#: The broker connection as the networking shell reports it: up, dropped and being made again, or
#: given up for good (``ConnectionLost``).
ConnectionState = Literal["connected", "reconnecting", "lost"]

#: A seat request, repeated until answered (``ask``).
SeatRequest = m.JoinMatch | m.Rejoin
#: A lobby request (``ask``): a seat request, or one that makes a match (never repeated).
LobbyRequest = m.CreateMatch | m.QuickMatch | SeatRequest
#: What the model asks to send back after a message (``on_message``, ``heal``).
Reply = m.Resync | m.Rejoin | m.ProbeReply
L = TypeVar("L", bound=LobbyRequest)


@dataclass
class Asking:
    """A seat request sent and not answered yet (``ClientModel.ask``)."""

    request: SeatRequest  # the relay answers a repeat with the same seat
    resend_at_ns: int
    sends: int = 1


@dataclass(frozen=True)
class Bounce:
    id: int
    action: object  # the game's action
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
    reason: SealReason


@dataclass(frozen=True)
class Reconnected:
    """Not a wire message: the broker connection is back (subscriptions renewed)."""


#: The networking shell's own notices, delivered beside the relay's messages.
Notice = ConnectionLost | Reconnecting | Reconnected | Tampered


@dataclass(frozen=True)
class Verdict:
    id: int
    ok: bool
    code: str  # "accepted", the relay's rejection code, or "no_answer" (given up)
    sent_ns: int
    answered_ns: int
    action: object = None  # the game's action
    # The verdict's own stamps (relay wall clock) and the clock offset then: the play's time in parts.
    hold_ns: int = 0
    recv_ns: int = 0
    relay_sent_ns: int = 0
    offset_ns: int | None = None

    @property
    def confirm_ns(self) -> int:
        return self.answered_ns - self.sent_ns


M = TypeVar("M")
#: A message handler: the model, the message, the time it arrived, the replies to add to; returns
#: whether what is drawn changed.
Handler = Callable[["ClientModel", M, int, list[Reply]], bool]
_HANDLERS: dict[type, Handler[object]] = {}


def handles(kind: type[M]) -> Callable[[Handler[M]], Handler[M]]:
    """Register the decorated method as the handler of messages of class ``kind``."""
    def register(method: Handler[M]) -> Handler[M]:
        # ``on_message`` looks the handler up by the message's own class: it only ever gets a ``kind``.
        _HANDLERS[kind] = cast(Handler[object], method)
        return method
    return register


@dataclass
class ClientModel:
    client_id: str
    name: str
    match: str | None = None
    seat: int | None = None
    game: str | None = None
    players: tuple[str, ...] = ()
    settings: dict[str, object] = field(default_factory=dict)  # the match's settings, as the wire has them
    #: The relay's match state, as the wire has it (read it through ``client.matchstate.MatchState``).
    match_state: dict[str, object] = field(default_factory=dict)
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
    #: The relay's latest challenge to sign (``Challenged``): what a rated join proves its key over.
    challenge: int | None = None
    #: This player's rating change at the end of its last rated match (``RatingChanged``), if any.
    rating: m.RatingChanged | None = None
    next_id: int = 1
    seq_received_ns: dict[int, int] = field(default_factory=dict)
    resyncs: int = 0
    version: int = 0  # moved on every change the screen or a bot should react to (``_changed``)
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
    connection: ConnectionState = "connected"
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

    def heal(self) -> list[Reply]:
        """What to ask the relay after the connection (or the relay) came back: the seat (if held)
        and the views and snapshot; missed public events from the relay's past ones."""
        if self.match is None:
            return []
        self.resyncs += 1
        if self.token and not self.spectating:
            return [m.Rejoin(self.match, self.token), m.Resync(self.match, from_seq=self.last_event_seq + 1)]
        return [m.Resync(self.match, from_seq=self.last_event_seq + 1 if self.last_event_seq else 0)]

    def ask(self, request: L, now_ns: int) -> L:
        """A lobby request about to be sent: returned as is. A join or a rejoin is remembered until
        answered (``MatchJoined`` or ``RequestRejected``) or ``stop_asking``, and ``asks_again`` sends
        it again meanwhile: the relay answers a repeat with the seat already given, so a request or
        an answer lost (QoS 0; the shard's relay killed after seating us and before its answer left,
        or nobody serving the shard for a moment) costs a resend, not the seat. A create or a quick
        match is not repeated: a second one would make a second match."""
        if isinstance(request, (m.JoinMatch, m.Rejoin)):
            self.asking = Asking(request, now_ns + ASK_AGAIN_FIRST_NS)
        else:
            self.asking = None
        return request

    def stop_asking(self) -> None:
        """The caller stopped waiting for the answer (it came, or it gave up)."""
        self.asking = None

    def asks_again(self, now_ns: int) -> list[SeatRequest]:
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
        gave_up = False
        for p in list(self.predictor.pending):
            if p.accepted_seq is not None or p.act is None:
                continue
            if now_ns - p.sent_ns >= GIVE_UP_NS:
                self.predictor.rejected(p.id)
                detail = f"no answer from the relay in {GIVE_UP_NS // 1_000_000_000} s ({p.sends} sends)"
                self.bounces.append(Bounce(p.id, p.action, "no_answer", detail, now_ns))
                self.verdicts.append(Verdict(p.id, False, "no_answer", p.sent_ns, now_ns, p.action))
                self.failed += 1
                gave_up = True
            elif now_ns >= p.resend_at_ns and self.connection == "connected":
                p.sends += 1
                p.resend_at_ns = now_ns + resend_wait_ns(p.sends)
                self.resent += 1
                due.append(p.act)
        if gave_up:
            self._changed()
        return due

    def spectate(self, code: str, game: str | None = None) -> None:
        """Watch ``code``: ask the relay ``watch_from()`` so the history starts at the match's beginning.
        With ``game`` (a replay, which knows its game before any snapshot) the spectator's predictor
        is made at once."""
        self.match, self.seat, self.spectating = code, None, True
        if self.events.maxlen is not None and self.events.maxlen < PAST_KEPT:
            self.events = deque(self.events, maxlen=PAST_KEPT)
        if game is not None:
            self.game = game
            self.predictor = Predictor(game_for(game), -1)

    def watch_from(self) -> m.Resync:
        """The request that starts watching: the views and snapshot, and the match's past events from
        seq 1 (those the relay still keeps), which ``on_message`` files as history (``_past``)."""
        assert self.match is not None
        return m.Resync(self.match, from_seq=1)

    def restate(self, match_state: dict[str, object], players: tuple[str, ...]) -> None:
        """The match's state and players as something other than the relay tells them (a replay's
        step, read from its log): shown at once."""
        self.match_state, self.players = match_state, players
        self._changed()

    def _past(self, ev: m.Event) -> bool:
        """An event at or below ``last_event_seq``: the relay re-sent it (``Resync`` from a seq) or it
        came late. Its effect on the state is already in the snapshot or view that moved
        ``last_event_seq`` past it, so it is not applied again; if the history lacks it, it takes its
        place there in seq order (and in ``history``, so the window does not announce it as news).
        Returns whether it was filed."""
        events = self.events
        if events and ev.seq > events[-1].seq:
            at = len(events)
        else:
            at = len(events)
            while at > 0 and events[at - 1].seq > ev.seq:
                at -= 1
            if at > 0 and events[at - 1].seq == ev.seq:
                return False  # already there
            if at == 0 and events.maxlen is not None and len(events) >= events.maxlen:
                return False  # older than everything a full history keeps
        if events.maxlen is not None and len(events) >= events.maxlen:
            events.popleft()
            at -= 1
        events.insert(at, ev)
        if len(self.history) >= PAST_KEPT:
            self.history.clear()
        self.history.add(ev.seq)
        return True

    @property
    def rules(self) -> AnyGame | None:
        """The game being played (or watched), once the relay has said which."""
        return self.predictor.rules if self.predictor else None

    def state(self) -> object:
        """What is drawn: the confirmed state with the own unanswered actions on top (the game's
        own state class; None before the first view)."""
        return self.predictor.predicted() if self.predictor else None

    def _changed(self) -> None:
        """Something the screen or a bot should react to changed: the one place ``version`` moves."""
        self.version += 1

    def on_message(self, msg: object, now_ns: int) -> list[Reply]:
        """Take one message from the relay (or a notice of the networking shell); return requests to
        send back (e.g. a Resync). A message of a class no handler takes is ignored."""
        handler = _HANDLERS.get(type(msg))
        out: list[Reply] = []
        if handler is not None and handler(self, msg, now_ns, out):
            self._changed()
        return out

    # ------------------------------------------------------------------------- the networking shell

    @handles(ConnectionLost)
    def _connection_lost(self, msg: ConnectionLost, now_ns: int, out: list[Reply]) -> bool:
        self.lost = msg.reason
        self.connection = "lost"
        return True

    @handles(Reconnecting)
    def _reconnecting(self, msg: Reconnecting, now_ns: int, out: list[Reply]) -> bool:
        self.connection = "reconnecting"
        return True

    @handles(Reconnected)
    def _reconnected(self, msg: Reconnected, now_ns: int, out: list[Reply]) -> bool:
        self.connection = "connected"
        out.extend(self.heal())
        self._ask_now(now_ns)
        return True

    @handles(Tampered)
    def _tampered(self, msg: Tampered, now_ns: int, out: list[Reply]) -> bool:
        # Only what may have been a true message spoilt on its way (a plain one or a replay is
        # someone else's, and the true one came too), at most once a second.
        lost = msg.reason in ("cut", "forged", "other_epoch")
        if lost and self.match is not None and (self.tampered_at is None
                                                or now_ns - self.tampered_at >= TAMPERED_RESYNC_NS):
            self.tampered_at = now_ns
            self.resyncs += 1
            out.append(m.Resync(self.match, from_seq=self.last_event_seq + 1 if self.last_event_seq else 0))
        return False

    # ------------------------------------------------------------------------------ the relay, lobby

    @handles(m.RelayStatus)
    def _relay_status(self, msg: m.RelayStatus, now_ns: int, out: list[Reply]) -> bool:
        if msg.relay.startswith("shard-"):
            heard = msg.relay in self.shard_status
            self.shard_status[msg.relay] = msg.online
            if msg.online and heard:  # a shard served again (which one a request goes to is the relays' to say)
                self._ask_now(now_ns)
            if self.match is None or msg.relay != f"shard-{self.shard}":
                return False
            self.relay_online = msg.online
            if msg.online and heard:  # the shard is served (again): catch up, resend now
                out.extend(self.heal())
                if self.predictor is not None:
                    for waiting in self.predictor.pending:
                        waiting.resend_at_ns = min(waiting.resend_at_ns, now_ns)
            return True
        was, self.relay_online = self.relay_online, msg.online
        if msg.online and was is False:  # the relay is back (restarted, reconnected): catch up
            out.extend(self.heal())
            self._ask_now(now_ns)
        return True

    @handles(m.Pong)
    def _pong(self, msg: m.Pong, now_ns: int, out: list[Reply]) -> bool:
        self.clock.add(sample(msg.t0, msg.t1, msg.t2, now_ns))
        return False

    @handles(m.Probe)
    def _probe(self, msg: m.Probe, now_ns: int, out: list[Reply]) -> bool:
        out.append(m.ProbeReply(msg.sent_ns))  # answered at once: the relay times the round trip
        return False

    @handles(m.MatchJoined)
    def _match_joined(self, msg: m.MatchJoined, now_ns: int, out: list[Reply]) -> bool:
        self.asking = None
        same = self.predictor is not None and (self.match, self.seat) == (msg.match, msg.seat)
        self.match, self.seat, self.game = msg.match, msg.seat, msg.game
        self.players, self.settings = msg.players, msg.settings
        self.token = msg.token or self.token
        self.shard = msg.shard
        if not same:  # a repeated answer (a join sent twice) must not forget pending actions
            self.predictor = Predictor(game_for(msg.game), msg.seat)
        return True

    @handles(m.RequestRejected)
    def _request_rejected(self, msg: m.RequestRejected, now_ns: int, out: list[Reply]) -> bool:
        self.errors.append(msg)
        self.asking = None  # refused, not lost: asking again would be refused again
        return True

    @handles(m.Challenged)
    def _challenged(self, msg: m.Challenged, now_ns: int, out: list[Reply]) -> bool:
        self.challenge = msg.nonce
        return False

    @handles(m.RatingChanged)
    def _rating_changed(self, msg: m.RatingChanged, now_ns: int, out: list[Reply]) -> bool:
        if msg.match != self.match:
            return False
        self.rating = msg
        return True

    # --------------------------------------------------------------------------------- the match

    @handles(m.ViewUpdated)
    def _view_updated(self, msg: m.ViewUpdated, now_ns: int, out: list[Reply]) -> bool:
        if msg.match != self.match or not self.predictor:
            return False
        try:
            state = self.predictor.rules.from_wire(msg.state)
        except ValueError:
            out.append(m.Resync(msg.match))
            return False
        fresh = msg.seq >= self.predictor.confirmed_seq or msg.game_index != self.predictor.game
        if self.predictor.confirm(state, msg.seq, msg.game_index):
            self.seq_received_ns.setdefault(msg.seq, now_ns)
            self.view_seq = msg.seq
            self._catch_up(out)
        if fresh:
            self.match_state = msg.match_state
            players = msg.match_state.get("players")
            if isinstance(players, list) and players:
                self.players = tuple(str(p) for p in players)
        return fresh

    @handles(m.PrivateUpdate)
    def _private_update(self, msg: m.PrivateUpdate, now_ns: int, out: list[Reply]) -> bool:
        pred = self.predictor
        if msg.match != self.match or not pred or msg.game_index != pred.game or msg.seq <= self.view_seq:
            return False
        self.private[msg.seq] = msg
        if msg.seq <= pred.confirmed_seq:  # it came after its event: apply it now
            self._apply_private(msg.seq, out)
        self._catch_up(out)
        return True

    @handles(m.Snapshot)
    def _snapshot(self, msg: m.Snapshot, now_ns: int, out: list[Reply]) -> bool:
        if msg.match != self.match:
            return False
        if msg.seq > self.last_event_seq:
            self.last_event_seq = msg.seq
        self.players = msg.players
        mine = self.predictor
        if (not self.spectating and mine is not None and mine.rules.sends_less and mine.confirmed is not None
                and msg.game_index == mine.game and msg.seq > mine.confirmed_seq
                and mine.confirmed_seq + 1 not in self.ahead):
            # The relay publishes a snapshot after the events it covers: events up to its seq that
            # never came were lost, and when the game waits for us no later event shows the gap.
            self._stuck(out, msg.seq)
        if not (self.spectating and msg.game and msg.state):
            return False
        # A spectator's confirmed state is the public snapshot (nothing hidden is in it).
        if self.predictor is None or self.game != msg.game:
            self.game = msg.game
            self.predictor = Predictor(game_for(msg.game), -1)
        try:
            state = self.predictor.rules.from_wire(msg.state)
        except ValueError:
            return False
        # A game that sends less has brought the view to this seq by its events already:
        # the snapshot still tells the match's status (over, between games).
        fresh = msg.seq >= self.predictor.confirmed_seq or msg.game_index != self.predictor.game
        if self.predictor.confirm(state, msg.seq, msg.game_index):
            self.match_state = msg.match_state
            self.seq_received_ns.setdefault(msg.seq, now_ns)
            self.view_seq = msg.seq
            self._catch_up(out)
            return True
        if fresh:
            self.match_state = msg.match_state
        return fresh

    @handles(m.Event)
    def _event(self, msg: m.Event, now_ns: int, out: list[Reply]) -> bool:
        if msg.match != self.match:
            return False
        known = self.predictor
        caught_up = False
        if known is not None and known.rules.sends_less and msg.seq > known.confirmed_seq and len(self.ahead) < 4096:
            self.ahead[msg.seq] = msg  # kept even if a snapshot said this seq already: the view needs it
            caught_up = self._catch_up(out)
        if msg.seq <= self.last_event_seq:
            return self._past(msg) or caught_up
        if self.last_event_seq and msg.seq > self.last_event_seq + 1:
            self.resyncs += 1
            out.append(m.Resync(msg.match))
        self.last_event_seq = msg.seq
        self.seq_received_ns.setdefault(msg.seq, now_ns)
        if len(self.seq_received_ns) > 4096:
            for k in sorted(self.seq_received_ns)[:2048]:
                del self.seq_received_ns[k]
        self.events.append(msg)
        match MATCH_EVENTS.read(msg):
            case PlayerDropped(player=seat, grace_s=grace):
                self.away[seat] = (now_ns, grace)
                if seat == self.seat and self.token and self.connection == "connected" and not self.spectating:
                    # We are here: a stale last will (a broker taking over our old session) -- take it back.
                    out.append(m.Rejoin(msg.match, self.token))
            case PlayerReturned(player=seat):
                self.away.pop(seat, None)
            case MatchOver() | RematchStarted():
                self.away.clear()
        return True

    @handles(m.ActionAccepted)
    def _action_accepted(self, msg: m.ActionAccepted, now_ns: int, out: list[Reply]) -> bool:
        if not self.predictor:
            return False
        p = self.predictor.accepted(msg.id, msg.seq)
        if p is not None:
            self.verdicts.append(Verdict(msg.id, True, "accepted", p.sent_ns, now_ns, p.action, msg.hold_ns,
                                         msg.recv_ns, msg.sent_ns, self.clock.offset_ns))
            self._clock_sample(p, msg, now_ns)
        return True

    def _clock_sample(self, p: Pending, msg: m.ActionAccepted | m.ActionRejected, now_ns: int) -> None:
        """A play is a ping: its send time, the verdict's two relay stamps and its arrival."""
        s = verdict_sample(p.sent_ns, msg.recv_ns, msg.sent_ns, now_ns, p.sends)
        if s is not None:
            self.clock.add(s)

    @handles(m.ActionRejected)
    def _action_rejected(self, msg: m.ActionRejected, now_ns: int, out: list[Reply]) -> bool:
        if not self.predictor:
            return False
        p = self.predictor.rejected(msg.id)
        if p is not None:
            self.bounces.append(Bounce(msg.id, p.action, msg.code, msg.detail, now_ns))
            self.verdicts.append(Verdict(msg.id, False, msg.code, p.sent_ns, now_ns, p.action, msg.hold_ns,
                                         msg.recv_ns, msg.sent_ns, self.clock.offset_ns))
            self._clock_sample(p, msg, now_ns)
        return True

    # ------------------------------------------------------------------------------- sending less

    def _catch_up(self, out: list[Reply]) -> bool:
        """Apply the buffered events (and the private update after each) that follow the confirmed
        view, in seq order, with the game's own applier. An event of another game waits for that
        game's whole view; one that does not fit (a doubt) asks for a resync. Returns whether the
        view moved on."""
        p = self.predictor
        if p is None or p.confirmed is None or not p.rules.sends_less:
            return False
        for seq in [s for s in self.ahead if s <= p.confirmed_seq]:
            del self.ahead[seq]
        for seq in [s for s in self.private if s <= self.view_seq]:
            del self.private[seq]
        apply_event = p.rules.apply_event
        assert apply_event is not None
        seat = p.seat if p.seat >= 0 else None
        moved = False
        while (ev := self.ahead.get(p.confirmed_seq + 1)) is not None:
            if ev.game_index != p.game:  # a new game: its whole view comes as ViewUpdated, right after its
                if len(self.ahead) >= STUCK_EVERY:  # first events; asked for if it never comes
                    self._stuck(out, p.confirmed_seq + len(self.ahead))
                return moved
            del self.ahead[ev.seq]
            try:
                state = apply_event(p.confirmed, seat, p.rules.decode_event(ev))
            except (ValueError, KeyError, TypeError, IndexError) as exc:
                self._doubt(out, exc)
                return moved
            p.advance(state, ev.seq)
            moved = True
            if ev.seq in self.private and not self._apply_private(ev.seq, out):
                return moved
        complete = p.rules.private_complete
        # An update comes before the events it belongs to: one still held for a later seq will fill
        # the hand when its event is applied; with none held, the hand's unknown cards mean it was lost.
        missing_private = (complete is not None and seat is not None and not self.private
                           and not complete(p.confirmed, seat))
        if self.ahead or missing_private:  # blocked on a lost event, or a lost private update
            self._stuck(out, p.confirmed_seq + len(self.ahead))
        else:
            self.stuck_asked = None
        return moved

    def _stuck(self, out: list[Reply], mark: int) -> None:
        if self.stuck_asked is None or mark - self.stuck_asked >= STUCK_EVERY:
            self.stuck_asked = mark
            self._doubt(out, ValueError("the confirmed view is stuck"))

    def _apply_private(self, seq: int, out: list[Reply]) -> bool:
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

    def _doubt(self, out: list[Reply], exc: Exception) -> None:
        """The confirmed view and the relay's disagree: ask for the whole view again."""
        if self.match is not None:
            self.resyncs += 1
            out.append(m.Resync(self.match))

    # ---------------------------------------------------------------------------------- own moves

    def act(self, action: object, now_ns: int, seen_seq: int | None = None) -> m.Act | Rejected:
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
        self._changed()
        seen = self.seq_received_ns.get(seq)
        reaction = now_ns - seen if seen is not None else None
        act = m.Act(id=pending.id, seq=seq, action=self.predictor.rules.action_to_wire(action), reaction_ns=reaction)
        pending.act, pending.resend_at_ns = act, now_ns + resend_wait_ns(1)
        return act

    def ping(self, now_ns: int, period_ns: int = 0) -> m.Ping | None:
        """A clock ping to send now, or None while the plays' verdicts keep the clock (a sample
        within ``period_ns``: see ``protocol/clock.py``)."""
        return m.Ping(t0=now_ns) if ping_due(self.clock.last_ns, now_ns, period_ns) else None
