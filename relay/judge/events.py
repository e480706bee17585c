"""Events and snapshots: every public event gets its match's next ``seq``; views, the coalesced snapshot, the match list.

How this works
--------------
``event`` stamps an engine's event with the match's next ``seq`` (gap-free) and the wall clock,
publishes it to ``.../ev``, logs it, and keeps it packed (one bytes object) for a late spectator's
``Resync(from_seq)``: the code's last ``PAST_EVENTS`` (its rematches' too, so the match can be written
whole into another relay's log after a takeover, ``relay/storage/eventlog.py``), resent
at most once a second per client and match. Whole views (``ViewUpdated``) go out only when asked
(a game's boundaries, joining, a resync, a game without an event applier). The retained public
snapshot is coalesced: ``snapshot_soon`` publishes it at once at a game boundary, otherwise owes
it ``snapshot_interval_s`` after the first change (the deadlines heap calls back). While a journal
is replayed, the messages that are only outputs are not built.
"""

from __future__ import annotations

from collections import deque
from itertools import islice
from typing import Mapping, TypedDict, cast

from protocol import messages as m
from protocol.codec import pack_plain, unpack_plain
from protocol.events import TypedEvent, public_data
from relay.judge.tables import NS, Tables
from relay.model import LogRecord, Match, Out, Publish

PAST_EVENTS = 4096  # per match: public events kept for a late spectator's Resync(from_seq)
#: A kept event, as ``event`` packs it: seq, wall time, game index, wire name, public map.
PastEvent = tuple[int, int, int, str, dict[str, object]]


class EventsRecord(TypedDict):
    """The kept past events in a relay snapshot: per match, the bound on them, the packed events
    (each ``pack_plain`` of a ``PastEvent``) and when each client last had them re-sent."""

    past: dict[str, tuple[int | None, list[bytes], dict[str, int]]]


def past_event(code: str, kept: bytes) -> m.Event:
    """A kept public event (``pack_plain([seq, ts, game, type, data])``) as the ``Event`` first published."""
    seq, ts, game, etype, data = cast(PastEvent, unpack_plain(kept))
    return m.Event(match=code, seq=seq, ts=ts, game_index=game, type=etype, data=data)


