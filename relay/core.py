"""The relay's judging core: sans-I/O, the single judge of order and of the rules.

How this works
--------------
``RelayCore.handle(topic, payload, now_ns)`` takes one incoming MQTT message and the relay's time
and returns what to do: ``Publish`` records (topic, typed message, retain) and ``LogRecord``s for
the event log on disk. ``tick(now_ns)`` does what timers ask for (the start countdown, a
stalemate pause, a pick time limit, dice rolls, turn timers, the pause between games) and
``next_deadline()`` tells the shell when to call it next. Nothing here reads a clock, touches a
socket or draws a random number: time arrives as ``now_ns``, chance comes from ``SeededChance``
seeded by the shell, so a core fed the same inputs produces the same outputs.

Ordering. In ``arrival`` mode actions are judged one at a time in the order ``handle`` sees them,
each against the state as it is then, and stamped with ``now_ns``. In ``fair`` mode a race (for a
BLINK pile: the game's ``RaceRule`` says which plays race) is decided by reaction time, not by
network speed: the core computes a play's race key from the state its player saw and submits it to
the scheduler (``relay/fair.py``), which holds it; the core asks the scheduler which held plays are
due, judges them in its order, and includes its deadline (hold ends, probes) in ``next_deadline``.

The games come from the registry (``protocol.rules.GAMES``) or ``RelayConfig.games``; the core asks
a match's ``Game`` for everything game-specific and never compares a game's name.

Every public event gets the match's next ``seq`` (gap-free) and goes to ``.../ev``. Sending less:
for a game with an event applier (``Game.apply_event``/``private_delta``/``apply_private``, e.g.
BLINK) a change publishes only its public events and, to a player whose private part changed beyond
what those say (cards drawn into their hand), a small ``PrivateUpdate`` after them; clients apply
both with the engine's own code, and a player's whole view (``ViewUpdated``) goes out only when a
game starts or ends, on joining and on ``Resync``. A game without an applier still sends every
player their whole view after each change. The retained public snapshot is coalesced: rewritten at
game boundaries at once, otherwise at most once per ``snapshot_interval_s`` (from ``tick``).

Time. ``now_ns`` must be monotonic (it orders, holds and times everything); ``wall_ns`` (default
``now_ns``) only stamps events, snapshots, pongs and log records. Every live match's earliest
deadline (its game timers, a held play's release, the next game, a coalesced snapshot) sits on one
heap (``Match.wake_at``; moot entries are skipped when popped), so ``tick`` and ``next_deadline``
visit only the matches that are due, never all of them. An action is answered to its sender only (``ActionAccepted`` /
``ActionRejected`` with a reason code). Answers are remembered per client and action id, so a
duplicate (QoS 1 redelivery, a resend) gets the same answer again and is never applied twice.

A spectator arriving late asks ``Resync(match, from_seq=1)``: the match's past public events (the
last ``PAST_EVENTS`` since the match or its latest rematch began, at most once a second per client
and match) go to its private topic before the snapshot, so ``blink watch`` starts from the beginning.

Seats survive a dropped connection. Joining gives a seat a secret token (in ``MatchJoined``, on
the player's private topic only). A client's MQTT last will is ``Leave(dropped=True)``: in a
running match it does not forfeit but marks the seat dropped (``player_dropped``) and puts the end
of the match's ``grace_s`` on the housekeeping heap; ``Rejoin(match, token)`` from any client id
within it gives the seat to that id (``player_returned``, ``MatchJoined`` and its view); when the
grace runs out the match ends ``abandoned`` for those still there. A wrong token is ``bad_token``.

Bad input never raises out of ``handle``: undecodable bytes, unknown types, unknown matches or
players, actions out of phase all become a rejection to the sender (when the topic names one)
and a ``bad_input`` log record.

Limits (``relay/limits.py``, settings in ``RelayConfig``). Before a payload is decoded, its sender
(named by the topic) takes a token from its action or request bucket; a flood is answered once
(``rate_limited``), then dropped and counted until the bucket refills. A payload over
``max_payload`` is answered ``too_large`` undecoded. A client has at most ``max_open_per_client``
matches it created open (``too_many_matches``); the relay holds at most ``max_waiting`` waiting
matches (``relay_full``). Limit refusals are logged once per burst. Housekeeping runs in ``tick``
from a heap of deadlines: a match waiting longer than ``waiting_ttl_s`` expires (a ``match_expired``
event), a finished match leaves memory ``linger_s`` after its end (its log stays on disk; a late
Resync or Join gets ``no_such_match``), and a client not heard from for ``client_idle_s`` (or the
least recent beyond ``max_clients``) loses everything the core keeps for it, unless it is seated
in a match still open. The waiting matches and the running ones are kept in their own indexes, so
the match list, quick match and ``tick`` never walk every match.

Recovery (the shell's journal). Replaying a journal feeds the same inputs into a fresh core and
throws its outputs away, so while ``replaying`` is set the core skips building the messages that
carry nothing but outputs -- whole views, the coalesced snapshots, players' private updates --
and still does everything that changes its state (the snapshot schedule, events kept for
``Resync(from_seq)``, remembered answers, log records); a test checks the replayed core equals
the live one. ``resync(code, ...)`` then builds, without changing anything, what a restarted or
reconnected relay republishes for one match so that its clients catch up: every player's view,
then the retained snapshot.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import heapq
from collections import deque
from itertools import islice
from typing import Any

from protocol import messages as m
from protocol.chance import SeededChance, commitment, derive
from protocol.codec import DecodeError, decode, pack_plain, unpack_plain
from protocol.records import plain, with_names
from protocol.rules import GAMES, canonical, game_for
from protocol.rules.base import SYSTEM, Accepted, Outcome, Rejected
from protocol.topics import Topics, valid_id
from relay import shards
from relay.fair import FairOrder, Table
from relay.limits import Clients, Deadlines, Quiet, TokenBucket
from relay.model import STATE_HISTORY, LogRecord, Match, Out, Publish, RelayConfig, Seat

__all__ = ["ACCEPTED_SEQ_BITS", "CoreParts", "LogRecord", "Match", "ORDERS", "Out", "PAST_EVENTS", "Publish",
           "REMEMBERED_ANSWERS", "RelayConfig", "RelayCore", "STATE_HISTORY", "Seat"]

ORDERS = ("arrival", "fair")
CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I: codes are read aloud
REMEMBERED_ANSWERS = 512  # per client: duplicates older than this are answered as unknown
ACCEPTED_SEQ_BITS = 40  # a remembered acceptance: ``hold_ns << ACCEPTED_SEQ_BITS | seq``
#: An answer as a client's book keeps it: the message, an acceptance packed in an int, or (in a
#: snapshot of an older core) an acceptance's (seq, hold_ns).
Answer = m.ActionAccepted | m.ActionRejected | int | tuple[int, int]
DETAIL_CHARS = 200  # a rejection's detail is cut to this: it may quote the (hostile) input
#: Refusals a flood meets: answered each time (within the sender's rate), logged once per burst.
LIMIT_CODES = frozenset({"too_many_matches", "relay_full", "too_large"})
HOUSEKEEPING_PER_TICK = 1_000  # expiries and idle clients handled per tick at most (the rest next tick)
NS = 1_000_000_000
PAST_EVENTS = 4096  # per match: public events kept for a late spectator's Resync(from_seq)
#: A public event as a match keeps it for a resend: ``pack_plain([seq, ts, game, type, data])``, one
#: bytes object (90 of its 210 bytes were a tuple and two ints). Older snapshots hold the tuple
#: (seq, ts, game, type, data) with the map packed or plain, or the ``Event`` itself.
PastEvent = bytes | tuple[int, int, int, str, bytes | dict[str, Any]] | m.Event
MAX_GRACE_S = 600.0  # a dropped player's seat is kept at most this long (the ``grace_s`` setting)


def _past_event(code: str, kept: PastEvent) -> m.Event:
    """A kept public event (any of ``PastEvent``'s forms) as the ``Event`` first published."""
    if isinstance(kept, m.Event):  # kept by a core from before the compact forms
        return kept
    seq, ts, game, etype, data = unpack_plain(kept) if isinstance(kept, bytes) else kept
    if isinstance(data, bytes):  # the tuple form with its map packed
        data = unpack_plain(data)
    return m.Event(match=code, seq=seq, ts=ts, game=game, type=etype, data=data)


@dataclasses.dataclass
class CoreParts:
    """The core's private parts, as it hands them to ``relay/snapshot.py`` (the one module that
    writes and reads them) and takes them back: the names on disk are that module's, not these."""

    codes: SeededChance
    wall_offset: int
    answers: dict[str, dict[tuple[str, int], Answer]]
    past: dict[str, tuple[deque[PastEvent], dict[str, int]]]
    waiting: dict[str, Match]
    live: dict[str, Match]
    fair_live: dict[str, None]
    wake: Deadlines
    owned: dict[str, set[str]]
    housekeeping: Deadlines
    clients: Clients
    act_buckets: dict[str, TokenBucket]
    req_buckets: dict[str, TokenBucket]
    quiet: Quiet


class RelayCore:
    _wall_offset = 0  # wall clock minus monotonic clock, for the call being handled (stamps only)
    #: The ``now_ns`` of the latest ``handle``/``tick`` (with ``_wall_offset``: its wall clock). It
    #: travels in snapshots, so a restarted shell can continue the core's monotonic time.
    last_now_ns = 0
    #: Set while a journal is replayed into this core: outputs-only messages are not built (see
    #: the header's Recovery). Never pickled set (the shell clears it before any snapshot).
    replaying = False

    def __init__(self, topics: Topics | None = None, config: RelayConfig | None = None, seed: int = 0) -> None:
        self.topics = topics or Topics()
        self.config = config or RelayConfig()
        self.seed = seed
        self._codes = SeededChance(derive(seed, "codes"))
        self.matches: dict[str, Match] = {}
        self.client_match: dict[str, str] = {}
        # Per client and (match, action id), oldest first: the answer it got, for a duplicate. An
        # acceptance is kept as one int, ``hold_ns << ACCEPTED_SEQ_BITS | seq`` (the seq itself in
        # arrival order) -- the rest of it is the key. A plain dict (ordered too): an OrderedDict's
        # links were 57 bytes an answer more, the (seq, hold_ns) tuple of older cores 64 more; a
        # relay of 1,000 matches keeps ~130 answers a match after 20 s at human pace, and up to
        # ``REMEMBERED_ANSWERS`` a client. (A snapshot from before holds OrderedDicts and tuples.)
        self._answers: dict[str, dict[tuple[str, int], Answer]] = {}
        # Per match: its last public events, and when each client last had them re-sent. An event
        # is kept as (seq, ts, game, type, data), not as the published ``Event`` (less memory; its
        # ``Event`` is rebuilt, equal, for a resend; a snapshot from before holds ``Event``s).
        self._past: dict[str, tuple[deque[PastEvent], dict[str, int]]] = {}
        self.stats: dict[str, Any] = {"accepted": 0, "rejected": {}}
        if self.config.order not in ORDERS:
            raise ValueError(f"order must be one of {', '.join(ORDERS)}, not {self.config.order!r}")
        self.games = GAMES if self.config.games is None else self.config.games
        # Idle for arrival-order matches; a match may choose fair order itself.
        self.fair = FairOrder(self.config.fair_cap_ns, self.config.fair_floor_ns)
        # Indexes kept up to date at every change of status, so nothing walks every match.
        self._waiting: dict[str, Match] = {}  # waiting for players, in creation order (the match list)
        self._live: dict[str, Match] = {}  # playing or between games
        self._fair_live: dict[str, None] = {}  # the live matches in fair order (they are probed)
        #: Every live match's earliest deadline (``Match.wake_at``), keyed by the monotonic clock.
        self._wake = Deadlines()
        self._owned: dict[str, set[str]] = {}  # client -> codes of the matches it created, not over yet
        self._housekeeping = Deadlines()
        self._clients = Clients(int(self.config.client_idle_s * NS))
        self._act_buckets: dict[str, TokenBucket] = {}
        self._req_buckets: dict[str, TokenBucket] = {}
        self._quiet = Quiet()
        self.stats["limited"] = {"dropped": 0, "bursts": 0}  # messages dropped by the rate limits; bursts of them

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickling (the journal's snapshots). A snapshot taken before the limits existed lacks
        their state: start it empty and rebuild the indexes from the matches."""
        self.__dict__.update(state)
        if "_waiting" not in state:
            self._rebuild_limits()
        if "_wake" not in state:  # a snapshot from before the deadline heap: build it
            self._fair_live = {c: None for c, x in self._live.items() if x.order == "fair"}
            self._wake = Deadlines()
            for x in self.matches.values():
                x.wake_at = None
                x.snapshot_due = None
                self._wake_up(x)

    def _parts(self) -> CoreParts:
        return CoreParts(codes=self._codes, wall_offset=self._wall_offset, answers=self._answers, past=self._past,
                         waiting=self._waiting, live=self._live, fair_live=self._fair_live, wake=self._wake,
                         owned=self._owned, housekeeping=self._housekeeping, clients=self._clients,
                         act_buckets=self._act_buckets, req_buckets=self._req_buckets, quiet=self._quiet)

    def _restore_parts(self, p: CoreParts) -> None:
        self._codes, self._wall_offset, self._answers, self._past = p.codes, p.wall_offset, p.answers, p.past
        self._waiting, self._live, self._fair_live, self._wake = p.waiting, p.live, p.fair_live, p.wake
        self._owned, self._housekeeping, self._clients, self._quiet = p.owned, p.housekeeping, p.clients, p.quiet
        self._act_buckets, self._req_buckets = p.act_buckets, p.req_buckets

    def _rebuild_limits(self) -> None:
        self.stats.setdefault("limited", {"dropped": 0, "bursts": 0})
        self._waiting = {c: x for c, x in self.matches.items() if x.status == "waiting"}
        self._live = {c: x for c, x in self.matches.items() if x.status in ("playing", "between")}
        self._owned = {}
        self._housekeeping = Deadlines()
        self._clients = Clients(int(self.config.client_idle_s * NS))
        self._act_buckets = {}
        self._req_buckets = {}
        self._quiet = Quiet()
        # The relay's time when the snapshot was taken, near enough: its last publication.
        then = max((t for book in self.fair.published.values() for t in book.values()), default=0)
        for client in self._answers:
            self._clients.touch(client, then)
        for match in self.matches.values():
            if match.status == "waiting":
                match.creator = match.players[0].client if match.players else ""
                if match.creator:
                    self._owned.setdefault(match.creator, set()).add(match.code)
                self._schedule(match, then + int(self.config.waiting_ttl_s * NS))
            elif match.status == "over":
                self._schedule(match, then + int(self.config.linger_s * NS))

    # ------------------------------------------------------------------ entry points

    def startup(self, now_ns: int) -> list[Out]:
        """What to publish when the relay comes online (status, empty match list)."""
        return [
            Publish(self.topics.relay_status(self.config.relay_id), m.RelayStatus(self.config.relay_id, True), retain=True),
            self._match_list(),
        ]

    def resync(self, code: str, now_ns: int, wall_ns: int) -> list[Out]:
        """What a (re)connected relay publishes for match ``code`` so that its clients resync: each
        player's whole view, then the retained snapshot (stamped ``wall_ns``), in that order, so
        a snapshot seen means the views went out before it. Read-only: not an input, not journalled,
        it changes nothing here (the coalesced snapshot's schedule included)."""
        match = self.matches.get(code)
        if match is None:
            return []
        out: list[Out] = []
        self._send_views(match, out)
        out.append(self._snapshot_of(match, wall_ns))
        return out

    def last_clock(self) -> tuple[int, int]:
        """(monotonic, wall) ns of the latest input: where a restarted shell continues the clock."""
        return self.last_now_ns, self.last_now_ns + self._wall_offset

    def subscriptions(self) -> list[str]:
        return [self.topics.req_all, self.topics.act_all]

    def handle(self, topic: str, payload: bytes, now_ns: int, wall_ns: int | None = None) -> list[Out]:
        """One incoming message. ``now_ns`` is the relay's *monotonic* clock (it orders, holds and
        times everything and must never go backwards); ``wall_ns`` (default: ``now_ns``) is the wall
        clock, used only to stamp events, snapshots, pongs and log records."""
        self._wall_offset = 0 if wall_ns is None else wall_ns - now_ns
        self.last_now_ns = now_ns
        return self._stamped(self._handle(topic, payload, now_ns))

    def _handle(self, topic: str, payload: bytes, now_ns: int) -> list[Out]:
        out: list[Out] = []
        try:
            act_addr = self.topics.parse_act(topic)
            if act_addr is not None:
                code, client = act_addr
                ids_ok = valid_id(client) and valid_id(code)
                if ids_ok and not self._admit(client, code, payload, now_ns, out):
                    return out
                self._on_act(code, client, payload, now_ns, out, ids_ok)
                return out
            requester = self.topics.parse_req(topic)
            if requester is not None:
                if valid_id(requester) and not self._admit(requester, None, payload, now_ns, out):
                    return out
                self._on_req(requester, payload, now_ns, out)
                return out
            self._bad_quietly(now_ns, out, "unknown_topic", topic=topic[:200])
        except Exception as exc:  # noqa: BLE001 - the relay never stops for bad input
            out.append(self._bad(now_ns, "internal_error", topic=topic, detail=f"{type(exc).__name__}: {exc}"))
        return out

    def _stamped(self, out: list[Out]) -> list[Out]:
        """Log records carry the wall clock: shift their monotonic stamps (events are stamped as made)."""
        if self._wall_offset:
            for o in out:
                if isinstance(o, LogRecord) and isinstance(o.record.get("ts"), int):
                    o.record["ts"] += self._wall_offset
        return out

    def tick(self, now_ns: int, wall_ns: int | None = None) -> list[Out]:
        """Do what is due by ``now_ns`` (monotonic; ``wall_ns`` as in ``handle``). Only the matches
        whose deadline has come are visited: they come off a heap, never from a scan of all matches."""
        self._wall_offset = 0 if wall_ns is None else wall_ns - now_ns
        self.last_now_ns = now_ns
        out: list[Out] = []
        try:
            self._housekeep(now_ns, out)
        except Exception as exc:  # noqa: BLE001
            out.append(self._bad(now_ns, "internal_error", detail=f"housekeeping: {type(exc).__name__}: {exc}"))
        if self._fair_live and self.fair.probe_due(now_ns):
            self._probe(now_ns, out)
        seen: set[str] = set()
        for at, code, _ in self._wake.due(now_ns, HOUSEKEEPING_PER_TICK):
            match = self._live.get(code)
            if match is None or match.wake_at != at or code in seen:
                continue  # moot: over, closed, or its deadline moved (a later entry stands for it)
            seen.add(code)
            match.wake_at = None
            try:
                self._release(match, now_ns, out)
                self._fire_timers(match, now_ns, out)
                if match.next_game_at is not None and now_ns >= match.next_game_at:
                    match.next_game_at = None
                    self._start_game(match, now_ns, out)
                if match.snapshot_due is not None and now_ns >= match.snapshot_due:
                    self._publish_snapshot(match, now_ns, out)
            except Exception as exc:  # noqa: BLE001
                out.append(self._bad(now_ns, "internal_error", match=match.code, detail=f"{type(exc).__name__}: {exc}"))
            self._wake_up(match)
        return self._stamped(out)

    def next_deadline(self) -> int | None:
        """When ``tick`` should run next (monotonic ns), or None. O(1) but for dropping moot heap tops."""
        deadlines: list[int] = []
        housekeeping = self._housekeeping.next()
        if housekeeping is not None:
            deadlines.append(housekeeping)
        heap = self._wake.heap
        while heap:
            at, code, _ = heap[0]
            match = self._live.get(code)
            if match is not None and match.wake_at == at:
                deadlines.append(at)
                break
            heapq.heappop(heap)  # moot
        if self._fair_live:
            deadlines.append(self.fair.next_probe_ns())
        return min(deadlines) if deadlines else None

    def _wake_up(self, match: Match) -> None:
        """Put the match's earliest deadline (its timers, the next game, a held play's release, a
        coalesced snapshot) on the heap, if it changed. One live entry per match: ``wake_at``."""
        at: int | None = None
        if match.status in ("playing", "between"):
            times = [d for d, _ in match.timers.values()] if match.timers else []
            if match.next_game_at is not None:
                times.append(match.next_game_at)
            if match.snapshot_due is not None:
                times.append(match.snapshot_due)
            if self.fair.held.get(match.code):  # (an arrival-order match never holds a play)
                held = self.fair.deadline(match.code, probing=False)
                if held is not None:
                    times.append(held)
            at = min(times) if times else None
        if at is not None and at != match.wake_at:
            self._wake.add(at, match.code, "wake")
            if len(self._wake) > 2 * len(self._live) + 64:
                self._wake.rebuild([(x.wake_at, x.code, "wake") for x in self._live.values()
                                    if x.wake_at is not None and x is not match] + [(at, match.code, "wake")])
        match.wake_at = at

    def shutdown(self) -> list[Out]:
        return [Publish(self.topics.relay_status(self.config.relay_id), m.RelayStatus(self.config.relay_id, False), retain=True)]

    # ------------------------------------------------------------------ limits and housekeeping

    def _admit(self, client: str, code: str | None, payload: bytes, now_ns: int, out: list[Out]) -> bool:
        """May this message from ``client`` (an action in match ``code``, or a request when None) be
        decoded? Costs a dict lookup and a little arithmetic -- before any decoding."""
        self._clients.touch(client, now_ns)
        cfg = self.config
        buckets = self._req_buckets if code is None else self._act_buckets
        bucket = buckets.get(client)
        if bucket is None:
            rate, burst = (cfg.req_rate, cfg.req_burst) if code is None else (cfg.act_rate, cfg.act_burst)
            bucket = buckets[client] = TokenBucket(rate, burst, now_ns)
        if not bucket.take(now_ns):
            limited = self.stats["limited"]
            limited["dropped"] += 1
            if bucket.first_refusal():
                limited["bursts"] += 1
                what = "requests" if code is None else "actions"
                detail = f"too many {what}: at most {bucket.rate:g} a second; the rest are dropped"
                self._refuse(client, code, payload, "rate_limited", detail, now_ns, out)
                out.append(self._bad(now_ns, "rate_limited", client=client, match=code or "", detail=detail))
            return False
        if len(payload) > cfg.max_payload:
            detail = f"{len(payload)} bytes > {cfg.max_payload}"
            self._refuse(client, code, b"", "too_large", detail, now_ns, out)
            self._bad_quietly(now_ns, out, "too_large", sender=client, client=client, match=code or "", detail=detail)
            return False
        return True

    def _refuse(self, client: str, code: str | None, payload: bytes, reason: str, detail: str, now_ns: int,
                out: list[Out]) -> None:
        """Tell the sender of an undecoded message that it was refused (never remembered as an answer:
        the same action sent again later is judged)."""
        if code is None:
            out.append(Publish(self.topics.client(client), m.RequestRejected(reason, detail)))
            return
        action_id = -1
        if payload and len(payload) <= self.config.max_payload:
            try:
                act = decode(payload)
                if isinstance(act, m.Act):
                    action_id = act.id
            except DecodeError:
                pass
        match = self.matches.get(code)
        out.append(Publish(self.topics.client(client),
                           m.ActionRejected(code, action_id, reason, detail, match.seq if match else 0)))

    def _bad_quietly(self, now_ns: int, out: list[Out], code: str, sender: str = "*", **fields: Any) -> None:
        """A ``bad_input`` record, once per burst of this refusal from this sender (``*``: unknown)."""
        silenced = self._quiet.log(sender, code, now_ns)
        if silenced is not None:
            if silenced:
                fields["silenced_before"] = silenced
            out.append(self._bad(now_ns, code, **fields))

    def _schedule(self, match: Match, at_ns: int) -> None:
        match.housekeep_at = at_ns
        self._housekeeping.add(at_ns, match.code, match.status)
        self._compact_housekeeping()

    def _compact_housekeeping(self) -> None:
        """Drop the moot deadlines (started, closed, rematched matches) once they are the majority."""
        if len(self._housekeeping) > 2 * len(self.matches) + 64:
            self._housekeeping.rebuild([(x.housekeep_at, x.code, x.status) for x in self.matches.values()
                                        if x.housekeep_at is not None])

    def _disown(self, match: Match) -> None:
        owned = self._owned.get(match.creator)
        if owned is not None:
            owned.discard(match.code)
            if not owned:
                del self._owned[match.creator]

    def _housekeep(self, now_ns: int, out: list[Out]) -> None:
        """Expire waiting matches, forget finished ones, drop idle clients -- what is due, no more."""
        for at, code, _ in self._housekeeping.due(now_ns, HOUSEKEEPING_PER_TICK):
            match = self.matches.get(code)
            if match is None or match.housekeep_at != at:
                continue  # moot: closed, started, rematched, or a later deadline replaced it
            if match.status == "waiting":
                # The event goes to whoever waits in it (and into the log); then it closes like an empty one.
                self._event(match, now_ns, out, {"type": "match_expired", "after_s": self.config.waiting_ttl_s})
                self._close(match, out)
                out.append(self._match_list())
            elif match.status == "over":
                out.append(LogRecord({"kind": "match_forgotten", "match": code, "ts": now_ns}))
                self._close(match, out)
            elif match.status in ("playing", "between"):
                self._grace_over(match, now_ns, out)
        self._compact_housekeeping()
        clients = self._clients
        idle = clients.idle(now_ns, HOUSEKEEPING_PER_TICK)
        for client in idle:
            self._forget_client(client, now_ns)
        over = len(clients) - self.config.max_clients
        for _ in range(min(max(0, over), HOUSEKEEPING_PER_TICK)):
            client = next(iter(clients.seen))
            del clients.seen[client]
            self._forget_client(client, now_ns)
        if idle and not clients.seen:
            self._release_empty_tables()

    def _release_empty_tables(self) -> None:
        """A dict keeps the table it grew to after its entries are gone: once a flood (or a busy
        hour) has passed and one is empty again, give it a fresh, small one."""
        for owner, names in ((self, ("matches", "client_match", "_answers", "_act_buckets", "_req_buckets",
                                     "_owned", "_waiting", "_live", "_past")),
                             (self.fair, ("published", "rtt", "held", "coins")),
                             (self._quiet, ("last",)), (self._clients, ("seen",))):
            for name in names:
                table = getattr(owner, name)
                if not table:
                    setattr(owner, name, type(table)())

    def _forget_client(self, client: str, now_ns: int) -> None:
        """Drop what the core keeps for a client gone quiet -- unless it sits in a match still open
        (a slow turn, a long think): then it counts as seen now."""
        code = self.client_match.get(client)
        match = self.matches.get(code) if code is not None else None
        if match is not None and match.status != "over" and match.seat_of(client) is not None:
            self._clients.touch(client, now_ns)
            return
        self.client_match.pop(client, None)
        self._answers.pop(client, None)
        self._act_buckets.pop(client, None)
        self._req_buckets.pop(client, None)
        self._quiet.forget(client)
        self.fair.rtt.pop(client, None)

    # ------------------------------------------------------------------ control requests

    def _on_req(self, client: str, payload: bytes, now_ns: int, out: list[Out]) -> None:
        if not valid_id(client):
            self._bad_quietly(now_ns, out, "bad_client_id", client=client[:80])
            return
        try:
            msg = decode(payload)
        except DecodeError as exc:
            self._reject_req(client, exc.code, exc.detail, now_ns, out)
            return
        if isinstance(msg, m.Ping):
            out.append(Publish(self.topics.client(client), m.Pong(t0=msg.t0, t1=now_ns + self._wall_offset, t2=now_ns + self._wall_offset)))
        elif isinstance(msg, m.CreateMatch):
            self._create(client, msg.name, msg.game, msg.settings, msg.seats, False, now_ns, out)
        elif isinstance(msg, m.JoinMatch):
            self._join(client, msg.name, msg.code.upper(), now_ns, out)
        elif isinstance(msg, m.QuickMatch):
            self._quick(client, msg, now_ns, out)
        elif isinstance(msg, m.Resync):
            match = self.matches.get(msg.match)
            if match is None:
                self._reject_req(client, "no_such_match", f"no match {msg.match[:16]!r}", now_ns, out)
            else:
                if msg.from_seq > 0:
                    self._resend_past(match.code, client, msg.from_seq, now_ns, out)
                self._send_views(match, out, only=client)
                self._publish_snapshot(match, now_ns, out)
        elif isinstance(msg, m.Rematch):
            self._rematch(client, msg.match, now_ns, out)
        elif isinstance(msg, m.Leave):
            self._leave(client, msg.match, now_ns, out, dropped=msg.dropped)
        elif isinstance(msg, m.Rejoin):
            self._rejoin(client, msg.match, msg.token, now_ns, out)
        elif isinstance(msg, m.ProbeReply):
            self.fair.on_probe_reply(client, msg.sent_ns, now_ns)
        else:
            self._reject_req(client, "unexpected", f"{type(msg).__name__} is not a request", now_ns, out)

    def _resend_past(self, code: str, client: str, from_seq: int, now_ns: int, out: list[Out]) -> None:
        past, last_sent = self._past.get(code, (deque(), {}))
        if now_ns - last_sent.get(client, now_ns - NS) < NS:
            return  # a second ago already: a client cannot make the relay repeat a match in a loop
        last_sent[client] = now_ns
        topic = self.topics.client(client)
        # The kept events' seqs run on without a gap (every public event is kept, a rematch starts
        # afresh): those before ``from_seq`` are skipped unread (all are read if that ever failed).
        skip = max(0, from_seq - _past_event(code, past[0]).seq) if past else 0
        if skip and (skip >= len(past) or _past_event(code, past[skip]).seq != from_seq):
            skip = 0
        for kept in islice(past, skip, None):
            ev = _past_event(code, kept)
            if ev.seq >= from_seq:
                out.append(Publish(topic, ev))

    def _reject_req(self, client: str, code: str, detail: str, now_ns: int, out: list[Out]) -> None:
        detail = detail[:DETAIL_CHARS]
        out.append(Publish(self.topics.client(client), m.RequestRejected(code, detail)))
        if code in LIMIT_CODES:  # a limit met by a flood: answered every time, logged once per burst
            self._bad_quietly(now_ns, out, code, sender=client, client=client, detail=detail)
        else:
            out.append(self._bad(now_ns, code, client=client, detail=detail))

    def _new_code(self) -> str:
        total = self.config.shards_total
        while True:
            if total > 1:  # several relays: the code names this core's shard (relay/shards.py)
                shard = int(self.topics.shard)
                code = shards.code_in_shard(self._codes.randbelow(shards.codes_in_shard(shard, total)), shard, total)
            else:
                code = "".join(CODE_ALPHABET[self._codes.randbelow(len(CODE_ALPHABET))] for _ in range(5))
            if code not in self.matches:
                return code

    def _create(self, client: str, name: str, game: str, settings: dict[str, Any], seats: int, quick: bool,
                now_ns: int, out: list[Out]) -> Match | None:
        owned = self._owned.get(client)
        if owned is not None and len(owned) >= self.config.max_open_per_client:
            self._reject_req(client, "too_many_matches",
                             f"you already have {len(owned)} matches open (at most {self.config.max_open_per_client})",
                             now_ns, out)
            return None
        if len(self.matches) >= self.config.max_matches or len(self._waiting) >= self.config.max_waiting:
            self._reject_req(client, "relay_full", "this relay holds no more matches", now_ns, out)
            return None
        settings = dict(settings)
        order = settings.pop("order", self.config.order)
        if order not in ORDERS:
            self._reject_req(client, "bad_settings", f"order must be one of {', '.join(ORDERS)}, not {order!r}",
                             now_ns, out)
            return None
        grace_s = _grace(settings.pop("grace_s", None))
        if grace_s is None:
            self._reject_req(client, "bad_settings", f"grace_s must be a number of seconds from 0 to {MAX_GRACE_S:g}",
                             now_ns, out)
            return None
        try:
            rules = game_for(game, self.games)
            settings = rules.check_settings(settings, seats)
        except (ValueError, TypeError) as exc:
            self._reject_req(client, "bad_settings", str(exc), now_ns, out)
            return None
        problem = rules.seats_problem(seats)
        if problem is not None:
            self._reject_req(client, "bad_settings", problem, now_ns, out)
            return None
        code = self._new_code()
        match = Match(code=code, game=canonical(game), rules=rules, settings=settings, seats=seats, quick=quick,
                      seed=derive(self.seed, "match", code), best_of=rules.best_of(settings), order=order,
                      creator=client, grace_s=grace_s)
        self.matches[code] = match
        self._waiting[code] = match
        self._owned.setdefault(client, set()).add(code)
        self._schedule(match, now_ns + int(self.config.waiting_ttl_s * NS))
        self._event(match, now_ns, out, {"type": "match_created", "game_name": match.game, "seats": seats,
                                          "settings": settings, "best_of": match.best_of, "order": order})
        self._join(client, name, code, now_ns, out)
        return match

    def _quick(self, client: str, msg: m.QuickMatch, now_ns: int, out: list[Out]) -> None:
        game = canonical(msg.game)
        checked: dict[int, Any] = {}  # seats -> the settings asked for, checked once per call
        for match in self._waiting.values():
            if (match.quick and match.game == game
                    and match.seat_of(client) is None and len(match.players) < match.seats):
                settings = dict(msg.settings)
                order = settings.pop("order", self.config.order)
                if _grace(settings.pop("grace_s", None)) != match.grace_s:
                    continue
                if match.seats not in checked:
                    try:
                        checked[match.seats] = match.rules.check_settings(settings, match.seats)
                    except (ValueError, TypeError):
                        checked[match.seats] = None
                wanted = checked[match.seats]
                if wanted == match.settings and order == match.order:
                    self._join(client, msg.name, match.code, now_ns, out)
                    return
        self._create(client, msg.name, msg.game, msg.settings, 2, True, now_ns, out)

    def _join(self, client: str, name: str, code: str, now_ns: int, out: list[Out]) -> None:
        match = self.matches.get(code)
        if match is None:
            self._reject_req(client, "no_such_match", f"no match with code {code[:16]!r}", now_ns, out)
            return
        seat = match.seat_of(client)
        if seat is None:
            if match.status != "waiting" or len(match.players) >= match.seats:
                self._reject_req(client, "match_full", f"match {code} already has its players", now_ns, out)
                return
            name = _clean_name(name[:200]) or f"player{len(match.players) + 1}"
            taken = set(match.names)
            base, n = name, 2
            while name in taken:
                name, n = f"{base}-{n}", n + 1
            match.players.append(Seat(client, name, token=self._seat_token(code, client, now_ns)))
            seat = len(match.players) - 1
            self.client_match[client] = code
            self._event(match, now_ns, out, {"type": "seat_taken", "player": seat, "name": name})
        out.append(self._joined(match, seat))
        if match.status == "waiting" and len(match.players) == match.seats:
            match.wins = [0] * match.seats
            self._start_game(match, now_ns, out)
        else:
            self._publish_snapshot(match, now_ns, out)
        out.append(self._match_list())

    def _joined(self, match: Match, seat: int) -> Publish:
        """``MatchJoined`` for a seat, with its secret token: to the seat's private topic only."""
        s = match.players[seat]
        return Publish(self.topics.client(s.client), m.MatchJoined(
            match=match.code, seat=seat, game=match.game, players=match.names, seats=match.seats,
            settings=match.settings, shard=self.topics.shard, token=s.token))

    def _seat_token(self, code: str, client: str, now_ns: int) -> str:
        """A seat's secret: from the relay's seed (the shell draws it from the OS; only the
        operator's log holds it), so a core fed the same inputs gives the same tokens."""
        return hashlib.sha256(f"{self.seed}:seat-token:{code}:{client}:{now_ns}".encode()).hexdigest()[:32]

    def _leave(self, client: str, code: str, now_ns: int, out: list[Out], dropped: bool = False) -> None:
        match = self.matches.get(code) if code else self.matches.get(self.client_match.get(client, ""))
        if match is None:
            return
        seat = match.seat_of(client)
        if seat is None:
            return
        if dropped and match.status in ("playing", "between"):
            # The connection dropped (the client's last will): the seat waits ``grace_s`` for a Rejoin.
            s = match.players[seat]
            if s.dropped_at is None:
                s.dropped_at = now_ns
                self._event(match, now_ns, out, {"type": "player_dropped", "player": seat, "grace_s": match.grace_s})
                self._schedule_grace(match)
            return
        self.client_match.pop(client, None)
        if match.status == "waiting":
            match.players.pop(seat)
            self._event(match, now_ns, out, {"type": "seat_left", "player": seat})
            if not match.players:
                self._close(match, out)
            else:
                self._publish_snapshot(match, now_ns, out)
        elif match.status in ("playing", "between"):
            # Leaving a running match forfeits it: the others win.
            others = [i for i in range(match.seats) if i != seat]
            self._event(match, now_ns, out, {"type": "seat_left", "player": seat})
            winner = others[0] if len(others) == 1 else None
            self._end_match(match, winner, "forfeit", now_ns, out)
        out.append(self._match_list())

    def _schedule_grace(self, match: Match) -> None:
        """Housekeeping for a running match is the end of its earliest dropped seat's grace."""
        at = match.grace_deadline()
        if at is None:
            match.housekeep_at = None
        else:
            self._schedule(match, at)

    def _grace_over(self, match: Match, now_ns: int, out: list[Out]) -> None:
        """A dropped seat's grace ran out: the match is forfeited (``abandoned``) to those still there."""
        grace_ns = int(match.grace_s * NS)
        late = [i for i, s in enumerate(match.players) if s.dropped_at is not None and s.dropped_at + grace_ns <= now_ns]
        if not late:
            self._schedule_grace(match)
            return
        others = [i for i in range(match.seats) if i not in late]
        self._end_match(match, others[0] if len(others) == 1 else None, "abandoned", now_ns, out, winners=others)
        out.append(self._match_list())

    def _rejoin(self, client: str, code: str, token: str, now_ns: int, out: list[Out]) -> None:
        """A seat taken back with its token, by a new client id (a restarted process) or the same
        one (a reconnect): the seat is the new client's, it gets ``MatchJoined`` and its view."""
        match = self.matches.get(code.upper()[:16])
        if match is None:
            self._reject_req(client, "no_such_match", f"no match {code[:16]!r}", now_ns, out)
            return
        seat = next((i for i, s in enumerate(match.players)
                     if s.token and hmac.compare_digest(s.token.encode(), token.encode()[:64])), None)
        if seat is None:
            self._reject_req(client, "bad_token", f"no seat of match {match.code} has this token", now_ns, out)
            return
        s = match.players[seat]
        if s.client != client:
            if match.status == "over":
                self._reject_req(client, "bad_token", f"match {match.code} is over: its seats are closed", now_ns, out)
                return
            if match.seat_of(client) is not None:
                self._reject_req(client, "bad_token", "you already hold another seat of this match", now_ns, out)
                return
            if self.client_match.get(s.client) == match.code:
                del self.client_match[s.client]
            out.append(LogRecord({"kind": "seat_moved", "match": match.code, "seat": seat, "from": s.client,
                                  "to": client, "ts": now_ns}))
            s.client = client
        self.client_match[client] = match.code
        if s.dropped_at is not None:
            s.dropped_at = None
            if match.status in ("playing", "between"):
                self._event(match, now_ns, out, {"type": "player_returned", "player": seat})
                self._schedule_grace(match)
        out.append(self._joined(match, seat))
        self._send_views(match, out, only=client)
        self._publish_snapshot(match, now_ns, out)

    def _close(self, match: Match, out: list[Out]) -> None:
        self.matches.pop(match.code, None)
        self._past.pop(match.code, None)
        self._waiting.pop(match.code, None)
        self._live.pop(match.code, None)
        self._fair_live.pop(match.code, None)
        self._disown(match)
        match.housekeep_at = None
        for s in match.players:
            if self.client_match.get(s.client) == match.code:
                del self.client_match[s.client]
        self.fair.drop_match(match.code)
        out.append(Publish(self.topics.snap(match.code), b"", retain=True))  # clears the retained snapshot

    def _rematch(self, client: str, code: str, now_ns: int, out: list[Out]) -> None:
        match = self.matches.get(code)
        if match is None:
            self._reject_req(client, "no_such_match", f"no match {code[:16]!r}", now_ns, out)
            return
        seat = match.seat_of(client)
        if seat is None:
            self._reject_req(client, "not_a_player", "you are not in this match", now_ns, out)
            return
        if match.status != "over":
            self._reject_req(client, "not_over", "the match is still running", now_ns, out)
            return
        match.players[seat].rematch = True
        self._event(match, now_ns, out, {"type": "rematch_requested", "player": seat})
        if all(s.rematch for s in match.players):
            for s in match.players:
                s.rematch = False
                s.dropped_at = None  # whoever asked for the rematch is there
            match.wins = [0] * match.seats
            match.winner = None
            match.results = []
            match.seed = derive(match.seed, "rematch")
            match.housekeep_at = None  # it stays while it is played again
            self._event(match, now_ns, out, {"type": "rematch_started"})
            self._start_game(match, now_ns, out)

    # ------------------------------------------------------------------ games

    def _start_game(self, match: Match, now_ns: int, out: list[Out]) -> None:
        match.game_index += 1
        match.status = "playing"
        if self._waiting.pop(match.code, None) is not None:
            match.housekeep_at = None  # no longer waiting: it cannot expire
        self._live[match.code] = match
        if match.order == "fair":
            self._fair_live[match.code] = None
        match.game_seed = derive(match.seed, "game", match.game_index)
        match.chance = SeededChance(match.game_seed)
        match.state = match.rules.new_game(match.settings, match.seats, match.chance)
        match.forget()
        match.timers.clear()
        self._event(match, now_ns, out, {"type": "game_started", "players": list(match.names),
                                          "seed_commitment": commitment(match.game_seed)})
        match.remember(now_ns)
        self._after_change(match, now_ns, out, starting=True)

    def _after_change(self, match: Match, now_ns: int, out: list[Out], starting: bool = False) -> None:
        """Re-arm timers from the new state, publish views and snapshot, and handle the end."""
        outcome = match.rules.outcome(match.state)
        if outcome is not None:
            match.timers.clear()
            self._end_game(match, outcome, now_ns, out)
        else:
            self._arm_timers(match, now_ns)
        if starting or outcome is not None or not match.rules.sends_less:
            self._send_views(match, out)  # whole views: at a game's boundaries, or for a game without an applier
        self._snapshot_soon(match, now_ns, out, now=outcome is not None or starting)
        if outcome is None:
            self._fire_timers(match, now_ns, out)
        self._wake_up(match)

    def _arm_timers(self, match: Match, now_ns: int) -> None:
        timers = match.rules.timers(match.state)
        if not timers:  # most changes (a BLINK play): no timer wanted, so none may stay armed
            if match.timers:
                match.timers.clear()
            return
        wanted = {t.name: t for t in timers}
        for name in list(match.timers):
            if name not in wanted:
                del match.timers[name]
        for name, t in wanted.items():
            if name not in match.timers:
                match.timers[name] = (now_ns + max(0, t.delay_ns), t.action)

    def _fire_timers(self, match: Match, now_ns: int, out: list[Out]) -> None:
        if not match.timers:
            return
        for _ in range(10_000):  # zero-delay timers may chain (roll, then roll again); bounded anyway
            due = [(d, n) for n, (d, _) in match.timers.items() if d <= now_ns]
            if not due or match.status != "playing":
                return
            _, name = min(due)
            _, action = match.timers.pop(name)
            assert match.chance is not None  # set when a game starts
            action = match.rules.complete(match.state, SYSTEM, action, match.chance)
            result = match.rules.apply(match.state, SYSTEM, action)
            if isinstance(result, Rejected):
                out.append(LogRecord({"kind": "timer_refused", "match": match.code, "timer": name, "code": result.code}))
                continue
            self._commit(match, result, now_ns, out, extra={"timer": name})
            self._after_change(match, now_ns, out)
            return

    def _end_game(self, match: Match, outcome: Outcome, now_ns: int, out: list[Out]) -> None:
        winners = list(outcome.winners)
        for w in winners:
            match.wins[w] += 1
        match.results.append({"game": match.game_index, "winners": winners, "reason": outcome.reason,
                              "scores": list(outcome.scores)})
        self._event(match, now_ns, out, {"type": "game_result", "winner": winners[0] if len(winners) == 1 else None,
                                          "winners": winners, "reason": outcome.reason,
                                          "scores": list(outcome.scores), "wins": list(match.wins),
                                          "seed": match.game_seed, **plain(outcome.extra)})
        need = match.best_of // 2 + 1
        leaders = [i for i, w in enumerate(match.wins) if w >= need]
        played = match.game_index + 1
        if leaders:
            # Several leaders at once: a shared win (Sequence teams, Takeaway ties) -- no single winner.
            self._end_match(match, leaders[0] if len(leaders) == 1 else None, "won", now_ns, out, winners=leaders)
        elif played >= match.best_of * 3:  # ties can go on for ever; cap the games of a match
            best = max(match.wins)
            top = [i for i, w in enumerate(match.wins) if w == best]
            self._end_match(match, top[0] if len(top) == 1 else None, "game_limit", now_ns, out, winners=top)
        else:
            match.status = "between"
            match.next_game_at = now_ns + int(self.config.between_games_s * NS)

    def _end_match(self, match: Match, winner: int | None, reason: str, now_ns: int, out: list[Out],
                   winners: list[int] | None = None) -> None:
        match.status = "over"
        match.winner = winner
        match.timers.clear()
        match.next_game_at = None
        match.forget()
        self._live.pop(match.code, None)
        self._fair_live.pop(match.code, None)
        self._disown(match)
        self._schedule(match, now_ns + int(self.config.linger_s * NS))
        winners = winners if winners is not None else ([] if winner is None else [winner])
        self._event(match, now_ns, out, {"type": "match_over", "winner": winner, "winners": winners,
                                          "reason": reason, "wins": list(match.wins)})
        self._publish_snapshot(match, now_ns, out)
        self._send_views(match, out)

    # ------------------------------------------------------------------ actions

    def _on_act(self, code: str, client: str, payload: bytes, now_ns: int, out: list[Out],
                ids_ok: bool | None = None) -> None:
        if ids_ok is None:  # not checked by the caller
            ids_ok = valid_id(client) and valid_id(code)
        if not ids_ok:
            self._bad_quietly(now_ns, out, "bad_topic", match=code[:80], client=client[:80])
            return
        try:
            act = decode(payload)
        except DecodeError as exc:
            self._answer(client, code, -1, m.ActionRejected(code, -1, "malformed", exc.detail), now_ns, out)
            return
        if not isinstance(act, m.Act):
            self._answer(client, code, -1, m.ActionRejected(code, -1, "malformed", f"expected Act, got {type(act).__name__}"),
                         now_ns, out)
            return
        book = self._answers.get(client)
        remembered = book.get((code, act.id)) if book is not None else None
        if remembered is not None:
            if type(remembered) is int:  # an acceptance, kept small (see ``_answer``)
                remembered = m.ActionAccepted(code, act.id, remembered & ((1 << ACCEPTED_SEQ_BITS) - 1),
                                              remembered >> ACCEPTED_SEQ_BITS)
            elif isinstance(remembered, tuple):  # the same, as an older core kept it
                remembered = m.ActionAccepted(code, act.id, remembered[0], remembered[1])
            out.append(Publish(self.topics.client(client), remembered))
            out.append(LogRecord({"kind": "duplicate", "match": code, "client": client, "id": act.id}))
            return
        match = self.matches.get(code)
        if match is None:
            self._reject(client, code, act, "no_such_match", f"no match {code!r}", now_ns, out)
            return
        seat = match.seat_of(client)
        if seat is None:
            self._reject(client, code, act, "not_a_player", "you are not a player in this match", now_ns, out)
            return
        try:
            action = match.rules.action_from_wire(act.action)
        except (ValueError, TypeError) as exc:
            self._reject(client, code, act, "malformed", str(exc), now_ns, out)
            return
        if match.status != "playing":
            reason = {"waiting": "not_running", "between": "not_running", "over": "game_over"}[match.status]
            self._reject(client, code, act, reason, f"the match is {match.status}", now_ns, out)
            return
        if act.seq > match.seq or act.seq < 0:
            self._reject(client, code, act, "bad_seq", f"seq {act.seq} is not a seq of this match", now_ns, out)
            return
        race = match.rules.race
        key = race.key(match.state_at(act.seq), action) if race is not None and match.order == "fair" else None
        if key is not None:  # it races others for the same thing: the scheduler holds it until due
            self.fair.submit(self._table(match), seat, act, action, key, now_ns)
            self._release(match, now_ns, out)
            self._wake_up(match)
            return
        self.judge(match, seat, client, act, action, now_ns, out)

    # ------------------------------------------------------------------ fair order

    def _table(self, match: Match) -> Table:
        race = match.rules.race
        assert race is not None  # only a game with a race rule has plays held

        def could_race(seat: int, key: Any) -> bool:
            return race.could_race(match.state, seat, key)

        return Table(match.code, match.clients, could_race, match.seed)

    def _release(self, match: Match, now_ns: int, out: list[Out]) -> None:
        """Judge the held plays that are due, in the scheduler's order, until none is."""
        if not self.fair.holding(match.code):
            return
        table = self._table(match)
        while batch := self.fair.next_batch(table, now_ns):
            for r in batch:
                h = r.play
                self.judge(match, h.seat, h.client, h.act, h.action, now_ns, out, hold_ns=r.hold_ns, note=r.note)

    def _probe(self, now_ns: int, out: list[Out]) -> None:
        """Probe every player of a running fair match: their replies measure their round trips."""
        for code in self._fair_live:
            match = self._live[code]
            if match.status in ("playing", "between"):
                for s in match.players:
                    out.append(Publish(self.topics.client(s.client), m.Probe(sent_ns=now_ns)))

    def judge(self, match: Match, seat: int, client: str, act: m.Act, action: Any, now_ns: int, out: list[Out],
              hold_ns: int = 0, note: dict[str, Any] | None = None) -> bool:
        """Apply one action against the state as it is now; answer it; publish what follows."""
        if match.status != "playing":
            self._reject(client, match.code, act, "not_running", f"the match is {match.status}", now_ns, out)
            return False
        assert match.chance is not None  # set when a game starts
        action = match.rules.complete(match.state, seat, action, match.chance)
        result = match.rules.apply(match.state, seat, action)
        if isinstance(result, Rejected):
            code, detail = result.code, result.detail
            then = match.state_at(act.seq)
            if then is not None and then is not match.state and code != "malformed":
                earlier = match.rules.apply(then, seat, action)
                if isinstance(earlier, Accepted):
                    code = match.rules.stale_code
                    detail = f"the state changed after the one you saw (seq {act.seq}): {result.detail}"
            self._reject(client, match.code, act, code, detail, now_ns, out, hold_ns=hold_ns, note=note)
            return False
        extra = {"client": client, "id": act.id, "reaction_ns": act.reaction_ns, "hold_ns": hold_ns}
        if note:
            extra.update(note)
        self._commit(match, result, now_ns, out, extra=extra)
        self.stats["accepted"] += 1
        # (an accepted action's sender was checked before it was judged: by ``_on_act``, or on its way to fair order's hold)
        self._answer(client, match.code, act.id, m.ActionAccepted(match.code, act.id, match.seq, hold_ns), now_ns, out,
                     log=False, client_ok=True)
        self._after_change(match, now_ns, out)
        return True

    def _commit(self, match: Match, result: Accepted[Any], now_ns: int, out: list[Out], extra: dict[str, Any]) -> None:
        before, match.state = match.state, result.state
        first = match.seq + 1
        start = len(out)
        if result.events:
            names = match.names  # a tuple built per call: once for all the change's events
            for ev in result.events:
                self._event(match, now_ns, out, ev, names)
        rules = match.rules
        if rules.private_delta is not None and rules.sends_less and not self.replaying:
            # Send less: the events say what changed in public; each player is told privately only
            # what they cannot learn from them (the cards drawn into their own hand).
            # They go out *before* the events: a client holds one until its seq, so the view it shows
            # after a change's last event already has the cards drawn in it.
            game = max(match.game_index, 0)
            private: list[Out] = []
            for seat, s in enumerate(match.players):
                delta = rules.private_delta(before, match.state, seat)
                if delta is not None:
                    private.append(Publish(self.topics.client(s.client), m.PrivateUpdate(match.code, match.seq, game, delta)))
            out[start:start] = private
        match.remember(now_ns)
        out.append(LogRecord({"kind": "applied", "match": match.code, "game": match.game_index,
                              "seq": [first, match.seq], "ts": now_ns, **extra}))

    def _reject(self, client: str, code: str, act: m.Act, reason: str, detail: str, now_ns: int, out: list[Out],
                hold_ns: int = 0, note: dict[str, Any] | None = None) -> None:
        detail = detail[:DETAIL_CHARS]  # it may quote what the player sent
        match = self.matches.get(code)
        seq = match.seq if match else 0
        rej = self.stats["rejected"]
        rej[reason] = rej.get(reason, 0) + 1
        self._answer(client, code, act.id, m.ActionRejected(code, act.id, reason, detail, seq), now_ns, out, log=False)
        out.append(LogRecord({"kind": "rejected", "match": code, "client": client, "id": act.id, "code": reason,
                              "detail": detail, "ts": now_ns, "reaction_ns": act.reaction_ns, "hold_ns": hold_ns,
                              **(note or {})}))

    def _answer(self, client: str, code: str, action_id: int, answer: Any, now_ns: int, out: list[Out],
                log: bool = True, client_ok: bool = False) -> None:
        """Answer an action to its sender (``client_ok``: its id has been checked already)."""
        if isinstance(answer, m.ActionRejected) and len(answer.detail) > DETAIL_CHARS:  # e.g. a decode error
            answer = dataclasses.replace(answer, detail=answer.detail[:DETAIL_CHARS])
        if client_ok or valid_id(client):
            out.append(Publish(self.topics.client(client), answer))
            if action_id >= 0:
                book = self._answers.get(client)  # (not setdefault: it would build a map per answer)
                if book is None:
                    book = self._answers[client] = {}
                if (type(answer) is m.ActionAccepted and answer.match == code and answer.id == action_id
                        and 0 <= answer.seq < 1 << ACCEPTED_SEQ_BITS and answer.hold_ns >= 0):
                    book[(code, action_id)] = answer.hold_ns << ACCEPTED_SEQ_BITS | answer.seq
                else:
                    book[(code, action_id)] = answer
                while len(book) > REMEMBERED_ANSWERS:
                    del book[next(iter(book))]  # the oldest (an older core's OrderedDict too)
        if log:
            out.append(self._bad(now_ns, getattr(answer, "code", "answer"), client=client, match=code,
                                 detail=getattr(answer, "detail", "")))

    # ------------------------------------------------------------------ publishing

    def _event(self, match: Match, now_ns: int, out: list[Out], data: dict[str, Any],
               names: tuple[str, ...] | None = None) -> None:
        """Publish one public event (``data``: the engine's map with its ``type``; left as it is)."""
        code = match.code
        seq = match.seq = match.seq + 1
        self.fair.note_published(code, seq, now_ns, every=match.order == "fair")
        # ``with_names`` builds a new map (its keys in ``data``'s order but the type, the seats added
        # after them), so the engine's own event is never changed.
        etype = str(data["type"])
        public = with_names(data, match.names if names is None else names, drop="type")
        game = match.game_index if match.game_index > 0 else 0
        ev = m.Event(match=code, seq=seq, ts=now_ns + self._wall_offset, game=game, type=etype, data=public)
        out.append(Publish(self.topics.ev(code), ev))
        past = self._past.get(code)
        if past is None:
            past = self._past[code] = (deque(maxlen=PAST_EVENTS), {})
        if etype == "rematch_started":  # a new match under the same code: it begins here
            past[0].clear()
        # Packed: a match keeps its whole past for late spectators, and a packed map is a third of
        # a dict's memory (and of the snapshot's objects to pickle and load); the whole event in one
        # bytes object is 120 bytes where a tuple of its fields was 210 (a relay of 1,000 matches
        # at human pace keeps about 60 a match after 20 s, and up to ``PAST_EVENTS``).
        past[0].append(pack_plain([seq, ev.ts, game, etype, public]))
        out.append(LogRecord({"kind": "event", "match": code, "seq": seq, "ts": now_ns,  # made wall later
                              "game": game, "type": etype, **public}))

    def _send_views(self, match: Match, out: list[Out], only: str | None = None) -> None:
        if match.state is None or self.replaying:
            return
        for seat, s in enumerate(match.players):
            if only is not None and s.client != only:
                continue
            state = match.rules.to_wire(match.rules.view(match.state, seat))
            out.append(Publish(self.topics.client(s.client), m.ViewUpdated(
                match=match.code, seq=match.seq, game=max(match.game_index, 0), state=state,
                match_state=match.match_state())))

    def _snapshot_soon(self, match: Match, now_ns: int, out: list[Out], now: bool = False) -> None:
        """Coalesce the retained snapshot: publish it now at a game boundary (``now``); otherwise once,
        ``snapshot_interval_s`` after the first change since the last one (from ``tick``, by the
        heap) -- however many plays fall in between, and never in the play's own ``handle``."""
        if now or match.snapshot_at is None:
            self._publish_snapshot(match, now_ns, out)
        elif match.snapshot_due is None:
            match.snapshot_due = now_ns + int(self.config.snapshot_interval_s * NS)

    def _publish_snapshot(self, match: Match, now_ns: int, out: list[Out]) -> None:
        match.snapshot_at, match.snapshot_due = now_ns, None
        if not self.replaying:
            out.append(self._snapshot_of(match, now_ns + self._wall_offset))

    def _snapshot_of(self, match: Match, wall_ns: int) -> Publish:
        state = match.rules.to_wire(match.rules.view(match.state, None)) if match.state is not None else {}
        return Publish(self.topics.snap(match.code), m.Snapshot(
            match=match.code, seq=match.seq, ts=wall_ns, game=max(match.game_index, 0), status=match.status,
            players=match.names, state=state, match_state=match.match_state(), game_name=match.game), retain=True)

    def _match_list(self) -> Publish:
        waiting = tuple(
            {"code": x.code, "game": x.game, "seats": x.seats, "players": list(x.names), "quick": x.quick}
            for x in islice(self._waiting.values(), self.config.max_listed)
        )
        # Several shards: one retained list each (relays must not overwrite each other's); clients merge.
        topic = self.topics.match_list if self.config.shards_total < 1 else f"{self.topics.match_list}/{self.topics.shard}"
        return Publish(topic, m.MatchList(waiting), retain=True)

    def _bad(self, now_ns: int, code: str, **fields: Any) -> LogRecord:
        return LogRecord({"kind": "bad_input", "code": code, "ts": now_ns, **fields})


def _grace(value: Any) -> float | None:
    """The ``grace_s`` match setting, checked: None (absent) is the default 30 s; None back if bad."""
    if value is None:
        return 30.0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= MAX_GRACE_S:
        return None
    return float(value)


def _clean_name(name: str) -> str:
    return "".join(c for c in name if c.isprintable() and c not in "/+#")[:24].strip()
