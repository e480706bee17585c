"""The ``blink`` command line: paths checked before anything starts, one exit-status convention
(2 bad input, 1 a failure at run time), players per game, ``blink watch`` from the match's
beginning with its result, and Roll Your Own's ``--json`` games."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from protocol import messages as m
from protocol.rules import game_for
from protocol.rules.blink import RaceResumed
from mqttkit import BrokerAddress, free_port
from relay.core import PAST_EVENTS, Publish
from client import Bot
from relay.hosting import LocalServer
from client import Connection, Player
from tests.test_relay_core import Harness, T

BLINK = [sys.executable, "-m", "client.cli"]
FAST = {"countdown_s": 0.3, "stalemate_pause_s": 0.2, "pick_time_s": 1.0}


def blink(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*BLINK, *args], capture_output=True, text=True, timeout=timeout)


def one_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


# ------------------------------------------------------------------------------------ paths


@pytest.mark.integration
@pytest.mark.parametrize("argv, says", [
    (["play", "--screenshot", "{missing}/x.png", "--quit-after", "1"], "no such directory"),
    (["play", "--screenshot", "{dir}", "--quit-after", "1"], "is a directory"),
    (["play", "--frame-stats", "{missing}/stats.json"], "no such directory"),
    (["play", "--frame-stats", "{dir}"], "is a directory"),
    (["serve", "--port", "{port}", "--log", "{missing}/relay.jsonl"], "no such directory"),
    (["serve", "--port", "{port}", "--log", "{dir}"], "is a directory"),
    (["match", "--log", "{missing}/match.jsonl"], "no such directory"),
    (["match", "--log", "{file}/match.jsonl"], "not a directory"),
    (["latency", "--plot", "{missing}/plot.png"], "no such directory"),
    (["replay", "{file}", "--screenshot", "{missing}/x.png"], "no such directory"),
])
def test_a_path_that_cannot_be_written_is_one_line_and_status_2_before_anything_starts(
        tmp_path: Path, argv: list[str], says: str) -> None:
    (tmp_path / "plain").write_text("")
    port = str(free_port())
    values = {"missing": str(tmp_path / "no" / "such"), "dir": str(tmp_path), "file": str(tmp_path / "plain"),
              "port": port}
    proc = blink(*[a.format(**values) for a in argv])
    assert proc.returncode == 2
    line = one_line(proc)
    assert says in line and argv[0] in line
    assert not (tmp_path / "no").exists(), "a missing folder is an error, never created"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plain"], "nothing was written"
    assert proc.stdout == "", "nothing started (nothing said it was running)"


@pytest.mark.integration
def test_screenshot_under_proc_is_refused_at_once() -> None:
    proc = blink("play", "--screenshot", "/proc/nope/x.png", "--quit-after", "1")
    assert proc.returncode == 2 and "/proc/nope" in one_line(proc)
    assert not Path("/proc/nope").exists()


# ------------------------------------------------------------------------------------ exit statuses


@pytest.mark.integration
@pytest.mark.parametrize("argv, says", [
    (["match", "--bots", "3"], "BLINK is for 2 players, not 3"),
    (["match", "--bots", "1"], "BLINK is for 2 players, not 1"),
    (["match", "--game", "takeaway", "--bots", "9"], "Takeaway Dice is for 2 to 6 players, not 9"),
    (["match", "--game", "sequence", "--bots", "5"], "Sequence Dice is for 2 to 4 players, not 5"),
    (["bot", "--server", "mqtt://127.0.0.1:1", "--create", "--game", "ryo", "--players", "1"],
     "Roll Your Own is for 2 to 8 players, not 1"),
    (["play", "--players", "3"], "BLINK is for 2 players, not 3"),
    (["play", "--game", "takeaway", "--players", "7"], "Takeaway Dice is for 2 to 6 players, not 7"),
    (["match", "--settings", "{bad"], "JSON"),
    (["match", "--settings", '{"best_of": 2}'], "best_of"),
    (["match", "--bots", "two"], "not a whole number"),
    (["serve", "--interface", "lo"], "--interface only goes with --lan"),
    (["serve", "--lan", "--broker", "mqtt://127.0.0.1:1"], "leave out --broker"),
    (["serve", "--broker", "http://x"], "unsupported scheme"),
    (["watch", "ABCDE"], "--server"),
    (["play", "--no-such-option"], "unrecognized arguments"),
    (["load", "--matches", "0"], "must be from 1"),
    (["load", "--matches", "2000"], "without --server"),
    (["load", "--matches", "1", "--relay-pid", "1"], "--relay-pid goes with --server"),
    (["lan", "--timeout", "0"], "must be from"),
    (["latency", "--loss", "2"], "loss"),
    (["serve", "--fair-cap-ms", "-1"], "must be from 0 to 10000 ms"),
    (["latency", "--fair-cap-ms", "nan"], "must be from 0 to 10000 ms"),
    (["cluster", "up", "--dir", "{tmp}", "--nodes", "99999"], "at most 16"),
])
def test_bad_input_is_status_2(argv: list[str], says: str, tmp_path: Path) -> None:
    proc = blink(*[a.replace("{tmp}", str(tmp_path / "cluster")) for a in argv])
    assert proc.returncode == 2, proc.stderr
    assert says in one_line(proc)


@pytest.mark.integration
@pytest.mark.parametrize("command", ["play", "bot"])
def test_rejoining_from_a_seat_file_that_is_not_there_is_status_2_in_play_and_bot(command: str,
                                                                                  tmp_path: Path) -> None:
    missing = str(tmp_path / "none.json")
    proc = blink(command, "--server", f"mqtt://127.0.0.1:{free_port()}", "--rejoin", missing)
    assert proc.returncode == 2, proc.stderr
    line = one_line(proc)
    assert "no saved seat" in line and missing in line and proc.stdout == ""


@pytest.mark.integration
def test_replay_at_past_the_last_event_is_an_option_out_of_range(tmp_path: Path) -> None:
    log = tmp_path / "match.jsonl"
    made = blink("match", "--seed", "3", "--settings", json.dumps({**FAST, "best_of": 1}), "--log", str(log),
                 timeout=300)
    assert made.returncode == 0, made.stderr
    proc = blink("replay", str(log), "--at", "99999")
    assert proc.returncode == 2, proc.stderr
    assert "--at 99999: the match has" in one_line(proc)


@pytest.mark.integration
def test_every_option_of_every_command_has_help_and_there_is_a_version() -> None:
    import argparse

    from client.cli import build_parser

    def parsers(p: argparse.ArgumentParser, name: str) -> Any:
        yield name, p
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for word, child in action.choices.items():
                    yield from parsers(child, f"{name} {word}")

    def helps(p: argparse.ArgumentParser) -> Any:  # each option, and each command word of a sub-command
        for a in p._actions:
            yield from a._choices_actions if isinstance(a, argparse._SubParsersAction) else [a]

    missing = [f"{name} {'/'.join(a.option_strings) or a.dest}" for name, p in parsers(build_parser(), "blink")
               for a in helps(p) if not a.help]
    assert missing == []
    proc = blink("--version")
    assert proc.returncode == 0 and proc.stdout.startswith("blink ") and proc.stdout.split()[1][0].isdigit()


def test_failures_at_run_time_are_status_1(mosquitto: BrokerAddress) -> None:
    nobody = f"mqtt://127.0.0.1:{free_port()}"
    for argv, says in [
        (["bot", "--server", nobody], "cannot reach"),
        (["watch", "ABCDE", "--server", nobody], "cannot reach"),
        (["load", "--matches", "1", "--server", nobody], "cannot reach"),
        (["latency", "--matches", "1", "--duration", "1", "--server", nobody], "cannot reach"),
        (["watch", "ABCDE", "--server", mosquitto.url], "no relay is online"),
    ]:
        proc = blink(*argv)
        assert proc.returncode == 1, (argv, proc.stderr)
        assert says in one_line(proc), argv
    # With a relay on that broker (its shipped ACL), the relay's own answer is what is said.
    serve = subprocess.Popen([*BLINK, "serve", "--broker", mosquitto.login_url], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        assert "running" in (serve.stdout.readline() if serve.stdout else "")
        proc = blink("watch", "ABCDE", "--server", mosquitto.url)
        assert proc.returncode == 1 and "no match ABCDE on this relay" in one_line(proc)
    finally:
        serve.send_signal(signal.SIGINT)
        serve.communicate(timeout=30)


def test_blink_play_checks_the_server_before_any_window_opens(mosquitto: BrokerAddress) -> None:
    """Run with a display that does not exist: a check that passes gets as far as the window (and
    says it cannot open one); a check that fails never gets there."""
    import os

    env = {**os.environ, "DISPLAY": ":0.999"}

    def play(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*BLINK, "play", "--mute", "--quit-after", "5", *argv], capture_output=True, text=True,
                              timeout=120, env=env)

    nobody = f"mqtt://127.0.0.1:{free_port()}"
    for argv, says in [
        (["--server", nobody], "cannot reach the MQTT broker"),
        (["--server", nobody, "--match", "ZZZZZ"], "cannot reach the MQTT broker"),
        (["--server", mosquitto.url], f"no relay is online on {mosquitto.url}"),
        (["--server", mosquitto.url, "--watch", "ZZZZZ"], "no relay is online"),
    ]:
        proc = play(*argv)
        assert proc.returncode == 1 and proc.stdout == "", (argv, proc.stderr)
        line = one_line(proc)
        assert line.startswith("blink play: ") and says in line and "window" not in line, (argv, line)
    serve = subprocess.Popen([*BLINK, "serve", "--broker", mosquitto.login_url], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        assert "running" in (serve.stdout.readline() if serve.stdout else "")
        for argv in (["--match", "ZZZZZ"], ["--watch", "zzzzz"]):
            proc = play("--server", mosquitto.url, *argv)
            assert proc.returncode == 1, proc.stderr
            assert f"no match ZZZZZ on {mosquitto.url}" in one_line(proc)
        proc = play("--server", mosquitto.url)  # all is well: on to the window, which cannot open here
        assert proc.returncode == 1 and "cannot open a window" in one_line(proc)
    finally:
        serve.send_signal(signal.SIGINT)
        serve.communicate(timeout=30)


@pytest.mark.integration
def test_a_match_that_runs_past_its_timeout_says_so_not_a_network_problem() -> None:
    proc = blink("match", "--timeout", "1", "--settings", json.dumps({"countdown_s": 3.0}))
    assert proc.returncode == 1
    line = one_line(proc)
    assert "the match did not finish within 1 s" in line and "--timeout" in line and "network" not in line


def test_players_accepted_are_what_each_game_allows() -> None:
    from client.cli import args as argtypes

    for name in ("blink", "takeaway", "sequence", "ryo"):
        game = game_for(name)
        for n in range(0, 12):
            problem = argtypes.seats_problem(name, n, "--bots")
            assert (problem is None) == (game.min_players <= n <= game.max_players), (name, n)
            if problem is not None:
                assert game.title in problem and f"{game.min_players}-{game.max_players}" not in problem


# ------------------------------------------------------------------------------------ the relay's past events


def test_resync_from_seq_resends_the_match_past_events_to_the_asker_only() -> None:
    h = Harness()
    code = h.start_match({"countdown_s": 0.5})
    past = [e for e in h.events() if e.match == code]
    assert len(past) >= 5 and [e.seq for e in past] == list(range(1, len(past) + 1))

    out = h.send(T.req("watcher"), m.Resync(code, from_seq=1))
    again = [x for x in h.to("watcher", out) if isinstance(x, m.Event)]
    assert again == past, "every past event, in order, to the asker's own topic"
    assert not [o for o in out if isinstance(o, Publish) and isinstance(o.msg, m.Event)
                and o.topic != T.client("watcher")], "nobody else gets them again"
    assert any(isinstance(o.msg, m.Snapshot) for o in out if isinstance(o, Publish))

    out = h.send(T.req("watcher"), m.Resync(code, from_seq=3))
    assert not [x for x in h.to("watcher", out) if isinstance(x, m.Event)], "once a second at most"
    h.tick(1.0)
    out = h.send(T.req("watcher"), m.Resync(code, from_seq=3))
    assert [x.seq for x in h.to("watcher", out) if isinstance(x, m.Event)] == [e.seq for e in past[2:]]

    out = h.send(T.req("other"), m.Resync(code))  # a plain resync (a gap) sends no past events
    assert not [x for x in h.to("other", out) if isinstance(x, m.Event)]

    out = h.send(T.req("watcher"), m.Resync("ZZZZZ", from_seq=1))
    assert [x.code for x in h.to("watcher", out) if isinstance(x, m.RequestRejected)] == ["no_such_match"]


def test_past_events_kept_packed_are_re_sent_alike_after_a_snapshot() -> None:
    # The core keeps a past event packed whole (one bytes object); read back from its snapshot it
    # re-sends the events exactly as first published, from any ``from_seq``.
    from protocol.codec import encode
    from relay.storage import snapshot

    h = Harness()
    code = h.start_match({"countdown_s": 0.5})
    published = [e for e in h.events() if e.match == code]
    assert len(published) >= 3
    assert all(isinstance(entry, bytes) for entry in h.core.events.past[code][0])
    blob = snapshot.dump(h.core)
    for from_seq in (1, 2, published[-1].seq, published[-1].seq + 1):
        h.core = snapshot.load(blob, games=h.core.games)
        out = h.send(T.req(f"w{from_seq}"), m.Resync(code, from_seq=from_seq))
        again = [x for x in h.to(f"w{from_seq}", out) if isinstance(x, m.Event)]
        assert [encode(e) for e in again] == [encode(e) for e in published if e.seq >= from_seq]


def test_the_relay_keeps_a_bounded_past_per_match() -> None:
    h = Harness()
    code = h.start_match()
    match = h.core.matches[code]
    for _ in range(PAST_EVENTS + 10):
        h.core.events.event(match, h.now, [], RaceResumed())
    h.tick(1.0)
    out = h.send(T.req("w"), m.Resync(code, from_seq=1))
    got = [x.seq for x in h.to("w", out) if isinstance(x, m.Event)]
    assert len(got) == PAST_EVENTS and got == list(range(match.seq - PAST_EVENTS + 1, match.seq + 1))


# ------------------------------------------------------------------------------------ blink watch


async def _watch_a_running_match(tmp: Path) -> tuple[list[dict[str, Any]], str, int, list[m.Event], str]:
    async with LocalServer(None, 5) as server:
        url = server.address.url
        every: list[m.Event] = []
        log = Connection(server.address, on_message=lambda msg, now: every.append(msg)
                         if isinstance(msg, m.Event) else None, ping_interval_s=0)
        async with log:
            await log.watch_all()
            async with Player(server.address, "ann") as a, Player(server.address, "bob") as b:
                code = await a.create("blink", {**FAST, "best_of": 1})
                await b.join(code)
                bots = [asyncio.create_task(Bot(p, reaction_s=0.08, seed=i).run()) for i, p in enumerate((a, b))]
                deadline = asyncio.get_running_loop().time() + 60
                while max((e.seq for e in every), default=0) < 12:  # well into the match
                    assert asyncio.get_running_loop().time() < deadline, "the match does not run"
                    await asyncio.sleep(0.05)
                watch = await asyncio.create_subprocess_exec(
                    *BLINK, "watch", code.lower(), "--server", url, "--json",
                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
                out, err = await asyncio.wait_for(watch.communicate(), timeout=120)
                for t in bots:
                    t.cancel()
                await asyncio.gather(*bots, return_exceptions=True)
                missing = await asyncio.create_subprocess_exec(
                    *BLINK, "watch", "QQQQQ", "--server", url, stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE)
                _, missing_err = await asyncio.wait_for(missing.communicate(), timeout=60)
                assert missing.returncode == 1
        lines = [json.loads(x) for x in out.decode().splitlines()]
        assert watch.returncode == 0, err.decode()
        return lines, err.decode(), missing.returncode, [e for e in every if e.match == code], missing_err.decode()


@pytest.mark.integration
def test_watch_starts_from_the_beginning_and_ends_with_the_result(tmp_path: Path) -> None:
    lines, err, _, every, missing_err = asyncio.run(_watch_a_running_match(tmp_path))
    assert [x["seq"] for x in lines] == list(range(1, len(lines) + 1)), "from seq 1, each once, in order"
    assert lines[0]["type"] == "match_created" and lines[-1]["type"] == "match_over"
    assert [(e.seq, e.type) for e in every if e.seq <= len(lines)] == [(x["seq"], x["type"]) for x in lines], \
        "the very events the relay published"
    over = lines[-1]
    result = [x for x in err.splitlines() if x.startswith("match over:")]
    assert len(result) == 1 and over["reason"] in result[0]
    assert (over["winner"] is None) or f"winner {over['winner']}" in result[0]
    assert "games won:" in result[0] and "Traceback" not in err
    assert missing_err.strip() == "blink watch: no match QQQQQ on this relay (a match ends when its players leave)"


# ------------------------------------------------------------------------------------ Roll Your Own's --json


@pytest.mark.integration
def test_roll_your_own_json_numbers_games_from_0_and_each_has_winners_and_reason(tmp_path: Path) -> None:
    log = tmp_path / "ryo.jsonl"
    proc = blink("match", "--game", "ryo", "--bots", "2", "--seed", "3", "--reaction", "0.005", "--json",
                 "--log", str(log), "--settings", json.dumps({"rolls_per_round": 2, "rounds_per_game": 1,
                                                              "games_per_match": 2}), timeout=240)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    games = summary["games"]
    events = [json.loads(x) for x in log.read_text().splitlines()]
    won = [e for e in events if e["type"] == "game_won"]
    assert len(games) == len(won) >= 2
    assert [g["game"] for g in games] == list(range(len(games)))
    for g, e in zip(games, won):
        assert g["winner"] == e["player"] and g["winners"] == [e["player"]] and g["reason"]
        assert g["games_won"] == dict(zip(summary["players"], e["games"]))
    assert games[-1]["reason"] == next(e for e in events if e["type"] == "game_result")["reason"]
    assert summary["winners"] == games[-1]["winners"]


# ------------------------------------------------------------------------------------ settings


@pytest.mark.integration
def test_blink_settings_lists_every_setting_with_what_it_takes_and_its_default() -> None:
    import re

    from protocol.rules import GAME_NAMES
    from protocol.rules.base import MATCH_SETTINGS

    proc = blink("settings")
    assert proc.returncode == 0, proc.stderr
    for name in GAME_NAMES:
        game = game_for(name)
        one = blink("settings", name)
        assert one.returncode == 0 and one.stdout.splitlines()[0].startswith(f"{game.title} ({name}")
        rows = {line.split()[0]: line for line in one.stdout.splitlines()[1:]}
        defaults = {**game.default_settings(), **MATCH_SETTINGS}
        assert set(rows) == set(defaults) and one.stdout in proc.stdout
        for key, value in defaults.items():
            what, default = rows[key].split(None, 1)[1].rsplit("; default ", 1)
            assert json.loads(default) == value
            game.check_new_match({key: json.loads(default)}, game.min_players)
            assert "\\x00" not in what and what
            bounds = re.fullmatch(r"an integer from (\d+) to (\d+)|a number of seconds from (\d+) to (\d+)", what)
            if bounds:  # the range said is the range the rules keep (other settings may narrow it)
                lo, hi = (int(b) for b in bounds.groups() if b is not None)
                game.check_new_match({key: lo}, game.min_players)
                for bad in (lo - 1, hi + 1):
                    with pytest.raises(ValueError):
                        game.check_new_match({key: bad}, game.min_players)
    assert "an odd number from 1 to 9; default 3" in proc.stdout and "true or false" in proc.stdout


@pytest.mark.integration
def test_an_unknown_setting_names_the_settings_there_are() -> None:
    proc = blink("match", "--game", "takeaway", "--bots", "2", "--settings", '{"sise": 12}')
    assert proc.returncode == 2
    line = one_line(proc)
    assert "unknown takeaway settings: sise" in line
    assert all(key in line for key in game_for("takeaway").default_settings())
