"""One contract for every ``blink`` sub-command: 2 for bad input before anything starts, 1 at run
time, 130 on Ctrl-C; one line that names the file, port, value or URL; every option's help shows
its default; and a broker with no relay (or a relay under another ``--prefix``) is said at once,
in words that name what is missing, by every command that needs a relay.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Iterator

import pytest

from mqttkit import BrokerAddress, free_port
from tests.test_window import SCENARIO_S, xdisplay  # noqa: F401 - the Xvfb fixture

ROOT = Path(__file__).resolve().parent.parent
BLINK = [sys.executable, "-m", "client.cli"]
FAST = {"best_of": 1, "countdown_s": 0.3, "stalemate_pause_s": 0.2}
#: The design says "at once" (a retained status, or none within a second and a half, after the
#: connect); this bounds it on a busy machine.
NO_RELAY_DEADLINE_S = 15.0


def blink(*args: str, timeout: float = 120, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*BLINK, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def one_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


# ------------------------------------------------------------------------------------ help


FLAGS = (argparse._StoreTrueAction, argparse._StoreFalseAction, argparse._StoreConstAction, argparse._CountAction,
         argparse._AppendConstAction, argparse._HelpAction, argparse._VersionAction, argparse.BooleanOptionalAction,
         argparse._SubParsersAction)


def every_parser(p: argparse.ArgumentParser, name: str = "blink") -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield name, p
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for word, child in action.choices.items():
                yield from every_parser(child, f"{name} {word}")


def shown(default: object) -> list[str]:
    """Ways a help text may write ``default``."""
    if isinstance(default, float):
        return [f"{default:g}", str(default)]
    return [str(default)]


def test_every_option_with_a_default_shows_it_in_its_help_and_every_choice_is_listed() -> None:
    from client.cli import build_parser

    problems = []
    for name, parser in every_parser(build_parser()):
        formatter = parser._get_formatter()
        for action in parser._actions:
            if isinstance(action, FLAGS) or action.help == argparse.SUPPRESS:
                continue
            option = f"{name} {'/'.join(action.option_strings) or action.dest}"
            text = formatter._expand_help(action) if action.help else ""
            if action.default is not None and action.default != argparse.SUPPRESS:
                if "default" not in text:
                    problems.append(f"{option}: default {action.default!r} not shown")
                elif isinstance(action.default, (str, int, float)) and not any(s in text for s in shown(action.default)):
                    problems.append(f"{option}: help does not say its default {action.default!r}: {text!r}")
            if action.choices is not None and action.metavar is not None:
                # argparse lists choices itself unless a metavar hides them; then the help must
                missing = [c for c in action.choices if str(c) not in text]
                if missing:
                    problems.append(f"{option}: choices {missing} not listed")
    assert problems == []


def test_latency_help_lists_the_games() -> None:
    from client.cli import build_parser
    from protocol.rules import GAME_NAMES

    text = build_parser("latency")._subparsers._group_actions[0].choices["latency"].format_help()  # type: ignore[union-attr]
    assert "--game {" + ",".join(GAME_NAMES) + "}" in text


# ------------------------------------------------------------------------------------ bad input: 2


@pytest.mark.integration
@pytest.mark.parametrize("argv, says", [
    (["--prefix", "a/#", "match"], "a/#"),
    (["--prefix", "a/+/b", "watch", "X", "--server", "mqtt://127.0.0.1:1"], "'+'"),
    (["--prefix", "", "match"], "empty"),
    (["--prefix", "/a", "match"], "empty level"),
    (["--prefix", "$SYS/x", "match"], "cannot start with $"),
    (["--prefix", "a b", "match"], "' '"),
    (["bot", "--server", "notaurl"], "not a broker URL: 'notaurl'"),
    (["watch", "X", "--server", "notaurl"], "not a broker URL: 'notaurl'"),
    (["play", "--server", "notaurl"], "not a broker URL: 'notaurl'"),
    (["match", "--server", "notaurl"], "not a broker URL: 'notaurl'"),
    (["latency", "--server", "notaurl"], "not a broker URL: 'notaurl'"),
    (["load", "--matches", "1", "--server", "notaurl"], "not a broker URL: 'notaurl'"),
    (["bot", "--server", "mqtt://127.0.0.1:0"], "port 0"),
    (["match", "--timeout", "0"], "--timeout"),
    (["bot", "--server", "mqtt://127.0.0.1:1", "--name", "x" * 500], "at most 24 characters, not 500"),
    (["play", "--name", "x" * 500], "at most 24 characters, not 500"),
    (["bot", "--server", "mqtt://127.0.0.1:1", "--name", "a/b"], "'/'"),
    (["bot", "--server", "mqtt://127.0.0.1:1", "--create", "--settings", '{"best_of": 2}'], "best_of"),
    (["match", "--settings", '{"grace_s": 601}'], "grace_s must be a number of seconds from 0 to 600"),
    (["play", "--settings", '{"grace_s": -1}'], "grace_s must be a number of seconds from 0 to 600"),
    (["bot", "--server", "mqtt://127.0.0.1:1", "--settings", '{"grace_s": "x"}'], "grace_s"),
])
def test_bad_input_is_one_line_and_status_2_before_anything_starts(argv: list[str], says: str, tmp_path: Path) -> None:
    proc = blink(*argv, env={"TMPDIR": str(tmp_path)})
    assert proc.returncode == 2, proc.stderr
    assert says in one_line(proc)
    assert proc.stdout == "" and list(tmp_path.iterdir()) == [], "nothing started, no journal folder left"


@pytest.mark.integration
def test_files_named_on_the_command_line_that_are_not_there_are_status_2_for_every_command(tmp_path: Path) -> None:
    missing = str(tmp_path / "missing")
    for argv in (["verify", missing], ["replay", missing],
                 ["serve", "--port", str(free_port()), "--tls-cert", missing, "--tls-key", missing],
                 ["serve", "--broker", "mqtt://127.0.0.1:1", "--password-file", missing],
                 ["watch", "X", "--server", "mqtts://127.0.0.1:1", "--ca", missing]):
        proc = blink(*argv)
        assert proc.returncode == 2, (argv, proc.stderr)
        assert missing in one_line(proc), argv
    (tmp_path / "not-a-log").write_text("hello\n")
    proc = blink("replay", str(tmp_path / "not-a-log"))
    assert proc.returncode == 2 and str(tmp_path / "not-a-log") in one_line(proc)


@pytest.mark.integration
def test_replay_of_a_match_the_log_does_not_hold_is_status_2(tmp_path: Path) -> None:
    log = tmp_path / "match.jsonl"
    made = blink("match", "--seed", "3", "--settings", json.dumps(FAST), "--log", str(log), timeout=300)
    assert made.returncode == 0, made.stderr
    proc = blink("replay", str(log), "--match", "NOPE9")
    assert proc.returncode == 2
    line = one_line(proc)
    assert "--match NOPE9" in line and json.loads(log.read_text().splitlines()[0])["match"] in line


@pytest.mark.integration
def test_insecure_goes_with_tls_only(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("")
    proc = blink("watch", "X", "--server", "mqtts://127.0.0.1:1", "--insecure", "--ca", str(ca))
    assert proc.returncode == 2 and "--ca and --insecure exclude each other" in one_line(proc)
    nobody = free_port()
    plain = blink("watch", "X", "--server", f"mqtt://127.0.0.1:{nobody}", "--insecure")
    assert plain.returncode == 1 and "cannot reach" in one_line(plain), "no word of a certificate on mqtt://"
    tls = blink("watch", "X", "--server", f"mqtts://127.0.0.1:{nobody}", "--insecure")
    assert tls.returncode == 1 and "warning: --insecure" in tls.stderr.splitlines()[0]


@pytest.mark.integration
def test_the_plot_hint_says_what_installs_matplotlib_for_a_user_of_a_checkout(tmp_path: Path) -> None:
    # A matplotlib that cannot be imported, ahead of the real one on the path.
    (tmp_path / "matplotlib").mkdir()
    (tmp_path / "matplotlib" / "__init__.py").write_text("raise ImportError('not installed')\n")
    proc = blink("latency", "--plot", str(tmp_path / "plot.png"), env={"PYTHONPATH": str(tmp_path)})
    assert proc.returncode == 1
    line = one_line(proc)
    assert "pip install matplotlib" in line and "pip install '.[bench]'" in line and "blink-race[" not in line
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(dep.startswith("matplotlib") for dep in extras["bench"]), "'.[bench]' installs matplotlib"
    assert not (tmp_path / "plot.png").exists()


@pytest.mark.integration
def test_cluster_up_without_nkeys_is_one_line_that_names_what_installs_it(tmp_path: Path) -> None:
    # An nkeys that cannot be imported, ahead of the real one on the path.
    (tmp_path / "nkeys.py").write_text("raise ImportError('not installed')\n")
    proc = blink("cluster", "up", "--dir", str(tmp_path / "c"), env={"PYTHONPATH": str(tmp_path)})
    assert proc.returncode == 1
    line = one_line(proc)
    assert "pip install nkeys" in line and "blink-race[" not in line, line
    assert not (tmp_path / "c" / "cluster.json").exists(), "no cluster recorded, so none to take down"


# ------------------------------------------------------------------------------------ grace_s


def test_grace_s_is_accepted_where_the_relay_accepts_it() -> None:
    from protocol import messages as m
    from protocol.rules import game_for
    from tests.test_relay_core import Harness, T

    for value in (0, 0.5, 30, 60, 600, 600.5, -1, "60", True, None, float("nan"), float("inf")):
        h = Harness()
        out = h.send(T.req("a"), m.CreateMatch(name="ann", settings={"grace_s": value}))
        relay_took = any(isinstance(x, m.MatchJoined) for x in h.to("a", out))
        try:
            game_for("blink").check_new_match({"grace_s": value}, 2)
            client_took = True
        except ValueError:
            client_took = False
        assert client_took == relay_took, value


@pytest.mark.integration
def test_a_match_with_grace_s_runs_and_blink_settings_lists_it() -> None:
    proc = blink("match", "--settings", json.dumps({**FAST, "grace_s": 60}), "--seed", "5", timeout=300)
    assert proc.returncode == 0, proc.stderr
    listed = blink("settings", "sequence")
    assert listed.returncode == 0
    assert "grace_s" in listed.stdout and "a number of seconds from 0 to 600; default 30" in listed.stdout
    refused = blink("match", "--settings", '{"grace_z": 1}')
    assert refused.returncode == 2 and "grace_s" in one_line(refused), "the unknown-setting line names it too"


# ------------------------------------------------------------------------------------ no relay: 1, at once


def needing_a_relay(url: str, tmp: Path) -> list[list[str]]:
    """Every way to ask a broker for a relay's service from the command line (the window's are
    ``blink play --server``: checked before the window opens, so no display is needed)."""
    return [
        ["bot", "--server", url],
        ["bot", "--server", url, "--create"],
        ["bot", "--server", url, "--match", "ABCDE"],
        ["match", "--server", url],
        ["latency", "--server", url, "--matches", "1", "--duration", "1"],
        ["load", "--server", url, "--matches", "1", "--duration", "1"],
        ["watch", "ABCDE", "--server", url],
        ["play", "--server", url],
        ["play", "--server", url, "--match", "ABCDE"],
        ["play", "--server", url, "--watch", "ABCDE"],
        ["play", "--server", url, "--quick"],
        ["play", "--server", url, "--host"],
    ]


def _no_relay_said_at_once(url: str, prefix: list[str], tmp: Path, times: dict[str, float]) -> None:
    topic = f"{prefix[1] if prefix else 'blink/v1'}/relay/+/status"
    env = {"DISPLAY": ":0.999"}  # a window would not open: none must be tried
    for argv in needing_a_relay(url, tmp):
        started = time.monotonic()
        proc = blink(*prefix, *argv, env=env)
        took = times[" ".join([*prefix, *argv]).replace(url, "URL")] = time.monotonic() - started
        assert proc.returncode == 1, (argv, proc.stderr)
        line = one_line(proc)
        assert f"no relay is online on {url}" in line and topic in line and "--prefix" in line, line
        assert "window" not in line and proc.stdout == "", (argv, proc.stdout)
        assert took < NO_RELAY_DEADLINE_S, (argv, took)


@pytest.mark.integration
def test_no_relay_is_said_at_once_by_every_command_that_needs_one(mosquitto: BrokerAddress, tmp_path: Path) -> None:
    times: dict[str, float] = {}
    _no_relay_said_at_once(mosquitto.url, [], tmp_path, times)
    serve = subprocess.Popen([*BLINK, "serve", "--broker", mosquitto.login_url, "--no-journal"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert "running" in (serve.stdout.readline() if serve.stdout else "")
        # A relay is there, under the default prefix: a command with another one sees none.
        _no_relay_said_at_once(mosquitto.url, ["--prefix", "other/v1"], tmp_path, times)
        proc = blink("bot", "--server", mosquitto.url, "--match", "ZZZZZ")  # the relay there answers
        assert proc.returncode == 1 and "the relay refused: no_such_match" in one_line(proc)
    finally:
        serve.send_signal(signal.SIGINT)
        serve.communicate(timeout=60)
    print("\nno relay said in (s):", json.dumps({k: round(v, 2) for k, v in times.items()}, indent=1))


# ------------------------------------------------------------------------------------ Ctrl-C: 130


def _terminal_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.integration
def test_ctrl_c_is_130_without_a_traceback(mosquitto: BrokerAddress) -> None:
    serve = subprocess.Popen([*BLINK, "serve", "--broker", mosquitto.login_url, "--no-journal"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    started: list[subprocess.Popen[str]] = []
    try:
        assert "running" in (serve.stdout.readline() if serve.stdout else "")
        # As from a terminal: Ctrl-C's default disposition, even where this suite was started in the
        # background of a shell without job control (which hands its children SIGINT ignored).
        host = subprocess.Popen([*BLINK, "bot", "--server", mosquitto.url, "--create"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, preexec_fn=_terminal_sigint)
        started.append(host)
        first = host.stdout.readline() if host.stdout else ""
        assert " in match " in first, first
        code = first.split(" in match ")[1].split()[0]
        watcher = subprocess.Popen([*BLINK, "watch", code, "--server", mosquitto.url], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, preexec_fn=_terminal_sigint)
        started.append(watcher)
        assert "watching" in (watcher.stderr.readline() if watcher.stderr else "")
        for proc in (watcher, host):  # each waiting: the host for an opponent, the watcher for events
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=60)
            assert proc.returncode == 130 and "Traceback" not in err, err
    finally:
        for proc in started:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        serve.send_signal(signal.SIGINT)
        serve.communicate(timeout=60)


def test_a_name_the_relay_would_cut_is_refused_and_one_it_keeps_is_not() -> None:
    from client.cli import args as argtypes
    from relay.judge.lobby import _clean_name

    longest = "x" * argtypes.NAME_CHARS
    assert argtypes.player_name(longest) == longest == _clean_name(longest)
    assert _clean_name(longest + "y") != longest + "y"
    with pytest.raises(argparse.ArgumentTypeError):
        argtypes.player_name(longest + "y")


def test_grace_limits_are_the_relay_s() -> None:
    from protocol.rules.base import MATCH_SETTINGS, MAX_GRACE_S
    from relay.judge import lobby

    assert lobby.MAX_GRACE_S == MAX_GRACE_S and lobby._grace(None) == MATCH_SETTINGS["grace_s"]


def test_prefixes_the_relay_can_use_are_taken() -> None:
    from client.cli import args as argtypes

    for good in ("blink/v1", "game/test", "a", "school-1/v2", "é/ü"):
        assert argtypes.topic_prefix(good) == good
    for bad in ("", "a/#", "+", "a//b", "/a", "a/", "$SYS", "a b", "a\tb", "a\x00"):
        with pytest.raises(argparse.ArgumentTypeError):
            argtypes.topic_prefix(bad)


@pytest.mark.integration
def test_grace_s_from_the_command_line_starts_a_game_from_the_menu(xdisplay: str) -> None:  # noqa: F811
    """``blink play --settings '{"grace_s": 60}'`` opens the menu with those settings: choosing a
    game there checks them as the relay does, so the game starts and its seat waits 60 s."""
    import asyncio

    from pyglet.window import key

    from tests.test_window import make_app, press, started, stop, until

    async def scenario() -> tuple[str, float]:
        app = make_app(mode="menu", settings={**FAST, "grace_s": 60})
        task = await started(app)
        try:
            await until(app, lambda: app.session.status == "ready")
            press(app, key.B)
            await until(app, lambda: app.session.status == "playing" or app.scene.name == "menu"
                        and bool(getattr(app.scene, "error", "")))
            error = str(getattr(app.scene, "error", "")) if app.scene.name == "menu" else ""
            code = app.session.player.model.match if app.session.player else None
            grace = float(app.session.server.relay.core.matches[code].grace_s) if code else 0.0
        finally:
            await stop(app, task)
        return error, grace

    error, grace = asyncio.run(asyncio.wait_for(scenario(), SCENARIO_S))
    assert error == "" and grace == 60.0


def test_the_join_command_blink_lan_suggests_names_the_host_s_prefix() -> None:
    from client.cli import build_parser, command_of
    from client.lan import Host, LanMatch, table

    for prefix, words in (("blink/v1", []), ("school/v1", ["--prefix", "school/v1"])):
        host = Host("desk relay-0", "192.168.1.5", 1883, "relay-0", (LanMatch("ABCDE", "blink", 1, 2),), 1,
                    prefix=prefix)
        line = table([host]).splitlines()[-1]
        argv = line.removeprefix("join: blink ").split()
        assert argv == [*words, "play", "--server", "mqtt://192.168.1.5:1883", "--match", "ABCDE"], line
        args = build_parser(command_of(argv)).parse_args(argv)
        assert (args.prefix, args.server, args.match) == (prefix, "mqtt://192.168.1.5:1883", "ABCDE")
