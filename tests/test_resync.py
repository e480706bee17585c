"""A restarted relay answers requests while it is still republishing every match for its
clients to resync, and every player of every match is still resynced (relay/publishing.py's Republisher).

The relay recovers a journal of 300 live BLINK matches (written here by the pure core) and runs
against a real Mosquitto started by the test. One client, logged in as the relay's user, reads
everything the relay sends to players' private topics and every match's snapshot topic, in the
order the relay sent it; another pings the relay every 10 ms from before it starts, and again
each time one of the first snapshots arrives (the resync is under way then). The relay sends one
match per chunk here, so its resync waits for about 150 acknowledgements by the broker: without
requests served between chunks, every answer would come after the last snapshot (as it did)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import aiomqtt

from mqttkit import BrokerAddress
from protocol import messages as m
from protocol.codec import decode_all, encode
from client import new_client_id
from relay.storage import snapshot
from relay.core import RelayCore
from relay.storage import open_journal
from relay.hosting import LocalServer
from relay.core import Publish
from relay.storage import Msg, Tick
from tests.test_snapshot import T, Driver, outputs

MATCHES = 300


def played(matches: int, turns: int) -> Driver:
    d = Driver(matches)
    for _ in range(turns):  # past the countdown, into the races (stale plays included)
        for e in d.turn():
            d.send(e)
    return d


def step(core: RelayCore, entry: Msg | Tick) -> list[Any]:
    """One journal entry into ``core`` (as recovery feeds it), its outputs."""
    if isinstance(entry, Msg):
        return core.handle(entry.topic, entry.payload, entry.now_ns, entry.wall_ns)
    return core.tick(entry.now_ns, entry.wall_ns)


def test_a_replay_that_builds_no_outputs_leaves_the_core_as_a_live_run_does() -> None:
    """``RelayCore.replaying`` skips the messages that are only outputs: the replayed core is the
    live one all the same (it carries on with the very same outputs), and the log records that
    recovery completes the event log with are the same."""
    d = played(12, 90)
    live_records = []
    quiet = RelayCore(T, seed=11)
    quiet.replaying = True
    kinds: set[str] = set()
    for e in d.inputs:
        out = step(quiet, e)
        kinds |= {type(o.msg).__name__ for o in out if isinstance(o, Publish)}
    del quiet.replaying
    assert not kinds & {"ViewUpdated", "Snapshot", "PrivateUpdate"}  # none of them was built
    live = RelayCore(T, seed=11)
    for e in d.inputs:
        live_records += [r for r in outputs(step(live, e)) if isinstance(r, dict)]
    replay_records = []
    again = RelayCore(T, seed=11)
    again.replaying = True
    for e in d.inputs:
        replay_records += [r for r in outputs(step(again, e)) if isinstance(r, dict)]
    assert replay_records == live_records
    snaps = {c: (x.snapshot_at, x.snapshot_due, x.wake_at) for c, x in d.core.matches.items()}
    assert {c: (x.snapshot_at, x.snapshot_due, x.wake_at) for c, x in quiet.matches.items()} == snaps
    accepted = quiet.stats["accepted"]
    for _ in range(150):
        for e in d.turn():
            assert outputs(d.send(e)) == outputs(step(quiet, e))
    assert quiet.stats["accepted"] > accepted  # it was judging plays, not refusing them


def test_resync_messages_change_nothing_and_put_views_before_the_snapshot() -> None:
    d = played(6, 90)
    touched = snapshot.load(snapshot.dump(d.core))
    for code, match in touched.matches.items():
        out = touched.resync(code, 5, 7)
        views = [o for o in out[:-1] if isinstance(o, Publish) and isinstance(o.msg, m.ViewUpdated)]
        assert len(views) == len(out) - 1 == len(match.players)
        assert {o.topic for o in views} == {T.client(s.client) for s in match.players}
        assert all(o.msg.seq == match.seq and o.msg.match == code for o in views)
        last = out[-1]
        assert isinstance(last, Publish) and isinstance(last.msg, m.Snapshot) and last.retain
        assert (last.msg.match, last.msg.seq, last.msg.ts) == (code, match.seq, 7)
    assert touched.resync("NOSUCH", 5, 7) == []
    accepted = touched.stats["accepted"]
    for _ in range(100):
        for e in d.turn():
            assert outputs(d.send(e)) == outputs(step(touched, e))
    assert touched.stats["accepted"] > accepted


def write_journal(data: Path) -> None:
    """A journal as a relay would leave it: the fresh core's snapshot at 0, then every input."""
    d = Driver(MATCHES)
    for _ in range(2):  # the countdowns are running (plays before the start are refused)
        for e in d.turn():
            d.send(e)
    journal = open_journal(data)
    try:
        journal.save_snapshot(0, snapshot.dump(RelayCore(T, seed=11)))
        for i in range(0, len(d.inputs), 512):
            journal.append(d.inputs[i:i + 512])
    finally:
        journal.close()


