"""A local embedded broker + relay in a child process of its own (what ``blink play`` runs).

How this works
--------------
``blink play`` without ``--server`` needs a broker and a relay on this machine. In the window's
process they would share one event loop (and one GIL) with the drawing, the bots and your player,
and on a busy machine the window's frames would delay every message the relay judges. So the
window starts them here, in a child process (``python -m relay.hosting.localchild``, whose code is in
relay/hosting/localchild.py so that it may import ``relay.hosting.local`` without an import circle), and talks to them
only over MQTT on loopback, like any other client.

Parent side, ``ChildServer`` (same surface as ``relay.hosting.local.LocalServer`` where the window uses
it: ``address``, ``broker.host``/``broker.port``, ``start``/``stop``, ``async with``, ``task``):
``start`` spawns the child with its settings (plain data: one JSON line on the child's stdin) and waits
for one JSON line on the child's stdout: ``{"ready": true, "host": ..., "port": ...}`` or
``{"error": "..."}``. ``task`` is done when the child has exited; ``lost`` then says why, in one
line, if the parent did not ask it to stop. ``stop`` closes the child's stdin (it stops its relay
and broker and exits), then terminates and finally kills it if it takes too long.

Child side, ``relay.hosting.localchild.main``: no orphan, whatever happens to the parent --

- ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` (Linux, through ctypes): the kernel kills the child when
  the parent dies, even by SIGKILL; a parent that died before the call is caught by comparing
  ``getppid()`` with the pid the parent passed. (The kernel ties it to the parent *thread* that
  started the child: start it from the thread that runs the event loop for the whole session --
  ``blink play``'s main thread.);
- the child reads its stdin until EOF: the parent's end of that pipe closes when the parent exits
  in any way (on every platform), and the child then stops;
- Ctrl-C in a terminal signals its foreground process group: the child runs in a session of its
  own (and ignores SIGINT anyway), so the parent alone decides, and stops it in order (after your
  player has left the match) -- even a Ctrl-C while the child is still starting cannot break it.

The protocol line goes to a private copy of the child's stdout; the child's ``sys.stdout`` is
pointed at stderr so nothing the relay prints can be mistaken for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
from dataclasses import dataclass
from typing import IO, TypedDict

from mqttkit import DEFAULT_MAX_PAYLOAD, BrokerAddress
from protocol.topics import Topics
from relay.model import RelayConfig

#: How long the child may take to start (a busy machine imports amqtt slowly).
START_TIMEOUT_S = 90.0
#: How long ``stop`` waits for an orderly exit before it terminates, then kills, the child.
STOP_GRACE_S = 5.0

PR_SET_PDEATHSIG = 1

#: Loggers whose levels the child takes over from its parent ("" is the root).
LOGGERS = ("", "amqtt", "transitions", "blink.relay", "blink", "zeroconf")


class TopicsLine(TypedDict):
    """A ``Topics`` as plain data."""

    prefix: str
    shard: str


class LocalChildSettings(TypedDict):
    """The settings line ``ChildServer`` sends ``relay.hosting.localchild`` (JSON)."""

    seed: int | None
    config: dict[str, object] | None  # ``RelayConfig.to_plain``
    host: str
    port: int | None
    topics: TopicsLine
    max_payload: int
    log_levels: dict[str, int]  # logger name ("" the root): level


@dataclass(frozen=True)
class BrokerInfo:
    """Where the child's embedded broker listens (what ``LocalServer.broker`` tells the window)."""

    host: str
    port: int


def child_settings(argv: list[str], bad_status: int) -> tuple[dict[str, object], IO[str]] | int:
    """The start of a child this module's parents run (``relay.hosting.localchild``):
    die with the parent, leave SIGINT to it, keep the real stdout for answers (stray prints go to
    stderr) and read the settings' JSON line from stdin. An exit status instead when there is
    nothing to read (0) or the line is unreadable (``bad_status``, the parent told why in one line)."""
    parent = int(argv[0]) if argv and argv[0].isdigit() else os.getppid()
    die_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when we stop
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    line = sys.stdin.buffer.readline()
    if not line:
        return 0  # the parent went away before telling us anything
    try:
        settings = json.loads(line)
        if not isinstance(settings, dict):
            raise ValueError(f"a JSON object was expected, not {type(settings).__name__}")
    except ValueError as exc:
        out.write(json.dumps({"error": f"bad settings from the parent: {exc!r}"}) + "\n")
        out.flush()
        return bad_status
    return settings, out


