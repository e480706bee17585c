"""Shard leases: the pure decision logic, and ``NatsLeases`` between relays on a real NATS cluster."""

from __future__ import annotations

import argparse
import asyncio
import itertools
import math
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from client.tools import nats_cluster
from client.tools.nats_cluster import Cluster
from mqttkit import free_port
from relay.cluster.jetstream import JetStreamJournal, NatsLink, close_nats, connect_jetstream
from relay.storage import FencedError, Tick
from relay.cluster.leaseplan import (GIVE_UP_AT, HeldLease, LeaseError, Owner, View, cooldown_s, decide, leftovers, parse_shards,
                             pin_conflict, preference, renew_after, without_dead)
from relay.cluster.leases import DEFAULT_TTL_S, NatsLeases, ThreadedLeases
from relay.ownership import Ownership

TTL = 4.0
SHARDS = [str(i) for i in range(6)]
DEADLINE_S = 120.0


def view(owners: dict[str, str], members: dict[str, frozenset[str]] | None = None) -> View:
    return View({s: Owner(r, 10 + i) for i, (s, r) in enumerate(owners.items())},
                members if members is not None else {r: frozenset() for r in set(owners.values())})


def held(*shards: str, at: float = 0.0) -> dict[str, HeldLease]:
    return {s: HeldLease(10, 10, at) for s in shards}


# ---------------------------------------------------------------------------------------------- pure logic

def test_alone_takes_every_free_shard() -> None:
    plan = decide(0.0, "a", SHARDS, frozenset(), {}, View(), TTL)
    assert sorted(plan.acquire) == SHARDS and not plan.release and not plan.lose


@pytest.mark.parametrize("ttl", [DEFAULT_TTL_S, TTL, 1.0, 600.0])
def test_renews_every_second_and_gives_up_at_half_the_ttl(ttl: float) -> None:
    v = view({"0": "a", "1": "a"})
    renew = renew_after(ttl)
    h = {"0": HeldLease(5, 9, 0.0), "1": HeldLease(6, 11, ttl * GIVE_UP_AT - renew)}
    assert renew == min(1.0, ttl / 3)
    assert decide(renew - 0.01, "a", ["0", "1"], frozenset(), h, v, ttl).renew == []
    plan = decide(renew, "a", ["0", "1"], frozenset(), h, v, ttl)
    assert plan.renew == ["0"] and plan.lose == []
    plan = decide(ttl * GIVE_UP_AT, "a", ["0", "1"], frozenset(), h, v, ttl)
    assert plan.lose == ["0"] and plan.renew == ["1"]
    # the give-up comes well before the server can let the entry expire (ttl after the renewal was stored)
    assert GIVE_UP_AT < 1 and renew < ttl * GIVE_UP_AT


def test_the_default_timing_leaves_room_on_both_sides() -> None:
    """12 s leases renewed every second: ~5 s of renewals may fail before a shard is given up, and the
    give-up, even at its latest (a tick plus the longest step of a tick: 3 requests of 0.67 s), still comes
    seconds before the entry can expire for another relay to take."""
    leases = NatsLeases("nats://127.0.0.1:1", 4)  # not started: only its timing is read
    ttl = leases.ttl
    assert ttl == DEFAULT_TTL_S == 12.0
    assert renew_after(ttl) == 1.0 and ttl * GIVE_UP_AT == 6.0
    assert ttl * GIVE_UP_AT - renew_after(ttl) >= 4.5  # a stall this long costs nothing (see the next test)
    latest_give_up = ttl * GIVE_UP_AT + leases.tick_s + 3 * leases.request_s
    assert latest_give_up <= ttl - 3.0
    assert cooldown_s(ttl) == 8.0 and cooldown_s(1.0) == 2.0
    from client.cli import build_parser  # what `blink serve --help` says is the default
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert f"own, {DEFAULT_TTL_S:g} s;" in " ".join(commands.choices["serve"].format_help().split())
    assert f"TTL ({DEFAULT_TTL_S:g} s\nby default" in (Path(__file__).parents[1] / "README.md").read_text()


