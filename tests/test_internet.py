"""A friend over the internet: a host whose broker faces the network with TLS alone.

Two network namespaces joined by a veth pair (tests/test_lan.py makes them) stand for the host's
machine (A) and a friend's far away (B). In A, ``blink serve --host 127.0.0.1 --tls-host 0.0.0.0``
runs its broker -- Mosquitto, and the embedded one -- with the plain listener on loopback, for the
relay, and the TLS one on every interface, with a certificate that names A's address. From B the
plain port is closed; over ``mqtts://`` with the test CA a bot creates a match and another bot, or
the window under Xvfb (``--autoplay``), joins it and plays it to the end. A host with no address
but loopback says that nobody else can reach it. No packet leaves the namespaces.
"""

from __future__ import annotations

import re
import signal
import subprocess
from pathlib import Path

import pytest

from tests.conftest import find_mosquitto
from tests.test_lan import Namespaces, netns  # noqa: F401 - the namespace fixture
from tests.test_window import SCENARIO_S, xdisplay  # noqa: F401 - the X server fixture
from tests.tlscerts import Certs, make_certs

TLS_PORT = 8884  # not the default: --tls-port is what puts it there
PLAIN_PORT = 1883
LONG = 120.0
WINDOW_S = 300.0  # at most this long for the window's whole match, on a busy machine

pytestmark = pytest.mark.timeout(600)


def _brokers() -> list[tuple[str, ...]]:
    return [(), ("--embedded",)] if find_mosquitto() else [("--embedded",)]


class Host:
    """``blink serve`` in namespace A: plain MQTT on loopback, TLS on every interface."""

    def __init__(self, spaces: Namespaces, certs: Certs, broker: tuple[str, ...]) -> None:
        self.spaces = spaces
        self.url = f"mqtts://{spaces.A_ADDR}:{TLS_PORT}"
        self.lines = spaces.start(spaces.a, "-m", "client.cli", "serve", "--no-journal", "--host", "127.0.0.1",
                                  "--port", str(PLAIN_PORT), "--tls-host", "0.0.0.0", "--tls-port", str(TLS_PORT),
                                  "--tls-cert", certs.good.cert, "--tls-key", certs.good.key, "--seed", "7", *broker)
        self.running = self.lines.wait_for(" running with ", timeout=LONG)

    def stop(self) -> None:
        self.lines.proc.send_signal(signal.SIGINT)
        assert self.lines.proc.wait(timeout=60) == 130, self.lines.seen


def _reach(spaces: Namespaces, ns: str, address: str, port: int) -> str:
    """What a TCP connection from namespace ``ns`` to address:port meets: "open" or the error's name."""
    probe = ("import socket,sys\n"
             "try:\n"
             f"    socket.create_connection(({address!r}, {port}), timeout=10).close(); print('open')\n"
             "except OSError as exc:\n"
             "    print(type(exc).__name__)\n")
    done = subprocess.run(spaces.cmd(ns, "-c", probe), capture_output=True, text=True, timeout=60)
    return done.stdout.strip()


def _code(bot_line: str) -> str:
    found = re.search(r" in match (\S+) ", bot_line)
    assert found is not None, bot_line
    return found.group(1)


@pytest.fixture
def certs(netns: Namespaces, tmp_path: Path) -> Certs:  # noqa: F811
    return make_certs(tmp_path / "certs", also=(netns.A_ADDR,))


