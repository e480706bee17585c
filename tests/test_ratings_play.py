"""Ratings as people meet them: bots of two difficulties rated over real matches on `blink serve`,
a restart, `blink ratings` in both forms, a stolen name, and a key file that is not one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mqttkit import free_port
from protocol.identity import fingerprint
from client.identity import bot_identity_path, load_identity
from tests.conftest import ROOT, wait_port
from tests.helpers import wait_until

BLINK = [sys.executable, "-m", "client.cli"]
#: Short games: one game a match, short pauses.
FAST = json.dumps({"countdown_s": 0.3, "stalemate_pause_s": 0.2, "pick_time_s": 1.0, "best_of": 1})
QUICK_S, SLOW_S = 0.15, 1.5


class Serve:
    """One `blink serve --embedded --data DIR` process at a time, on one port."""

    def __init__(self, tmp: Path) -> None:
        self.port = free_port()
        self.data = tmp / "data"
        self.out = tmp / "serve.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"mqtt://127.0.0.1:{self.port}"

    def start(self) -> None:
        with open(self.out, "ab") as out:
            self.proc = subprocess.Popen([*BLINK, "serve", "--embedded", "--port", str(self.port), "--data",
                                          str(self.data)], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        wait_port("127.0.0.1", self.port, timeout=60)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


def blink(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*BLINK, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def bots_match(serve: Serve, quick: list[str], slow: list[str]) -> tuple[str, str]:
    """A quick match between a quick bot and a slow one (each a `blink bot` process): their outputs."""
    procs = [subprocess.Popen([*BLINK, "bot", "--server", serve.url, "--settings", FAST, *extra], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for extra in (quick, slow)]
    outs: list[str] = []
    try:
        for p in procs:
            out, _ = p.communicate(timeout=180)
            assert p.returncode == 0, out
            outs.append(out)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return outs[0], outs[1]


def leaderboard(serve: Serve) -> list[dict[str, Any]]:
    done = blink("ratings", "--server", serve.url, "--game", "blink", "--json")
    assert done.returncode == 0, done.stderr
    rows: list[dict[str, Any]] = json.loads(done.stdout)
    return rows


@pytest.mark.integration
def test_five_matches_rate_the_quick_bot_above_the_slow_one_across_a_restart(tmp_path: Path) -> None:
    serve = Serve(tmp_path)
    serve.start()
    try:
        quick = ["--name", "quick", "--reaction", str(QUICK_S)]
        slow = ["--name", "slow", "--reaction", str(SLOW_S)]
        for i in range(5):
            q, s = bots_match(serve, quick, slow)
            assert f"{i + 1} rated match" in q and f"{i + 1} rated match" in s, (q, s)
            if i == 2:  # a restart in the middle: the journal's snapshot and replay carry the ratings on
                serve.stop()
                serve.start()
        serve.stop()
        serve.start()
        rows = leaderboard(serve)
        # each difficulty has its own key in the data directory; the relay knows them by fingerprint
        keys = {fingerprint(load_identity(bot_identity_path(x)).public): x for x in (QUICK_S, SLOW_S)}
        assert [(r["name"], keys.get(r["key"]), r["matches"]) for r in rows] == [
            ("quick", QUICK_S, 5), ("slow", SLOW_S, 5)]
        assert rows[0]["rating"] > rows[1]["rating"]
        assert [r["rank"] for r in rows] == [1, 2] and all(r["game"] == "blink" for r in rows)

        text = blink("ratings", "--server", serve.url)
        assert text.returncode == 0, text.stderr
        lines = text.stdout.splitlines()
        assert lines[0] == "blink: 2 rated players"
        assert lines[1].split() == ["#", "name", "key", "rating", "matches"]
        assert lines[2].split() == ["1", "quick", rows[0]["key"], f"{rows[0]['rating']:.2f}", "5"]
        assert lines[3].split() == ["2", "slow", rows[1]["key"], f"{rows[1]['rating']:.2f}", "5"]

        # a stolen name with another key: seated under the name and its own key's fingerprint, rated apart
        thief_file = tmp_path / "thief.key"
        thief = fingerprint(load_identity(thief_file).public)
        q, _ = bots_match(serve, ["--name", "quick", "--reaction", str(QUICK_S), "--identity", str(thief_file)],
                          slow)
        assert q.startswith(f"quick~{thief[:4]} in match"), q
        after = {r["key"]: r for r in leaderboard(serve)}
        assert after[rows[0]["key"]]["matches"] == 5 and after[rows[0]["key"]]["name"] == "quick"
        assert after[thief]["name"] == f"quick~{thief[:4]}" and after[thief]["matches"] == 1
        assert "Traceback" not in serve.out.read_text()
    finally:
        serve.stop()


@pytest.mark.integration
def test_a_key_file_that_is_not_one_is_one_line_and_status_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.key"
    bad.write_text("not a key\n")
    os.chmod(bad, 0o600)
    done = blink("bot", "--server", "mqtt://127.0.0.1:1", "--identity", str(bad), timeout=60)
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = [x for x in done.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and str(bad) in lines[0] and "Traceback" not in done.stderr, done.stderr
    os.chmod(bad, 0o644)
    done = blink("bot", "--server", "mqtt://127.0.0.1:1", "--identity", str(bad), timeout=60)
    assert done.returncode == 2 and "chmod 600" in done.stderr, done.stderr
    # without --identity, a data directory where no key can be made leaves the player unrated, not stopped
    env = {**os.environ, "XDG_DATA_HOME": str(bad / "not-a-folder")}
    done = subprocess.run([*BLINK, "bot", "--server", "mqtt://127.0.0.1:1"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env=env)
    assert done.returncode == 1 and "blink bot: playing unrated: cannot write the identity" in done.stderr, done.stderr
    assert "cannot reach the MQTT broker" in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_a_players_key_is_made_once_mode_600_and_kept(tmp_path: Path) -> None:
    path = tmp_path / "ids" / "ann.key"
    first = load_identity(path)
    assert (path.stat().st_mode & 0o777) == 0o600 and (path.parent.stat().st_mode & 0o777) == 0o700
    assert load_identity(path).public == first.public


def test_a_shard_taken_over_keeps_its_ratings(mosquitto: Any, tmp_path: Path) -> None:
    """Two rated players quick-match on a relay of two shards; the relay stops and another takes its
    shards over from their journals: the leaderboard it answers is the same."""
    import asyncio

    from protocol import messages as m
    from relay.cluster import ShardedSpace, shards
    from relay.core import RelayConfig
    from relay.hosting import ClusterServer, sqlite_opener
    from relay.ownership import StaticOwnership
    from relay.runtime import Relay, RelaySettings
    from client import Player
    from tests.helpers import eventually

    deadline = 120.0

    def relay(name: str) -> Relay:
        return Relay(mosquitto, RelaySettings(config=RelayConfig(relay_id=name), relay_id=name),
                     ShardedSpace(2, sqlite_opener(tmp_path / "shared", durable=False)), StaticOwnership(["0", "1"]))

    async def serving(r: Relay) -> ClusterServer:
        server = ClusterServer(r)
        await server.start()
        await eventually(lambda: not r._starting and not r._announce, deadline, "the relay serves its shards")
        return server

    async def board(p: Player) -> list[dict[str, object]]:
        got: list[m.RatingBoard] = []
        own = p.conn.on_message

        def tap(msg: object, now_ns: int) -> None:
            if isinstance(msg, m.RatingBoard):
                got.append(msg)
            own(msg, now_ns)

        p.conn.on_message = tap
        try:
            async def asked() -> bool:
                await p.conn.request(m.Ratings(game="blink"))
                await p.wait_change(1.0)
                return bool(got)

            deadline_at = asyncio.get_running_loop().time() + deadline
            while not await asked():
                assert asyncio.get_running_loop().time() < deadline_at, "no leaderboard"
            return [dict(r) for r in got[0].rows]
        finally:
            p.conn.on_message = own

    async def body() -> None:
        ann, bob = load_identity(tmp_path / "ann.key"), load_identity(tmp_path / "bob.key")
        pub = mosquitto.public()
        a = relay("relay-a")
        server = await serving(a)
        async with Player(pub, "ann", identity=ann) as p1:
            async with Player(pub, "bob", identity=bob) as p2:
                code = await p1.quick(timeout=deadline)
                assert await p2.quick(timeout=deadline) == code
                await eventually(lambda: p1.model.state() is not None, deadline, "the game starts", p1.wait_change)
            # bob left a running match: a forfeit, rated as his loss
            await eventually(lambda: p1.model.rating is not None, deadline, "ann's rating change", p1.wait_change)
            assert p1.model.rating is not None and p1.model.rating.after > p1.model.rating.before
            before = await board(p1)
            assert [(r["name"], r["key"], r["matches"]) for r in before] == [
                ("ann", ann.fingerprint, 1), ("bob", bob.fingerprint, 1)]
            shard = shards.shard_of_code(code, 2)
            assert shard == shards.shard_of_quick("blink", {}, 2)  # where the leaderboard is asked
            await server.stop()
            b = relay("relay-b")
            server = await serving(b)
            try:
                assert b.servers[shard].core.leaderboard("blink") == before
                assert await board(p1) == before
            finally:
                await server.stop()

    asyncio.run(asyncio.wait_for(body(), deadline * 2))


@pytest.mark.integration
def test_a_tampered_ratings_record_in_the_journal_is_one_line_and_the_relay_goes_on(tmp_path: Path) -> None:
    import msgpack

    from relay.storage import SqliteJournal
    from relay.storage import snapshot as snapshots

    serve = Serve(tmp_path)
    serve.start()
    try:
        quick = ["--name", "quick", "--reaction", str(QUICK_S)]
        slow = ["--name", "slow", "--reaction", str(SLOW_S)]
        bots_match(serve, quick, slow)
        rows = {r["name"]: r for r in leaderboard(serve)}

        def newest_file() -> int:
            return max((int(p.name.rsplit("-", 1)[1]) for p in serve.data.glob("journal.db.snapshot-*")), default=-1)

        # the relay snapshots its judge every 10 s while inputs come (a leaderboard asked is one): wait for
        # one taken after the match
        ended = newest_file()
        wait_until(lambda: newest_file() > ended or not leaderboard(serve), 90, "a snapshot with the ratings", 0.5)
        assert newest_file() > ended
        serve.stop()
        # someone raises quick's rating in the journal's newest snapshot (a well-formed blob, checksum and all)
        journal = SqliteJournal(serve.data / "journal.db")
        try:
            newest = journal.latest_snapshot()
            assert newest is not None
            pos, blob = newest
            head = len(snapshots.MAGIC) + 2
            record = msgpack.unpackb(blob[head:], raw=False, strict_map_key=False)
            table = record["core"]["ratings"]["blink"]
            row = next(x for x in table if x[1] == "quick")
            row[2] += 50.0
            journal.save_snapshot(max(pos, journal.last_position()), blob[:head] + msgpack.packb(record, use_bin_type=True))
        finally:
            journal.close()
        said = len(serve.out.read_text().splitlines())
        serve.start()
        after = leaderboard(serve)
        assert [(r["name"], r["matches"]) for r in after] == [("slow", 1)]
        assert after[0]["key"] == rows["slow"]["key"]
        lines = [ln for ln in serve.out.read_text().splitlines()[said:] if "ratings record" in ln]
        assert len(lines) == 1 and rows["quick"]["key"] in lines[0], serve.out.read_text()
        # the relay goes on: quick plays again, rated afresh
        q, s = bots_match(serve, quick, slow)
        assert "1 rated match" in q and "2 rated matches" in s, (q, s)
        assert "Traceback" not in serve.out.read_text()
    finally:
        serve.stop()