def _hold_through_stall(ttl: float, stall_from: float, stall_s: float, until: float = 30.0) -> list[float]:
    """Ticks every 0.5 s for one relay holding one shard; every renewal sent inside the stall gets no
    answer (and does not land), every other one succeeds. Returns the times the shard was given up."""
    v = view({"0": "a"})
    h = {"0": HeldLease(5, 5, 0.0)}
    lost = []
    now = 0.0
    while now < until:
        now = round(now + 0.5, 6)
        plan = decide(now, "a", ["0"], frozenset(), h, v, ttl)
        if plan.lose:
            lost.append(now)
            h = {}
            break
        for shard in plan.renew:
            if not stall_from <= now < stall_from + stall_s:
                h[shard] = HeldLease(5, h[shard].revision + 1, now)
    return lost


@pytest.mark.parametrize("stall_from", [10.0, 10.25, 10.5, 10.75, 11.0])
def test_a_renewal_stall_shorter_than_the_give_up_time_keeps_the_shard(stall_from: float) -> None:
    """What a stopped NATS node did 7-12 s later: ~4 s with no answer from JetStream. With the default
    ttl the shard stays (whenever in the renewal cycle the stall begins); with a 4 s ttl it is given
    up, and a stall longer than the give-up time still makes the relay stop serving."""
    assert _hold_through_stall(DEFAULT_TTL_S, stall_from, 4.5) == []
    assert _hold_through_stall(4.0, stall_from, 4.0) != []  # a 4 s ttl gives the shard up
    lost = _hold_through_stall(DEFAULT_TTL_S, stall_from, 20.0)
    assert lost and lost[0] <= stall_from + DEFAULT_TTL_S * GIVE_UP_AT  # ... before half the ttl has passed


def test_a_lease_that_is_gone_or_taken_is_lost_at_once() -> None:
    h = held("0", "1")
    plan = decide(0.1, "a", ["0", "1"], frozenset(), h, view({"0": "b"}, {"a": frozenset(), "b": frozenset()}), TTL)
    assert sorted(plan.lose) == ["0", "1"]  # 0 taken by b, 1 absent (expired or deleted)


def test_two_relays_aim_at_half_each_and_the_surplus_is_released_one_at_a_time() -> None:
    members = {"a": frozenset(), "b": frozenset()}
    h = held(*SHARDS)
    plan = decide(0.1, "a", SHARDS, frozenset(), h, view({s: "a" for s in SHARDS}, members), TTL)
    assert len(plan.release) == 1 and not plan.acquire
    h3 = held("0", "1", "2")
    v = view({**{s: "a" for s in ("0", "1", "2")}}, members)
    assert decide(0.1, "a", SHARDS, frozenset(), h3, v, TTL).release == []  # at target: stable
    plan_b = decide(0.1, "b", SHARDS, frozenset(), {}, v, TTL)
    assert sorted(plan_b.acquire) == ["3", "4", "5"]


def test_above_the_floor_releases_while_someone_is_below_it() -> None:
    shards = ["0", "1", "2", "3"]
    members = {m: frozenset() for m in "abc"}
    v = view({"0": "a", "1": "a", "2": "b", "3": "b"}, members)
    plan = decide(0.1, "a", shards, frozenset(), held("0", "1"), v, TTL)
    assert len(plan.release) == 1  # c holds nothing: hand one over
    v2 = view({"0": "a", "1": "a", "2": "b", "3": "c"}, members)
    assert decide(0.1, "a", shards, frozenset(), held("0", "1"), v2, TTL).release == []  # 2/1/1: balanced


