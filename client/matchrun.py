"""Whole matches between bots, on the broker of a running relay.

How this works
--------------
``run_match`` connects one ``Player`` per bot (the first creates the match, the others join
it by its code), plus a silent spectator that subscribes to the match's events as soon as its code
is known and asks the relay for those published before (``Resync(from_seq=1)``: the relay keeps a
match's recent public events), so the log it writes starts at seq 1 and has no gaps. Events are QoS 0 and a
relay may die between journalling a step and publishing it (another relay then takes its shard
over): the spectator keeps each seq once and, on a gap or after a reconnect, asks the relay for the
missing ones (``Resync(from_seq)``: the relay's recent public events, to the spectator's private
topic). When the relay announces ``match_over`` the bots stop, the log's gaps (if any) are filled
the same way, and the summary is built from the events and the bots' verdicts.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from protocol import messages as m
from protocol.match import MATCH_EVENTS, GameResult, MatchOver
from protocol.rules import game_for
from protocol.topics import Topics
from mqttkit import BrokerAddress
from client.bots import Bot
from client.model import Reconnected
from client.net import Connection, Impairment, new_client_id
from client.player import Player
from client import ClientError


RESYNC_EVERY_S = 1.1  # the relay re-sends a match's past events to one client at most once a second
GAP_FILL_S = 30.0  # after the match: how long to keep asking for events the log lacks
RESYNC_MAX_S = 10.0  # the longest wait for an asked-for gap before asking again
QUIET_S = 3.0  # no doubt for this long: ask for what may have followed the newest event anyway


class MatchTimeout(ClientError):
    """The match did not end within the time given: the bots were slow, not the network."""


@dataclass
class MatchResult:
    code: str
    game: str
    players: list[str]
    events: list[m.Event]
    accepted: int
    rejected: dict[str, int]
    duration_s: float
    bots: list[Bot] = field(default_factory=list)

    def summary(self) -> dict[str, object]:
        """The match as ``blink match`` prints it (JSON): who won, each game's result, the counts."""
        games: list[dict[str, object]] = []
        final: MatchOver | None = None
        for ev in self.events:
            match MATCH_EVENTS.read(ev):
                case GameResult() as result:
                    entry: dict[str, object] = {"game": ev.game_index, "winner": self.name(result.winner),
                                                "winners": [self.name(w) for w in result.winners],
                                                "reason": result.reason}
                    if result.scores:
                        entry["scores"] = dict(zip(self.players, result.scores))
                    if "line" in result.extra:  # Sequence: the winning line, as [row, col] cells
                        entry["line"] = result.extra["line"]
                    games.append(entry)
                case MatchOver() as over:
                    final = over
        own = game_for(self.game).summarise_games
        if own is not None:  # a game with games of its own inside one relay game (Roll Your Own)
            games = own(self.events, self.players, games)
        out: dict[str, object] = {
            "game": self.game,
            "match": self.code,
            "players": self.players,
            "winner": self.name(final.winner) if final is not None else None,
            "winners": [self.name(w) for w in final.winners] if final is not None else [],
            "match_result": final.reason if final is not None else None,
            "wins": dict(zip(self.players, final.wins if final is not None else ())),
            "games": games,
            "accepted": self.accepted,
            "rejected": dict(sorted(self.rejected.items())),
            "events": len(self.events),
            "duration_s": round(self.duration_s, 3),
        }
        if games and "scores" in games[-1]:
            out["scores"] = games[-1]["scores"]
        for key in ("line", "rounds_won", "games_won"):
            if games and key in games[-1]:
                out[key] = games[-1][key]
        return out


    def name(self, seat: int | None) -> object:
        """A seat as the events name it: the player's name (a seat it does not know stays a seat)."""
        return self.players[seat] if seat is not None and 0 <= seat < len(self.players) else seat


def event_line(ev: m.Event) -> dict[str, object]:
    # The envelope's fields come last: an event's data can never overwrite seq, ts, type or game.
    return {**ev.data, "seq": ev.seq, "ts": ev.ts, "type": ev.type, "game": ev.game_index, "match": ev.match}


def write_log(path: str | Path, events: list[m.Event]) -> None:
    # No folder is created: the command line checked that it exists (client/cli/args.out_file).
    with open(Path(path), "w", encoding="utf-8") as f:
        for ev in events:
            f.write(json.dumps(event_line(ev)) + "\n")


