"""A NATS node with blink's authorization (``relay/cluster/natsauth.py``, ``relay/cluster/natscallout.py``): what it stops, on a real nats-server.

The node is the one ``blink cluster up`` starts (``start_cluster(..., auth=True)``: the template plus
``include "auth.conf"``, with the relay's password and the auth callout). A real relay of a cluster
(``cluster_server``: leases and journals in the node's JetStream, MQTT logged in as ``relay``) serves
a bot match through it and answers the node's auth callout, so the permissions are shown to be
enough to play; an attacker (an anonymous MQTT client, so its own permissions are those of its own
client id) tries every attack the other brokers are tried with, against a victim whose client id
it knows. "Nothing arrived" is checked after a barrier: a Pong from the relay on a path the
attacker may read, published after the forgeries.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any, Iterator

import aiomqtt
import nats
import pytest

from client import Connection, new_client_id, run_match
from client.tools import nats_cluster
from mqttkit import BrokerAddress, parse_url
from protocol import messages as m
from protocol.codec import decode_all, encode
from protocol.topics import Topics
from relay.hosting import ClusterServer, cluster_server
from relay.cluster.shards import shard_of_code
from relay.cluster.natsauth import auth_text, main as natsauth_main, secure_node_conf, write_nats_auth
from relay.cluster.natscallout import (ACCOUNT, Grant, Refusal, _unb64, answer, claims_of, decide, issuer_public,
                               issuer_seed, password_of, subject)
from tests.conftest import ROOT
from tests.helpers import collect_messages

T = Topics()
FAST = {"countdown_s": 0.3, "stalemate_pause_s": 0.2, "pick_time_s": 1.0}
DEADLINE_S = 60.0


async def until(cond: Any, what: str, timeout: float = DEADLINE_S) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


class NatsNode:
    def __init__(self, cluster: nats_cluster.Cluster) -> None:
        self.cluster = cluster
        self.mqtt = parse_url(cluster.relay_mqtt[0])  # the relay's MQTT login
        self.nats_url = cluster.relay_nats[0]
        self.nats_port = cluster.nodes[0].client
        assert cluster.password is not None
        self.secret = cluster.password

    @property
    def players(self) -> BrokerAddress:
        return self.mqtt.public()

    def relay(self, data: Path, prefix: str = T.prefix) -> _Pending:
        """A relay of the cluster on this node (it answers the node's auth callout)."""
        return _Pending(self, data, prefix)


class _Pending:
    """``async with node.relay(dir) as server``: a cluster relay on the node, stopped afterwards."""

    def __init__(self, node: NatsNode, data: Path, prefix: str) -> None:
        self.node, self.data, self.prefix = node, data, prefix
        self.server: ClusterServer | None = None

    async def __aenter__(self) -> ClusterServer:
        self.server = await cluster_server(self.node.mqtt.login_url, cluster_url=self.node.nats_url, shards=None,
                                           shards_total=2, data_dir=self.data, topics=Topics(self.prefix))
        await self.server.start(timeout_s=DEADLINE_S)
        relay = self.server.relay
        await until(lambda: len(relay.servers) == 2, "the relay serving both shards")  # (a request before is lost)
        return self.server

    async def __aexit__(self, *exc: object) -> None:
        if self.server is not None:
            await self.server.stop()


@pytest.fixture
def nats_node(tmp_path: Path) -> Iterator[NatsNode]:
    directory = tmp_path / "nats"
    try:
        yield NatsNode(nats_cluster.start_cluster(1, directory, auth=True))
    finally:
        nats_cluster.stop_cluster(directory)


def refused(codes: Any) -> bool:
    return all(int(getattr(c, "value", c)) >= 0x80 for c in codes)


async def connect_refused(port: int, client_id: str, **login: Any) -> bool:
    try:
        async with aiomqtt.Client("127.0.0.1", port, identifier=client_id, timeout=30, **login):
            return False
    except aiomqtt.MqttError:
        return True


async def core_nats_refused(port: int, user: str | None = None, password: str | None = None) -> bool:
    """Whether the node refuses a core-NATS login (the protocol by hand: CONNECT, PING, then PONG or
    ``-ERR 'Authorization Violation'``; the node may wait for the callout up to its auth timeout)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        await asyncio.wait_for(reader.readline(), 30)  # INFO
        opts: dict[str, Any] = {"verbose": False, "pedantic": False, "protocol": 1}
        if user is not None:
            opts.update(user=user, **{"pass": password or ""})
        writer.write(f"CONNECT {json.dumps(opts)}\r\nPING\r\n".encode())
        await writer.drain()
        while True:
            line = await asyncio.wait_for(reader.readline(), 30)
            if not line or line.startswith(b"-ERR"):
                return True
            if line.startswith(b"PONG"):
                return False
    finally:
        writer.close()


# ---------------------------------------------------------------------------------------------- no broker

def _signing() -> Any:
    """nkeys (and PyNaCl under it): blink's ``cluster`` extra, which CI installs; a venv without it
    skips these, as it skips the tests that need its nats-server."""
    pytest.importorskip("nkeys", reason="pip install -e '.[cluster]'")
    return pytest.importorskip("nacl.signing", reason="pip install -e '.[cluster]'")


def test_the_auth_block_names_the_issuer_and_the_node_files_include_it(tmp_path: Path) -> None:
    _signing()
    issuer = issuer_public("pw")
    text = auth_text("HASH", issuer)
    block = text.split("authorization", 1)[1]
    assert f'issuer: "{issuer}"' in block and 'auth_users: [ "relay" ]' in block and "no_auth_user" not in block
    assert "player" not in block.split("auth_callout")[0].split("users")[1]  # one user: the relay
    for bad in ("", "UABC", "A" * 55, issuer + "x"):
        with pytest.raises(ValueError):
            auth_text("HASH", bad)
    secret = write_nats_auth(tmp_path / "auth.conf")
    written = (tmp_path / "auth.conf").read_text()
    assert len(secret) == 32 and secret not in written  # stored hashed
    assert issuer_public(secret) in written  # the issuer the relays derive from that password
    assert (tmp_path / "auth.conf").stat().st_mode & 0o077 == 0
    assert natsauth_main([str(tmp_path / "y" / "auth.conf"), str(tmp_path / "missing.conf")]) == 2
    assert not (tmp_path / "y" / "auth.conf").exists()  # nothing written when a node file is wrong
    node = (ROOT / "deploy" / "nats" / "node1.conf").read_text()
    secured = secure_node_conf(node)
    assert secure_node_conf(secured) == secured  # once only
    assert secured.rstrip().endswith('include "auth.conf"') and "no_auth_user" not in secured
    older = node.replace("mqtt {", 'mqtt {\n  no_auth_user: "player"', 1)
    assert "no_auth_user" not in secure_node_conf(older)  # that user is gone: nats-server would refuse the line
    with pytest.raises(ValueError):
        secure_node_conf("listen: 1\n")


def test_the_callout_grants_a_player_its_own_topics_only_and_refuses_everything_else() -> None:
    def request(kind: str = "mqtt", mqtt_id: str | None = "p1", **opts: str) -> dict[str, Any]:
        info: dict[str, Any] = {"type": kind, "kind": "Client"}
        if mqtt_id is not None:
            info["mqtt_id"] = mqtt_id
        return {"nats": {"user_nkey": "UUSER", "server_id": {"id": "NSERVER"}, "client_info": info,
                         "connect_opts": opts, "type": "authorization_request"}}

    signing = _signing()
    grant = decide(request(), "blink/v1")
    assert grant == Grant("p1", ("blink.v1.lobby.req.p1", "blink.v1.m.*.*.act.p1"),
                          ("blink.v1.c.p1", "blink.v1.m.*.*.ev", "blink.v1.m.*.*.snap", "blink.v1.lobby.matches",
                           "blink.v1.lobby.matches.*", "blink.v1.relay.*.status"))
    # a '.' inside a topic level is '//' in nats-server's MQTT subjects: the grant must say the same
    assert decide(request(mqtt_id="a.b"), "game/v2") == Grant(
        "a.b", ("game.v2.lobby.req.a//b", "game.v2.m.*.*.act.a//b"),
        ("game.v2.c.a//b", "game.v2.m.*.*.ev", "game.v2.m.*.*.snap", "game.v2.lobby.matches",
         "game.v2.lobby.matches.*", "game.v2.relay.*.status"))
    assert subject("blink/v1/c/+") == "blink.v1.c.*" and subject("#") == ">"
    for bad in (request(kind="nats"), request(kind="websocket"), request(mqtt_id=None), request(mqtt_id=""),
                request(mqtt_id="a/b"), request(mqtt_id="a+"), request(mqtt_id="x" * 65), request(mqtt_id="a b"),
                request(user="relay"), request(user="player", **{"pass": "x"}), request(**{"pass": "x"})):
        assert isinstance(decide(bad, "blink/v1"), Refusal), bad
    # The answer: for that server and that connection's user key, signed by the issuer derived from the password.
    seed = issuer_seed("secret")
    issuer = issuer_public("secret")
    assert issuer.startswith("A") and issuer_public("other") != issuer
    import nkeys

    signer = nkeys.from_seed(bytearray(seed))
    token = answer(request(), grant, signer, issuer, now=1000)
    outer = claims_of(token)
    assert (outer["iss"], outer["sub"], outer["aud"], outer["nats"]["type"]) == (issuer, "UUSER", "NSERVER",
                                                                                  "authorization_response")
    inner = claims_of(outer["nats"]["jwt"])
    assert (inner["iss"], inner["sub"], inner["aud"]) == (issuer, "UUSER", ACCOUNT)
    assert inner["nats"]["pub"]["allow"] == list(grant.publish) and inner["nats"]["sub"]["allow"] == list(grant.subscribe)
    key = signing.VerifyKey(bytes(signer._keys.verify_key))  # the issuer's public key, raw
    for jwt in (token.decode(), outer["nats"]["jwt"]):
        head, body, sig = jwt.split(".")
        key.verify(f"{head}.{body}".encode(), _unb64(sig))  # raises if the signature does not hold
        assert json.loads(_unb64(head)) == {"typ": "JWT", "alg": "ed25519-nkey"}
    no = claims_of(answer(request(kind="nats"), decide(request(kind="nats"), "blink/v1"), signer, issuer))
    assert "jwt" not in no["nats"] and "MQTT" in no["nats"]["error"]
    assert password_of("nats://h:1,nats://relay:pw%2Dx@h:2") == "pw-x" and password_of(["h:1"]) is None


# ---------------------------------------------------------------------------------------------- a real node

@pytest.mark.integration("nats-server")
def test_on_nats_only_the_relay_with_its_password_is_relay(nats_node: NatsNode, tmp_path: Path) -> None:
    async def main() -> None:
        port = nats_node.mqtt.port
        for password in (None, "", "wrong"):
            assert await connect_refused(port, new_client_id("x"), username="relay", password=password)
        assert not await connect_refused(port, new_client_id("r"), username="relay", password=nats_node.secret)
        # No relay runs: nobody answers the callout, so no player gets in.
        assert await connect_refused(port, new_client_id("early"))
        # Core NATS (the relays' leases and journals): only with the relay's password.
        assert await core_nats_refused(nats_node.nats_port)
        assert await core_nats_refused(nats_node.nats_port, "relay", "wrong")
        assert not await core_nats_refused(nats_node.nats_port, "relay", nats_node.secret)
        nc = await nats.connect(nats_node.nats_url, connect_timeout=5)
        try:  # ... with JetStream's API, as the relays' leases and journals use it
            js = nc.jetstream()
            await js.add_stream(name="authcheck", subjects=["authcheck.>"])
            ack = await js.publish("authcheck.x", b"1")
            assert ack.seq == 1
        finally:
            await nc.close()
        async with nats_node.relay(tmp_path / "r"):
            # A relay runs and answers the callout: players get in, as themselves only.
            assert not await connect_refused(port, new_client_id("late"))
            assert await connect_refused(port, new_client_id("named"), username="player", password="x")
            assert await connect_refused(port, "no spaces in ids")
            assert await core_nats_refused(nats_node.nats_port)  # by the callout itself
            assert await core_nats_refused(nats_node.nats_port, "player", "x")

    asyncio.run(main())


@pytest.mark.integration("nats-server")
def test_on_nats_a_player_reads_and_writes_only_its_own_and_public_topics(nats_node: NatsNode, tmp_path: Path) -> None:
    async def main() -> None:
        async with nats_node.relay(tmp_path / "r"):
            got: list[Any] = []
            victim = Connection(nats_node.players, on_message=lambda msg, now: got.append(msg), ping_interval_s=0)
            eve_id = new_client_id("eve")
            eve_got: list[tuple[str, bytes]] = []
            port = nats_node.mqtt.port
            async with victim, aiomqtt.Client("127.0.0.1", port, identifier=eve_id, timeout=30) as eve:
                await victim.request(m.CreateMatch(name="victim"))
                await until(lambda: any(isinstance(x, m.MatchJoined) for x in got), "the victim's match")
                vmatch = next(x for x in got if isinstance(x, m.MatchJoined)).match
                vid = victim.client_id
                for t in ("#", f"{T.prefix}/#", f"{T.prefix}/c/+", f"{T.prefix}/c/#", T.client(vid),
                          f"{T.prefix}/lobby/req/+", T.req(vid), f"{T.prefix}/m/+/+/act/+", f"{T.prefix}/m/#",
                          "$MQTT/sub/#", "$SYS/#"):
                    assert refused(await eve.subscribe(t, qos=1)), t
                for t in (T.client(eve_id), T.match_list, f"{T.prefix}/m/+/+/ev", f"{T.prefix}/m/+/+/snap",
                          T.relay_status("+")):
                    assert not refused(await eve.subscribe(t, qos=1)), t
                reader = asyncio.create_task(collect_messages(eve, eve_got))
                # A bot match through the node: the permissions are enough to play (QoS 1 included).
                result = await run_match(nats_node.players, "blink", 2, FAST, 31, 0.03, 240)
                assert result.summary()["winner"] in result.summary()["players"]
                code = result.events[-1].match
                S = Topics(T.prefix, shard_of_code(code, 2))  # the match's shard: its topics
                forged = m.Event(code, 100000, time.time_ns(), 0, "match_over", {"winner": "EVIL", "reason": "won"})
                snap = m.Snapshot(code, 100000, time.time_ns(), 0, "over", ("EVIL",), {}, {}, "blink")
                before = len(got)
                for topic, payload, retain in (
                        (S.ev(code), encode(forged), False), (S.snap(code), encode(snap), True),
                        (T.snap("FAKE1"), encode(snap), True),
                        (T.client(vid), encode(m.Pong(1, 2, 3)), False),
                        (T.relay_status("relay-0"), b"\x80", True), (T.match_list, encode(m.MatchList(())), True),
                        # the victim's own request and action topics: leaving its match, a ping, a play
                        (T.req(vid), encode(m.Leave(match=vmatch)), False), (T.req(vid), encode(m.Ping(t0=1)), False),
                        *((Topics(T.prefix, s).act(vmatch, vid), encode(m.Act(id=1, seq=1, action={
                            "t": "PlayCard", "v": 1, "card": "1-red-moon", "pile": 0})), False) for s in ("0", "1"))):
                    try:  # nats-server may answer a refused QoS 1 publish, or just drop it (and the connection)
                        await asyncio.wait_for(eve.publish(topic, payload, qos=1, retain=retain), 10)
                    except (aiomqtt.MqttError, asyncio.TimeoutError):
                        pass
                # Barrier: Eve's own ping answered; then the victim's (it would have got the forged Pong first).
                await eve.publish(T.req(eve_id), encode(m.Ping(t0=7)), qos=1)
                await until(lambda: any(t == T.client(eve_id) for t, _ in eve_got), "eve's pong")
                t0 = time.time_ns()
                await victim.request(m.Ping(t0=t0))
                await until(lambda: any(isinstance(x, m.Pong) and x.t0 == t0 for x in got), "the victim's pong")
                reader.cancel()
                await asyncio.gather(reader, return_exceptions=True)
                after = [type(x).__name__ for x in got[before:]]
                assert after == ["Pong"], after  # no forged Pong, no answer to a Leave, Ping or Act sent in its name
            mine = [(t, x) for t, p in eve_got if p for x in decode_all(p)]
            assert not [x for t, x in mine if isinstance(x, (m.Event, m.Snapshot)) and x.seq >= 100000]
            assert not [t for t, _ in eve_got if "/act/" in t or "/req/" in t or (t.startswith(f"{T.prefix}/c/")
                                                                                  and t != T.client(eve_id))]
            # A newcomer gets only the relay's retained messages.
            late_got: list[tuple[str, bytes]] = []
            async with aiomqtt.Client("127.0.0.1", port, identifier=new_client_id("late"), timeout=30) as late:
                for t in (T.snap("FAKE1"), S.snap(code), T.match_list, f"{T.match_list}/+"):
                    await late.subscribe(t, qos=1)
                reader = asyncio.create_task(collect_messages(late, late_got))
                await until(lambda: any(t == S.snap(code) for t, _ in late_got), "the real retained snapshot")
                # (a relay of several shards keeps a match list per shard: lobby/matches/N)
                await until(lambda: any(t.startswith(T.match_list) for t, _ in late_got), "a retained match list")
                reader.cancel()
                await asyncio.gather(reader, return_exceptions=True)
            snaps = [x for t, p in late_got if t.endswith("/snap") for x in decode_all(p)]
            assert snaps and all(isinstance(x, m.Snapshot) and x.match == code and x.seq < 100000 for x in snaps)
            lists = [x for t, p in late_got if t.startswith(T.match_list) for x in decode_all(p)]
            assert lists and all(isinstance(x, m.MatchList) for x in lists)

    asyncio.run(main())


@pytest.mark.integration("nats-server")
def test_on_nats_the_callout_grants_the_relays_own_prefix(nats_node: NatsNode, tmp_path: Path) -> None:
    """A relay with another topic prefix lets its players use that prefix, and only it."""
    async def main() -> None:
        mine = Topics("game/v2")
        async with nats_node.relay(tmp_path / "r", prefix=mine.prefix):
            me = new_client_id("p")
            async with aiomqtt.Client("127.0.0.1", nats_node.mqtt.port, identifier=me, timeout=30) as c:
                assert not refused(await c.subscribe(mine.client(me), qos=1))
                assert refused(await c.subscribe(T.client(me), qos=1))  # the default prefix is not this relay's
                got: list[tuple[str, bytes]] = []
                reader = asyncio.create_task(collect_messages(c, got))
                await c.publish(mine.req(me), encode(m.Ping(t0=5)), qos=1)
                await until(lambda: any(t == mine.client(me) for t, _ in got), "the pong under the relay's prefix")
                reader.cancel()
                await asyncio.gather(reader, return_exceptions=True)

    asyncio.run(main())