def test_a_released_shard_is_not_taken_back_during_the_cooldown() -> None:
    members = {"a": frozenset(), "b": frozenset()}
    v = view({"0": "a"}, members)
    plan = decide(1.0, "a", ["0", "1", "2"], frozenset(), held("0", at=0.9), v, TTL, cooldown={"1": 5.0})
    assert plan.acquire == ["2"]
    v = view({"0": "a", "2": "b"}, members)
    plan = decide(6.0, "a", ["0", "1", "2"], frozenset(), held("0", at=5.9), v, TTL, cooldown={"1": 5.0})
    assert sorted(plan.acquire) == ["1"]  # target is ceil(3/2) = 2: one more


def test_an_entry_still_naming_a_relay_that_gave_the_shard_up_is_taken_back_or_deleted_after_the_cooldown() -> None:
    """After a stall the bucket may still name this relay for shards it gave up (a renewal queued in the
    stall landed late; the deletion failed): nobody else may take them until they expire, so it does."""
    members = {"a": frozenset(), "b": frozenset()}
    v = view({"0": "a", "1": "a", "2": "a", "3": "b"}, members)
    assert leftovers("a", held("0"), v) == {"1": v.owners["1"], "2": v.owners["2"]}
    cool = {"1": 8.0, "2": 8.0}
    plan = decide(5.0, "a", ["0", "1", "2", "3"], frozenset(), held("0", at=4.9), v, TTL, cool)
    assert plan.acquire == [] and plan.clear == []  # cooling down: the queued deletion may still come
    plan = decide(9.0, "a", ["0", "1", "2", "3"], frozenset(), held("0", at=8.9), v, TTL, cool)
    assert len(plan.acquire) == 1 and plan.acquire[0] in ("1", "2")  # its share is 2 of 4: one back ...
    assert plan.clear == sorted({"1", "2"} - set(plan.acquire))  # ... and the other freed for b
    assert decide(9.0, "b", ["0", "1", "2", "3"], frozenset(), held("3"), v, TTL).acquire == []  # b must wait
    pinned = decide(0.0, "p", ["0", "1"], frozenset({"1"}), {}, view({"1": "p"}, {"p": frozenset({"1"})}), TTL)
    assert pinned.acquire == ["1"] and pinned.clear == []
    kept = decide(0.0, "a", ["0"], frozenset(), held("0"), view({"0": "a"}), TTL)
    assert kept.acquire == [] and kept.clear == [] and leftovers("a", held("0"), view({"0": "a"})) == {}


def test_pins() -> None:
    members = {"a": frozenset(), "p": frozenset({"2", "3"})}
    v = view({"2": "a", "0": "a"}, members)
    plan = decide(0.1, "a", SHARDS, frozenset(), held("0", "2"), v, TTL)
    assert plan.release == ["2"]  # a live relay is pinned to it
    assert "3" not in plan.acquire and "2" not in plan.acquire
    pinned = decide(0.1, "p", SHARDS, frozenset({"2", "3"}), {}, v, TTL)
    assert pinned.acquire == ["3"]  # 2 is still a's until released; never anything unpinned
    assert pin_conflict("q", frozenset({"3", "4"}), View(members=members, since={"p": 5}), None) is not None
    assert pin_conflict("q", frozenset({"4"}), View(members=members, since={"p": 5}), None) is None
    both = View(members={"p": frozenset({"1"}), "q": frozenset({"1"})}, since={"p": 5, "q": 7})
    assert pin_conflict("q", frozenset({"1"}), both, 7) is not None  # the later registration is refused
    assert pin_conflict("p", frozenset({"1"}), both, 5) is None


def test_preferences_differ_between_relays() -> None:
    order_a = sorted(SHARDS, key=lambda s: preference("a", s))
    order_b = sorted(SHARDS, key=lambda s: preference("b", s))
    assert order_a != order_b
    assert order_a == sorted(SHARDS, key=lambda s: preference("a", s))  # deterministic


