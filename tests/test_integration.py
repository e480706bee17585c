"""BLINK end to end through real brokers and real processes."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from protocol import messages as m
from protocol.codec import decode, encode
from protocol.rules import blink
from mqttkit import BrokerAddress, free_port
from relay.core import RelayConfig
from relay.hosting import LocalServer
from client import Connection, Player
from tests.conftest import wait_port
from tests.helpers import DEADLINE_S, eventually
from tests.logcheck import check_blink_log, read
from tests.decks import fixed_deck_games
from tests.test_relay_core import race_deck

pytestmark = pytest.mark.integration

BLINK = [sys.executable, "-m", "client.cli"]
FAST = json.dumps({"countdown_s": 0.3, "stalemate_pause_s": 0.2, "pick_time_s": 1.0})


def run_match_cli(tmp_path: Path, *extra: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    log = tmp_path / "match.jsonl"
    proc = subprocess.run([*BLINK, "match", "--game", "blink", "--bots", "2", "--seed", "4", "--reaction", "0.03",
                           "--settings", FAST, "--json", "--log", str(log), *extra],
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout), read(log)


def check_summary_and_log(summary: dict[str, Any], events: list[dict[str, Any]]) -> None:
    assert summary["game"] == "blink" and len(summary["players"]) == 2
    assert summary["winner"] in summary["players"]
    assert 2 <= len(summary["games"]) <= 9  # best of three; a tied game (the one-card tie) counts for no one
    assert summary["wins"][summary["winner"]] == 2
    assert summary["accepted"] > 20 and isinstance(summary["rejected"], dict)
    assert summary["duration_s"] > 0
    checked = check_blink_log(events, summary["players"])
    assert checked["plays"] == summary["accepted"] - sum(1 for e in events if e["type"] == "pick_made")
    assert checked["winners"] == [g["winner"] for g in summary["games"]]
    assert events[-1]["type"] == "match_over" and events[-1]["winner"] == summary["winner"]


def test_two_bots_finish_a_match_through_the_embedded_broker(tmp_path: Path) -> None:
    summary, events = run_match_cli(tmp_path)
    check_summary_and_log(summary, events)


def test_two_bots_finish_a_match_through_mosquitto(tmp_path: Path, mosquitto: BrokerAddress) -> None:
    relay_log = tmp_path / "relay.jsonl"
    serve = subprocess.Popen([*BLINK, "serve", "--broker", mosquitto.login_url, "--seed", "9", "--log", str(relay_log)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert "running" in (serve.stdout.readline() if serve.stdout else "")
        summary, events = run_match_cli(tmp_path, "--server", mosquitto.url)
        check_summary_and_log(summary, events)
    finally:
        serve.send_signal(signal.SIGINT)  # Ctrl-C stops it cleanly
        out, err = serve.communicate(timeout=60)
    assert serve.returncode == 130, err
    assert "stopped" in out and "Traceback" not in err
    kinds = {json.loads(line)["kind"] for line in relay_log.read_text().splitlines()}
    assert {"relay_started", "event", "applied"} <= kinds


def test_the_mosquitto_acl_lets_a_client_write_only_its_own_action_topic(mosquitto: BrokerAddress) -> None:
    async def main() -> tuple[list[str], str]:
        async with LocalServer(mosquitto.login_url, seed=1, config=RelayConfig(games=fixed_deck_games((race_deck(),)))) as server:
            assert server.relay is not None
            a = Player(server.address, "ann", client_id="pa")
            b = Player(server.address, "bob", client_id="pb")
            async with a, b:
                code = await a.create("blink", {"countdown_s": 0.1}, timeout=DEADLINE_S)
                await b.join(code, timeout=DEADLINE_S)
                await eventually(lambda: a.model.state() is not None and a.model.state().phase == "running",
                                 changed=a.wait_change, what="the race to start")
                # bob forges a play on ann's action topic: the broker's ACL drops it
                forged = encode(m.Act(id=1, seq=a.model.predictor.confirmed_seq,  # type: ignore[union-attr]
                                      action=blink.action_to_wire(blink.PlayCard("3-red-star", 0))))
                await b.conn.send_raw(a.topics.act(code, "pa"), forged)
                # ... then pings on his own topic: once the pong is back, the relay has handled
                # everything the broker passed on from bob before it (one connection, in order).
                pongs: list[m.Pong] = []
                forward = b.conn.on_message

                def keep_pongs(msg: Any, now_ns: int) -> None:
                    if isinstance(msg, m.Pong):
                        pongs.append(msg)
                    forward(msg, now_ns)

                b.conn.on_message = keep_pongs
                await b.conn.request(m.Ping(t0=4242))
                await eventually(lambda: any(p.t0 == 4242 for p in pongs), what="bob's pong")
                match = server.relay.core.matches[code]
                hand = [str(c) for c in match.state.hands[0]]
                # The control: the same bytes from ann herself land -- the ACL, not the message, stopped bob.
                await a.conn.send_raw(a.topics.act(code, "pa"), forged)
                await eventually(lambda: str(match.state.top(0)) == "3-red-star", what="ann's own play to land")
                return hand, str(match.state.top(0))

    hand, top = asyncio.run(main())
    assert "3-red-star" in hand  # ann's card was never played by bob
    assert top == "3-red-star"


def test_forced_conflict_through_a_real_broker_is_resolved_as_the_rules_say() -> None:
    """Both players play onto pile 0 within a few ms, against the same pile top. Exactly one
    lands; the other is answered pile_changed and its card is back in its owner's hand."""

    async def main() -> tuple[Any, Any, Any, Any]:
        config = RelayConfig(games=fixed_deck_games((race_deck(),)))
        async with LocalServer(None, seed=3, config=config) as server:
            async with Player(server.address, "ann") as a, Player(server.address, "bob") as b:
                code = await a.create("blink", {"countdown_s": 0.2}, timeout=DEADLINE_S)
                await b.join(code, timeout=DEADLINE_S)
                for p in (a, b):
                    await eventually(lambda: p.model.state() is not None and p.model.state().phase == "running",
                                     changed=p.wait_change, what=f"{p.model.name} to see the race start")
                seen = a.model.predictor.confirmed_seq  # type: ignore[union-attr]
                assert b.model.predictor.confirmed_seq == seen  # type: ignore[union-attr]
                await asyncio.gather(a.act(blink.PlayCard("3-red-star", 0), seen_seq=seen),
                                     b.act(blink.PlayCard("5-green-triangle", 0), seen_seq=seen))
                # The loser's rejection (its private topic) may come before the winner's event (the
                # match's public topic): wait until both confirmed states hold the winning card.
                landed = {"3-red-star", "5-green-triangle"}
                await eventually(lambda: len(a.model.verdicts) + len(b.model.verdicts) == 2
                                 and not a.model.predictor.pending  # type: ignore[union-attr]
                                 and not b.model.predictor.pending  # type: ignore[union-attr]
                                 and str(a.model.state().top(0)) in landed and str(b.model.state().top(0)) in landed,
                                 what="both verdicts and both confirmed states")
                return list(a.model.verdicts), list(b.model.verdicts), a.model.state(), b.model.state()

    va, vb, sa, sb = asyncio.run(main())
    verdicts = va + vb
    assert sorted(v.ok for v in verdicts) == [False, True]
    lost = next(v for v in verdicts if not v.ok)
    assert lost.code == "pile_changed"
    winner_card = "3-red-star" if va[0].ok else "5-green-triangle"
    loser_card = "5-green-triangle" if va[0].ok else "3-red-star"
    assert str(sa.top(0)) == winner_card and str(sb.top(0)) == winner_card
    loser_state = sb if va[0].ok else sa
    loser_seat = 1 if va[0].ok else 0
    assert loser_card in [str(c) for c in loser_state.hands[loser_seat]]  # back in the hand


