"""LAN hosting and discovery (relay/hosting/lanhost.py, client/lan.py, mqttkit/lan.py; `blink serve --lan`, `blink lan`).

The pure parts (TXT encoding, port choice) are tested directly. Discovery is tested through real
multicast DNS between two network namespaces joined by a veth pair that this test creates and
removes: the host runs in namespace A, the friend in namespace B, and zeroconf is pinned to the
veth ends, so no packet of these tests leaves through the machine's own interfaces.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from client import lan
from mqttkit import lan as dnssd
from mqttkit.lan import LanMatch, decode_txt, encode_txt
from relay.hosting import lanhost
from relay.hosting.lanhost import pick_port
from protocol.codec import PROTOCOL_VERSION, encode
from protocol.messages import MatchList
from protocol.topics import DEFAULT_PREFIX

ROOT = Path(__file__).resolve().parent.parent


def _entry(code: str, game: str = "blink", seats: int = 2, players: int = 1) -> dict[str, Any]:
    return {"code": code, "game": game, "seats": seats, "players": [f"p{i}" for i in range(players)], "quick": False}


# ---------------------------------------------------------------------------------------------
# Pure: the TXT record


def test_txt_round_trip_keeps_relay_version_and_matches() -> None:
    txt = encode_txt("relay-7", [_entry("ABCDE", "takeaway", 3, 1), _entry("XYZ23", "blink", 2, 1)])
    assert txt["relay"] == "relay-7" and txt["v"] == str(PROTOCOL_VERSION) and txt["n"] == "2"
    assert "p" not in txt  # the default prefix is not spelled out
    advert = decode_txt({k.encode(): v.encode() for k, v in txt.items()})  # as zeroconf gives them: bytes
    assert advert.relay == "relay-7" and advert.version == PROTOCOL_VERSION and advert.waiting == 2
    assert advert.matches == (LanMatch("ABCDE", "takeaway", 1, 3), LanMatch("XYZ23", "blink", 1, 2))
    assert advert.prefix == DEFAULT_PREFIX


def test_txt_truncates_to_ten_matches_but_counts_them_all() -> None:
    entries = [_entry(f"C{i:04d}", "sequence", 4, 3) for i in range(25)]
    txt = encode_txt("r", entries)
    listed = sorted(k for k in txt if k.startswith("m"))
    assert len(listed) == dnssd.MAX_TXT_MATCHES == 10
    assert txt["n"] == "25"
    size = sum(len(k) + 1 + len(v) + 1 for k, v in txt.items())  # DNS-SD wire size of the strings
    assert size < 400, size
    advert = decode_txt(txt)
    assert [m.code for m in advert.matches] == [f"C{i:04d}" for i in range(10)]  # the relay's order
    assert advert.waiting == 25


def test_txt_carries_a_non_default_prefix() -> None:
    txt = encode_txt("r", [], prefix="school/v1")
    assert decode_txt(txt).prefix == "school/v1"


def test_txt_encoding_leaves_out_unusable_entries() -> None:
    bad = [{"code": "A:B", "game": "blink", "seats": 2, "players": []},  # separator in the code
           {"code": "OKAY1", "game": "bl ink", "seats": 2, "players": []},
           {"code": "OKAY2", "game": "blink", "seats": -1, "players": []},
           {"code": "OKAY3", "game": "blink"},
           "not a dict", None]
    txt = encode_txt("r", [*bad, _entry("GOOD1")])
    assert txt["n"] == "1" and txt["m0"] == "GOOD1:blink:1:2" and "m1" not in txt


def test_txt_decoding_skips_malformed_values_and_never_raises() -> None:
    props: dict[Any, Any] = {
        b"relay": b"\xff\xfe", b"v": b"x", b"n": b"99999999999",
        b"m0": b"ABCDE:blink:1:2", b"m1": b"too:few", b"m2": b"ABCDE:blink:one:2", b"m3": None,
        b"m4": b"A B:blink:1:2", b"m5": b"ABCDE:blink:1:2:extra", b"m6": "\u00e9\u00e9:blink:1:2".encode(),
        b"m7": b"QWERT:ryo:1234:2", b"p": b"bad/#", 7: b"x",
    }
    advert = decode_txt(props)
    assert advert.relay == "" and advert.version is None
    assert advert.matches == (LanMatch("ABCDE", "blink", 1, 2),)
    assert advert.waiting == 1 and advert.prefix == DEFAULT_PREFIX


def test_match_list_payload_is_read_like_the_relay_writes_it() -> None:
    payload = encode(MatchList((_entry("ABCDE"),)))
    assert [m["code"] for m in lanhost.parse_match_list(payload) or []] == ["ABCDE"]
    assert lanhost.parse_match_list(b"") == []  # a cleared retained message: nothing waiting
    assert lanhost.parse_match_list(b"\x00garbage") is None


def test_instance_name_is_one_dns_label() -> None:
    assert lanhost.instance_name("r", "desk.example.org") == "desk r"
    long_host = lanhost.instance_name("relay-0", "h" * 80)
    assert long_host == "h" * 40 + " relay-0"
    assert len(lanhost.instance_name("r" * 100, "desk").encode()) == 63
    assert lanhost.instance_name("relay-0", "my_odd host") == "my-odd-host relay-0"
    assert lanhost.instance_name("relay.0", "desk") == "desk relay-0"  # a dot would split the DNS name


def test_a_host_is_reached_first_on_an_address_in_our_own_network() -> None:
    advertised = ["172.17.0.1", "10.8.0.5", "192.168.1.20"]  # a container bridge, a VPN, the LAN
    assert lan.reachable_first(advertised, ["192.168.1.7/24"]) == ["192.168.1.20", "172.17.0.1", "10.8.0.5"]
    assert lan.reachable_first(advertised, []) == advertised
    assert lan.reachable_first(advertised, ["nonsense"]) == advertised
    host = lan.host_from_info(f"desk r.{dnssd.SERVICE_TYPE}", 1884, advertised, {b"relay": b"r"},
                              networks=["192.168.1.7/24"])
    assert host is not None and host.name == "desk r" and host.address == "192.168.1.20"
    assert host.url == "mqtt://192.168.1.20:1884" and host.to_dict()["matches"] == []
    assert lan.host_from_info("x", None, advertised, {}) is None
    assert lan.host_from_info("x", 1884, [], {}) is None


# ---------------------------------------------------------------------------------------------
# Pure: the port choice


def test_pick_port_takes_the_first_free_one() -> None:
    taken = {1883, 1884}
    assert pick_port(1883, lambda p: p not in taken) == 1885
    assert pick_port(1883, lambda p: True) == 1883


def test_pick_port_gives_up_after_its_tries_and_never_passes_65535() -> None:
    tried: list[int] = []

    def never(p: int) -> bool:
        tried.append(p)
        return False

    with pytest.raises(lanhost.NoFreePort, match="1883-1885"):
        pick_port(1883, never, tries=3)
    assert tried == [1883, 1884, 1885]
    tried.clear()
    with pytest.raises(lanhost.NoFreePort):
        pick_port(65534, never, tries=20)
    assert tried == [65534, 65535]


@pytest.mark.integration
def test_port_is_free_sees_a_listening_socket_on_loopback() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert not lanhost.port_is_free("127.0.0.1", port)
        assert lanhost.choose_port("127.0.0.1", port) != port


@pytest.mark.parametrize("argv, says", [
    (["serve", "--lan", "--host", "127.0.0.1"], "loopback"),
    (["serve", "--interface", "lo"], "--interface only goes with --lan"),
    (["serve", "--lan", "--broker", "mqtt://127.0.0.1:1"], "leave out --broker"),
])
def test_serve_lan_refuses_what_cannot_work_before_starting_anything(argv: list[str], says: str,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from client.cli import main

    assert main(argv) == 2  # bad input on the command line (client/cli/args.py: the exit status convention)
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1


# ---------------------------------------------------------------------------------------------
# Real multicast between two network namespaces


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


class Namespaces:
    """Two namespaces A and B joined by a veth pair (10.213.77.1/24 in A, .2 in B), lo up in both,
    and a third namespace C with only loopback (no multicast anywhere)."""

    A_ADDR, B_ADDR = "10.213.77.1", "10.213.77.2"

    def __init__(self) -> None:
        tag = f"{os.getpid() % 100000}"
        self.a, self.b, self.c = f"blk-a{tag}", f"blk-b{tag}", f"blk-c{tag}"
        self.va, self.vb = f"bka{tag}", f"bkb{tag}"  # interface names: at most 15 characters
        self.procs: list[subprocess.Popen[str]] = []

    def create(self) -> None:
        for ns in (self.a, self.b, self.c):
            _ip("netns", "add", ns)
        # Created directly inside the namespaces: the pair never exists in the machine's own.
        _ip("link", "add", self.va, "netns", self.a, "type", "veth", "peer", "name", self.vb, "netns", self.b)
        for ns, dev, addr in ((self.a, self.va, self.A_ADDR), (self.b, self.vb, self.B_ADDR)):
            _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
            _ip("-n", ns, "link", "set", dev, "multicast", "on", "up")
        for ns in (self.a, self.b, self.c):
            _ip("-n", ns, "link", "set", "lo", "up")

    def remove(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        for ns in (self.a, self.b, self.c):
            _ip("netns", "del", ns, check=False)  # removes the veth end inside it too

    def cmd(self, ns: str, *args: str) -> list[str]:
        return ["ip", "netns", "exec", ns, sys.executable, *args]

    def blink(self, ns: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.cmd(ns, "-m", "client.cli", *args), capture_output=True, text=True,
                              cwd=ROOT, timeout=timeout)

    def start(self, ns: str, *args: str) -> Lines:
        proc = subprocess.Popen(self.cmd(ns, *args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                stdin=subprocess.PIPE, text=True, cwd=ROOT)
        self.procs.append(proc)
        return Lines(proc)


class Lines:
    """A running process whose stdout and stderr lines can be waited for (with a deadline)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        for stream in (proc.stdout, proc.stderr):
            threading.Thread(target=self._pump, args=(stream,), daemon=True).start()

    def _pump(self, stream: Any) -> None:
        for line in stream:
            self.lines.put(line.rstrip("\n"))

    def wait_for(self, text: str, timeout: float = 30.0) -> str:
        for line in self.seen:
            if text in line:
                return line
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                break
            self.seen.append(line)
            if text in line:
                return line
        raise AssertionError(f"{text!r} not seen in {timeout} s; output so far: {self.seen}; "
                             f"exit status {self.proc.poll()}")