def test_parse_shards() -> None:
    assert parse_shards("0, 3,3", 4) == frozenset({"0", "3"})
    for bad in ("4", "x", "", "-1"):
        with pytest.raises(LeaseError):
            parse_shards(bad, 4)


@pytest.mark.parametrize("members", [1, 2, 3, 5, 7])
@pytest.mark.parametrize("count", [1, 4, 8, 16])
def test_repeated_decisions_converge_to_a_balanced_partition(members: int, count: int) -> None:
    """A small simulation of the bucket: relays act one after another on the shared truth."""
    shards = [str(i) for i in range(count)]
    names = [f"r{i}" for i in range(members)]
    truth: dict[str, str] = {}
    holds: dict[str, dict[str, HeldLease]] = {n: {} for n in names}
    cool: dict[str, dict[str, float]] = {n: {} for n in names}
    now = 0.0
    for _ in range(400):
        now += 0.25
        for n in names:
            v = View({s: Owner(r, 1) for s, r in truth.items()}, {m: frozenset() for m in names})
            plan = decide(now, n, shards, frozenset(), holds[n], v, TTL, cool[n])
            assert not plan.lose
            for s in plan.renew:
                holds[n][s] = HeldLease(1, 1, now)
            for s in plan.release:
                del holds[n][s]
                del truth[s]
                cool[n][s] = now + cooldown_s(TTL)
            for s in plan.acquire:
                if s not in truth:
                    truth[s] = n
                    holds[n][s] = HeldLease(1, 1, now)
    counts = sorted(len(h) for h in holds.values())
    assert sum(counts) == count and set(truth) == set(shards)
    assert counts[-1] - counts[0] <= 1 and counts[-1] == math.ceil(count / members) or count < members


def test_a_dead_members_shards_are_free_and_remembered_with_their_revision() -> None:
    v = View({"0": Owner("a", 5), "1": Owner("b", 6), "2": Owner("a", 7)},
             {"a": frozenset(), "b": frozenset({"1"})}, {"a": 1, "b": 2})
    assert without_dead(v, []) == (v, {})
    rest, taken = without_dead(v, ["a"])
    assert taken == {"0": Owner("a", 5), "2": Owner("a", 7)}
    assert rest == View({"1": Owner("b", 6)}, {"b": frozenset({"1"})}, {"b": 2})
    plan = decide(0.0, "b", ["0", "1", "2"], frozenset({"1"}), {"1": HeldLease(6, 6, 0.0)}, rest, TTL)
    assert plan.acquire == []  # b is pinned to "1" (which it holds): none of the dead relay's
    plan = decide(0.0, "c", ["0", "1", "2"], frozenset(), {}, View(rest.owners, {**rest.members, "c": frozenset()}), TTL)
    assert sorted(plan.acquire) == ["0", "2"]


# ---------------------------------------------------------------------------------------------- on NATS

_spaces = itertools.count(1)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with nats_cluster.running_cluster(3, tmp_path_factory.mktemp("nats-leases")) as c:
        yield c


class Recorder:
    """The relay side of ``Ownership``: what it serves, and a log of gains and losses."""

    def __init__(self, name: str, log: list[tuple[float, str, str, str]]) -> None:
        self.name = name
        self.serving: dict[str, int] = {}
        self.threads: set[str] = set()  # where the callbacks ran
        self.log = log

    async def gain(self, shard: str, fence: int) -> None:
        self.threads.add(threading.current_thread().name)
        self.serving[shard] = fence
        self.log.append((time.monotonic(), self.name, "gain", shard))

    async def loss(self, shard: str) -> None:
        self.threads.add(threading.current_thread().name)
        self.serving.pop(shard, None)
        self.log.append((time.monotonic(), self.name, "loss", shard))


_started: list[NatsLeases] = []


