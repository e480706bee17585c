"""``blink load``: the load generator, run as a user would (a subprocess), against the relay it
starts itself and against Mosquitto with a separate ``blink serve --broker``; its bad input; and
its prediction bookkeeping, pure. No speed is asserted here (that is bench/'s and the report's)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Iterator

import pytest

from protocol import messages as m
from protocol.clock import ping_due
from protocol.rules import blink
from protocol.rules.base import FixedChance
from mqttkit import BrokerAddress, free_port
from mqttkit.connection import connect
from protocol.codec import decode_all
from client.tools.load import LoadRun, run_load
from client.tools.load_config import LoadConfig, percentiles
from client.tools.load_player import InFlight, LoadPlayer

ROOT = Path(__file__).resolve().parent.parent
BLINK = [sys.executable, "-m", "client.cli"]
FIELDS = ("matches", "players", "duration_s", "actions", "actions_per_s", "verdict_ms", "unanswered",
          "generator_lag_ms", "relay_cpu_pct", "relay_rss_mb")


def run_blink(*args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*BLINK, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def gone(pid: int, timeout: float = 10.0) -> bool:
    """True once no process ``pid`` is left (a zombie counts as gone: it no longer runs)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


def check_result(out: dict[str, Any], matches: int) -> None:
    for key in FIELDS:
        assert key in out, key
    assert out["matches"] == matches and out["matches_running"] == matches
    assert out["players"] == 2 * matches
    assert out["actions"] > 0 and out["actions_per_s"] > 0
    v = out["verdict_ms"]
    assert set(v) >= {"p50", "p90", "p99", "max", "n"}
    assert v["n"] > 0 and 0 <= v["p50"] <= v["p90"] <= v["p99"] <= v["max"]
    assert v["n"] == out["accepted"] + sum(out["rejected"].values())
    assert out["unanswered"] == 0
    lag = out["generator_lag_ms"]
    assert lag["n"] > 0 and 0 <= lag["p50"] <= lag["p99"]
    assert out["lost_connections"] == 0 and not out["setup_failed"]