async def run_match(address: BrokerAddress, game: str = "blink", bots: int = 2, settings: dict[str, object] | None = None,
                    seed: int | None = None, reaction_s: float = 0.35, timeout_s: float = 900.0,
                    topics: Topics | None = None, impairments: list[Impairment] | None = None,
                    names: list[str] | None = None) -> MatchResult:
    topics = topics or Topics()
    events: list[m.Event] = []
    seen: set[tuple[str, int]] = set()
    over = asyncio.Event()
    ended = asyncio.Event()  # match_over of our match heard (set by the handler: no scanning)
    doubt = asyncio.Event()  # a gap or a reconnect: ask for the missing events
    code = ""

    def on_spectated(msg: object, now: int) -> None:
        if isinstance(msg, m.Event):
            if (msg.match, msg.seq) not in seen:
                seen.add((msg.match, msg.seq))
                events.append(msg)
                if msg.match == code and isinstance(MATCH_EVENTS.read(msg), MatchOver):
                    ended.set()
                if msg.match == code and missing_from(code) is not None:
                    doubt.set()
        elif isinstance(msg, Reconnected):
            doubt.set()

    def missing_from(match: str) -> int | None:
        """The first seq of ``match`` not heard (below the newest heard), or None."""
        have = sorted(seq for (c, seq) in seen if c == match)
        for want, got in enumerate(have, start=1):
            if got != want:
                return want
        return None

    async def heal(until: asyncio.Event) -> None:
        """Ask for missed events when in doubt (a gap, a reconnect) or when the match has been quiet
        for a while (its last events may be what was lost); the relay re-sends at most once a second."""
        while not until.is_set():
            try:
                await asyncio.wait_for(doubt.wait(), QUIET_S)
            except asyncio.TimeoutError:
                pass
            doubt.clear()
            if not code:
                continue
            first = missing_from(code)
            newest = max((seq for (c, seq) in seen if c == code), default=0)
            await spectator.request(m.Resync(code, from_seq=first or newest + 1))
            # The relay answers with every event from there on: give it time before asking again
            # (asking faster than it can send would only pile up copies on a busy broker).
            wait = RESYNC_EVERY_S
            while not until.is_set() and first is not None and missing_from(code) == first and wait < RESYNC_MAX_S:
                await asyncio.sleep(wait)
                wait *= 2
            if missing_from(code) is not None:
                doubt.set()

    spectator = Connection(address, new_client_id("log"), topics, on_spectated, ping_interval_s=0)
    players: list[Player] = []
    started = time.monotonic()
    async with spectator:
        try:
            for i in range(bots):
                imp = impairments[i] if impairments and i < len(impairments) else None
                name = names[i] if names and i < len(names) else f"bot{i + 1}"
                p = Player(address, name, topics, imp)
                await p.__aenter__()
                players.append(p)
            code = await players[0].create(game, settings or {}, seats=bots)
            # This match only (a spectator following every match made a test of 60 concurrent matches
            # deliver each event 60 times over: the broker dropped QoS 0 events and the test process
            # fell behind); subscribed first, then its first events asked for from the relay's past.
            await spectator.watch(code)
            await spectator.request(m.Resync(code, from_seq=1))
            for p in players[1:]:
                await p.join(code)
            robots = [Bot(p, reaction_s=reaction_s, seed=None if seed is None else seed * 100 + i)
                      for i, p in enumerate(players)]
            tasks = [asyncio.create_task(b.run()) for b in robots]

            async def watch_end() -> None:
                # match_over may have come before the code was known (it cannot, but be exact)
                if any(e.match == code and isinstance(MATCH_EVENTS.read(e), MatchOver) for e in events):
                    ended.set()
                await ended.wait()
                over.set()

            watcher = asyncio.create_task(watch_end())
            healer = asyncio.create_task(heal(over))
            try:
                await asyncio.wait_for(over.wait(), timeout=timeout_s)
            except asyncio.TimeoutError as exc:
                raise MatchTimeout(f"the match did not finish within {timeout_s:g} s") from exc
            finally:
                watcher.cancel()
                healer.cancel()
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
            duration = time.monotonic() - started
            await asyncio.sleep(0.05)  # the last views and verdicts
            # Whatever the log still lacks (events lost with a relay that died), from the relay's past.
            deadline = time.monotonic() + GAP_FILL_S
            wait = RESYNC_EVERY_S
            while missing_from(code) is not None and time.monotonic() < deadline:
                await spectator.request(m.Resync(code, from_seq=missing_from(code) or 1))
                await asyncio.sleep(wait)
                wait = min(RESYNC_MAX_S, wait * 2)
        finally:
            for p in players:
                await p.close()
    mine = sorted((e for e in events if e.match == code), key=lambda e: e.seq)
    accepted = 0
    rejected: Counter[str] = Counter()
    for p in players:
        for v in p.model.verdicts:
            if v.ok:
                accepted += 1
            else:
                rejected[v.code] += 1
    names_out = list(players[0].model.players) if players else []
    return MatchResult(code, game, names_out, mine, accepted, dict(rejected), duration, robots)
