"""A relay on a freshly started NATS cluster starts at its first try: ``blink cluster up`` returns only
once an MQTT client can log in on every node and JetStream takes a replicated key, and a relay
given any one node's URLs (or all) then starts, takes its shards and lets players in (it answers
the nodes' auth callout); a relay started before the cluster waits for it, saying so on one line;
one that waits in vain ends after its deadline in one line. Real processes, free ports, loopback."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import aiomqtt
import pytest

from client import new_client_id
from client.tools import nats_cluster
from mqttkit import free_port
from protocol import messages as m
from protocol.codec import decode_all, encode
from protocol.topics import Topics
from relay.cluster.jetstream import NotReady, connect_jetstream
from tests.helpers import collect_messages, stop_process
from tests.test_cluster_cli import BLINK, ROOT, blink

pytestmark = pytest.mark.integration("nats-server")

T = Topics()
DEADLINE_S = 120.0


def wait_for(predicate: Any, what: str, timeout: float = DEADLINE_S) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def start_relay(tmp: Path, name: str, mqtt: list[str], nats: list[str], password_file: str | None,
                ) -> tuple[subprocess.Popen[bytes], Path, Path]:
    out, err = tmp / f"{name}.out", tmp / f"{name}.err"
    login = ["--password-file", password_file] if password_file else []
    proc = subprocess.Popen([*BLINK, "serve", "--broker", ",".join(mqtt), "--cluster", ",".join(nats), *login,
                             "--shards-total", "2", "--relay-id", name], stdout=open(out, "wb"), stderr=open(err, "wb"),
                            stdin=subprocess.DEVNULL, cwd=ROOT)
    return proc, out, err


def serving(proc: subprocess.Popen[bytes], out: Path, err: Path) -> bool:
    """The relay serves both shards (or it ended: then the assertion after the wait says why)."""
    text = out.read_text(errors="replace")
    return proc.poll() is not None or (text.count(" serves shard ") >= 2 and "running on broker" in text)


async def player_ping(mqtt_url: str) -> bool:
    """An anonymous player on that node: let in (the relay answers the callout) and answered."""
    host, port = mqtt_url.split("://", 1)[1].rsplit(":", 1)
    me = new_client_id("p")
    got: list[tuple[str, bytes]] = []
    async with aiomqtt.Client(host, int(port), identifier=me, timeout=30) as c:
        await c.subscribe(T.client(me), qos=1)
        reader = asyncio.create_task(collect_messages(c, got))
        await c.publish(T.req(me), encode(m.Ping(t0=3)), qos=1)
        deadline = time.monotonic() + DEADLINE_S
        while not any(isinstance(x, m.Pong) for _, p in got for x in decode_all(p)):
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.02)
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)
    return True


@pytest.mark.timeout(1200)
def test_relays_start_at_the_first_try_on_freshly_started_clusters(tmp_path: Path) -> None:
    # Each round: a fresh 3-node cluster, then at once a relay given one node's URLs (each node in
    # turn) or all of them. None may fail, none may be tried twice.
    for round_, pick in enumerate(([0], [1], [2], [0, 1, 2])):
        directory = tmp_path / f"c{round_}"
        relay: subprocess.Popen[bytes] | None = None
        try:
            up = blink("cluster", "up", "--nodes", "3", "--dir", str(directory))
            assert up.returncode == 0, up.stderr
            info = json.loads(up.stdout)
            mqtt = [info["mqtt"][i] for i in pick]
            nats = [info["nats"][i] for i in pick]
            relay, out, err = start_relay(tmp_path, f"r{round_}", mqtt, nats, info["password_file"])
            wait_for(lambda: serving(relay, out, err), f"round {round_}: the relay serving its shards")
            assert relay.poll() is None, f"round {round_} ({pick}): {err.read_text(errors='replace')[-800:]}"
            assert "waiting" not in out.read_text(errors="replace")  # `up` returned a ready cluster
            assert asyncio.run(player_ping(info["mqtt"][(pick[0] + 1) % 3])), f"round {round_}: no pong"
        finally:
            if relay is not None:
                stop_process(relay, 30)
            nats_cluster.stop_cluster(directory)


@pytest.mark.timeout(600)
def test_a_relay_started_before_its_cluster_waits_for_it_saying_so_once(tmp_path: Path) -> None:
    # Free ports for one open node (no password to read before `up` writes it), taken by nobody yet.
    base = next(p for p in (free_port() for _ in range(50)) if p + 4 < 65535
                and all(nats_cluster._port_free(p + k) for k in range(4)))
    mqtt, nats = f"mqtt://127.0.0.1:{base + 1}", f"nats://127.0.0.1:{base}"
    directory = tmp_path / "late"
    relay, out, err = start_relay(tmp_path, "early", [mqtt], [nats], None)
    try:
        wait_for(lambda: "waiting for the NATS cluster" in out.read_text(errors="replace") or relay.poll() is not None,
                 "the relay's waiting line")
        assert relay.poll() is None, err.read_text(errors="replace")
        up = blink("cluster", "up", "--nodes", "1", "--dir", str(directory), "--base-port", str(base), "--no-auth")
        assert up.returncode == 0, up.stderr
        wait_for(lambda: serving(relay, out, err), "the relay serving its shards")
        assert relay.poll() is None, err.read_text(errors="replace")
        text = out.read_text(errors="replace")
        assert text.count("waiting for") == 1, text  # one line, however long it waited
        assert asyncio.run(player_ping(mqtt))
    finally:
        stop_process(relay, 30)
        nats_cluster.stop_cluster(directory)


def test_a_cluster_that_never_gets_ready_ends_the_wait_in_one_line() -> None:
    said: list[str] = []
    url = f"nats://127.0.0.1:{free_port()}"
    t0 = time.monotonic()
    with pytest.raises(NotReady) as err:
        asyncio.run(connect_jetstream(url, connect_timeout=1, wait_s=2, say=said.append))
    assert time.monotonic() - t0 >= 2
    assert "cannot reach the NATS cluster" in str(err.value) and "still after 2 s" in str(err.value)
    assert "\n" not in str(err.value)
    assert len(said) == 1 and said[0].startswith(f"waiting for the NATS cluster at {url}") and "2 s" in said[0]