def one_line_error(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("blink load: ")
    return lines[0]


# ------------------------------------------------------------------------------------ whole runs


@pytest.mark.integration
def test_load_with_its_own_relay() -> None:
    proc = run_blink("load", "--matches", "3", "--duration", "8", "--json", "--seed", "5", "--grace", "60", "--timeout", "60",
                     timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    check_result(out, 3)
    assert out["relay_local"] is True
    assert out["relay_cpu_pct"] is not None and out["relay_rss_mb"] > 0
    assert gone(out["relay_pid"]), "the blink serve started by blink load outlived it"


@pytest.fixture
def relay_on(mosquitto: BrokerAddress) -> Iterator[tuple[BrokerAddress, int]]:
    proc = subprocess.Popen([*BLINK, "serve", "--broker", mosquitto.login_url], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        assert "running" in proc.stdout.readline()
        yield mosquitto, proc.pid
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.mark.integration
def test_load_against_mosquitto_and_a_separate_relay(relay_on: tuple[BrokerAddress, int]) -> None:
    broker, relay_pid = relay_on
    proc = run_blink("load", "--server", broker.url, "--relay-pid", str(relay_pid), "--matches", "3",
                     "--duration", "6", "--json", "--pace", "max", "--grace", "60", "--timeout", "60", timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    check_result(out, 3)
    assert out["relay_local"] is False and out["relay_pid"] == relay_pid
    assert out["relay_cpu_pct"] is not None and out["relay_rss_mb"] > 0
    # The readable table, without --relay-pid: the relay's figures are unknown, not invented.
    proc = run_blink("load", "--server", broker.url, "--matches", "1", "--duration", "2", "--grace", "60",
                     "--timeout", "60", timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "verdict ms" in proc.stdout and "not local" in proc.stdout


@pytest.mark.integration
def test_ctrl_c_stops_the_run_and_its_relay() -> None:
    proc = subprocess.Popen([*BLINK, "load", "--matches", "2", "--duration", "120", "--json"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()  # the first progress line: the relay is up, the window open
        assert line.startswith("blink load:"), line
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130
    result = json.loads(out)
    assert result["interrupted"] is True
    assert gone(result["relay_pid"])


# ------------------------------------------------------------------------------------ bad input


@pytest.mark.integration
@pytest.mark.parametrize("matches", ["0", "-3", "abc", "1e9", "100000"])
def test_bad_matches(matches: str) -> None:
    assert "--matches" in one_line_error(run_blink("load", "--matches", matches, "--duration", "2"))


@pytest.mark.integration
def test_too_many_matches_for_the_embedded_broker() -> None:
    assert "--server" in one_line_error(run_blink("load", "--matches", "2000", "--duration", "2"))


@pytest.mark.integration
def test_unreachable_server() -> None:
    port = free_port()
    line = one_line_error(run_blink("load", "--server", f"mqtt://127.0.0.1:{port}", "--matches", "2", "--duration", "2",
                                    timeout=60))
    assert "cannot reach" in line


@pytest.mark.integration
def test_relay_pid_needs_server() -> None:
    one_line_error(run_blink("load", "--matches", "1", "--relay-pid", "1"))


@pytest.mark.integration
def test_broker_without_relay(mosquitto: BrokerAddress) -> None:
    line = one_line_error(run_blink("load", "--server", mosquitto.url, "--matches", "2", "--duration", "2",
                                    timeout=60))
    assert "no relay" in line


# ------------------------------------------------------------------------------------ pure parts


def test_percentiles_nearest_rank() -> None:
    assert percentiles([]) == {"p50": None, "p90": None, "p99": None, "max": None, "n": 0}
    p = percentiles([float(x) for x in range(1, 101)])
    assert (p["p50"], p["p90"], p["p99"], p["max"], p["n"]) == (50.0, 90.0, 99.0, 100.0, 100)


class _Loop:
    """What a LoadRun asks of its loop, doing nothing (the players' timers never fire here)."""

    def call_soon(self, *a: Any) -> None: ...
    def call_later(self, *a: Any) -> None: ...
    def time(self) -> float:
        return 0.0

    def call_at(self, *a: Any) -> Any:
        return _Timer()


class _Timer:
    def cancel(self) -> None: ...


def test_a_play_in_flight_is_predicted_until_a_view_contains_it() -> None:
    run = LoadRun(LoadConfig(matches=1), BrokerAddress("127.0.0.1", 1), _Loop())  # type: ignore[arg-type]
    p = LoadPlayer(run, "p", __import__("random").Random(1))
    p.match, p.seat = "ABCDE", 0
    state = blink.new_game(dict(countdown_s=0.5), 2, FixedChance(list(range(200))))
    state = blink.apply(state, None, blink.StartRace()).state  # type: ignore[union-attr]
    view = lambda st, seq: m.ViewUpdated(match="ABCDE", seq=seq, game_index=0,  # noqa: E731
                                         state=blink.to_wire(blink.view(st, 0)), match_state={"status": "playing"})
    assert p.apply_view(view(state, 5), 0)
    play = next(a for a in blink.legal_actions(p.state(), 0) if isinstance(a, blink.PlayCard))
    p.inflight.append(InFlight(1, play))
    p._predicted = None
    assert play.card not in [str(c) for c in p.state().hands[0]]  # predicted: the card has left the hand
    after = blink.apply(state, 0, play).state  # type: ignore[union-attr]
    p.on_verdict(m.ActionAccepted(match="ABCDE", id=1, seq=7), 0)
    assert p.inflight and p.inflight[0].accepted_seq == 7  # accepted, but no view with it yet: still predicted
    assert not p.apply_view(view(state, 4), 0)  # an older view is ignored
    assert p.apply_view(view(after, 7), 0)
    assert p.inflight == []
    assert p.state() == blink.from_wire(blink.to_wire(blink.view(after, 0)))


class _Conn:
    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def write(self, data: bytes | bytearray) -> None:
        self.sent.append(bytes(data))


def test_a_play_sent_keeps_the_prediction_it_was_checked_on() -> None:
    """``_fire`` keeps the state it checked the play on as the prediction: the same as recomputing
    it from the confirmed view and every play in flight."""
    run = LoadRun(LoadConfig(matches=1), BrokerAddress("127.0.0.1", 1), _Loop())  # type: ignore[arg-type]
    run.acting = True
    p = LoadPlayer(run, "p", __import__("random").Random(1))
    p.match, p.seat, p.act_topic = "ABCDE", 0, "t/act"
    conn = _Conn()
    p.mqtt = conn  # type: ignore[assignment]
    state = blink.new_game(dict(countdown_s=0.5), 2, FixedChance(list(range(200))))
    state = blink.apply(state, None, blink.StartRace()).state  # type: ignore[union-attr]
    assert p.apply_view(m.ViewUpdated(match="ABCDE", seq=5, game_index=0, state=blink.to_wire(blink.view(state, 0)),
                                      match_state={"status": "playing"}), 0)
    for n in range(1, 3):
        play = next(a for a in blink.legal_actions(p.state(), 0) if isinstance(a, blink.PlayCard))
        p._fire(play, 5)
        assert len(conn.sent) == n and len(p.inflight) == n and p.awaiting.keys() == set(range(1, n + 1))
        kept = p._predicted
        p._predicted = None
        assert kept is not None and p.state() == kept


def test_a_verdict_is_a_round_trip_and_keeps_the_player_from_being_pinged() -> None:
    S = 1_000_000_000
    run = LoadRun(LoadConfig(matches=1), BrokerAddress("127.0.0.1", 1), _Loop())  # type: ignore[arg-type]
    run.window_start = 1
    p = LoadPlayer(run, "p", __import__("random").Random(1))
    assert ping_due(p.answered_ns, 0, S)  # nothing answered yet: idle
    p.awaiting[1] = 1_000
    # sent at 1,000 (this process's clock), answered at 2,000; the relay kept it 400 (its own clock)
    p.on_verdict(m.ActionAccepted(match="ABCDE", id=1, seq=7, recv_ns=50_000, sent_ns=50_400), 2_000)
    assert run.rtt_ms == [(2_000 - 1_000 - 400) / 1e6] and run.verdict_ms == [1_000 / 1e6]
    assert p.answered_ns == 2_000 and not ping_due(p.answered_ns, 2_000 + S - 1, S)
    assert ping_due(p.answered_ns, 2_000 + S, S)
    p.awaiting[2] = 3_000
    p.on_verdict(m.ActionAccepted(match="ABCDE", id=2, seq=8), 4_000)  # a remembered answer: no stamps
    assert len(run.rtt_ms) == 1 and p.answered_ns == 2_000 and len(run.verdict_ms) == 2


@pytest.mark.integration
def test_a_relay_that_dies_ends_the_run_with_one_line() -> None:
    proc = subprocess.Popen([*BLINK, "load", "--matches", "2", "--duration", "120"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        assert proc.stderr.readline().startswith("blink load:")  # running: the relay is up
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        assert len(children) == 1
        os.kill(int(children[0]), signal.SIGKILL)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1
    assert "Traceback" not in err
    lines = [x for x in err.splitlines() if x.strip()]
    assert lines[-1] == "blink load: the local relay (blink serve) stopped during the run, status -9"
    assert all(x.startswith("blink load:") for x in lines)  # progress lines, then the one error line


# ------------------------------------------------------------------------------------ the players' MQTT (mqttkit)


@pytest.mark.integration
def test_players_on_mqttkit_speak_the_relays_whole_exchange(relay_on: tuple[BrokerAddress, int],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """In this process, so what each player received can be seen: create/join, the match's events
    applied (BLINK sends less), private updates, full views, verdicts, pongs and a rematch, all
    through one mqttkit connection per player behind the shipped ACL."""
    broker, relay_pid = relay_on
    seen: Counter[str] = Counter()
    private_payloads: list[bytes] = []
    games: set[int] = set()
    on_event, on_private, apply_view = LoadPlayer.on_event, LoadPlayer.on_private, LoadPlayer.apply_view

    def count_event(self: LoadPlayer, payload: bytes, now: int) -> None:
        seen["event"] += 1
        on_event(self, payload, now)

    def count_private(self: LoadPlayer, payload: bytes, now: int) -> None:
        private_payloads.append(payload)
        for msg in decode_all(payload):
            seen[type(msg).__name__] += 1
        on_private(self, payload, now)

    def note_view(self: LoadPlayer, msg: m.ViewUpdated, now_ns: int) -> bool:
        games.add(msg.game_index)
        return apply_view(self, msg, now_ns)

    monkeypatch.setattr(LoadPlayer, "on_event", count_event)
    monkeypatch.setattr(LoadPlayer, "on_private", count_private)
    monkeypatch.setattr(LoadPlayer, "apply_view", note_view)
    # (pinged only while idle: a player waiting out a game's countdown, 0.5 s, is, for ping_s 0.2)
    cfg = LoadConfig(matches=2, pace="max", duration_s=6.0, server=broker.url, relay_pid=relay_pid, seed=3,
                     grace_s=60.0, timeout_s=60.0, ping_s=0.2)
    out = asyncio.run(run_load(cfg))
    check_result(out, 2)
    assert out["library"] == "mqttkit"
    assert out["bad_messages"] == 0 and not out["request_rejected"]
    assert out["rtt_ms"]["n"] > out["pings"]  # round trips from the plays' verdicts, and from pongs
    assert out["rtt_ms"]["n"] >= out["verdict_ms"]["n"]
    assert seen["MatchJoined"] == 4 and seen["event"] > 0 and seen["PrivateUpdate"] > 0
    assert seen["ActionAccepted"] > 0 and seen["Pong"] > 0
    # The snapshots: carried and counted, never decoded (an event or private payload may hold several messages).
    assert out["messages_in"] > seen["event"] + len(private_payloads)
    assert len(private_payloads) < sum(seen.values()) - seen["event"]  # a verdict and its cards: one payload
    assert len(games) >= 2, f"no rematch in the run: games {games}"


@pytest.mark.integration
def test_a_dropped_player_connection_is_counted_lost(mosquitto: BrokerAddress) -> None:
    async def main() -> None:
        run = LoadRun(LoadConfig(matches=1, server=mosquitto.url), mosquitto.public(), asyncio.get_running_loop())
        p = LoadPlayer(run, "p", __import__("random").Random(1))
        await p.connect()
        assert p.mqtt is not None and p.mqtt.connected
        # Another connection with the player's client id: the broker drops the player's.
        thief = await connect(mosquitto.host, mosquitto.port, client_id=p.cid, on_messages=lambda _: None)
        deadline = time.monotonic() + 30
        while run.lost_connections == 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert run.lost_connections == 1 and p.lost and p.mqtt is None
        p.request(m.Ping(t0=0))  # a dropped player's sends are dropped, not raised
        await p.close(leave=True)
        await thief.disconnect()

    asyncio.run(main())
