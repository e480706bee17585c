"""TLS on every connection: ``mqtts://`` URLs, the one client context (the system's CAs or
``--ca``, ``--insecure`` only by name), ``blink serve --tls-cert`` on the embedded broker and
``blink broker-config --tls-cert`` on Mosquitto, and every refusal in one line with its exit status
(2 for the command line, 1 at run time). The certificates are made here (tests/tlscerts.py)."""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mqttkit import (BadURL, BrokerAddress, TLSProblem, TLSTrust, check_tls_pair, connect_problem, free_port, parse_url,
                     tls_context, tls_refusal)
from mqttkit.lan import decode_txt, encode_txt
from relay.hosting.mosquitto import conf_text
from tests.conftest import require, wait_port
from tests.helpers import stop_process
from tests.test_lan import Namespaces, netns  # noqa: F401 - the fixture, used by name
from tests.tlscerts import Certs, Pair, make_certs

BLINK = [sys.executable, "-m", "client.cli"]
QUICK_MATCH = ["match", "--game", "takeaway", "--seed", "3", "--reaction", "0.02", "--json", "--timeout", "60"]


@pytest.fixture(scope="module")
def certs() -> Iterator[Certs]:
    # Mosquitto started as root reads them as its own user: not under pytest's mode-700 tmp.
    directory = Path(tempfile.mkdtemp(prefix="blink-tls-"))
    directory.chmod(0o755)
    try:
        yield make_certs(directory)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def blink(*args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*BLINK, *args], capture_output=True, text=True, timeout=timeout)


def one_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


# ------------------------------------------------------------------------------------ pure


def test_mqtts_urls_are_tls_addresses_with_the_port_8883_by_default() -> None:
    a = parse_url("mqtts://relay:s3cret@example.org")
    assert (a.host, a.port, a.username, a.password, a.tls) == ("example.org", 8883, "relay", "s3cret", TLSTrust())
    assert a.url == "mqtts://example.org:8883" and a.login_url == "mqtts://relay:s3cret@example.org:8883"
    assert a.public().tls == a.tls and a.public().username is None
    assert parse_url("ssl://h:1").tls is not None and parse_url("mqtt://h").tls is None
    assert parse_url("mqtts://h:9", TLSTrust("ca.pem")).tls == TLSTrust("ca.pem")
    assert BrokerAddress("h", 1).ssl_context() is None
    with pytest.raises(BadURL, match="mqtts://HOST:PORT"):
        parse_url("https://h:1")


def test_the_client_context_checks_certificate_and_host_name_unless_insecure_is_named(certs: Certs) -> None:
    checked = tls_context(certs.ca)
    assert checked.verify_mode == ssl.CERT_REQUIRED and checked.check_hostname
    assert tls_context(certs.ca) is checked, "one context per trust: the load generator opens hundreds"
    loose = tls_context(None, insecure=True)
    assert loose.verify_mode == ssl.CERT_NONE and not loose.check_hostname
    system = tls_context()
    assert system.verify_mode == ssl.CERT_REQUIRED and system.check_hostname
    with pytest.raises(TLSProblem, match="no such CA file"):
        tls_context(certs.ca + ".missing")
    with pytest.raises(TLSProblem, match="no usable PEM certificate"):
        tls_context(certs.good.key)


def test_a_refused_handshake_is_worded_for_a_person() -> None:
    text = "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: certificate has expired (_ssl.c:1006)"
    assert tls_refusal(text) == "the broker's certificate was refused: certificate has expired"
    assert tls_refusal("[Errno 111] Connection refused") is None
    assert "use mqtt://" in (tls_refusal("[SSL: WRONG_VERSION_NUMBER] wrong version number (_ssl.c:1006)") or "")
    plain = connect_problem(TimeoutError("Operation timed out"), BrokerAddress("h", 1))
    assert plain.endswith("(if the broker speaks TLS, use mqtts://)")
    assert "mqtts" not in connect_problem(TimeoutError("Operation timed out"), parse_url("mqtts://h"))


def test_a_server_certificate_and_key_are_checked_before_anything_starts(certs: Certs) -> None:
    assert check_tls_pair(None, None) is None
    assert check_tls_pair(certs.good.cert, certs.good.key) == (certs.good.cert, certs.good.key)
    for cert, key, says in [
        (certs.good.cert, None, "go together"),
        (certs.good.cert + ".missing", certs.good.key, "no such certificate file"),
        (certs.good.cert, certs.good.key + ".missing", "no such key file"),
        (certs.good.cert, certs.stray_key, "does not belong to the certificate"),
        (certs.good.key, certs.good.key, "cannot load the certificate"),
    ]:
        with pytest.raises(TLSProblem, match=says):
            check_tls_pair(cert, key)


