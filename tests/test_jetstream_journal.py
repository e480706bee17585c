"""``JetStreamJournal``: the ``Journal`` interface on a real NATS cluster started by the tests."""

from __future__ import annotations

import itertools
import subprocess
import threading
from pathlib import Path
from typing import Iterator

import pytest

from client.tools import nats_cluster
from client.tools.nats_cluster import Cluster
from mqttkit import free_port
from relay.cluster.jetstream import JetStreamJournal, NatsLink, decode_entries, encode_entries, split_batch
from relay.storage.journal import FencedError, JournalError, Msg, Tick, replay

pytestmark = pytest.mark.integration("nats-server")

_names = itertools.count(1)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with nats_cluster.running_cluster(3, tmp_path_factory.mktemp("nats3")) as c:
        yield c


@pytest.fixture
def link(cluster: Cluster) -> Iterator[NatsLink]:
    with NatsLink(cluster.nats) as lk:
        yield lk


def ns() -> str:
    return f"t{next(_names)}"


def msgs(n: int, start: int = 0) -> list[Msg | Tick]:
    out: list[Msg | Tick] = []
    for i in range(start, start + n):
        wall = 1_796_000_000_000_000_000 + i if i % 2 else None  # the wall clock, where the shell read one
        out.append(Msg(f"blink/m/{i}", bytes([i % 256]) * (i % 7), i, wall) if i % 3 else Tick(i, wall))
    return out


def test_entries_round_trip_and_split() -> None:
    batch = msgs(50)
    assert decode_entries(encode_entries(batch)) == batch
    assert any(e.wall_ns for e in batch) and any(e.wall_ns is None for e in batch)
    pieces = split_batch(batch, 200)
    assert len(pieces) > 1 and [e for p in pieces for e in p] == batch
    assert all(len(encode_entries(p)) <= 200 for p in pieces)
    with pytest.raises(JournalError):
        split_batch([Msg("t", b"x" * 500, 0)], 200)


def test_append_read_positions_snapshot_compact_reopen(cluster: Cluster, link: NatsLink) -> None:
    space = ns()
    j = JetStreamJournal(link, "0", namespace=space, fence=3)
    assert j.replicas == 3
    assert j.last_position() == 0 and list(j.read()) == [] and j.latest_snapshot() is None
    written: list[Msg | Tick] = []
    for k in range(10):
        batch = msgs(k + 1, len(written))
        assert j.append(batch, 3) == len(written) + len(batch)
        written += batch
    assert j.append([]) == len(written)
    assert [(p, e) for p, e in j.read()] == list(enumerate(written, 1))
    assert [p for p, _ in j.read(17)] == list(range(17, len(written) + 1))
    assert list(j.read(len(written) + 1)) == []

    # a batch larger than one NATS message is spread over several, positions still contiguous
    big = [Msg("blink/big", bytes([i % 256]) * 200_000, i) for i in range(12)]
    end = j.append(big, 3)
    written += big
    assert end == len(written)
    assert [e for _, e in j.read(end - 11)] == big

    blobs = {20: b"A" * 3_000_000, 40: b"B" * 10, 55: bytes(range(256)) * 5000}
    for pos, blob in blobs.items():
        j.save_snapshot(pos, blob)
    assert j.latest_snapshot() == (55, blobs[55])
    with pytest.raises(JournalError):
        j.save_snapshot(len(written) + 1, b"future")
    with pytest.raises(JournalError, match="no snapshot covers"):
        j.compact(56)
    dropped = j.compact(55)
    assert 0 < dropped <= 55
    remaining = [p for p, _ in j.read()]
    assert remaining == list(range(remaining[0], len(written) + 1)) and remaining[0] <= 56
    assert [p for p, _ in j.read(56)][0] == 56
    assert j.compact(55) == 0
    j.close()
    with pytest.raises(JournalError, match="closed"):
        j.append([Tick(1)])

    # another process (a new connection) opening the shard sees the same journal
    with NatsLink(cluster.nats) as other:
        again = JetStreamJournal(other, "0", namespace=space)
        assert again.last_position() == len(written)
        assert again.fence == 3
        assert again.latest_snapshot() == (55, blobs[55])
        snap_names = [n for _, n in other.run(again._names(other.run(again._snapshots_store())))]
        assert len(snap_names) == 2  # the newest two are kept
        tail = list(again.read(56))
        assert [e for _, e in tail] == written[55:]
        assert again.append([Tick(999)], 3) == len(written) + 1  # positions go on after compaction and reopen
        again.close()


def test_replay_through_the_journal_interface(link: NatsLink) -> None:
    class Core:
        def __init__(self, seen: list[int] | None = None) -> None:
            self.seen = seen or []
            self.walls: list[int | None] = []

        def handle(self, topic: str, payload: bytes, now_ns: int, wall_ns: int | None = None) -> None:
            self.seen.append(now_ns)
            self.walls.append(wall_ns)

        def tick(self, now_ns: int, wall_ns: int | None = None) -> None:
            self.seen.append(-now_ns)
            self.walls.append(wall_ns)

    j = JetStreamJournal(link, "7", namespace=ns())
    j.append(msgs(30))
    j.save_snapshot(10, b"10")
    core = replay(j, Core, lambda blob: Core(list(range(int(blob)))))
    assert len(core.seen) == 30 and core.seen[10:] == [e.now_ns if isinstance(e, Msg) else -e.now_ns
                                                       for e in msgs(30)[10:]]
    assert core.walls == [e.wall_ns for e in msgs(30)[10:]]  # the wall clock survives the journal
    j.close()


