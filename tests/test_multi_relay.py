"""Several relays on one broker (relay/runtime.py): two relays with static, disjoint shards on a
test-started Mosquitto. Bot matches of all four games land on shards of both relays and finish;
every lobby request is handled by exactly one relay; a client follows its match's shard; a relay
that stops hands its shards to another, which replays their journals and carries on."""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from pathlib import Path
from typing import Any

import aiomqtt
import pytest

from mqttkit import BrokerAddress
from protocol import messages as m
from protocol.codec import decode, decode_all, encode
from protocol.rules import game_for
from protocol.topics import Topics
from relay import judge
from relay.cluster import shards
from relay.hosting import ClusterServer, sqlite_opener
from relay.shard import ConfigConflict
from relay.runtime import Relay, RelaySettings
from relay.core import RelayConfig
from relay.cluster import ShardedSpace
from relay.ownership import StaticOwnership
from client import Player, run_match
from tests.helpers import eventually

DEADLINE_S = 120.0
TOTAL = 4
GAMES = ("blink", "takeaway", "sequence", "ryo")


class CountingRelay(Relay):
    """A cluster relay that counts the lobby requests it hands to a core, per client, and the actions
    of shards it does not serve that reached its inbox (the connection's parser should skip them)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.handled: Counter[str] = Counter()
        self.foreign_actions = 0

    async def step(self) -> None:
        head = f"{self.prefix}/lobby/req/"
        for topic, payload, _ in self._inbox[:512]:
            act_shard = shards.shard_of_act_topic(topic, self.prefix)
            if act_shard is not None and act_shard not in self.servers:
                self.foreign_actions += 1
            if topic.startswith(head):
                client = topic[len(head):]
                shard = shards.route_request(client, payload, self.total)
                if shard == shards.KNOWN:
                    self.handled[client] += sum(1 for s in self.servers.values() if client in s.core.client_match)
                elif shard in self.servers:
                    self.handled[client] += 1
        await super().step()


def relay(address: BrokerAddress, owned: list[str], data: Path, name: str, total: int = TOTAL) -> CountingRelay:
    r = CountingRelay(address, RelaySettings(config=RelayConfig(relay_id=name), relay_id=name),
                      ShardedSpace(total, sqlite_opener(data, durable=False)), StaticOwnership(owned))
    r.eventlog.records = []
    return r


async def started(*relays: Relay) -> list[ClusterServer]:
    servers = [ClusterServer(r) for r in relays]
    for s in servers:
        await s.start()
    for r in relays:
        await eventually(lambda: not r._starting and not r._announce, DEADLINE_S, "the relay serves its shards")
    return servers


async def stopped(servers: list[ClusterServer]) -> None:
    for s in servers:
        await s.stop()


def test_two_relays_on_one_broker_play_every_game_across_shards(mosquitto: BrokerAddress, tmp_path: Path) -> None:
    async def body() -> None:
        a = relay(mosquitto, ["0", "1"], tmp_path / "a", "relay-a")
        b = relay(mosquitto, ["2", "3"], tmp_path / "b", "relay-b")
        servers = await started(a, b)
        try:
            players = mosquitto.public()
            runs = [run_match(players, game, 2, dict(game_for(game).quick_settings), seed=i, reaction_s=0.02,
                              timeout_s=DEADLINE_S * 2)
                    for i, game in enumerate(GAMES * 3)]
            results = await asyncio.gather(*runs)
            served: Counter[str] = Counter()
            for r in results:
                assert any(e.type == "match_over" for e in r.events), r.code
                assert [e.seq for e in r.events] == list(range(1, len(r.events) + 1)), f"{r.code}: gap-free"
                shard = shards.shard_of_code(r.code, TOTAL)
                served["a" if shard in ("0", "1") else "b"] += 1
                owner = a if shard in ("0", "1") else b
                other = b if owner is a else a
                # judged by the shard's owner only (its records; the core forgets a match after its linger)
                assert owner.eventlog.records is not None and other.eventlog.records is not None
                judged = [x for x in owner.eventlog.records if x.get("match") == r.code and isinstance(x.get("seq"), int)]
                assert {x["seq"] for x in judged} == {e.seq for e in r.events}  # every event, from the owner
                assert {x["shard"] for x in judged} == {shard}
                assert not any(x.get("match") == r.code for x in other.eventlog.records)
            assert served["a"] and served["b"], served  # both relays served matches
            # Each relay hears every shard's actions (one fixed subscription) and its connection's
            # parser skipped the other relay's, undecoded: none reached its inbox.
            for r in (a, b):
                assert r._client is not None and r._client.filtered > 0, r.relay_id
                assert r.foreign_actions == 0, r.relay_id
        finally:
            await stopped(servers)

    asyncio.run(asyncio.wait_for(body(), DEADLINE_S * 3))


def test_every_lobby_request_is_handled_by_exactly_one_relay(mosquitto: BrokerAddress, tmp_path: Path) -> None:
    async def body() -> None:
        a = relay(mosquitto, ["0", "1"], tmp_path / "a", "relay-a")
        b = relay(mosquitto, ["2", "3"], tmp_path / "b", "relay-b")
        servers = await started(a, b)
        t = Topics()
        me = "p" + os.urandom(16).hex()
        answers: list[Any] = []
        try:
            pub = mosquitto.public()
            async with aiomqtt.Client(pub.host, pub.port, identifier=me) as c:
                await c.subscribe(t.client(me), qos=1)

                async def reader() -> None:
                    async for msg in c.messages:
                        answers.extend(decode_all(bytes(msg.payload)))  # type: ignore[arg-type]

                task = asyncio.create_task(reader())
                requests: list[bytes] = [encode(m.Ping(t0=i)) for i in range(8)]
                requests.append(encode(m.CreateMatch("me", "takeaway")))
                requests += [encode(m.JoinMatch("me", judge.code_in_shard(5, s, TOTAL))) for s in range(TOTAL)]
                requests += [encode(m.Resync(judge.code_in_shard(9, s, TOTAL))) for s in range(TOTAL)]
                requests += [encode(m.QuickMatch("me", g, dict(game_for(g).quick_settings))) for g in GAMES]
                requests += [b"\x93garbage", encode(m.Pong(1, 2, 3)), encode(m.JoinMatch("me", "not a code"))]
                for payload in requests:
                    await c.publish(t.req(me), payload, qos=1)
                # A barrier: one more request per shard; each relay handles its messages in order, so once
                # every shard has answered, both relays have judged everything sent before.
                for s in range(TOTAL):
                    await c.publish(t.req(me), encode(m.Resync(judge.code_in_shard(11, s, TOTAL))), qos=1)
                want = len(requests) + TOTAL
                await eventually(lambda: len(answers) >= want, DEADLINE_S, f"{want} answers")
                assert a.handled[me] + b.handled[me] == want
                kinds = Counter(type(x).__name__ for x in answers)
                assert kinds["Pong"] == 8 and kinds["MatchJoined"] == 1 + len(GAMES), kinds
                assert sorted(x.t0 for x in answers if isinstance(x, m.Pong)) == list(range(8))
                # a Leave without a match (the last will) reaches the cores that know this client only
                before = a.handled[me] + b.handled[me]
                await c.publish(t.req(me), encode(m.Leave()), qos=1)
                await eventually(lambda: a.handled[me] + b.handled[me] > before, DEADLINE_S, "the leave")

                def knowing() -> int:
                    return sum(1 for r in (a, b) for s in r.servers.values() if me in s.core.client_match)

                # Each relay judges the Leave in its own time: wait until every core that knew the client has.
                await eventually(lambda: knowing() == 0, DEADLINE_S, "the leave in every core that knew the client")
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            assert len(answers) == want  # nothing answered twice
            assert knowing() == 0  # the Leave reached every core that had seated this client
        finally:
            await stopped(servers)

    asyncio.run(asyncio.wait_for(body(), DEADLINE_S * 2))


def test_a_shard_moves_to_another_relay_and_its_matches_carry_on(mosquitto: BrokerAddress, tmp_path: Path) -> None:
    """Relay A stops (handing shard 1 over cleanly); B takes it, replays its journal, players resync."""

    async def body() -> None:
        data = tmp_path / "shared"  # one machine: the SQLite journals of the shards, in one place
        a = relay(mosquitto, ["0", "1"], data, "relay-a", total=2)
        servers = await started(a)
        pub = mosquitto.public()
        b_server: ClusterServer | None = None
        async with Player(pub, "ann") as p1, Player(pub, "bob") as p2:
            code = await p1.create("takeaway", {}, timeout=DEADLINE_S)
            await p2.join(code, timeout=DEADLINE_S)
            shard = shards.shard_of_code(code, 2)
            assert p1.model.shard == shard and p1.conn.shard_of(code) == shard
            await eventually(lambda: p1.model.state() is not None, DEADLINE_S, "the first view", p1.wait_change)
            seq_before = p1.model.last_event_seq
            await stopped(servers)  # A hands over: its shards' statuses go offline
            b = relay(mosquitto, ["0", "1"], data, "relay-b", total=2)
            b_server = (await started(b))[0]
            try:
                # B replayed the match; both players are told (the shard is online again) and resync
                assert code in b.servers[shard].core.matches
                await eventually(lambda: p1.model.shard_status.get(f"shard-{shard}") is True, DEADLINE_S,
                                 "the shard is back", p1.wait_change)
                # the match goes on under B: a move by whoever's turn it is gets a verdict
                match = b.servers[shard].core.matches[code]
                assert match.seq >= seq_before

                def mover() -> Player | None:
                    for p in (p1, p2):
                        rules, state = p.model.rules, p.model.state()
                        if rules is not None and state is not None and rules.legal_actions(state, p.model.seat):
                            return p
                    return None

                who = await eventually(mover, DEADLINE_S, "a legal move", p1.wait_change)
                rules = who.model.rules
                assert rules is not None
                action = rules.legal_actions(who.model.state(), who.model.seat)[0]
                verdicts = len(who.model.verdicts)
                await who.act(action)
                await eventually(lambda: len(who.model.verdicts) > verdicts, DEADLINE_S, "a verdict from B",
                                 who.wait_change)
                assert who.model.verdicts[-1].ok
            finally:
                await b_server.stop()

    asyncio.run(asyncio.wait_for(body(), DEADLINE_S * 2))


def test_a_journal_made_with_another_shard_count_is_refused(mosquitto: BrokerAddress, tmp_path: Path) -> None:
    async def body() -> None:
        servers = await started(relay(mosquitto, ["0"], tmp_path, "relay-a", total=2))
        await stopped(servers)
        r = relay(mosquitto, ["0"], tmp_path, "relay-b", total=3)
        server = ClusterServer(r)
        with pytest.raises(ConfigConflict, match="shard 0's journal was made with 2 shard"):
            await server.start()
            assert server.task is not None
            await server.task
        await server.stop()

    asyncio.run(asyncio.wait_for(body(), DEADLINE_S))


def test_a_last_will_lost_while_a_shard_had_no_relay_is_given_by_the_next_owner(
        mosquitto: BrokerAddress, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A player's connection ends while its shard is served by nobody (its relay is gone, so its last
    will is heard by no core). The relay that takes the shard over gives the will itself: the player not
    heard from since the takeover is marked dropped; the one still there (pinging) is not."""
    monkeypatch.setattr("relay.runtime.WILL_CHECK_S", 5.0)

    async def body() -> None:
        data = tmp_path / "shared"
        a = relay(mosquitto, ["0", "1"], data, "relay-a", total=2)
        servers = await started(a)
        pub = mosquitto.public()
        async with Player(pub, "ann") as p1:
            p2 = Player(pub, "bob")
            await p2.__aenter__()
            code = await p1.create("takeaway", {}, timeout=DEADLINE_S)
            await p2.join(code, timeout=DEADLINE_S)
            shard = shards.shard_of_code(code, 2)
            await eventually(lambda: p1.model.state() is not None, DEADLINE_S, "the first view", p1.wait_change)
            await stopped(servers)  # nobody serves the shard now
            gone = p2.conn.client_id
            await p2.close(leave=False)  # its will, had there been one, would have reached no core
            b = relay(mosquitto, ["0", "1"], data, "relay-b", total=2)
            b_server = (await started(b))[0]
            try:
                seat = b.servers[shard].core.matches[code].seat_of(gone)
                assert seat is not None
                await eventually(lambda: any(e.type == "player_dropped" and e.data.get("seat") == seat
                                             for e in p1.model.events if e.match == code),
                                 DEADLINE_S, "bob marked dropped by the new owner", p1.wait_change)
                players = b.servers[shard].core.matches[code].players
                assert players[seat].dropped_at is not None
                assert players[1 - seat].dropped_at is None  # ann was heard (her pings): no will for her
            finally:
                await b_server.stop()

    asyncio.run(asyncio.wait_for(body(), DEADLINE_S * 2))


