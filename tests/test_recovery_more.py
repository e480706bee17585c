"""More real-process recovery tests: ``kill -9`` of ``blink serve`` during a BLINK
stalemate pick and during a Roll Your Own match, and a Mosquitto restarted mid-match.

Same shape as tests/test_recovery.py (whose helpers these reuse): a real Mosquitto, a real
``blink serve --broker --data --log`` process, in-process players driven by bots (so the test can
read what each was told), and the relay's ``--log`` checked across the restart: gap-free ``seq``,
every play a player heard accepted is in it, and ``blink verify`` passes on it.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from mqttkit import BrokerAddress, free_port, parse_url
from protocol import messages as m
from protocol.topics import Topics
from client import Bot, Connection, Player, new_client_id
from tests.conftest import ROOT
from tests.test_recovery import BLINK, OwnMosquitto, Relay, check_log, read_log, until

pytestmark = pytest.mark.integration("mosquitto")

#: A BLINK deck where cards rarely share a colour, shape or count, one card in hand, fast timers and
#: the longest match: stalemates with an empty draw pile (a pick) come in about a third of games.
PICKY_BLINK: dict[str, Any] = {
    "deck": {"colours": ["red", "blue", "green", "yellow", "white", "black", "pink", "grey"],
             "shapes": ["star", "moon", "sun", "ring", "cross"], "counts": [1, 2, 3, 4, 5, 6]},
    "hand_size": 1, "countdown_s": 0.2, "stalemate_pause_s": 0.2, "pick_time_s": 3.0, "best_of": 9,
}
SHORT_RYO = {"rolls_per_round": 3, "rounds_per_game": 2, "games_per_match": 2}


#: The relay's log records that carry a match's ``seq``: its public events, and the dice rolls (logged
#: as ``roll`` records with every die face, for ``blink verify``).
SEQ_KINDS = ("event", "roll")


def check_seqs(records: list[dict[str, Any]], code: str) -> None:
    seqs = [r["seq"] for r in records if r["kind"] in SEQ_KINDS and r.get("match") == code]
    assert seqs == list(range(1, len(seqs) + 1)), f"seqs not gap-free and unique: {seqs}"


def verify(log: Path) -> None:
    proc = subprocess.run([*BLINK, "verify", str(log)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def kill_and_recover(mosquitto: BrokerAddress, tmp_path: Path, game: str, settings: dict[str, Any],
                     kill_when: Callable[[list[m.Event]], bool], attempts: int = 1) -> None:
    """Bot matches on a relay until ``kill_when`` holds for one (at most ``attempts`` matches: a
    moment that only some matches reach); then ``kill -9``, a restart on the same data directory,
    and that match must finish with nothing lost."""
    log = tmp_path / "relay.jsonl"
    relay = Relay(mosquitto.login_url, tmp_path / "data", log)
    address = parse_url(mosquitto.url)
    topics = Topics()
    relay.start()
    code = ""
    accepted: set[tuple[str, int]] = set()

    async def scenario() -> None:
        nonlocal code, accepted
        events: list[m.Event] = []
        spectator = Connection(address, new_client_id("log"), topics,
                               lambda msg, now: events.append(msg) if isinstance(msg, m.Event) else None,
                               ping_interval_s=0)
        async with spectator:
            await spectator.watch_all()
            for attempt in range(attempts):
                players = [Player(address, f"bot{i + 1}", topics) for i in range(2)]
                tasks: list[asyncio.Task[None]] = []
                try:
                    for p in players:
                        await p.__aenter__()
                    code = await players[0].create(game, settings, seats=2)
                    await players[1].join(code)
                    tasks = [asyncio.create_task(Bot(p, reaction_s=0.02, seed=10 * attempt + i).run())
                             for i, p in enumerate(players)]
                    mine = lambda: [e for e in events if e.match == code]  # noqa: E731
                    over = lambda: any(e.type == "match_over" for e in mine())  # noqa: E731
                    await until(lambda: kill_when(mine()) or over(), 400, "the kill point or the end of the match")
                    if not kill_when(mine()):
                        continue  # this match never got there: another one
                    relay.kill9()
                    seen = max(e.seq for e in mine())
                    heard = {(p.client_id, v.id) for p in players for v in p.model.verdicts if v.ok}
                    relay.start()
                    assert "(1 running)" in relay.lines[-1], relay.lines
                    await until(lambda: all(p.model.predictor is not None and p.model.predictor.confirmed_seq >= seen
                                            for p in players), 30, "views at or after the last seq seen before the kill")
                    await until(over, 180, "the end of the match after the restart")
                    accepted = {(p.client_id, v.id) for p in players for v in p.model.verdicts if v.ok}
                    assert heard <= accepted
                    return
                finally:
                    for t in tasks:
                        t.cancel()
                    await asyncio.gather(*tasks, return_exceptions=True)
                    for p in players:
                        await p.close()
            raise AssertionError(f"no match of {attempts} reached the kill point")

    try:
        asyncio.run(scenario())
    finally:
        relay.stop()
    records = read_log(log)
    check_seqs(records, code)
    # test_recovery's check (gap-free events, every heard play applied, two relay starts), with the
    # roll records counted among the events they interleave with
    check_log([{**r, "kind": "event"} if r["kind"] == "roll" else r for r in records], code, accepted)
    verify(log)


def test_kill_9_during_a_stalemate_pick_and_restart(mosquitto: BrokerAddress, tmp_path: Path) -> None:
    # Killed while the players pick (the pick timer is running): the restarted relay must re-arm it
    # or take the picks, and the match goes on to its end.
    kill_and_recover(mosquitto, tmp_path, "blink", PICKY_BLINK,
                     lambda evs: any(e.type == "pick_started" for e in evs), attempts=6)


def test_kill_9_during_a_roll_your_own_match_and_restart(mosquitto: BrokerAddress, tmp_path: Path) -> None:
    kill_and_recover(mosquitto, tmp_path, "ryo", SHORT_RYO, lambda evs: len(evs) >= 10)


def test_a_match_finishes_when_mosquitto_restarts_mid_match(tmp_path: Path) -> None:
    """The relay and a ``blink match --server`` (two bots) are separate processes on a Mosquitto that
    is stopped mid-match and started again on the same port: everyone reconnects, the match ends."""
    broker_dir = Path(os.environ.get("TMPDIR", "/tmp")) / f"blink-mosq-{os.getpid()}-{free_port()}"
    broker = OwnMosquitto(broker_dir)
    log = tmp_path / "relay.jsonl"
    relay = Relay(broker.login.login_url, tmp_path / "data", log)
    match: subprocess.Popen[str] | None = None

    def events() -> list[dict[str, Any]]:
        if not log.exists():
            return []
        out = []
        for line in log.read_text(encoding="utf-8").splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                break  # a line being written
            if record.get("kind") == "event":
                out.append(record)
        return out

    def wait_for(cond: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not cond():
            assert match is not None
            if match.poll() is not None and not cond():
                raise AssertionError(f"blink match exited ({match.returncode}) before {what}: "
                                     f"{match.communicate()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            time.sleep(0.05)  # polling a file for a condition, not a synchronisation by time

    try:
        broker.start()
        relay.start()
        match = subprocess.Popen([*BLINK, "match", "--server", broker.login.url, "--game", "blink", "--bots", "2",
                                  "--seed", "5", "--reaction", "0.05", "--timeout", "600", "--json"],
                                 cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_for(lambda: sum(e["type"] == "card_played" for e in events()) >= 10, 120, "plays before the restart")
        assert not any(e["type"] == "match_over" for e in events()), "the match ended before the broker restart"
        broker.stop()  # SIGTERM
        broker.start()  # same port and configuration; no sessions, no retained messages
        wait_for(lambda: any(e["type"] == "match_over" for e in events()), 180, "match_over after the restart")
        out, err = match.communicate(timeout=120)
        assert match.returncode == 0, (out, err)
        summary = json.loads(out)
        assert summary, out
        assert relay.proc is not None and relay.proc.poll() is None, "the relay exited instead of reconnecting"
    finally:
        if match is not None and match.poll() is None:
            match.kill()
            match.communicate()
        relay.stop()
        broker.stop()
        shutil.rmtree(broker_dir, ignore_errors=True)
    records = read_log(log)
    codes = {r["match"] for r in records if r["kind"] in SEQ_KINDS}
    assert len(codes) == 1, codes
    code = codes.pop()
    check_seqs(records, code)
    assert any(r["kind"] == "event" and r["type"] == "match_over" for r in records)
    verify(log)