def test_a_stale_owner_is_fenced_even_before_the_new_owner_writes(cluster: Cluster, link: NatsLink) -> None:
    space = ns()
    old = JetStreamJournal(link, "1", namespace=space, fence=5)
    old.append(msgs(4), 5)
    with NatsLink(cluster.nats) as other:
        new = JetStreamJournal(other, "1", namespace=space)
        assert new.claim(9) == 4  # takes over: nothing written yet but the fence marker
        with pytest.raises(FencedError):
            old.append([Tick(100)], 5)
        with pytest.raises(FencedError):
            old.append([Tick(101)], 5)  # and stays refused
        with pytest.raises(FencedError):
            old.claim(7)  # an older fence cannot claim back
        assert new.append([Tick(200)], 9) == 5
        assert [e for _, e in new.read(5)] == [Tick(200)]  # the stale appends are nowhere
        with pytest.raises(FencedError):
            new.append([Tick(1)], 8)
        assert old.fence == 9
        new.close()
    old.close()


def test_writers_without_fences_never_interleave_positions(cluster: Cluster, link: NatsLink) -> None:
    space = ns()
    with NatsLink(cluster.nats) as other:
        a = JetStreamJournal(link, "2", namespace=space)
        b = JetStreamJournal(other, "2", namespace=space)
        errors: list[BaseException] = []

        def write(j: JetStreamJournal, tag: int) -> None:
            try:
                for i in range(15):
                    j.append([Tick(tag * 1000 + i), Tick(tag * 1000 + i)])
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)

        threads = [threading.Thread(target=write, args=(j, t)) for j, t in ((a, 1), (b, 2))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors
        entries = list(a.read())
        assert [p for p, _ in entries] == list(range(1, 61))
        # every batch stayed whole: pairs of equal ticks
        values = [e.now_ns for _, e in entries if isinstance(e, Tick)]
        assert all(values[i] == values[i + 1] for i in range(0, 60, 2))
        assert sorted(set(values)) == sorted({t * 1000 + i for t in (1, 2) for i in range(15)})
        a.close()
        b.close()


def test_unreachable_and_no_jetstream_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(JournalError, match="cannot reach the NATS cluster") as err:
        JetStreamJournal(f"nats://127.0.0.1:{free_port()}", "0", connect_timeout=2)
    assert "\n" not in str(err.value)
    port = free_port()
    plain = subprocess.Popen([nats_cluster.server_binary(), "-a", "127.0.0.1", "-p", str(port)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        from tests.conftest import wait_port

        wait_port("127.0.0.1", port, 60)
        with pytest.raises(JournalError, match="has no JetStream") as err:
            JetStreamJournal(f"nats://127.0.0.1:{port}", "0", connect_timeout=5)
        assert "\n" not in str(err.value)
    finally:
        plain.terminate()
        plain.wait(30)
    with pytest.raises(JournalError, match="is not a NATS URL"):
        JetStreamJournal(f"mqtt://127.0.0.1:{port}", "0")
    with pytest.raises(JournalError, match="shard name"):
        JetStreamJournal(f"nats://127.0.0.1:{port}", "a.b")


def test_survives_stopping_one_node_of_three(tmp_path: Path) -> None:
    directory = tmp_path / "c3"
    with nats_cluster.running_cluster(3, directory) as cluster:
        with NatsLink(cluster.nats) as lk:
            j = JetStreamJournal(lk, "0", namespace="survive", replicas=3, fence=1, op_timeout=90)
            for i in range(5):
                j.append(msgs(3, 3 * i), 1)
            j.save_snapshot(6, b"six")
            # stop the node this client is connected to: it must reconnect, and the stream elect a leader
            url = lk.nc.connected_url
            index = next(i for i, n in enumerate(cluster.nodes) if n.client == url.port)
            nats_cluster.stop_node(directory, index)
            for i in range(5, 10):
                j.append(msgs(3, 3 * i), 1)
            assert [p for p, _ in j.read()] == list(range(1, 31))
            assert j.latest_snapshot() == (6, b"six")
            j.close()
            with NatsLink([u for k, u in enumerate(cluster.nats) if k != index]) as survivor:
                again = JetStreamJournal(survivor, "0", namespace="survive", op_timeout=90)
                assert again.last_position() == 30
                assert [e for _, e in again.read()] == msgs(30)
                again.close()
            nats_cluster.start_node(directory, index)


def test_a_one_node_cluster_gets_a_one_replica_journal_at_once(tmp_path: Path) -> None:
    # A standalone server refuses replicas > 1 with a 500 (err_code 10074): that is no leader
    # election to wait out, so the journal falls back to one replica without retrying for op_timeout.
    with nats_cluster.running_cluster(1, tmp_path / "nats1") as one:
        with NatsLink(one.nats) as lk:
            j = JetStreamJournal(lk, "0", namespace=ns(), fence=1, op_timeout=20)
            try:
                assert j.replicas == 1
                j.append(msgs(5))
                assert [e for _, e in j.read()] == msgs(5)
            finally:
                j.close()
