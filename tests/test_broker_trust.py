"""Attacks on the brokers, each of which must fail for the attacker.

Real brokers only: the embedded amqtt broker (``LocalServer``: access plugin, relay secret, size
limit) and Mosquitto with the configuration ``blink broker-config`` writes. The attacker is a
plain MQTT client (aiomqtt) that knows the protocol and the topic layout. Every "nothing arrived"
is checked after a barrier that proves the message would have arrived by then (a later message
from the relay on a path the attacker is allowed to read)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import shutil
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable

import aiomqtt
import pytest

from mqttkit import BrokerAddress, free_port
from protocol import messages as m
from protocol.codec import decode_all, encode
from protocol.topics import Topics
from relay.embedded import EmbeddedBroker
from relay.embedded import Access
from relay.embedded.gate import LimitedReader, PacketTooLarge
from relay.hosting import LocalServer
from relay.hosting.mosquitto import acl_text, hash_password, write_mosquitto_config
from relay.runtime import Relay, RelaySettings
from bench.fuzz import RawMqtt
from client import Connection, new_client_id, run_match
from tests.conftest import ROOT, find_mosquitto, wait_port

pytestmark = pytest.mark.integration

T = Topics()
FAST = {"countdown_s": 0.3, "stalemate_pause_s": 0.2, "pick_time_s": 1.0}
PRIVATE = re.compile(r"/(c|act|req)/")
DEADLINE_S = 60.0


async def until(cond: Callable[[], bool], what: str, timeout: float = DEADLINE_S) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


class Spy:
    """A raw MQTT client collecting (topic, payload) of everything it is sent."""

    def __init__(self, address: BrokerAddress, client_id: str | None = None, **login: Any) -> None:
        self.client_id = client_id or new_client_id("eve")
        self.client = aiomqtt.Client(address.host, address.port, identifier=self.client_id, **login)
        self.got: list[tuple[str, bytes]] = []
        self.closed: str | None = None
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Spy:
        await self.client.__aenter__()
        self._task = asyncio.create_task(self._read())
        return self

    async def __aexit__(self, *exc: Any) -> None:
        if self._task:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        try:
            await asyncio.wait_for(self.client.__aexit__(None, None, None), 5)
        except Exception:  # noqa: BLE001 - the broker may have closed us: that is the point of some tests
            pass

    async def _read(self) -> None:
        try:
            async for msg in self.client.messages:
                payload = msg.payload if isinstance(msg.payload, (bytes, bytearray)) else b""
                self.got.append((msg.topic.value, bytes(payload)))
        except aiomqtt.MqttError as exc:
            self.closed = str(exc) or "closed"

    async def send_big(self, size: int) -> None:
        """Publish ``size`` bytes until the broker closes us (or the publish is done)."""
        task = asyncio.create_task(self.client.publish(T.req(self.client_id), os.urandom(size), timeout=60))
        await until(lambda: self.closed is not None or task.done(), f"a {size}-byte publish to end")
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)  # the broker may close us mid-write

    def decoded(self, topic_part: str = "") -> list[Any]:
        return [x for t, p in self.got if topic_part in t and p for x in decode_all(p)]

    async def ping_barrier(self) -> None:
        """Ask the relay for a Pong on our own private topic and wait for it: everything the relay
        published before answering has been delivered by then (one broker, in order)."""
        before = len(self.decoded(f"/c/{self.client_id}"))
        await self.client.subscribe(T.client(self.client_id), qos=0)
        await self.client.publish(T.req(self.client_id), encode(m.Ping(t0=time.time_ns())))
        await until(lambda: len(self.decoded(f"/c/{self.client_id}")) > before, "our own pong")


def refused(codes: Any) -> bool:
    return all(int(getattr(c, "value", c)) >= 0x80 for c in codes)


async def bot_match(address: BrokerAddress, seed: int) -> Any:
    return await run_match(address, "blink", 2, FAST, seed, 0.03, 240)


# ----------------------------------------------------------------------------- the rules themselves

def test_access_rules_match_the_mosquitto_acl() -> None:
    a = Access()
    me = "p" + "ab" * 16
    assert a.may_publish(me, T.req(me)) and a.may_publish(me, T.act("ABCDE", me))
    for topic in (T.req("other"), T.act("ABCDE", "other"), T.ev("ABCDE"), T.snap("ABCDE"), T.client(me),
                  T.match_list, T.relay_status("relay-0"), "blink/v1/lobby/req/" + me + "/x"):
        assert not a.may_publish(me, topic), topic
    for topic in (T.client(me), T.ev("ABCDE"), T.snap("ABCDE"), T.match_list, T.relay_status("relay-0"),
                  "blink/v1/m/+/+/ev", "blink/v1/m/0/+/snap", "blink/v1/relay/+/status"):
        assert a.may_read(me, topic), topic
    for topic in ("#", "blink/v1/#", "blink/v1/c/+", T.client("other"), "blink/v1/m/+/+/+", "blink/v1/m/0/X/#",
                  T.act("ABCDE", me), "blink/v1/m/+/+/act/+", T.req(me), "blink/v1/lobby/req/+", "$SYS/#"):
        assert not a.may_read(me, topic), topic
    # The shipped ACL file is exactly what broker-config writes for the default prefix.
    assert (ROOT / "deploy" / "mosquitto.acl").read_text() == acl_text()


def test_client_ids_have_at_least_96_random_bits() -> None:
    ids = {new_client_id() for _ in range(1000)}
    assert len(ids) == 1000
    hexpart = next(iter(ids))[1:]
    assert len(hexpart) * 4 >= 96 and int(hexpart, 16) >= 0


def test_the_relay_client_id_is_unique_per_start_and_not_the_old_fixed_one() -> None:
    a, b = Relay(BrokerAddress("127.0.0.1", 1)), Relay(BrokerAddress("127.0.0.1", 1))
    assert a.client_id != b.client_id and "blink-relay-0" not in (a.client_id, b.client_id)


# ----------------------------------------------------------------------------- embedded broker

def test_the_size_gate_follows_mqtt_framing_and_stops_at_the_announced_length() -> None:
    async def main() -> None:
        r = asyncio.StreamReader()
        r.feed_data(bytes([0x30, 3, 1, 2, 3]) + bytes([0x30, 0xD0, 0x0F]) + b"x" * 10)  # 3-byte body, then 2000
        gate = LimitedReader(r, 1000, b"\x10\x02ab")  # the CONNECT already read, replayed first
        assert [await gate.read(1), await gate.read(1), await gate.read(2)] == [b"\x10", b"\x02", b"ab"]
        assert [await gate.read(1), await gate.read(1), await gate.read(3)] == [b"\x30", b"\x03", b"\x01\x02\x03"]
        with pytest.raises(PacketTooLarge):  # the gate reads whole packets: 2000 > 1000 is refused
            await gate.read(1)  # as soon as its length is read (only 10 bytes of its body ever came)
        spanning = LimitedReader(asyncio.StreamReader(), 1000, b"\x10\x02ab")
        spanning._reader.feed_data(bytes([0xC0, 0]))  # a PINGREQ after the replay
        assert await spanning.read(6) == b"\x10\x02ab\xc0\x00"

    asyncio.run(main())


def test_a_hash_subscriber_on_the_embedded_broker_sees_no_private_topic_and_no_action() -> None:
    async def main() -> None:
        async with LocalServer(None, seed=3) as server:
            async with Spy(server.address) as eve:
                denied = [await eve.client.subscribe(t, qos=0) for t in
                          ("#", "blink/v1/#", "blink/v1/c/+", "blink/v1/m/+/+/act/+", "blink/v1/lobby/req/+")]
                assert all(refused(c) for c in denied), denied
                for t in ("blink/v1/m/+/+/ev", "blink/v1/m/+/+/snap", "blink/v1/lobby/matches", "blink/v1/relay/+/status"):
                    assert not refused(await eve.client.subscribe(t, qos=0))
                result = await bot_match(server.address, 3)
                await eve.ping_barrier()
            assert result.summary()["winner"] in result.summary()["players"]
            public = [(t, p) for t, p in eve.got if not t.endswith(f"/c/{eve.client_id}")]
            assert sum(len(decode_all(p)) for t, p in public if t.endswith("/ev")) >= len(result.events) > 20  # it watched
            assert not [t for t, _ in public if PRIVATE.search(t)]
            ids = [b.player.client_id for b in result.bots]
            assert len(ids) == 2
            for topic, payload in public:  # client ids are secrets: never on a public topic
                for cid in ids:
                    assert cid.encode() not in payload and cid not in topic, (topic, cid)

    asyncio.run(main())


def test_another_players_private_topic_gives_nothing() -> None:
    async def main() -> None:
        async with LocalServer(None, seed=4) as server:
            got: list[Any] = []
            victim = Connection(server.address, on_message=lambda msg, now: got.append(msg), ping_interval_s=0)
            async with victim, Spy(server.address) as eve:
                for t in (T.client(victim.client_id), "blink/v1/c/+"):
                    assert refused(await eve.client.subscribe(t, qos=0))
                await victim.request(m.Ping(t0=time.time_ns()))
                await until(lambda: any(isinstance(x, m.Pong) for x in got), "the victim's pong")
                await eve.ping_barrier()
            assert not [t for t, _ in eve.got if victim.client_id in t]

    asyncio.run(main())


def test_relay_without_the_secret_is_refused_by_the_embedded_broker() -> None:
    async def main() -> None:
        async with LocalServer(None, seed=5) as server:
            for password in (None, "", "relay", "0" * 32):
                with pytest.raises(aiomqtt.MqttError):
                    async with aiomqtt.Client(server.address.host, server.address.port, identifier=new_client_id("x"),
                                              username="relay", password=password):
                        pass
            # ... and the relay itself is still at work.
            async with Spy(server.address) as ok:
                await ok.ping_barrier()

    asyncio.run(main())


def test_forged_events_and_retained_snapshots_from_a_client_never_reach_anyone() -> None:
    async def main() -> None:
        async with LocalServer(None, seed=6) as server:
            async with Spy(server.address) as eve:
                await eve.client.subscribe(T.match_list, qos=0)
                match = asyncio.create_task(bot_match(server.address, 6))
                await until(lambda: any(isinstance(x, m.MatchList) and x.matches for x in eve.decoded("lobby/matches")),
                            "the match in the lobby list")
                code = next(x for x in eve.decoded("lobby/matches") if isinstance(x, m.MatchList) and x.matches).matches[0]["code"]
                forged = m.Event(code, 100000, time.time_ns(), 0, "match_over", {"winner": "EVIL", "reason": "won"})
                snap = m.Snapshot(code, 100000, time.time_ns(), 0, "over", ("EVIL",), {}, {}, "blink")
                await eve.client.publish(T.ev(code), encode(forged))
                await eve.client.publish(T.snap(code), encode(snap), retain=True)
                await eve.client.publish(T.snap("FAKE1"), encode(snap), retain=True)
                await eve.client.publish(T.req(eve.client_id), encode(m.Ping(t0=1)), retain=True)
                result = await match
            assert all(e.seq < 100000 for e in result.events)
            assert result.summary()["winner"] in ("bot1", "bot2")
            async with Spy(server.address) as late:  # a newcomer: only the relay's retained messages
                await late.client.subscribe(T.snap("FAKE1"), qos=0)
                await late.client.subscribe(T.snap(code), qos=0)
                await until(lambda: bool(late.decoded(T.snap(code))), "the real retained snapshot")
                await late.ping_barrier()
            snaps = [x for x in late.decoded("/snap")]
            assert snaps and all(isinstance(x, m.Snapshot) and x.match == code and x.seq < 100000 for x in snaps)
            assert not [t for t, _ in late.got if "/lobby/req/" in t]  # the attacker's retained request

    asyncio.run(main())


def test_connects_under_the_relays_ids_or_a_connected_players_id_do_not_disturb_them() -> None:
    async def main() -> None:
        async with LocalServer(None, seed=7) as server:
            assert server.relay is not None
            got: list[Any] = []
            victim = Connection(server.address, on_message=lambda msg, now: got.append(msg), ping_interval_s=0)
            async with victim:
                match = asyncio.create_task(bot_match(server.address, 7))
                # The relay's former fixed id is just another client now ...
                async with Spy(server.address, "blink-relay-0") as old:
                    await old.ping_barrier()
                # ... and so is its real id (if it leaked): the relay stands inside the broker, on no
                # connection to take over; a connected player's id cannot be taken over.
                async with Spy(server.address, server.relay.client_id) as leaked:
                    await leaked.ping_barrier()
                with pytest.raises(aiomqtt.MqttError):
                    async with aiomqtt.Client(server.address.host, server.address.port, identifier=victim.client_id):
                        pass
                with pytest.raises(aiomqtt.MqttError):
                    async with aiomqtt.Client(server.address.host, server.address.port,
                                              identifier=server.relay.client_id, username="relay", password="guess"):
                        pass
                # A last will is a publish too: not on someone else's topic, and never retained.
                for will in (aiomqtt.Will(T.ev("ABCDE"), b"x"), aiomqtt.Will(T.req("other"), b"x"),
                             aiomqtt.Will(T.req("w1"), b"x", retain=True)):
                    with pytest.raises(aiomqtt.MqttError):
                        async with aiomqtt.Client(server.address.host, server.address.port, identifier="w1", will=will):
                            pass
                result = await match
                await victim.request(m.Ping(t0=time.time_ns()))
                await until(lambda: any(isinstance(x, m.Pong) for x in got), "the victim's pong")
            assert result.events[-1].type == "match_over"
            assert victim.lost is None

    asyncio.run(main())


def test_a_10_mb_payload_is_refused_by_the_embedded_broker() -> None:
    async def main() -> None:
        async with LocalServer(None, seed=8) as server:
            assert server.relay is not None
            server.relay.eventlog.records = []
            for size in (10 * 1024 * 1024, 9000):
                async with Spy(server.address) as eve:
                    await eve.send_big(size)
                    await until(lambda: eve.closed is not None, f"the broker closing a {size}-byte sender")
            async with Spy(server.address) as ok:  # the broker and the relay carry on
                await ok.ping_barrier()
            assert not [r for r in server.relay.eventlog.records if r.get("kind") == "bad_input"]  # nothing reached the relay

    asyncio.run(main())


def test_a_sender_the_broker_dropped_comes_back_at_once_under_its_own_id(monkeypatch: pytest.MonkeyPatch) -> None:
    """The broker closes a connection over the size limit and amqtt ends its session some loop
    turns later (many, on a busy broker: here made slow on purpose): a client that reconnects at
    once under its id is served, not refused as a take-over of a live session."""
    from amqtt.broker import Broker

    stop_handler = Broker._stop_handler

    async def slow_stop(self: Any, handler: Any) -> None:
        await asyncio.sleep(0.3)
        await stop_handler(self, handler)

    monkeypatch.setattr(Broker, "_stop_handler", slow_stop)

    async def main() -> None:
        async with LocalServer(None, seed=9) as server:
            cid = new_client_id("back")
            for _ in range(3):
                eve = RawMqtt(cid)
                await eve.connect(server.address.host, server.address.port)
                eve.publish(T.req(cid), os.urandom(9000))
                await asyncio.wait_for(eve.closed.wait(), DEADLINE_S)
                await eve.close()
            async with Spy(server.address, cid) as back:
                await back.ping_barrier()

    asyncio.run(main())


def test_the_relay_refuses_payloads_over_its_limit_itself() -> None:
    async def main() -> None:
        broker = EmbeddedBroker("127.0.0.1", free_port(), max_payload=60_000)  # a broker that lets it through
        await broker.start()
        relay = Relay(broker.relay_address, RelaySettings(max_payload=1024))
        relay.eventlog.records = []
        task = asyncio.create_task(relay.run())
        try:
            await asyncio.wait_for(relay.ready.wait(), 15)
            async with Spy(broker.address) as eve:
                await eve.client.subscribe(T.client(eve.client_id), qos=0)
                for _ in range(15):  # a burst (under the broker gate's request burst, 20): answered and logged once
                    await eve.client.publish(T.req(eve.client_id), b"\x80" * 2000)
                await eve.ping_barrier()
                answers = [x for x in eve.decoded(f"/c/{eve.client_id}") if isinstance(x, m.RequestRejected)]
            assert [a.code for a in answers] == ["too_large"]
            assert [r["code"] for r in relay.eventlog.records if r.get("kind") == "bad_input"] == ["too_large"]
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await broker.stop()

    asyncio.run(main())


# ----------------------------------------------------------------------------- Mosquitto

@pytest.fixture(params=["mosquitto_passwd", "own_hash"])
def configured_mosquitto(request: pytest.FixtureRequest) -> Any:
    """Mosquitto run as ``blink broker-config`` sets it up, with the password hashed by the tool
    and by our own ``$7$`` code."""
    binary = find_mosquitto()
    if binary is None:
        pytest.fail("mosquitto is not installed (.ci/run installs it)")
    port = free_port()
    tmp = Path(tempfile.mkdtemp(prefix="blink-mosq-trust-"))
    tmp.chmod(0o755)
    login = write_mosquitto_config(tmp, "127.0.0.1", port, use_tool=request.param == "mosquitto_passwd")
    proc = subprocess.Popen([binary, "-c", str(tmp / "mosquitto.conf")], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
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
        shutil.rmtree(tmp, ignore_errors=True)


def test_our_password_hash_has_mosquittos_format() -> None:
    line = hash_password("abc", salt=b"\x00" * 12)
    assert re.fullmatch(r"\$7\$101\$[A-Za-z0-9+/=]{16}\$[A-Za-z0-9+/=]{88}", line)


def test_on_generated_mosquitto_only_the_relay_with_its_secret_is_relay(configured_mosquitto: BrokerAddress) -> None:
    login = configured_mosquitto

    async def main() -> None:
        for password in (None, "wrong"):
            with pytest.raises(aiomqtt.MqttError):
                async with aiomqtt.Client(login.host, login.port, identifier=new_client_id("x"), username="relay",
                                          password=password):
                    pass
        async with LocalServer(login.login_url, seed=9) as server:
            assert server.relay is not None
            server.relay.eventlog.records = []
            assert server.address.password is None  # players never get the relay's login
            async with Spy(server.address) as eve:
                for t in ("#", "blink/v1/c/+", "blink/v1/lobby/req/+"):
                    await eve.client.subscribe(t, qos=0)  # Mosquitto grants, then delivers only what the ACL allows
                victim = Connection(server.address, ping_interval_s=0)
                async with victim:
                    await victim.request(m.Ping(t0=time.time_ns()))
                    await eve.client.publish(T.ev("ABCDE"), encode(m.Event("ABCDE", 1, 1, 0, "match_over", {})))
                    await eve.client.publish(T.req(eve.client_id), os.urandom(9000))  # over message_size_limit
                    await eve.ping_barrier()
                    assert not [t for t, _ in eve.got if victim.client_id in t or t.endswith("/ev") or "/lobby/req/" in t]
                    assert [t for t, _ in eve.got if t == T.client(eve.client_id)]  # its own private topic works
                    await eve.client.publish(T.snap("FAKE2"), encode(m.Snapshot("FAKE2", 9, 1, 0, "over", (), {})),
                                             retain=True)
                # The relay's former fixed id is just another client: connecting under it changes nothing.
                async with Spy(server.address, "blink-relay-0") as old:
                    await old.client.subscribe(T.snap("FAKE2"), qos=0)
                    await old.ping_barrier()  # the relay still answers, and no forged snapshot was retained
                    assert not [t for t, _ in old.got if t.endswith("/snap")]
                # A 10 MB packet ends the sender's connection (max_packet_size).
                await eve.send_big(10 * 1024 * 1024)
                await until(lambda: eve.closed is not None, "Mosquitto closing the 10 MB sender")
            assert not [r for r in server.relay.eventlog.records if r.get("kind") == "bad_input"]  # the 9 KB never arrived

    asyncio.run(main())


@pytest.fixture
def readable_dir() -> Any:
    """A directory Mosquitto can read after dropping root (pytest's tmp_path, mode 700, is not)."""
    d = Path(tempfile.mkdtemp(prefix="blink-trust-"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.integration("mosquitto")
def test_broker_config_command_writes_a_config_mosquitto_runs_as_is(readable_dir: Path) -> None:
    binary = find_mosquitto()
    assert binary is not None
    port = free_port()
    d = readable_dir / "mq"
    done = subprocess.run([sys.executable, "-m", "client.cli", "broker-config", str(d), "--port", str(port)],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    url = done.stdout.strip().splitlines()[-1]
    assert re.fullmatch(rf"mqtt://relay:[0-9a-f]{{32}}@127\.0\.0\.1:{port}", url)
    assert url.split("@")[0].split(":")[-1] not in (d / "passwd").read_text()  # only the hash is stored
    assert (d / "passwd").stat().st_mode & 0o777 == 0o600  # the hash is the broker's only
    assert (d / "mosquitto.acl").stat().st_mode & 0o777 == 0o644
    proc = subprocess.Popen([binary, "-c", str(d / "mosquitto.conf")], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        wait_port("127.0.0.1", port)

        async def main() -> None:
            async with LocalServer(url, seed=1) as server:
                async with Spy(server.address) as ok:
                    await ok.ping_barrier()

        asyncio.run(main())
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_the_shipped_mosquitto_conf_needs_a_password_for_relay(readable_dir: Path) -> None:
    tmp_path = readable_dir
    shipped = (ROOT / "deploy" / "mosquitto.conf").read_text()
    assert re.search(r"^password_file\s+\S+", shipped, re.M) and re.search(r"^message_size_limit\s+\d+", shipped, re.M)
    binary = find_mosquitto()
    assert binary is not None
    port = free_port()
    (tmp_path / "deploy").mkdir()
    (tmp_path / "deploy" / "mosquitto.acl").write_text((ROOT / "deploy" / "mosquitto.acl").read_text())
    (tmp_path / "deploy" / "passwd").write_text(f"relay:{hash_password('s3cret')}\n")
    for f in (tmp_path / "deploy").iterdir():
        f.chmod(0o644)
    (tmp_path / "deploy").chmod(0o755)
    conf = tmp_path / "deploy" / "mosquitto.conf"
    conf.write_text(shipped.replace("listener 1883 127.0.0.1", f"listener {port} 127.0.0.1")
                    .replace("deploy/", f"{tmp_path}/deploy/"))
    proc = subprocess.Popen([binary, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port("127.0.0.1", port)

        async def main() -> None:
            for password in (None, "", "wrong"):
                with pytest.raises(aiomqtt.MqttError):
                    async with aiomqtt.Client("127.0.0.1", port, identifier=new_client_id("x"), username="relay",
                                              password=password):
                        pass
            async with aiomqtt.Client("127.0.0.1", port, identifier=new_client_id("r"), username="relay",
                                      password="s3cret"):
                pass

        asyncio.run(main())
    finally:
        proc.terminate()
        proc.wait(timeout=10)