class SlowRelease(StaticOwnership):
    """Gives its shards up more slowly than ``ClusterServer.stop`` cancels again (every 0.25 s), as
    NATS leases do while JetStream is slow."""

    released = False

    async def close(self) -> None:
        await asyncio.sleep(1.0)  # the slow release itself (not a wait for anything)
        await super().close()
        self.released = True


def test_a_clean_stop_says_its_shards_offline_and_releases_them_even_when_asked_again(
        mosquitto: BrokerAddress, tmp_path: Path) -> None:
    async def body() -> None:
        ownership = SlowRelease(["0", "1"])
        a = CountingRelay(mosquitto, RelaySettings(config=RelayConfig(relay_id="relay-a"), relay_id="relay-a"),
                          ShardedSpace(TOTAL, sqlite_opener(tmp_path / "a", durable=False)), ownership)
        await stopped(await started(a))
        assert ownership.released  # the release ran to its end despite stop's repeated cancels
        t = Topics()
        statuses: dict[str, Any] = {}
        pub = mosquitto.public()
        async with aiomqtt.Client(pub.host, pub.port, identifier="w" + os.urandom(8).hex()) as c:
            await c.subscribe(t.relay_status("+"), qos=1)

            async def reader() -> None:
                async for msg in c.messages:
                    statuses[str(msg.topic)] = decode(bytes(msg.payload))  # type: ignore[arg-type]

            task = asyncio.create_task(reader())
            want = {t.relay_status("shard-0"), t.relay_status("shard-1")}
            await eventually(lambda: want <= set(statuses), DEADLINE_S, "the shards' retained statuses")
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        # Retained and said before the release: offline (a successor's "online" would replace them).
        assert all(statuses[topic] == m.RelayStatus(topic.split("/")[-2], False) for topic in want), statuses

    asyncio.run(asyncio.wait_for(body(), DEADLINE_S))
