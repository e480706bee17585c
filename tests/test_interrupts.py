"""Ctrl-C ends every ``blink`` command with status 130, after a clean stop.

Each command runs as a real process and gets SIGINT once it is doing its work (a condition waited
for, never a sleep): ``serve`` says it stopped, ``latency`` stops its bots and prints no report (a
partial measurement is not a result), ``replay`` closes its window. SIGTERM, a service manager's
stop, still ends ``serve`` with 0. ``play`` is covered in tests/test_play_isolation.py (with its relay
child) and ``match``, ``load``, ``watch`` and ``bot`` in their own tests.
"""

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
from tests.helpers import wait_until
from tests.test_replay import played  # noqa: F401 - the fixture
from tests.test_window import LONG, xdisplay  # noqa: F401 - the fixture

ROOT = Path(__file__).resolve().parent.parent
BLINK = [sys.executable, "-m", "client.cli"]
pytestmark = [pytest.mark.timeout(4 * LONG), pytest.mark.integration]


def _start(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([*BLINK, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env=env)


def _serve(log: Path | None = None) -> tuple[subprocess.Popen[str], str]:
    port = free_port()
    serve = _start("serve", "--port", str(port), "--no-journal", *(["--log", str(log)] if log else []))
    assert serve.stdout is not None and "running" in serve.stdout.readline()
    return serve, f"mqtt://127.0.0.1:{port}"


def _records(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip().endswith("}")]


@pytest.mark.parametrize("sig,status", [(signal.SIGINT, 130), (signal.SIGTERM, 0)])
def test_serve_stops_in_order_on_a_signal_and_ctrl_c_is_130(sig: int, status: int) -> None:
    serve, _ = _serve()
    serve.send_signal(sig)
    out, err = serve.communicate(timeout=LONG)
    assert serve.returncode == status, err
    assert "blink relay stopped." in out and "Traceback" not in err


def test_latency_interrupted_is_130_with_no_report(tmp_path: Path) -> None:
    log = tmp_path / "relay.jsonl"
    serve, url = _serve(log)
    try:
        latency = _start("latency", "--server", url, "--duration", "600", "--matches", "1", "--json")
        try:
            wait_until(lambda: any(r.get("kind") == "applied" for r in _records(log)), timeout=LONG,
                       what="the measured bots to be playing")
            latency.send_signal(signal.SIGINT)
            out, err = latency.communicate(timeout=LONG)
        finally:
            if latency.poll() is None:
                latency.kill()
                latency.communicate()
        assert latency.returncode == 130, err
        assert out == ""  # no JSON object a script could take for a finished measurement
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1 and "interrupted after" in lines[0] and "no report" in lines[0], err
    finally:
        serve.send_signal(signal.SIGINT)
        serve.communicate(timeout=LONG)
    assert serve.returncode == 130


def _windows(display: str) -> str:
    return subprocess.run(["xwininfo", "-root", "-tree", "-display", display], capture_output=True, text=True,
                          timeout=LONG).stdout


@pytest.mark.integration
def test_replay_closes_its_window_on_ctrl_c_with_130(xdisplay: str, played: Any, tmp_path: Path) -> None:  # noqa: F811
    log = tmp_path / "blink.jsonl"
    log.write_text("\n".join(played["blink"][0]) + "\n")
    replay = _start("replay", str(log), "--mute", env={**os.environ, "DISPLAY": xdisplay})
    try:
        wait_until(lambda: "BLINK — blink" in _windows(xdisplay) or replay.poll() is not None, timeout=LONG,
                   what="the replay window")
        assert replay.poll() is None, replay.communicate()
        replay.send_signal(signal.SIGINT)
        _, err = replay.communicate(timeout=LONG)
    finally:
        if replay.poll() is None:
            replay.kill()
            replay.communicate()
    assert replay.returncode == 130 and "Traceback" not in err, err
    assert "BLINK — blink" not in _windows(xdisplay)


def test_a_sweep_interrupted_at_a_later_step_is_130_with_no_report(tmp_path: Path) -> None:
    log = tmp_path / "relay.jsonl"
    serve, url = _serve(log)
    try:
        # One match a step: a second match code in the relay's log means the first step is done.
        latency = _start("latency", "--server", url, "--sweep", "0,20", "--games", "1", "--duration", "600",
                         "--matches", "1", "--json")
        try:
            wait_until(lambda: len({r.get("match") for r in _records(log) if r.get("kind") == "applied"}) >= 2,
                       timeout=2 * LONG, what="the sweep's second step to be playing")
            latency.send_signal(signal.SIGINT)
            out, err = latency.communicate(timeout=LONG)
        finally:
            if latency.poll() is None:
                latency.kill()
                latency.communicate()
        assert latency.returncode == 130, err
        assert out == ""  # the finished first step is not reported either: a partial curve is not a result
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1 and "interrupted after" in lines[0] and "no report" in lines[0], err
    finally:
        serve.send_signal(signal.SIGINT)
        serve.communicate(timeout=LONG)
    assert serve.returncode == 130
