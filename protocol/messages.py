"""Every message that crosses the wire, by direction.

How this works
--------------
Client requests are imperative (``CreateMatch``, ``Act``), relay facts are past tense
(``ActionAccepted``, ``ViewUpdated``). A player's game action travels inside ``Act`` as a nested
map (``{"t": "PlayCard", ...}``) that the game's own rule module decodes: the envelope carries what
every game shares -- the per-client action ``id`` (duplicates are answered, never applied twice),
the ``seq`` of the state the action was made against, and the player's own reaction time.

Public events (``Event``) carry the match's gap-free ``seq`` and the relay's timestamp ``ts`` in ns.
A player's private view of the state (their hand, the number of cards in draw piles) comes as
``ViewUpdated`` on their private topic, stamped with the ``seq`` it is current as of.

Each wire name means one thing: ``match`` a match's code, ``game`` a game's name (``blink``),
``game_index`` the index of a game within its match, ``code`` a rejection's reason code. The
version-1 forms of the messages that named them otherwise are still read (``v1=``: see
``protocol/codec.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from protocol.codec import DecodeError, decode, message, renamed

# --- client -> relay, on {prefix}/req/{client} --------------------------------------------------


@message("CreateMatch")
@dataclass(frozen=True)
class CreateMatch:
    name: str
    game: str = "blink"
    settings: dict[str, object] = field(default_factory=dict)
    seats: int = 2
    bots: int = 0
    # A rated player's identity (``protocol/identity.py``): its public key, the relay's challenge
    # and its signature over it. Empty: an unrated player (and every message of an older client).
    key: bytes = b""
    nonce: int = 0
    sig: bytes = b""


@message("JoinMatch", v1=renamed("JoinMatch", {"code": "match"}))
@dataclass(frozen=True)
class JoinMatch:
    name: str
    match: str  # the match's code
    # A rated player's identity (``protocol/identity.py``): its public key, the relay's challenge
    # and its signature over it. Empty: an unrated player (and every message of an older client).
    key: bytes = b""
    nonce: int = 0
    sig: bytes = b""


@message("QuickMatch")
@dataclass(frozen=True)
class QuickMatch:
    name: str
    game: str = "blink"
    settings: dict[str, object] = field(default_factory=dict)
    # A rated player's identity (``protocol/identity.py``): its public key, the relay's challenge
    # and its signature over it. Empty: an unrated player (and every message of an older client).
    key: bytes = b""
    nonce: int = 0
    sig: bytes = b""


@message("Challenge")
@dataclass(frozen=True)
class Challenge:
    """Asks the relay for a challenge to sign (``Challenged``) before a rated join."""


@message("Ratings")
@dataclass(frozen=True)
class Ratings:
    """Asks for a game's leaderboard (``RatingBoard``, on the asker's private topic)."""

    game: str = "blink"
    limit: int = 20  # at most this many rows, best first (at most ``RATING_ROWS``)


@message("Ping")
@dataclass(frozen=True)
class Ping:
    t0: int  # client clock, ns, when sent


@message("ProbeReply")
@dataclass(frozen=True)
class ProbeReply:
    sent_ns: int  # echoed from the relay's Probe, untouched


@message("Resync")
@dataclass(frozen=True)
class Resync:
    match: str
    # 0: the current views and snapshot only. N >= 1: also the match's past public events from seq N
    # that the relay still keeps (a bounded number), sent to the asker's private topic first -- a
    # spectator that arrives late starts from the match's beginning.
    from_seq: int = 0


@message("Leave")
@dataclass(frozen=True)
class Leave:
    match: str = ""  # empty: whatever match this client is in (also the client's MQTT last will)
    # True in the MQTT last will only: the connection dropped, the player did not choose to go. A
    # running match keeps the seat for its grace period (``grace_s``) before it is forfeited.
    dropped: bool = False


@message("Rejoin")
@dataclass(frozen=True)
class Rejoin:
    """Take back a seat (after a dropped connection, from the same or a new process) with the
    secret token the relay gave in ``MatchJoined``; the seat then belongs to this client id."""

    match: str
    token: str


@message("Rematch")
@dataclass(frozen=True)
class Rematch:
    match: str


# --- player -> relay, on {prefix}/m/{shard}/{match}/act/{client} -----------------------------------


@message("Act")
@dataclass(frozen=True)
class Act:
    id: int  # per-client action id, increasing
    seq: int  # the match seq of the state the player saw when acting
    action: dict[str, object]  # a game action, e.g. {"t": "PlayCard", "v": 1, "card": "4-red-moon", "pile": 0}
    reaction_ns: int | None = None  # client clock: from receiving event `seq` to sending this


# --- relay -> one client, on {prefix}/c/{client} ----------------------------------------------------


@message("MatchJoined")
@dataclass(frozen=True)
class MatchJoined:
    match: str
    seat: int
    game: str
    players: tuple[str, ...]
    seats: int
    settings: dict[str, object]
    shard: str = "0"
    # The seat's secret (private topic only, never public): ``Rejoin(match, token)`` takes the seat back.
    token: str = ""


@message("ActionAccepted")
@dataclass(frozen=True)
class ActionAccepted:
    match: str
    id: int
    seq: int  # the seq of the last event the action produced
    hold_ns: int = 0  # how long fair ordering held the action before judging it
    recv_ns: int = 0  # relay wall clock when the action arrived (a play's time in parts: uplink, judging)
    sent_ns: int = 0  # relay wall clock when this verdict left the relay (judging, downlink)


@message("ActionRejected")
@dataclass(frozen=True)
class ActionRejected:
    match: str
    id: int
    code: str
    detail: str = ""
    seq: int = 0  # the match seq when the rejection was decided
    hold_ns: int = 0  # as ``ActionAccepted``'s
    recv_ns: int = 0
    sent_ns: int = 0


@message("RequestRejected")
@dataclass(frozen=True)
class RequestRejected:
    code: str
    detail: str = ""


@message("Challenged")
@dataclass(frozen=True)
class Challenged:
    nonce: int  # what to sign with the join (``protocol.identity.challenge_message``)


#: The most rows a ``RatingBoard`` carries: it must fit the brokers' payload limit (8 KiB by default),
#: a row of the longest name (24 characters of 4 bytes) being about 180 bytes.
RATING_ROWS = 30


@message("RatingBoard")
@dataclass(frozen=True)
class RatingBoard:
    """A game's leaderboard, best first: each row ``{"name", "key" (fingerprint), "rating", "mu",
    "sigma", "matches"}``; ``players`` is how many rated players the relay holds for the game."""

    game: str
    rows: tuple[dict[str, object], ...]
    players: int = 0


@message("RatingChanged")
@dataclass(frozen=True)
class RatingChanged:
    """A rated match ended: this player's rating for its game before and after, and matches rated."""

    match: str
    game: str
    before: float
    after: float
    matches: int


