"""The load generator's settings, limits and pure helpers (``client/tools/load.py`` runs it).

How this works
--------------
``LoadConfig`` is one run as ``blink load`` describes it; ``check_config`` refuses what cannot
work before anything starts (too many matches for the embedded broker, a relay pid that is no
process, a game that is not for two). The limits and timeouts below are shared by the run and its
players. ``percentiles`` and the ``/proc`` readers are the report's arithmetic.
"""

from __future__ import annotations

import math
import os
import resource
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypedDict

from mqttkit import TLSTrust

from protocol import messages as m
from protocol.codec import encode
from protocol.rules import game_for
from protocol.topics import Topics
from client import ClientError

MAX_MATCHES = 10_000
#: The embedded amqtt broker of ``blink serve`` accepts 1,000 connections (two per match, plus the
#: relay and a little room).
EMBEDDED_MAX_MATCHES = 495
MAX_IN_FLIGHT = 3  # plays awaiting a verdict, as client/bots.py
#: Decoded events one player of a match keeps for the other, at most (see ``LoadPlayer.on_event``).
SHARED_EVENTS = 64
CONNECTS_IN_FLIGHT = 64
SETUPS_IN_FLIGHT = 32
LAG_PERIOD_S = 0.05
#: A player's timer due this soon after the one being run goes with it (one loop wake-up, not two).
TIMER_SLACK_S = 0.0005
START_SPREAD_S = 1.0
GRACE_S = 5.0
RELAY_WAIT_S = 3.0
REQUEST_TIMEOUT_S = 15.0
CONNECT_TIMEOUT_S = 10.0
SERVE_START_S = 30.0
CLOSE_TIMEOUT_S = 20.0
KEEPALIVE_S = 60
#: The packet id of a player's one unawaited SUBSCRIBE (its match's topics); awaited ones count up from 1.
SUBSCRIBE_PID = 0xFFFF
LEAVE = encode(m.Leave())  # a player's last will, and what it says when it leaves


class LoadError(ClientError, RuntimeError):
    """The run cannot go on (unreachable broker, no relay, bad arguments); one readable line."""


@dataclass
class LoadConfig:
    matches: int
    game: str = "blink"
    pace: str = "human"  # human | max
    duration_s: float = 30.0
    server: str | None = None
    trust: TLSTrust = field(default_factory=TLSTrust)  # whom an mqtts:// server believes (--ca, --insecure)
    seed: int | None = None
    relay_pid: int | None = None
    reaction_s: float = 0.35
    ping_s: float = 1.0
    grace_s: float = GRACE_S  # how long verdicts may still come after the window closes
    timeout_s: float = REQUEST_TIMEOUT_S  # a connect or a create/join with no answer by then fails
    topics: Topics = field(default_factory=Topics)


# ------------------------------------------------------------------------------------ pure helpers


Rank = Literal["p50", "p90", "p99", "max"]


class Spread(TypedDict, total=False):
    """Some nearest-rank percentiles of values in ms (the ``Rank``s asked for, None without values),
    and ``n``, how many values there were (always there, last)."""

    p50: float | None
    p90: float | None
    p99: float | None
    max: float | None
    n: int


def percentiles(values: list[float], keys: tuple[Rank, ...] = ("p50", "p90", "p99", "max")) -> Spread:
    """Nearest-rank percentiles of values in ms (so p50 <= p90 <= p99 <= max), rounded, with ``n``."""
    xs = sorted(values)
    n = len(xs)
    out: Spread = {}
    for k in keys:
        if not n:
            out[k] = None
        elif k == "max":
            out[k] = round(xs[-1], 3)
        else:
            q = float(k[1:])
            out[k] = round(xs[min(n - 1, max(0, math.ceil(q / 100.0 * n) - 1))], 3)
    out["n"] = n
    return out


def proc_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of a process (Linux /proc), or None."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def proc_rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except (OSError, IndexError, ValueError):
        pass
    return None


def check_config(cfg: LoadConfig) -> None:
    if not 1 <= cfg.matches <= MAX_MATCHES:
        raise LoadError(f"--matches must be from 1 to {MAX_MATCHES}, not {cfg.matches}")
    if cfg.server is None and cfg.matches > EMBEDDED_MAX_MATCHES:
        raise LoadError(f"without --server the embedded broker takes at most {EMBEDDED_MAX_MATCHES} matches; "
                        f"for {cfg.matches} run Mosquitto and `blink serve --broker mqtt://HOST:PORT`, then "
                        f"`blink load --server mqtt://HOST:PORT`")
    if cfg.relay_pid is not None and proc_cpu_s(cfg.relay_pid) is None:
        raise LoadError(f"--relay-pid {cfg.relay_pid}: no such process on this machine")
    game = game_for(cfg.game)
    if not game.min_players <= 2 <= game.max_players:
        raise LoadError(f"{cfg.game} is not a two-player game")


def raise_fd_limit(connections: int) -> None:
    """Each player is a socket: lift the soft file limit to what the run needs (up to the hard one)."""
    need = connections + 256
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= need:
        return
    if hard != resource.RLIM_INFINITY and hard < need:
        raise LoadError(f"{connections} connections need {need} open files, but this process may open {hard} "
                        f"(ulimit -n); use fewer --matches")
    resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))


def settings_for(game: str) -> dict[str, object]:
    """The game's own settings for short matches (the Game's ``quick_settings``)."""
    return dict(game_for(game).quick_settings)


# ------------------------------------------------------------------------------------ one player