def die_with_parent(parent_pid: int) -> None:
    """Ask the kernel to SIGKILL this process when its parent dies (Linux); exit at once if the
    parent is already gone (it died before the request took effect)."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass  # the stdin watch below still ends us
    if os.getppid() != parent_pid:
        os._exit(0)


class ChildServer:
    """An embedded broker + relay in a child process; ``address`` is where players connect."""

    def __init__(self, seed: int | None = None, config: RelayConfig | None = None, host: str = "127.0.0.1",
                 port: int | None = None, topics: Topics | None = None, max_payload: int = DEFAULT_MAX_PAYLOAD) -> None:
        # The child logs as this process does (``blink`` quiets the broker and relay unless --verbose).
        levels = {name: logging.getLogger(name or None).getEffectiveLevel() for name in LOGGERS}
        topics = topics or Topics()
        #: Plain data (``relay.hosting.localchild`` reads it back); a game variant cannot cross: ValueError here.
        self._settings: LocalChildSettings = {"seed": seed, "config": None if config is None else config.to_plain(), "host": host,
                          "port": port, "topics": {"prefix": topics.prefix, "shard": topics.shard},
                          "max_payload": max_payload, "log_levels": levels}
        self.broker: BrokerInfo | None = None
        self.address: BrokerAddress | None = None
        self.proc: asyncio.subprocess.Process | None = None
        #: Why the child ended without being asked to (one line), once it has.
        self.lost: str | None = None
        self._stopping = False
        self._task: asyncio.Task[int] | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def task(self) -> asyncio.Task[int] | None:
        """Done when the child has exited (asked to or not: see ``lost``)."""
        return self._task

    async def __aenter__(self) -> ChildServer:
        try:
            await self.start()
        except BaseException:
            await self.stop()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        settings = json.dumps(self._settings)
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "relay.hosting.localchild", str(os.getpid()),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            start_new_session=True)  # out of the terminal's process group: Ctrl-C is the parent's to handle
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(settings.encode() + b"\n")
        await self.proc.stdin.drain()
        try:
            line = await asyncio.wait_for(self.proc.stdout.readline(), timeout=START_TIMEOUT_S)
        except asyncio.TimeoutError:
            raise ConnectionError(f"the local relay did not start within {START_TIMEOUT_S:.0f} s") from None
        try:
            answer = json.loads(line) if line else {"error": "it exited while starting (see above)"}
        except ValueError:
            answer = {"error": f"it said {line[:200]!r}"}
        if not answer.get("ready"):
            raise ConnectionError(f"the local relay could not start: {answer.get('error', 'no reason given')}")
        self.broker = BrokerInfo(str(answer["host"]), int(answer["port"]))
        self.address = BrokerAddress("127.0.0.1" if self.broker.host == "0.0.0.0" else self.broker.host,
                                     self.broker.port)
        self._task = asyncio.create_task(self._watch())

    async def _watch(self) -> int:
        assert self.proc is not None
        code = await self.proc.wait()
        if not self._stopping:
            how = f"killed by signal {-code}" if code < 0 else f"exit status {code}"
            self.lost = f"the local relay stopped unexpectedly ({how}, pid {self.proc.pid})"
        return code

    async def stop(self) -> None:
        self._stopping = True
        proc = self.proc
        if proc is None or proc.returncode is not None:
            return
        if proc.stdin is not None:
            with contextlib.suppress(Exception):
                proc.stdin.close()  # EOF: the child stops its relay and broker and exits
        for step in (None, signal.SIGTERM, signal.SIGKILL):
            if step is not None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(step)
            try:
                await asyncio.wait_for(proc.wait(), timeout=STOP_GRACE_S if step is None else 5.0)
                break
            except asyncio.TimeoutError:
                continue
        if self._task is not None:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(self._task, timeout=1)