@message("Pong")
@dataclass(frozen=True)
class Pong:
    t0: int  # client send time (echoed)
    t1: int  # relay receive time
    t2: int  # relay send time


@message("Probe")
@dataclass(frozen=True)
class Probe:
    sent_ns: int  # relay clock, ns: the relay measures each player's round trip itself (fair ordering)


def _results_v1(obj: dict[object, object]) -> dict[object, object]:
    """A ``match_state``'s results named each game's index ``game`` in version 1."""
    ms = obj.get("match_state")
    if isinstance(ms, dict) and isinstance(ms.get("results"), list):
        results = [{("game_index" if k == "game" else k): v for k, v in r.items()} if isinstance(r, dict) else r
                   for r in ms["results"]]
        obj = {**obj, "match_state": {**ms, "results": results}}
    return obj


def _view_v1(obj: dict[object, object]) -> dict[object, object]:
    return _results_v1(renamed("ViewUpdated", {"game": "game_index"})(obj))


def _snapshot_v1(obj: dict[object, object]) -> dict[object, object]:
    return _results_v1(renamed("Snapshot", {"game": "game_index", "game_name": "game"})(obj))


@message("ViewUpdated", v1=_view_v1)
@dataclass(frozen=True)
class ViewUpdated:
    match: str
    seq: int
    game_index: int  # index of the game within the match
    state: dict[str, object]
    match_state: dict[str, object] = field(default_factory=dict)


@message("PrivateUpdate", v1=renamed("PrivateUpdate", {"game": "game_index"}))
@dataclass(frozen=True)
class PrivateUpdate:
    """What changed for one player that the public events do not say (e.g. the cards drawn into
    their hand), for a game with an event applier (``Game.apply_event``): the client applies it to
    its view right after the public event ``seq``. Its full view comes as ``ViewUpdated`` only on
    joining, at a game's start and end, and on ``Resync``."""

    match: str
    seq: int  # the public event after which it applies
    game_index: int
    delta: dict[str, object]


# --- relay -> everyone in a match, on {prefix}/m/{shard}/{match}/ev (and /snap, retained) -------------


@message("Event", v1=renamed("Event", {"game": "game_index"}))
@dataclass(frozen=True)
class Event:
    match: str
    seq: int
    ts: int
    game_index: int
    type: str
    data: dict[str, object]


@message("Snapshot", v1=_snapshot_v1)
@dataclass(frozen=True)
class Snapshot:
    match: str
    seq: int
    ts: int
    game_index: int
    status: str
    players: tuple[str, ...]
    state: dict[str, object]
    match_state: dict[str, object] = field(default_factory=dict)
    game: str = ""  # which rule engine reads ``state`` (blink, takeaway, sequence, ryo)
    #: What the relay measured of each seat's plays, by seat (``relay.model.SeatFigures``): ``rtt_ms``,
    #: ``held_ms`` (None until measured) and, in a race, ``races_lost``.
    seats: tuple[dict[str, object], ...] = ()
    since: int = 0  # relay wall time (ns) the match was created (0: not known): how long it has run


# --- relay -> all, retained -------------------------------------------------------------------------


@message("MatchList")
@dataclass(frozen=True)
class MatchList:
    matches: tuple[dict[str, object], ...]


@message("RelayStatus")
@dataclass(frozen=True)
class RelayStatus:
    relay: str
    online: bool


def act_id(payload: bytes | bytearray | memoryview) -> int:
    """The id of the ``Act`` an untrusted payload holds, or -1 (not one, or not a message): what a
    refusal of an action names, so its sender can match it to the play it made."""
    try:
        msg = decode(payload)
    except DecodeError:
        return -1
    return msg.id if isinstance(msg, Act) else -1