def test_the_mosquitto_conf_gets_a_tls_listener_with_its_files(certs: Certs, tmp_path: Path) -> None:
    text = conf_text(tmp_path, "0.0.0.0", 1883, tls=(certs.good.cert, certs.good.key, 8883))
    lines = text.splitlines()
    at = lines.index("listener 8883 0.0.0.0")
    assert lines[at + 1:at + 3] == [f"certfile {certs.good.cert}", f"keyfile {certs.good.key}"]
    assert "listener 1883 0.0.0.0" in lines and "certfile" not in conf_text(tmp_path, "h", 1)
    # the TLS listener on an address of its own: plain MQTT on loopback, TLS facing the network
    apart = conf_text(tmp_path, "127.0.0.1", 1883, tls=(certs.good.cert, certs.good.key, 8883),
                      tls_host="0.0.0.0").splitlines()
    assert "listener 1883 127.0.0.1" in apart and "listener 8883 0.0.0.0" in apart


def test_the_lan_advert_names_the_scheme_only_for_tls() -> None:
    assert "s" not in encode_txt("relay-0", [])
    assert decode_txt(encode_txt("relay-0", [])).scheme == "mqtt"
    assert decode_txt(encode_txt("relay-0", [], scheme="mqtts")).scheme == "mqtts"
    assert decode_txt({b"relay": b"r", b"s": b"gopher"}).scheme == "mqtt"
    # what `blink lan` prints and the window's LAN games joins: the advertised scheme and port
    from client.lan import host_from_info
    from client.window.viewmodels import LanGames

    host = host_from_info("desk relay-0._blink._tcp.local.", 8883, ["192.168.1.5"],
                          encode_txt("relay-0", [], scheme="mqtts"))
    assert host is not None and host.url == "mqtts://192.168.1.5:8883"
    assert parse_url(host.url).tls is not None
    from relay.hosting.lanhost import lan_urls

    assert lan_urls(8883, "192.168.1.5", scheme="mqtts") == ["mqtts://192.168.1.5:8883"]
    assert lan_urls(1883, "192.168.1.5") == ["mqtt://192.168.1.5:1883"]
    games = LanGames()
    games.set_hosts([host])
    assert [r.url for r in games.rows() if r.kind == "host"] == [host.url]


@pytest.mark.integration
@pytest.mark.parametrize("argv, says", [
    (["serve", "--tls-cert", "{cert}"], "go together"),
    (["serve", "--tls-cert", "{cert}", "--tls-key", "{stray}"], "does not belong to the certificate"),
    (["serve", "--tls-cert", "{missing}", "--tls-key", "{key}"], "no such certificate file"),
    (["serve", "--tls-port", "9999"], "--tls-port goes with --tls-cert"),
    (["serve", "--tls-host", "0.0.0.0"], "--tls-host goes with --tls-cert"),
    (["serve", "--lan", "--tls-host", "127.0.0.1", "--tls-cert", "{cert}", "--tls-key", "{key}"],
     "--tls-host 127.0.0.1 is loopback: nobody else could reach it"),
    (["serve", "--tls-host", "0.0.0.0", "--tls-port", "1883", "--tls-cert", "{cert}", "--tls-key", "{key}"],
     "is the plain listener's --port too"),
    (["broker-config", "{dir}", "--tls-host", "0.0.0.0"], "--tls-host goes with --tls-cert"),
    (["broker-config", "{dir}", "--tls-host", "0.0.0.0", "--tls-port", "1883", "--tls-cert", "{cert}", "--tls-key",
      "{key}"], "is the plain listener's --port too"),
    (["serve", "--broker", "mqtt://127.0.0.1:1", "--tls-cert", "{cert}", "--tls-key", "{key}"],
     "are for the embedded broker"),
    (["broker-config", "{dir}", "--tls-cert", "{cert}", "--tls-key", "{stray}"], "does not belong"),
    (["broker-config", "{dir}", "--tls-cert", "{cert}"], "go together"),
    (["watch", "ABCDE", "--server", "mqtts://127.0.0.1:1", "--ca", "{missing}"], "no such CA file"),
    (["bot", "--server", "mqtts://127.0.0.1:1", "--ca", "{key}"], "no usable PEM certificate"),
])
def test_bad_tls_files_on_the_command_line_are_one_line_and_status_2(
        certs: Certs, tmp_path: Path, argv: list[str], says: str) -> None:
    given = {"cert": certs.good.cert, "key": certs.good.key, "stray": certs.stray_key,
             "missing": str(tmp_path / "missing.pem"), "dir": str(tmp_path / "conf")}
    proc = blink(*[a.format(**given) for a in argv])
    assert proc.returncode == 2, proc.stderr
    assert says in one_line(proc)
    assert not (tmp_path / "conf" / "mosquitto.conf").exists(), "nothing written before the check"