class Events:
    def __init__(self, t: Tables) -> None:
        self.t = t
        # Per match: its last public events, and when each client last had them re-sent. An event
        # is kept packed, not as the published ``Event`` (a third of the memory; its ``Event`` is
        # rebuilt, equal, for a resend).
        self.past: dict[str, tuple[deque[bytes], dict[str, int]]] = {}

    def to_record(self) -> EventsRecord:
        """The kept past events as plain data (a relay snapshot's): each is packed already."""
        return {"past": {code: (q.maxlen, list(q), sent) for code, (q, sent) in self.past.items()}}

    def load_record(self, snapshot: Mapping[str, object]) -> None:
        """Take what ``to_record`` wrote (the snapshot holds it as written)."""
        record = cast(EventsRecord, snapshot)
        self.past = {code: (deque(q, maxlen=n), dict(sent)) for code, (n, q, sent) in record["past"].items()}

    def event(self, match: Match, now_ns: int, out: list[Out], ev: TypedEvent,
               names: tuple[str, ...] | None = None) -> None:
        """Publish one public event (an engine's, or the match's own) in its public form."""
        code = match.code
        seq = match.seq = match.seq + 1
        self.t.fair.note_published(code, seq, now_ns, every=match.order == "fair")
        etype = ev.TYPE
        public = public_data(ev, match.names if names is None else names)
        game = match.game_index if match.game_index > 0 else 0
        wall = now_ns + self.t.wall_offset
        out.append(Publish(self.t.topics.ev(code), m.Event(match=code, seq=seq, ts=wall, game_index=game, type=etype,
                                                           data=public)))
        past = self.past.get(code)
        if past is None:
            past = self.past[code] = (deque(maxlen=PAST_EVENTS), {})
        # Packed: a match keeps its whole past for late spectators, and a packed map is a third of
        # a dict's memory (and of the snapshot's objects to pickle and load); the whole event in one
        # bytes object is 120 bytes where a tuple of its fields was 210 (a relay of 1,000 matches
        # at human pace keeps about 60 a match after 20 s, and up to ``PAST_EVENTS``).
        past[0].append(pack_plain([seq, wall, game, etype, public]))
        out.append(LogRecord({"kind": "event", "match": code, "seq": seq, "ts": now_ns,  # made wall later
                              "game": game, "type": etype, **public}))

    def send_views(self, match: Match, out: list[Out], only: str | None = None) -> None:
        if match.state is None or self.t.replaying:
            return
        for seat, s in enumerate(match.players):
            if only is not None and s.client != only:
                continue
            state = match.rules.to_wire(match.rules.view(match.state, seat))
            out.append(Publish(self.t.topics.client(s.client), m.ViewUpdated(
                match=match.code, seq=match.seq, game_index=max(match.game_index, 0), state=state,
                match_state=match.match_state())))

    def snapshot_soon(self, match: Match, now_ns: int, out: list[Out], now: bool = False) -> None:
        """Coalesce the retained snapshot: publish it now at a game boundary (``now``); otherwise once,
        ``snapshot_interval_s`` after the first change since the last one (from ``tick``, by the
        heap) -- however many plays fall in between, and never in the play's own ``handle``."""
        if now or match.snapshot_at is None:
            self.publish_snapshot(match, now_ns, out)
        elif match.snapshot_due is None:
            match.snapshot_due = now_ns + int(self.t.config.snapshot_interval_s * NS)

    def publish_snapshot(self, match: Match, now_ns: int, out: list[Out]) -> None:
        match.snapshot_at, match.snapshot_due = now_ns, None
        if not self.t.replaying:
            out.append(self.snapshot_of(match, now_ns + self.t.wall_offset))

    def snapshot_of(self, match: Match, wall_ns: int) -> Publish:
        state = match.rules.to_wire(match.rules.view(match.state, None)) if match.state is not None else {}
        return Publish(self.t.topics.snap(match.code), m.Snapshot(
            match=match.code, seq=match.seq, ts=wall_ns, game_index=max(match.game_index, 0), status=match.status,
            players=match.names, state=state, match_state=match.match_state(), game=match.game,
            seats=match.seat_figures(), since=self.created(match.code)), retain=True)

    def created(self, code: str) -> int:
        """When match ``code`` was created (relay wall ns): its first event's time, while it is kept
        (a match's first ``PAST_EVENTS``); 0 once it is not."""
        kept = self.past.get(code)
        if kept is None or not kept[0]:
            return 0
        first = past_event(code, kept[0][0])
        return first.ts if first.seq == 1 else 0

    def match_list(self) -> Publish:
        waiting = tuple(
            {"code": x.code, "game": x.game, "seats": x.seats, "players": list(x.names), "quick": x.quick}
            for x in islice(self.t.waiting.values(), self.t.config.max_listed)
        )
        # Several shards: one retained list each (relays must not overwrite each other's); clients merge.
        topic = self.t.topics.match_list if self.t.config.shards_total < 1 else f"{self.t.topics.match_list}/{self.t.topics.shard}"
        return Publish(topic, m.MatchList(waiting), retain=True)

    def bad(self, now_ns: int, code: str, **fields: object) -> LogRecord:
        return LogRecord({"kind": "bad_input", "code": code, "ts": now_ns, **fields})

    def resend_past(self, code: str, client: str, from_seq: int, now_ns: int, out: list[Out]) -> None:
        past, last_sent = self.past.get(code, (deque(), {}))
        if now_ns - last_sent.get(client, now_ns - NS) < NS:
            return  # a second ago already: a client cannot make the relay repeat a match in a loop
        last_sent[client] = now_ns
        topic = self.t.topics.client(client)
        # The kept events' seqs run on without a gap (every public event is kept): those before
        # ``from_seq`` are skipped unread (all are read if that ever failed).
        skip = max(0, from_seq - past_event(code, past[0]).seq) if past else 0
        if skip and (skip >= len(past) or past_event(code, past[skip]).seq != from_seq):
            skip = 0
        for kept in islice(past, skip, None):
            ev = past_event(code, kept)
            if ev.seq >= from_seq:
                out.append(Publish(topic, ev))
