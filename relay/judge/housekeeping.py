"""Housekeeping and timers: what ``tick`` does -- due deadlines, expiries, finished matches, idle clients.

How this works
--------------
``tick`` visits only what is due: housekeeping's heap first (a waiting match older than
``waiting_ttl_s`` expires with a ``match_expired`` event; a finished match leaves memory ``linger_s``
after its end; a dropped seat whose grace ran out forfeits its match), then clients not heard from
for ``client_idle_s`` (or the least recent beyond ``max_clients``) lose everything the judge keeps
for them unless seated in a match still open, then fair order's probes, then the live matches whose
wake-up deadline came: held plays released, timers fired, the next game started, a coalesced
snapshot published. At most ``HOUSEKEEPING_PER_TICK`` of each per call; the rest the next.
"""

from __future__ import annotations

from protocol.match import MatchExpired
from relay.judge.answers import Answers
from relay.judge.deadlines import Deadlines
from relay.judge.events import Events
from relay.judge.gate import Gate
from relay.judge.lobby import Lobby
from relay.judge.referee import Referee
from relay.judge.tables import HOUSEKEEPING_PER_TICK, Tables
from relay.model import LogRecord, Out


class Housekeeping:
    def __init__(self, t: Tables, events: Events, gate: Gate, deadlines: Deadlines, answers: Answers,
                 referee: Referee, lobby: Lobby) -> None:
        self.t = t
        self.events = events
        self.gate = gate
        self.deadlines = deadlines
        self.answers = answers
        self.referee = referee
        self.lobby = lobby

    def tick(self, now_ns: int, out: list[Out]) -> None:
        """Do what is due by ``now_ns`` (monotonic). Only the matches whose deadline has come are
        visited: they come off a heap, never from a scan of all matches."""
        try:
            self.housekeep(now_ns, out)
        except Exception as exc:  # noqa: BLE001
            out.append(self.events.bad(now_ns, "internal_error", detail=f"housekeeping: {type(exc).__name__}: {exc}"))
        if self.t.fair_live and self.t.fair.probe_due(now_ns):
            self.referee.probe(now_ns, out)
        seen: set[str] = set()
        for at, code, _ in self.deadlines.wake.due(now_ns, HOUSEKEEPING_PER_TICK):
            match = self.t.live.get(code)
            if match is None or match.wake_at != at or code in seen:
                continue  # moot: over, closed, or its deadline moved (a later entry stands for it)
            seen.add(code)
            match.wake_at = None
            try:
                self.referee.release(match, now_ns, out)
                self.referee.fire_timers(match, now_ns, out)
                if match.next_game_at is not None and now_ns >= match.next_game_at:
                    match.next_game_at = None
                    self.referee.start_game(match, now_ns, out)
                if match.snapshot_due is not None and now_ns >= match.snapshot_due:
                    self.events.publish_snapshot(match, now_ns, out)
            except Exception as exc:  # noqa: BLE001
                out.append(self.events.bad(now_ns, "internal_error", match=match.code, detail=f"{type(exc).__name__}: {exc}"))
            self.deadlines.wake_up(match)

    def housekeep(self, now_ns: int, out: list[Out]) -> None:
        """Expire waiting matches, forget finished ones, drop idle clients -- what is due, no more."""
        for at, code, _ in self.deadlines.housekeeping.due(now_ns, HOUSEKEEPING_PER_TICK):
            match = self.t.matches.get(code)
            if match is None or match.housekeep_at != at:
                continue  # moot: closed, started, rematched, or a later deadline replaced it
            if match.status == "waiting":
                # The event goes to whoever waits in it (and into the log); then it closes like an empty one.
                self.events.event(match, now_ns, out, MatchExpired(after_s=self.t.config.waiting_ttl_s))
                self.lobby.close(match, out)
                out.append(self.events.match_list())
            elif match.status == "over":
                out.append(LogRecord({"kind": "match_forgotten", "match": code, "ts": now_ns}))
                self.lobby.close(match, out)
            elif match.status in ("playing", "between"):
                self.lobby.grace_over(match, now_ns, out)
        self.deadlines.compact_housekeeping()
        clients = self.gate.clients
        idle = clients.idle(now_ns, HOUSEKEEPING_PER_TICK)
        for client in idle:
            self.forget_client(client, now_ns)
        over = len(clients) - self.t.config.max_clients
        for _ in range(min(max(0, over), HOUSEKEEPING_PER_TICK)):
            client = next(iter(clients.seen))
            del clients.seen[client]
            self.forget_client(client, now_ns)
        if idle and not clients.seen:
            self.release_empty_tables()

    def release_empty_tables(self) -> None:
        """A dict keeps the table it grew to after its entries are gone: once a flood (or a busy
        hour) has passed and one is empty again, give it a fresh, small one."""
        owners: tuple[tuple[object, tuple[str, ...]], ...] = (
            (self.t, ("matches", "client_match", "waiting", "live")), (self.answers, ("book",)),
            (self.gate, ("act_buckets", "req_buckets", "owned")), (self.events, ("past",)),
            (self.t.fair, ("published", "rtt", "held", "coins")),
            (self.gate.quiet, ("last",)), (self.gate.clients, ("seen",)))
        for owner, names in owners:
            for name in names:
                table = getattr(owner, name)
                if not table:
                    setattr(owner, name, type(table)())

    def forget_client(self, client: str, now_ns: int) -> None:
        """Drop what the core keeps for a client gone quiet -- unless it sits in a match still open
        (a slow turn, a long think): then it counts as seen now."""
        code = self.t.client_match.get(client)
        match = self.t.matches.get(code) if code is not None else None
        if match is not None and match.status != "over" and match.seat_of(client) is not None:
            self.gate.clients.touch(client, now_ns)
            return
        self.t.client_match.pop(client, None)
        self.answers.forget(client)
        self.gate.act_buckets.pop(client, None)
        self.gate.req_buckets.pop(client, None)
        self.gate.quiet.forget(client)
        self.t.fair.forget(client)