# ------------------------------------------------------------------------------------ real brokers


class Served:
    """``blink serve`` with a TLS listener on free loopback ports."""

    def __init__(self, pair: Pair) -> None:
        self.port, self.tls_port = free_port(), free_port()
        self.proc = subprocess.Popen([*BLINK, "serve", "--no-journal", "--port", str(self.port), "--tls-port",
                                      str(self.tls_port), "--tls-cert", pair.cert, "--tls-key", pair.key],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        assert "running" in line and f"mqtts://127.0.0.1:{self.tls_port}" in line, line

    def stop(self) -> None:
        stop_process(self.proc)


@pytest.fixture
def served(certs: Certs) -> Iterator[Served]:
    s = Served(certs.good)
    try:
        yield s
    finally:
        s.stop()


def _played(proc: subprocess.CompletedProcess[str]) -> dict[str, object]:
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert isinstance(result, dict) and result["match_result"] == "won", result
    return result


@pytest.mark.integration
def test_a_match_is_played_over_tls_on_the_embedded_broker(certs: Certs, served: Served) -> None:
    for host in ("127.0.0.1", "localhost"):  # both names are in the certificate
        _played(blink(*QUICK_MATCH, "--server", f"mqtts://{host}:{served.tls_port}", "--ca", certs.ca))
    # --insecure believes any certificate, and says so on stderr
    proc = blink(*QUICK_MATCH, "--server", f"mqtts://127.0.0.1:{served.tls_port}", "--insecure")
    _played(proc)
    assert "warning: --insecure" in proc.stderr


@pytest.mark.integration
def test_tls_and_plain_mixed_up_are_one_line_and_status_1(certs: Certs, served: Served) -> None:
    proc = blink("watch", "ABCDE", "--server", f"mqtt://127.0.0.1:{served.tls_port}")
    assert proc.returncode == 1 and "if the broker speaks TLS, use mqtts://" in one_line(proc)
    proc = blink("watch", "ABCDE", "--server", f"mqtts://127.0.0.1:{served.port}", "--ca", certs.ca)
    assert proc.returncode == 1 and "speak plain MQTT? then use mqtt://" in one_line(proc)
    # without --ca the system's CAs do not know the test CA
    proc = blink("watch", "ABCDE", "--server", f"mqtts://127.0.0.1:{served.tls_port}")
    assert proc.returncode == 1 and "the broker's certificate was refused" in one_line(proc)


@pytest.mark.integration
@pytest.mark.parametrize("which, says", [
    ("wrong_host", "certificate is not valid for '127.0.0.1'"),
    ("expired", "certificate has expired"),
    ("unknown_ca", "unable to get local issuer certificate"),
])
def test_a_bad_server_certificate_is_refused_in_one_line_with_status_1(certs: Certs, which: str, says: str) -> None:
    server = Served(getattr(certs, which))
    try:
        url = f"mqtts://127.0.0.1:{server.tls_port}"
        for argv in (["watch", "ABCDE", "--server", url], ["bot", "--server", url], ["load", "--matches", "1",
                                                                                      "--server", url]):
            proc = blink(*argv, "--ca", certs.ca)
            assert proc.returncode == 1, (argv, proc.stderr)
            line = one_line(proc)
            assert "the broker's certificate was refused" in line and says in line, (argv, line)
    finally:
        server.stop()


@pytest.fixture
def tls_mosquitto(certs: Certs) -> Iterator[tuple[BrokerAddress, int, Path]]:
    """Mosquitto as ``blink broker-config --tls-cert`` configures it: (the relay's login, the TLS port, its dir)."""
    binary = require("mosquitto")
    directory = Path(tempfile.mkdtemp(prefix="blink-mosquitto-tls-"))
    directory.chmod(0o755)
    port, tls_port = free_port(), free_port()
    proc = blink("broker-config", str(directory), "--port", str(port), "--tls-port", str(tls_port),
                 "--tls-cert", certs.good.cert, "--tls-key", certs.good.key)
    assert proc.returncode == 0, proc.stderr
    login = parse_url(proc.stdout.strip())
    mosquitto = subprocess.Popen([binary, "-c", str(directory / "mosquitto.conf")], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE)
    try:
        wait_port("127.0.0.1", port)
        wait_port("127.0.0.1", tls_port)
        yield login, tls_port, directory
    finally:
        stop_process(mosquitto)
        shutil.rmtree(directory, ignore_errors=True)


@pytest.mark.integration("mosquitto")
def test_a_match_is_played_over_tls_on_mosquitto_with_the_relay_on_tls_too(
        certs: Certs, tls_mosquitto: tuple[BrokerAddress, int, Path]) -> None:
    login, tls_port, _ = tls_mosquitto
    relay_url = f"mqtts://{login.username}:{login.password}@127.0.0.1:{tls_port}"
    serve = subprocess.Popen([*BLINK, "serve", "--no-journal", "--broker", relay_url, "--ca", certs.ca],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = serve.stdout.readline() if serve.stdout else ""
        assert f"broker mqtts://127.0.0.1:{tls_port}" in line, line
        _played(blink(*QUICK_MATCH, "--server", f"mqtts://localhost:{tls_port}", "--ca", certs.ca))
    finally:
        stop_process(serve)


@pytest.mark.integration("mosquitto")
def test_the_relay_refuses_a_broker_it_cannot_believe_in_one_line_with_status_1(
        certs: Certs, tls_mosquitto: tuple[BrokerAddress, int, Path]) -> None:
    login, tls_port, _ = tls_mosquitto
    relay_url = f"mqtts://{login.username}:{login.password}@127.0.0.1:{tls_port}"
    proc = blink("serve", "--no-journal", "--broker", relay_url)  # the system's CAs: not the test CA
    assert proc.returncode == 1 and "the broker's certificate was refused" in one_line(proc)
    assert login.password and login.password not in proc.stderr
    proc = blink("serve", "--no-journal", "--broker", relay_url.replace("mqtts://", "mqtt://"))
    assert proc.returncode == 1 and "if it speaks TLS, use mqtts://" in one_line(proc)


@pytest.mark.integration("nats-server")
def test_a_match_is_played_over_tls_on_a_nats_cluster(certs: Certs, tmp_path: Path) -> None:
    directory = tmp_path / "cluster"
    proc = blink("cluster", "up", "--nodes", "1", "--dir", str(directory), "--tls-cert", certs.good.cert,
                 "--tls-key", certs.good.key)
    assert proc.returncode == 0, proc.stderr
    try:
        summary = json.loads(proc.stdout)
        assert summary["tls"] is True and all(u.startswith("mqtts://") for u in summary["mqtt"])
        mqtt, nats = summary["mqtt"][0], summary["nats"][0]
        serve = subprocess.Popen([*BLINK, "serve", "--broker", mqtt, "--cluster", nats, "--password-file",
                                  summary["password_file"], "--ca", certs.ca],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            while "running" not in (line := serve.stdout.readline() if serve.stdout else ""):
                assert line, serve.stderr.read() if serve.stderr else ""
            _played(blink(*QUICK_MATCH, "--server", mqtt, "--ca", certs.ca))
            plain = blink("watch", "ABCDE", "--server", mqtt.replace("mqtts://", "mqtt://"))
            assert plain.returncode == 1 and "if the broker speaks TLS, use mqtts://" in one_line(plain)
        finally:
            stop_process(serve)
    finally:
        blink("cluster", "down", "--dir", str(directory))


@pytest.mark.integration
def test_cluster_up_refuses_a_key_that_is_not_the_certificates_with_status_2(certs: Certs, tmp_path: Path) -> None:
    proc = blink("cluster", "up", "--nodes", "1", "--dir", str(tmp_path / "c"), "--tls-cert", certs.good.cert,
                 "--tls-key", certs.stray_key)
    assert proc.returncode == 2 and "does not belong to the certificate" in one_line(proc)


@pytest.mark.integration
def test_a_lan_host_with_tls_advertises_mqtts_and_a_friend_plays_over_it(netns: Namespaces, tmp_path: Path) -> None:
    spaces = netns
    lan_certs = make_certs(tmp_path / "lan", also=(spaces.A_ADDR,))
    host = spaces.start(spaces.a, "-m", "client.cli", "serve", "--lan", "--no-journal", "--interface", spaces.va,
                        "--relay-id", "tlsrelay", "--tls-cert", lan_certs.good.cert, "--tls-key", lan_certs.good.key)
    url = f"mqtts://{spaces.A_ADDR}:8883"
    host.wait_for(f"blink play --server {url}")
    host.wait_for(" running with ")
    deadline = time.monotonic() + 60
    found: list[dict[str, object]] = []
    while not any(h.get("relay") == "tlsrelay" for h in found):
        assert time.monotonic() < deadline, f"the TLS host was not advertised; last answer {found}"
        out = spaces.blink(spaces.b, "lan", "--json", "--timeout", "3", "--interface", spaces.vb)
        assert out.returncode == 0, out.stderr
        found = json.loads(out.stdout)
    advert = next(h for h in found if h.get("relay") == "tlsrelay")
    assert advert["url"] == url and advert["port"] == 8883
    played = spaces.blink(spaces.b, *QUICK_MATCH, "--server", url, "--ca", lan_certs.ca, timeout=90)
    _played(played)