def test_bad_input_through_the_broker_is_answered_and_the_relay_keeps_going() -> None:
    async def main() -> list[Any]:
        async with LocalServer(None, seed=5) as server:
            got: list[Any] = []
            conn = Connection(server.address, "evil1", on_message=lambda msg, now: got.append(msg), ping_interval_s=0)
            async with conn:
                await conn.send_raw(conn.topics.req("evil1"), b"\xc1\xc1not msgpack")
                await conn.send_raw(conn.topics.act("NOPE1", "evil1"), encode(m.Act(id=1, seq=0, action={})))
                await conn.send_raw(conn.topics.req("evil1"), encode(m.JoinMatch(name="x", match="NOPE1")))
                await conn.request(m.Ping(t0=time.time_ns()))
                # answers come back in the order the relay handled the requests: the pong is last
                await eventually(lambda: any(isinstance(x, m.Pong) for x in got), what="the relay's pong")
            return got

    got = asyncio.run(main())
    codes = [x.code for x in got if isinstance(x, (m.RequestRejected, m.ActionRejected))]
    assert codes == ["malformed", "no_such_match", "no_such_match"]
    assert isinstance(got[-1], m.Pong) and len(got) == 4  # still alive and answering, and nothing else


def test_serve_reports_a_taken_port_clearly() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        proc = subprocess.run([*BLINK, "serve", "--port", str(port)], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "already in use" in proc.stderr and "--broker" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_embedded_serve_starts_and_stops_on_ctrl_c() -> None:
    port = free_port()
    proc = subprocess.Popen([*BLINK, "serve", "--port", str(port), "--embedded"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert "running" in (proc.stdout.readline() if proc.stdout else "")
        wait_port("127.0.0.1", port, timeout=60)

        async def ping() -> bool:
            got: list[Any] = []
            conn = Connection(BrokerAddress("127.0.0.1", port), on_message=lambda msg, now: got.append(msg),
                              ping_interval_s=0.05)
            async with conn:
                await eventually(lambda: any(isinstance(x, m.Pong) for x in got), what="the relay's pong")
            return True

        assert asyncio.run(ping())
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "Traceback" not in err


@pytest.mark.parametrize("args,needle", [
    (["serve", "--broker", "http://x"], "unsupported scheme"),
    (["match", "--bots", "3"], "BLINK is for 2 players"),
    (["match", "--settings", "{bad"], "JSON"),
    (["match", "--settings", '{"best_of": 2}'], "best_of"),
    (["bot", "--server", "mqtt://127.0.0.1:1"], "cannot reach"),
])
def test_command_line_errors_are_one_readable_line(args: list[str], needle: str) -> None:
    proc = subprocess.run([*BLINK, *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert needle in proc.stderr and "Traceback" not in proc.stderr