@pytest.fixture
def netns() -> Iterator[Namespaces]:
    if shutil.which("ip") is None:
        pytest.skip("iproute2's `ip` is not installed (.ci/run installs it)")
    probe = f"blk-probe{os.getpid() % 100000}"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        pytest.skip(f"network namespaces are not permitted here: {made.stderr.strip()}")
    _ip("netns", "del", probe, check=False)
    spaces = Namespaces()
    try:
        spaces.create()
        yield spaces
    finally:
        spaces.remove()


def _lan_json(spaces: Namespaces, timeout: float = 3.0) -> list[dict[str, Any]]:
    out = spaces.blink(spaces.b, "lan", "--json", "--timeout", str(timeout), "--interface", spaces.vb)
    assert out.returncode == 0, out.stderr
    hosts = json.loads(out.stdout)
    assert isinstance(hosts, list)
    return hosts


def _until(spaces: Namespaces, found: Any, what: str, timeout: float = 60.0) -> dict[str, Any]:
    """Run `blink lan --json` in B until a host satisfies ``found``."""
    deadline = time.monotonic() + timeout
    last: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        last = _lan_json(spaces)
        for host in last:
            if found(host):
                return host
    raise AssertionError(f"{what}: not found in {timeout} s; last answer {last}")


@pytest.mark.integration
def test_blink_lan_finds_a_lan_host_and_its_open_match_across_namespaces(netns: Namespaces) -> None:
    spaces = netns
    # Port 1883 is taken inside A: the host must pick 1884 and say so.
    blocker = spaces.start(spaces.a, "-c", "import socket,sys\ns=socket.socket()\ns.bind(('0.0.0.0',1883))\n"
                                           "s.listen()\nprint('listening',flush=True)\nsys.stdin.read()")
    blocker.wait_for("listening")
    host = spaces.start(spaces.a, "-m", "client.cli", "serve", "--lan", "--interface", spaces.va,
                        "--relay-id", "lanrelay", "--seed", "5")
    host.wait_for("port 1883 is taken; hosting on 1884")
    host.wait_for(f"blink play --server mqtt://{spaces.A_ADDR}:1884")
    host.wait_for("running with")

    empty = _until(spaces, lambda h: h["relay"] == "lanrelay", "the host")
    assert empty["address"] == spaces.A_ADDR and empty["port"] == 1884
    assert empty["name"].endswith("lanrelay") and empty["version"] == PROTOCOL_VERSION
    assert empty["matches"] == [] and empty["waiting"] == 0

    # A friend in B creates a match through the veth pair; the host's TXT record follows.
    bot = spaces.start(spaces.b, "-m", "client.cli", "bot", "--server", f"mqtt://{spaces.A_ADDR}:1884",
                       "--create", "--game", "takeaway", "--players", "3", "--name", "friend")
    code = bot.wait_for("in match").split(" in match ")[1].split()[0]
    listed = _until(spaces, lambda h: any(m["code"] == code for m in h["matches"]), f"match {code} in the TXT")
    assert listed["port"] == 1884 and listed["address"] == spaces.A_ADDR
    assert {"code": code, "game": "takeaway", "players": 1, "seats": 3} in listed["matches"]
    assert listed["waiting"] == 1

    # The readable listing says the same, with how to join.
    text = spaces.blink(spaces.b, "lan", "--timeout", "3", "--interface", spaces.vb)
    assert text.returncode == 0, text.stderr
    assert f"{spaces.A_ADDR}:1884" in text.stdout and f"{code} takeaway 1/3" in text.stdout
    assert f"join: blink play --server mqtt://{spaces.A_ADDR}:1884 --match {code}" in text.stdout

    # Stopping the host withdraws it; an empty network is not an error.
    host.proc.send_signal(signal.SIGINT)
    assert host.proc.wait(timeout=30) == 130
    gone = spaces.blink(spaces.b, "lan", "--timeout", "2", "--interface", spaces.vb)
    assert gone.returncode == 0 and "no blink hosts found on the local network" in gone.stdout
    none_json = spaces.blink(spaces.b, "lan", "--json", "--timeout", "1", "--interface", spaces.vb)
    assert none_json.returncode == 0 and json.loads(none_json.stdout) == []


