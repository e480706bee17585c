"""``blink broker-config DIR`` then ``mosquitto -c DIR/mosquitto.conf``, as the README gives it,
with the real Mosquitto: in a folder closed to everyone else (mode 700, as a home folder is) the
broker still reads its password file and certificate -- started by root it runs as a user that
can -- and with ``--tls-host`` the TLS listener is on its own address. Both listeners here are on
loopback addresses (127.0.0.1 plain, 127.0.0.2 TLS): nothing listens beyond this machine."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from mqttkit import PortInUse, check_port, free_port, parse_url
from relay.hosting import broker_user
from tests.conftest import require, wait_port
from tests.helpers import stop_process
from tests.test_tls import BLINK, QUICK_MATCH, _played, blink
from tests.tlscerts import make_certs

TLS_HOST = "127.0.0.2"  # a loopback address of its own: the TLS listener apart from the plain one


def _refused(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=10).close()
    except ConnectionRefusedError:
        return True
    return False


def _free_on_both() -> int:
    """A port free on 127.0.0.1 and on TLS_HOST: nothing may answer on the address the TLS listener is not on."""
    while True:
        port = free_port()
        try:
            check_port(TLS_HOST, port)
        except PortInUse:
            continue
        return port


@pytest.fixture
def closed_home() -> Iterator[Path]:
    """A folder only its owner may enter, as ``~`` is."""
    home = Path(tempfile.mkdtemp(prefix="blink-home-"))
    home.chmod(0o700)
    try:
        yield home
    finally:
        shutil.rmtree(home, ignore_errors=True)


@pytest.mark.integration("mosquitto")
def test_the_readme_recipe_runs_in_a_closed_folder_with_tls_on_its_own_address(closed_home: Path) -> None:
    binary = require("mosquitto")
    certs = make_certs(closed_home / "certs", also=(TLS_HOST,))
    for f in (certs.good.key,):
        Path(f).chmod(0o600)  # as a real key is: its owner's alone
    directory = closed_home / "blink-mosquitto"
    port, tls_port = free_port(), _free_on_both()
    made = blink("broker-config", str(directory), "--port", str(port), "--tls-host", TLS_HOST, "--tls-port",
                 str(tls_port), "--tls-cert", certs.good.cert, "--tls-key", certs.good.key)
    assert made.returncode == 0, made.stderr
    login = parse_url(made.stdout.strip())  # the relay's URL, alone on stdout
    conf = (directory / "mosquitto.conf").read_text().splitlines()
    assert f"listener {port} 127.0.0.1" in conf and f"listener {tls_port} {TLS_HOST}" in conf
    if os.geteuid() == 0:  # its own user cannot enter the folder: it runs as the folder's owner
        assert "user root" in conf and "runs as user root" in made.stderr, (conf, made.stderr)
    assert (directory / "passwd").stat().st_mode & 0o777 == 0o600

    mosquitto = subprocess.Popen([binary, "-c", str(directory / "mosquitto.conf")], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, text=True)
    serve = None
    try:
        try:
            wait_port("127.0.0.1", port, timeout=30)
            wait_port(TLS_HOST, tls_port, timeout=30)
        except TimeoutError:
            stop_process(mosquitto)
            raise AssertionError(f"Mosquitto did not listen: {mosquitto.stderr.read() if mosquitto.stderr else ''}")
        assert _refused(TLS_HOST, port), "the plain listener is on 127.0.0.1 alone"
        assert _refused("127.0.0.1", tls_port), "the TLS listener is on its own address alone"
        # The relay logs in with the password Mosquitto read; a match is played over TLS.
        serve = subprocess.Popen([*BLINK, "serve", "--no-journal", "--broker", login.login_url],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = serve.stdout.readline() if serve.stdout else ""
        assert "running with broker" in line, \
            line + (serve.stderr.read() if serve.poll() is not None and serve.stderr else "")
        _played(blink(*QUICK_MATCH, "--server", f"mqtts://{TLS_HOST}:{tls_port}", "--ca", certs.ca))
    finally:
        if serve is not None:
            stop_process(serve)
        stop_process(mosquitto)


def test_root_writes_for_mosquittos_own_user_where_it_can_read_the_files(closed_home: Path) -> None:
    if os.geteuid() != 0:
        assert broker_user(closed_home) is None  # anyone else: Mosquitto keeps whoever starts it
        return
    try:
        own = pwd.getpwnam("mosquitto")
    except KeyError:
        pytest.skip("no user mosquitto on this machine")
    open_dir = Path(tempfile.mkdtemp(prefix="blink-open-"))
    try:
        open_dir.chmod(0o755)
        assert broker_user(open_dir) == own
        key = open_dir / "key.pem"
        key.write_text("k")
        key.chmod(0o600)  # root's alone: Mosquitto's own user cannot read it
        assert broker_user(open_dir, (key,)).pw_uid == 0  # type: ignore[union-attr]
        assert broker_user(closed_home).pw_uid == 0  # type: ignore[union-attr]  # the folder's owner
    finally:
        shutil.rmtree(open_dir, ignore_errors=True)