def test_a_restarted_relay_answers_requests_during_its_resync_and_resyncs_every_player(
        mosquitto: BrokerAddress, tmp_path: Path) -> None:
    data = tmp_path / "data"
    write_journal(data)
    seen: list[tuple[str, Any]] = []  # ("pong" | "view" | "snap", message), in the order received
    pinger_id = new_client_id("p")

    async def main() -> tuple[RelayCore, set[str]]:
        async with aiomqtt.Client(mosquitto.host, mosquitto.port, identifier=new_client_id("w"),
                                  username=mosquitto.username, password=mosquitto.password) as watcher, \
                aiomqtt.Client(mosquitto.host, mosquitto.port, identifier=pinger_id) as pinger:
            await watcher.subscribe(T.client("+"), qos=0)
            await watcher.subscribe(T.snap("+"), qos=0)

            async def read() -> None:
                async for msg in watcher.messages:
                    bodies = decode_all(bytes(msg.payload)) if isinstance(msg.payload, (bytes, bytearray)) else []
                    for body in bodies:
                        if isinstance(body, m.Pong) and msg.topic.value == T.client(pinger_id):
                            seen.append(("pong", body))
                        elif isinstance(body, m.ViewUpdated):
                            seen.append(("view", (msg.topic.value, body)))
                        elif isinstance(body, m.Snapshot):
                            seen.append(("snap", body))
                            if len(seen) < 100:
                                await send_ping()

            async def send_ping() -> None:
                await pinger.publish(T.req(pinger_id), encode(m.Ping(t0=time.time_ns())), qos=0)

            async def ping() -> None:
                while True:
                    await send_ping()
                    await asyncio.sleep(0.01)

            tasks = [asyncio.create_task(read()), asyncio.create_task(ping())]
            server = LocalServer(mosquitto.login_url, topics=T, data_dir=data)
            assert server.relay is not None
            server.relay.resync.chunk = 1  # requests are answered between two chunks
            try:
                await server.start()
                relay = server.relay
                assert relay.recovered is not None and f"recovered {MATCHES} match(es)" in relay.recovered
                codes = set(relay.core.matches)
                await asyncio.wait_for(relay.resynced.wait(), 120)
                # What the relay sent is on its way (the core's own coalesced snapshots may come
                # before the resync's: only a snapshot after all its match's views counts).
                deadline = time.monotonic() + 60
                while set(resynced(relay.core)) != codes and time.monotonic() < deadline:
                    await asyncio.sleep(0.05)
                return relay.core, codes
            finally:
                for t in tasks:
                    t.cancel()
                await server.stop()

    def resynced(core: RelayCore) -> dict[str, int]:
        """Match -> where in ``seen`` its resync completed: its snapshot, after a view at the same
        seq for each of its players (the order the relay sends them in)."""
        views: dict[tuple[str, str], list[tuple[int, int]]] = {}  # (match, client topic) -> [(index, seq)]
        done: dict[str, int] = {}
        for i, (kind, body) in enumerate(list(seen)):
            if kind == "view":
                topic, view = body
                views.setdefault((view.match, topic), []).append((i, view.seq))
            elif kind == "snap" and body.match not in done and body.match in core.matches:
                players = [T.client(s.client) for s in core.matches[body.match].players]
                assert len(players) == 2
                if all(any(j < i and seq == body.seq for j, seq in views.get((body.match, p), [])) for p in players):
                    done[body.match] = i
        return done

    core, codes = asyncio.run(asyncio.wait_for(main(), 240))
    assert len(codes) == MATCHES
    # Every match: a view for each of its players, then its snapshot at the same seq, so every
    # client that was in a match has what it needs to carry on.
    resynced_at = resynced(core)
    assert set(resynced_at) == codes, f"{len(codes - set(resynced_at))} match(es) not resynced"
    # ... and the pings were answered while that went on, not after it.
    first, last = min(resynced_at.values()), max(resynced_at.values())
    pongs = [i for i, (kind, _) in enumerate(seen) if kind == "pong"]
    assert any(first < i < last for i in pongs), (first, last, pongs[:20])