@pytest.mark.integration
@pytest.mark.parametrize("broker", _brokers(), ids=lambda b: "embedded" if b else "mosquitto")
def test_a_friend_plays_over_tls_while_the_plain_port_stays_on_loopback(
        netns: Namespaces, certs: Certs, broker: tuple[str, ...]) -> None:  # noqa: F811
    spaces = netns
    host = Host(spaces, certs, broker)
    # The running line says where each listener is and who can reach it.
    assert ("embedded broker" if broker else "Mosquitto broker") in host.running
    assert f"on mqtt://127.0.0.1:{PLAIN_PORT} (this machine only) and mqtts://0.0.0.0:{TLS_PORT} (every " \
           "interface)" in host.running, host.running

    # From the friend's side only TLS is there; on the host, plain MQTT is on loopback alone.
    assert _reach(spaces, spaces.b, spaces.A_ADDR, PLAIN_PORT) == "ConnectionRefusedError"
    assert _reach(spaces, spaces.b, spaces.A_ADDR, TLS_PORT) == "open"
    assert _reach(spaces, spaces.a, spaces.A_ADDR, PLAIN_PORT) == "ConnectionRefusedError"
    assert _reach(spaces, spaces.a, "127.0.0.1", PLAIN_PORT) == "open"
    plain = spaces.blink(spaces.b, "bot", "--server", f"mqtt://{spaces.A_ADDR}:{PLAIN_PORT}", "--create")
    assert plain.returncode == 1 and len(plain.stderr.strip().splitlines()) == 1, plain.stderr

    # The friend creates a match over TLS; another player joins it by code and they play it out.
    creator = spaces.start(spaces.b, "-m", "client.cli", "bot", "--server", host.url, "--ca", certs.ca, "--create",
                           "--game", "takeaway", "--name", "friend", "--reaction", "0.05", "--seed", "1")
    code = _code(creator.wait_for(" in match ", timeout=LONG))
    joiner = spaces.blink(spaces.b, "bot", "--server", host.url, "--ca", certs.ca, "--match", code, "--name", "far",
                          "--reaction", "0.05", "--seed", "2", timeout=LONG)
    assert joiner.returncode == 0, joiner.stderr
    assert f" in match {code} " in joiner.stdout and "match over: winner " in joiner.stdout, joiner.stdout
    assert creator.proc.wait(timeout=LONG) == 0, creator.seen
    creator.wait_for("match over: winner ")
    host.stop()


@pytest.mark.integration
def test_a_friend_joins_in_the_window_over_tls_and_plays_to_the_end(
        netns: Namespaces, certs: Certs, xdisplay: str, tmp_path: Path) -> None:  # noqa: F811
    spaces = netns
    host = Host(spaces, certs, _brokers()[0])  # Mosquitto where it is installed
    creator = spaces.start(spaces.b, "-m", "client.cli", "bot", "--server", host.url, "--ca", certs.ca, "--create",
                           "--name", "friend", "--reaction", "0.2", "--seed", "1")
    code = _code(creator.wait_for(" in match ", timeout=LONG))
    shot = tmp_path / "friend_window.png"
    window = spaces.start(spaces.b, "-m", "client.cli", "play", "--server", host.url, "--ca", certs.ca, "--match", code,
                          "--name", "far", "--autoplay", "--mute", "--quit-after", str(WINDOW_S), "--screenshot",
                          str(shot))
    # The bot's match ends with a verdict only if the window's player took the other seat and played.
    creator.wait_for("match over: winner ", timeout=WINDOW_S)
    assert creator.proc.wait(timeout=LONG) == 0, creator.seen
    assert window.proc.poll() is None, window.seen  # still open: it played, and did not give up
    window.proc.terminate()  # SIGTERM: the window quits, saving its screenshot
    assert window.proc.wait(timeout=LONG) == 0, window.seen
    assert shot.stat().st_size > 0
    host.stop()


@pytest.mark.integration
def test_a_lan_host_without_an_address_but_loopback_says_nobody_else_can_reach_it(netns: Namespaces) -> None:  # noqa: F811
    spaces = netns  # namespace C has loopback alone
    host = spaces.start(spaces.c, "-m", "client.cli", "serve", "--lan", "--no-journal", "--embedded")
    said = host.wait_for("LAN host: ", timeout=LONG)
    assert said == ("LAN host: this machine has no LAN address (no network interface but loopback is up): nobody "
                    "else can reach it yet; listening on 0.0.0.0:1883"), said
    host.wait_for(" running with ", timeout=LONG)
    # No multicast either: not advertised, and no address to give friends.
    assert "friends" not in host.wait_for("not advertised on the local network", timeout=LONG)
    assert not any("friends join with" in line for line in host.seen), host.seen
    host.proc.send_signal(signal.SIGINT)
    assert host.proc.wait(timeout=60) == 130