def relay(cluster: Cluster, name: str, space: str, log: list[Any], count: int = 6, **kw: Any) -> tuple[NatsLeases, Recorder]:
    leases = NatsLeases(cluster.nats, count, namespace=space, relay_id=name, **{"ttl": TTL, **kw})
    _started.append(leases)
    rec = Recorder(name, log)
    leases.subscribe(rec.gain, rec.loss)
    ownership: Ownership = leases  # it implements the Protocol
    assert ownership is leases
    return leases, rec


async def close_all() -> None:
    """Close every NatsLeases a scenario made (also when it failed); a close that hangs fails the test
    with the stack of every task, rather than hanging it."""
    while _started:
        leases = _started.pop()
        closing = asyncio.ensure_future(leases.close())
        done, _ = await asyncio.wait({closing}, timeout=60)
        if not done:
            for task in asyncio.all_tasks():
                task.print_stack()
            raise AssertionError(f"closing relay {leases.relay_id} hung")
        closing.result()


def run(scenario: Any) -> None:
    async def guarded() -> None:
        try:
            await scenario
        finally:
            await close_all()
    asyncio.run(guarded())


async def until(predicate: Any, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


def no_overlap(log: list[tuple[float, str, str, str]]) -> None:
    """Never two relays serving one shard: replaying the log, a gain finds the shard unserved."""
    serving: dict[str, str] = {}
    for _, who, what, shard in sorted(log):
        if what == "gain":
            assert shard not in serving, f"{who} gained {shard} while {serving.get(shard)} served it"
            serving[shard] = who
        else:
            assert serving.get(shard) == who
            del serving[shard]


def test_two_relays_split_the_shards_and_a_closing_one_hands_over(cluster: Cluster) -> None:
    async def scenario() -> None:
        log: list[Any] = []
        space = f"l{next(_spaces)}"
        a, ra = relay(cluster, "a", space, log)
        b, rb = relay(cluster, "b", space, log)
        await a.start()
        assert len(ra.serving) == 6  # start returns once the first shards' on_gain has run
        await b.start()
        await until(lambda: len(ra.serving) == 3 and len(rb.serving) == 3, "a 3/3 split")
        assert set(ra.serving) | set(rb.serving) == set(SHARDS)
        assert dict(a.owned()) == ra.serving and dict(b.owned()) == rb.serving
        fences_b = dict(rb.serving)
        await b.close()
        assert rb.serving == {} and b.owned() == {}
        await until(lambda: len(ra.serving) == 6, "a to take b's shards back")
        assert all(ra.serving[s] > f for s, f in fences_b.items())  # a later tenure, a larger fence
        await a.close()
        no_overlap(log)
    run(scenario())


def test_an_entry_naming_the_relay_that_it_does_not_hold_is_taken_back_at_once(cluster: Cluster) -> None:
    """What a stall can leave behind (a renewal stored after the relay gave the shard up): an entry
    naming a live relay that does not hold it. Nobody else may take it; the relay itself takes it back
    rather than leaving the shard unserved until the entry expires."""
    async def scenario() -> None:
        log: list[Any] = []
        space = f"l{next(_spaces)}"
        first, _ = relay(cluster, "first", space, log, count=2, ttl=60.0)
        await first.start()  # creates the buckets (entries expire 60 s after their last write)
        await first.close()
        nc = await connect_jetstream(cluster.nats)
        try:
            kv = await nc.jetstream().key_value(f"{space}_leases")
            await kv.put("s.0", b"a")
        finally:
            await close_nats(nc)
        a, ra = relay(cluster, "a", space, log, count=2, ttl=60.0)
        await a.start()
        assert sorted(ra.serving) == ["0", "1"]  # in its first tick, not a ttl later
        await a.close()
        no_overlap(log)
    run(scenario())


def test_a_shard_given_up_in_a_stall_whose_renewal_landed_late_is_served_again_before_that_entry_expires(
        cluster: Cluster) -> None:
    """A stall long enough for the give-up: the deletion after it fails, then a renewal queued in the
    stall is stored. The entry names the relay again for a ttl; the relay takes the shard back at once
    (the stall outlasted its cooldown) instead of leaving it unserved until that entry expires."""
    async def scenario() -> None:
        log: list[Any] = []
        space = f"l{next(_spaces)}"
        a, ra = relay(cluster, "a", space, log, count=1)
        await a.start()
        assert list(ra.serving) == ["0"]

        async def frozen(*_: Any) -> None:  # the stall: nothing this relay writes is answered
            return None

        a._renew = frozen  # type: ignore[method-assign]
        a._heartbeat = frozen  # type: ignore[method-assign]
        a._deleter = lambda *_: frozen  # type: ignore[method-assign]
        await until(lambda: ra.serving == {}, "a to give the shard up")
        nc = await connect_jetstream(cluster.nats)
        try:
            kv = await nc.jetstream().key_value(f"{space}_leases")
            entry = await kv.get("s.0")
            assert entry is not None and entry.value == b"a" and entry.revision is not None
            await kv.update("s.0", b"a", last=entry.revision)  # the queued renewal, stored late
        finally:
            await close_nats(nc)
        landed = time.monotonic()
        del a._renew, a._heartbeat, a._deleter  # the stall is over
        a._cooldown.clear()  # ... and lasted longer than the cooldown
        await until(lambda: "0" in ra.serving, "a to serve the shard again")
        assert time.monotonic() - landed < TTL * 0.75  # that entry expires a ttl after it was stored
        await a.close()
        no_overlap(log)
    run(scenario())


def test_relays_starting_together_never_share_a_shard(cluster: Cluster) -> None:
    """Four relays on three nodes start at once and race for eight shards: each shard is gained by one
    relay at a time (KV create would let two win a race on nats-server 2.9: see relay/cluster/leases.py)."""
    async def scenario() -> None:
        log: list[Any] = []
        space = f"l{next(_spaces)}"
        relays = [relay(cluster, f"r{i}", space, log, count=8) for i in range(4)]
        for i, (leases, _) in enumerate(relays):  # each relay talks to its own node first
            leases.servers = cluster.nats[i % 3:] + cluster.nats[:i % 3]
        await asyncio.gather(*(leases.start() for leases, _ in relays))
        await until(lambda: sorted(len(r.serving) for _, r in relays) == [2, 2, 2, 2], "a 2/2/2/2 split")
        no_overlap(log)
        for leases, _ in relays:
            await leases.close()
        no_overlap(log)
    run(scenario())


def test_a_relay_that_stops_renewing_loses_its_shards_before_the_other_takes_them(cluster: Cluster) -> None:
    async def scenario() -> None:
        log: list[Any] = []
        space = f"l{next(_spaces)}"
        a, ra = relay(cluster, "a", space, log)
        b, rb = relay(cluster, "b", space, log)
        await a.start()
        await b.start()
        await until(lambda: len(ra.serving) == 3 and len(rb.serving) == 3, "a 3/3 split")
        taken = dict(ra.serving)

        async def frozen(*_: Any) -> None:  # a cut-off relay: its renewals and heartbeats never arrive
            return None

        a._renew = frozen  # type: ignore[method-assign]
        a._heartbeat = frozen  # type: ignore[method-assign]
        frozen_at = time.monotonic()
        await until(lambda: len(rb.serving) == 6, "b to take over a's shards")
        took = time.monotonic() - frozen_at
        print(f"takeover {took:.1f} s after renewals stopped (ttl {TTL} s)")
        assert ra.serving == {}  # a gave up by itself
        no_overlap(log)  # ... before b gained each shard
        assert all(rb.serving[s] > f for s, f in taken.items())
        for t in a._tasks:
            t.cancel()
        await asyncio.gather(*a._tasks, return_exceptions=True)
        await close_nats(a._nc)
        await b.close()
    run(scenario())


def test_a_killed_relay_is_taken_over_and_its_journal_writes_are_fenced(cluster: Cluster) -> None:
    async def scenario() -> None:
        log: list[Any] = []
        space = f"l{next(_spaces)}"
        a, ra = relay(cluster, "a", space, log, count=2)
        await a.start()
        await until(lambda: len(ra.serving) == 2, "a to take both shards")
        link = await asyncio.to_thread(NatsLink, cluster.nats)
        try:
            ja = await asyncio.to_thread(JetStreamJournal, link, "0", namespace=space, fence=ra.serving["0"])
            await asyncio.to_thread(ja.append, [Tick(1)], ra.serving["0"])
            old_fence = ra.serving["0"]
            # kill -9: no more ticks, no goodbye
            for t in a._tasks:
                t.cancel()
            await asyncio.gather(*a._tasks, return_exceptions=True)
            await close_nats(a._nc)
            b, rb = relay(cluster, "b", space, log, count=2)
            await b.start()
            await until(lambda: len(rb.serving) == 2, "b to take over")
            jb = await asyncio.to_thread(JetStreamJournal, link, "0", namespace=space, fence=rb.serving["0"])
            assert rb.serving["0"] > old_fence
            with pytest.raises(FencedError):
                await asyncio.to_thread(ja.append, [Tick(2)], old_fence)
            assert await asyncio.to_thread(jb.append, [Tick(3)], rb.serving["0"]) == 2
            await b.close()
        finally:
            await asyncio.to_thread(link.close)
    run(scenario())


def test_a_killed_relays_shards_are_taken_before_its_leases_expire(cluster: Cluster) -> None:
    """Leases that would expire only after 600 s: the survivor sees the killed relay's liveness subject
    without a responder and takes its shards over at once (well within the test's deadline), each
    with a larger fence; the shards a live relay holds are never taken that way."""
    async def scenario() -> None:
        log: list[Any] = []
        space = f"l{next(_spaces)}"
        a, ra = relay(cluster, "a", space, log)
        a.ttl = 600.0
        b, rb = relay(cluster, "b", space, log)
        b.ttl = 600.0
        await a.start()
        await b.start()
        await until(lambda: len(ra.serving) == 3 and len(rb.serving) == 3, "a 3/3 split")
        assert a.ttl == 600.0  # the bucket's entries live that long
        taken = dict(ra.serving)
        for t in a._tasks:  # kill -9: no more ticks, no goodbye, its connection closed
            t.cancel()
        await asyncio.gather(*a._tasks, return_exceptions=True)
        await close_nats(a._nc)
        _started.remove(a)
        await until(lambda: len(rb.serving) == 6, "b to take over a's shards")
        assert all(rb.serving[s] > f for s, f in taken.items())
        assert not [h for h in b.history if h[1].startswith("loss")]
        await b.close()
    run(scenario())


@pytest.mark.integration("nats-server")
def test_shards_stay_served_when_a_nats_node_stops(tmp_path: Path) -> None:
    """A node of three goes down under two relays: leases may move (a relay whose node vanished cannot
    renew until it has reconnected and the bucket has a leader), but every shard ends up served again,
    never by two relays at once."""
    async def scenario(cluster: Cluster, directory: Path) -> None:
        log: list[Any] = []
        a, ra = relay(cluster, "a", "nodes", log)
        b, rb = relay(cluster, "b", "nodes", log)
        a.servers, b.servers = cluster.nats[0:1] + cluster.nats[1:], cluster.nats[1:] + cluster.nats[0:1]
        await a.start()
        await b.start()
        await until(lambda: len(ra.serving) == 3 and len(rb.serving) == 3, "a 3/3 split")
        await asyncio.to_thread(nats_cluster.stop_node, directory, 0)  # a's node
        await until(lambda: len(ra.serving) + len(rb.serving) == 6 and set(ra.serving) | set(rb.serving) == set(SHARDS)
                    and a.history[-1][0] + 2 * TTL < time.monotonic() > b.history[-1][0] + 2 * TTL,
                    "every shard served again, and quiet for a while")
        print("moves after the node stopped:", [(round(t - log[0][0], 1), w, what, s) for t, w, what, s in log[6:]])
        no_overlap(log)
        await a.close()
        await b.close()
        no_overlap(log)

    directory = tmp_path / "c3"
    with nats_cluster.running_cluster(3, directory) as cluster:
        run(scenario(cluster, directory))


def test_pins_and_shard_count_conflicts_are_refused(cluster: Cluster) -> None:
    async def scenario() -> None:
        log: list[Any] = []
        space = f"l{next(_spaces)}"
        a, ra = relay(cluster, "a", space, log)
        await a.start()
        await until(lambda: len(ra.serving) == 6, "a to take all")
        p, rp = relay(cluster, "p", space, log, pinned=["1", "4"])
        await p.start()
        await until(lambda: set(rp.serving) == {"1", "4"} and len(ra.serving) == 4, "p to get its pinned shards")
        q, _ = relay(cluster, "q", space, log, pinned=["4", "5"])
        with pytest.raises(LeaseError, match="already pinned by relay p"):
            await q.start()
        wrong, _ = relay(cluster, "w", space, log, count=8)
        with pytest.raises(LeaseError, match="has 6 shards"):
            await wrong.start()
        await p.close()
        await until(lambda: len(ra.serving) == 6, "a to take the pinned shards once p is gone")
        await a.close()
        no_overlap(log)
    run(scenario())


def test_leases_on_their_own_thread_survive_a_busy_relay_loop(cluster: Cluster) -> None:
    """The relay's event loop is busy (pure Python, holding the GIL) for twice the TTL: leases renewed on
    that loop are given up (the renewals were late), those on their own thread (``ThreadedLeases``, what
    ``blink serve --cluster`` uses) are kept; their callbacks still run on the relay's loop."""
    async def scenario() -> None:
        log: list[Any] = []
        plain, rp = relay(cluster, "plain", f"l{next(_spaces)}", log, count=2)
        inner, rt = relay(cluster, "threaded", f"l{next(_spaces)}", log, count=2)
        _started.remove(inner)
        threaded = ThreadedLeases(inner)
        threaded.subscribe(rt.gain, rt.loss)
        inner._gain.remove(rt.gain)  # the recorder hears it through the thread, not directly
        inner._loss.remove(rt.loss)
        _started.append(threaded)  # type: ignore[arg-type]
        await plain.start()
        await threaded.start()
        assert len(rp.serving) == 2 and len(rt.serving) == 2
        assert dict(threaded.owned()) == rt.serving
        busy_until = time.monotonic() + 2 * TTL
        while time.monotonic() < busy_until:  # a loop that never yields
            sum(range(1000))
        await until(lambda: {e[3] for e in log if e[1:3] == ("plain", "loss")} == {"0", "1"},
                    "the leases renewed on the busy loop to be given up")
        assert len(rt.serving) == 2 and dict(threaded.owned()) == rt.serving, inner.history
        assert not [h for h in inner.history if h[1].startswith("loss")], inner.history
        assert rt.threads == {threading.current_thread().name}
        await threaded.close()
        assert rt.serving == {} and threaded.owned() == {}
    run(scenario())


@pytest.mark.integration
def test_bad_configuration_and_unreachable_cluster() -> None:
    with pytest.raises(LeaseError):
        NatsLeases("nats://127.0.0.1:1", 0)
    with pytest.raises(LeaseError):
        NatsLeases("nats://127.0.0.1:1", 4, pinned=["9"])
    with pytest.raises(LeaseError):
        NatsLeases("nats://127.0.0.1:1", 4, ttl=0.1)
    leases = NatsLeases(f"nats://127.0.0.1:{free_port()}", 4, connect_timeout=2)
    with pytest.raises(LeaseError, match="cannot reach") as err:
        asyncio.run(leases.start())
    assert "\n" not in str(err.value)