@pytest.mark.integration
def test_no_multicast_is_one_line_and_a_non_zero_status(netns: Namespaces) -> None:
    spaces = netns
    only_lo = spaces.blink(spaces.c, "lan", "--timeout", "1")
    assert only_lo.returncode == 1
    assert only_lo.stderr.count("\n") == 1 and "multicast" in only_lo.stderr and "Traceback" not in only_lo.stderr
    assert only_lo.stdout == ""

    unknown = spaces.blink(spaces.c, "lan", "--interface", "10.99.99.99", "--timeout", "1")
    assert unknown.returncode == 1 and unknown.stderr.count("\n") == 1 and "10.99.99.99" in unknown.stderr

    # A host without multicast still serves (friends join by address) and says it is not advertised.
    _ip("-n", spaces.a, "link", "set", spaces.va, "multicast", "off")
    off = spaces.blink(spaces.a, "lan", "--interface", spaces.va, "--timeout", "1")
    assert off.returncode == 1 and "multicast" in off.stderr and off.stderr.count("\n") == 1
    host = spaces.start(spaces.a, "-m", "client.cli", "serve", "--lan")
    host.wait_for("not advertised on the local network")
    host.wait_for("running with")
    host.proc.send_signal(signal.SIGINT)
    assert host.proc.wait(timeout=30) == 130
