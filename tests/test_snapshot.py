"""The journal's snapshot blob (relay/storage/snapshot.py): a restored core carries on exactly as the
original would have, a data directory of format 3 is read, a pickle of the core (formats 1 and 2)
and a newer format are refused in one line; the shell's recovery and its snapshot spacing."""

from __future__ import annotations

import asyncio
import copy
import pickle
from pathlib import Path
from typing import Any

import pytest

from mqttkit import parse_url
from protocol import messages as m
from protocol.codec import encode
from protocol.rules import blink
from protocol.topics import Topics
from relay.storage import snapshot
from relay.core import LogRecord, Publish, RelayConfig, RelayCore
from relay.storage import JournalError, Msg, SqliteJournal, Tick, feed
from relay.ownership import WholeSpace
from relay.runtime import Relay, RelaySettings

T = Topics()
NS = 1_000_000_000


class Driver:
    """Concurrent BLINK matches between greedy players; every other play is sent with an old
    ``seq`` (as a player who has not seen the latest events yet), so the stale check -- which
    reads the match's state history -- is exercised."""

    def __init__(self, matches: int) -> None:
        self.core = RelayCore(T, seed=11)
        self.now = 0
        self.inputs: list[Msg | Tick] = []
        self.ids: dict[str, int] = {}
        self.codes: list[str] = []
        for i in range(matches):
            self.send(Msg(T.req(f"a{i}"), encode(m.CreateMatch(name=f"a{i}")), self.now))
            code = self.core.client_match[f"a{i}"]
            self.send(Msg(T.req(f"b{i}"), encode(m.JoinMatch(name=f"b{i}", match=code)), self.now))
            self.codes.append(code)

    def send(self, entry: Msg | Tick, core: RelayCore | None = None) -> list[Any]:
        self.inputs.append(entry)
        target = core or self.core
        if isinstance(entry, Msg):
            return target.handle(entry.topic, entry.payload, entry.now_ns)
        return target.tick(entry.now_ns)

    def turn(self) -> list[Msg | Tick]:
        """The inputs of one 50 ms turn, chosen from the driver's own core."""
        self.now += NS // 20
        batch: list[Msg | Tick] = [Tick(self.now)]
        for i, code in enumerate(self.codes):
            match = self.core.matches.get(code)
            if match is None or match.status != "playing":
                continue
            for seat, client in enumerate((f"a{i}", f"b{i}")):
                acts = blink.legal_actions(match.state, seat)
                if acts:
                    self.ids[client] = self.ids.get(client, 0) + 1
                    seen = match.seq - 2 if self.ids[client] % 2 else match.seq
                    act = m.Act(id=self.ids[client], seq=max(0, seen), action=blink.action_to_wire(acts[-1]))
                    batch.append(Msg(T.act(code, client), encode(act), self.now))
        return batch


def pickled(core: RelayCore, version: int) -> bytes:
    """A snapshot blob of format 1 (a bare pickle of the core) or 2 (``MAGIC``, version 2, a pickle)."""
    blob = pickle.dumps(core, pickle.HIGHEST_PROTOCOL)
    return blob if version == 1 else snapshot.MAGIC + version.to_bytes(2, "little") + blob


def outputs(out: list[Any]) -> list[Any]:
    return [(o.topic, o.msg, o.retain) if isinstance(o, Publish) else o.record for o in out
            if isinstance(o, (Publish, LogRecord))]


def test_a_restored_core_carries_on_exactly_like_the_original() -> None:
    d = Driver(12)
    for _ in range(90):  # past the countdown, into the races
        for e in d.turn():
            d.send(e)
    assert any(len(x.history) > 1 for x in d.core.matches.values())  # states to judge stale plays against
    blob = snapshot.dump(d.core)
    assert blob.startswith(snapshot.MAGIC)
    restored = snapshot.load(blob)
    assert restored is not d.core
    lost_before = d.core.stats["rejected"].get("pile_changed", 0)
    for _ in range(200):
        for e in d.turn():
            assert outputs(d.send(e)) == outputs(d.send(e, restored))
    for code, x in d.core.matches.items():
        y = restored.matches[code]
        assert (x.seq, x.status, x.state, x.wins, list(x.history)) == (y.seq, y.status, y.state, y.wins, list(y.history))
    # the stale check was met after the restore: plays judged against the state their player saw
    assert d.core.stats["rejected"] == restored.stats["rejected"]
    assert restored.stats["rejected"].get("pile_changed", 0) > lost_before


def test_equal_cards_are_written_once() -> None:
    d = Driver(20)
    for _ in range(80):
        for e in d.turn():
            d.send(e)
    # A live core already shares one deck's card objects between its matches (``Deck.cards`` is
    # built once): give each match its own equal copies, as states rebuilt from elsewhere would have,
    # so the interning pickler has equal-but-distinct cards to merge.
    for x in d.core.matches.values():
        x.state, x.history = copy.deepcopy((x.state, x.history))
    blob = snapshot.dump(d.core)
    restored = snapshot.load(blob)
    cards = {id(c) for x in restored.matches.values() for pile in (*x.state.draw, *x.state.hands, *x.state.piles)
             for c in pile}
    assert len(cards) <= 60  # one deck's worth of distinct cards, shared by every match
    assert len(blob) < len(pickle.dumps(d.core, pickle.HIGHEST_PROTOCOL))


def test_a_pickle_of_the_core_formats_1_and_2_is_refused_in_one_line() -> None:
    d = Driver(3)
    for _ in range(70):
        for e in d.turn():
            d.send(e)
    for version in (1, 2):
        with pytest.raises(JournalError, match=f"snapshot format {version} .*does not read .*move the data") as err:
            snapshot.load(pickled(d.core, version), "the snapshot at 5")
        assert "\n" not in str(err.value) and str(err.value).startswith("the snapshot at 5 ")


def test_a_newer_format_or_garbage_is_refused_in_one_line() -> None:
    newer = snapshot.MAGIC + (snapshot.VERSION + 1).to_bytes(2, "little") + pickle.dumps(RelayCore(T))
    with pytest.raises(JournalError, match="newer version of blink"):
        snapshot.load(newer)
    for bad, why in ((b"hello", "not a relay snapshot"), (snapshot.MAGIC + b"\x02", "cut short"),
                     (snapshot.MAGIC + b"\x03\x00" + b"\x80\x05junk", "cannot be read"),
                     (snapshot.MAGIC + b"\x02\x00" + b"\x80\x05junk", "format 2"),
                     (pickle.dumps({"not": "a core"}), "format 1")):
        with pytest.raises(JournalError, match=why) as err:
            snapshot.load(bad)
        assert "\n" not in str(err.value)


def shell_on(journal: SqliteJournal) -> Relay:
    return Relay(parse_url("mqtt://127.0.0.1:1"), RelaySettings(T), WholeSpace(journal))


def test_the_shell_refuses_a_pickled_snapshot_in_one_line(tmp_path: Path) -> None:
    d = Driver(4)
    for _ in range(70):
        for e in d.turn():
            d.send(e)
    with SqliteJournal(tmp_path / "j.db") as j:
        j.append(d.inputs[:5])
        core = RelayCore(T, seed=11)
        feed(core, d.inputs[:5])
        j.save_snapshot(5, pickled(core, 1))
        j.append(d.inputs[5:])
    with SqliteJournal(tmp_path / "j.db") as j:
        with pytest.raises(JournalError, match="snapshot at 5 is in snapshot format 1") as err:
            shell_on(j).recover()
        assert "\n" not in str(err.value)


def test_the_shell_refuses_a_snapshot_from_a_newer_version(tmp_path: Path) -> None:
    with SqliteJournal(tmp_path / "j.db") as j:
        j.append([Tick(1)])
        j.save_snapshot(1, snapshot.MAGIC + (snapshot.VERSION + 1).to_bytes(2, "little") + b"\x80\x05N.")
        with pytest.raises(JournalError, match="snapshot at 1 was written by a newer version"):
            shell_on(j).recover()


def test_snapshots_are_spaced_by_their_own_cost(tmp_path: Path) -> None:
    """A snapshot comes no sooner than SNAPSHOT_COST_RATIO times its own duration after the last."""
    with SqliteJournal(tmp_path / "j.db") as j:
        shell = shell_on(j)
        shell.recover()  # a fresh journal: the fresh core's snapshot at 0
        j.append([Tick(1)])
        shell.whole.snapshot_s = 3600.0  # as if the last one had taken an hour
        asyncio.run(shell.whole.snapshot())
        assert (j.latest_snapshot() or (None,))[0] == 0  # too soon: skipped
        asyncio.run(shell.whole.snapshot(force=True))
        assert (j.latest_snapshot() or (None,))[0] == 1
        assert 0.0 <= shell.whole.snapshot_s < 3600.0  # measured afresh


def test_equal_states_are_never_merged_even_when_all_scalar() -> None:
    """The stale check asks whether the state a play was made against *is* the current one; a
    snapshot must keep two equal states two objects, whatever a game's state is made of."""
    from dataclasses import dataclass

    import protocol.rules.base as base_module

    @dataclass(frozen=True)
    class Flat:  # an all-scalar value type of a game module
        turn: int
        phase: str

    Flat.__module__ = base_module.__name__
    Flat.__qualname__ = Flat.__name__ = "_TestFlatState"
    setattr(base_module, "_TestFlatState", Flat)
    try:
        core = RelayCore(T, seed=1)
        core.handle(T.req("a1"), encode(m.CreateMatch(name="a")), 0)
        match = next(iter(core.matches.values()))
        then, now = Flat(1, "turn"), Flat(1, "turn")
        match.history.clear()
        match.history.append((1, then))
        match.state = now
        values = [Flat(2, "x"), Flat(2, "x")]  # not states: merged
        match.settings = {"values": values}
        restored = snapshot.load(snapshot.dump(core))
        x = restored.matches[match.code]
        assert x.state == x.history[0][1] and x.state is not x.history[0][1]
        assert x.settings["values"][0] is x.settings["values"][1]
    finally:
        delattr(base_module, "_TestFlatState")


FIXTURES = Path(__file__).parent / "fixtures"


def test_a_data_directory_of_format_3_snapshots_is_read_at_start(tmp_path: Path) -> None:
    """``tests/fixtures/data-snapshot-v3`` was written by a relay of snapshot format 3 (its journal
    holds messages of protocol version 1): a relay started on it reads that snapshot, replays the
    journal's tail, and ends exactly where a replay of the whole journal into a fresh core ends; the
    next snapshot it takes is read back the same."""
    import json
    import shutil

    from relay.storage import open_journal

    data = tmp_path / "data"
    shutil.copytree(FIXTURES / "data-snapshot-v3", data)
    expected = json.loads((data / "expected.json").read_text())
    with open_journal(data) as j:
        pos, blob = j.latest_snapshot() or (0, b"")
        assert pos == expected["snapshot_position"] and blob[len(snapshot.MAGIC):][:2] == b"\x03\x00"
        shell = shell_on(j)
        shell.recover()
        assert shell.recovered is not None
        assert f"{expected['last_position'] - pos} entries replayed" in shell.recovered
        whole = RelayCore(T, RelayConfig(), seed=expected["seed"])
        feed(whole, [e for _, e in j.read(1)])
        got = shell.core
        assert {c: {"game": x.game, "status": x.status, "seq": x.seq, "game_index": x.game_index, "order": x.order}
                for c, x in got.matches.items()} == expected["matches"]
        assert got.stats == whole.stats == expected["stats"]
        asyncio.run(shell.whole.snapshot(force=True))
        pos, blob = j.latest_snapshot() or (0, b"")
        assert pos == expected["last_position"] and blob.startswith(snapshot.MAGIC + b"\x03\x00")
    with open_journal(data) as j:
        again = shell_on(j)
        again.recover()
        assert "+ 0 entries replayed" in (again.recovered or "")
        assert same_core(again.core, got)  # the figures too, now that the snapshot holds them
    # (format 3 predates the seats' figures -- races lost, round trips, holds, measured for the
    # spectator page only -- so those count from the plays after it)
    assert same_core(without_figures(got), without_figures(whole))


def test_a_data_directory_of_pickled_snapshots_is_refused_in_one_line(tmp_path: Path) -> None:
    """``tests/fixtures/data-snapshot-v2`` was written by a relay whose snapshots were pickles of its
    core (format 2): a relay started on it says so in one line, and changes nothing there."""
    import shutil

    from relay.storage import open_journal

    data = tmp_path / "data"
    shutil.copytree(FIXTURES / "data-snapshot-v2", data)
    before = {p.name: p.read_bytes() for p in data.iterdir()}
    with open_journal(data) as j:
        with pytest.raises(JournalError, match="snapshot at 294 is in snapshot format 2 .*move the data directory") \
                as err:
            shell_on(j).recover()
        assert "\n" not in str(err.value)
    assert {p.name: p.read_bytes() for p in data.iterdir() if p.name in before} == before


def same_core(a: RelayCore, b: RelayCore) -> bool:
    """Two cores hold the same: every part of their records, and their matches field by field (a
    record also says which equal values are one object, which a replay need not reproduce)."""
    def matches(core: RelayCore) -> dict[str, Any]:
        return {c: ({k: v for k, v in vars(x).items() if k != "chance"}, x.chance and x.chance.to_record())
                for c, x in core.matches.items()}

    ra, rb = snapshot.record_of(a)[0], snapshot.record_of(b)[0]
    del ra["matches"], rb["matches"]
    return ra == rb and matches(a) == matches(b)


def without_figures(core: RelayCore) -> RelayCore:
    """``core`` with its seats' figures forgotten (what a snapshot of format 3 could not hold)."""
    for x in core.matches.values():
        for s in x.players:
            s.figures = None
    return core


def test_renaming_a_private_attribute_changes_nothing_on_disk() -> None:
    """Every attribute of every part of the judge moved under another name, private ones included
    (as a rename in the code would do): the snapshot's bytes are the same as before, and the
    renamed core carries on exactly like one loaded from the snapshot taken before the rename."""
    d = Driver(6)
    for _ in range(90):
        for e in d.turn():
            d.send(e)
    blob = snapshot.dump(d.core)
    core = d.core
    parts = [core.tables, core.lobby, core.referee, core.answers, core.gate, core.deadlines, core.housekeeping,
             core.events, core.fair, core.gate.clients, core.gate.quiet, core.lobby.codes,
             *(x.chance for x in core.matches.values() if x.chance is not None)]
    assert "_state" in vars(core.lobby.codes)  # a private attribute among them

    def moved(name: str) -> property:
        return property(lambda self: self.__dict__["_renamed_" + name],
                        lambda self, value: self.__dict__.__setitem__("_renamed_" + name, value))

    for part in parts:
        names = list(vars(part))
        cls = type(part)
        part.__class__ = type(cls.__name__, (cls,), {n: moved(n) for n in names})
        for n in names:
            part.__dict__["_renamed_" + n] = part.__dict__.pop(n)
    assert "_state" not in vars(core.lobby.codes) and "book" not in vars(core.answers)
    assert snapshot.dump(core) == blob  # the names on disk are the snapshot module's, not the parts'
    restored = snapshot.load(blob)
    for _ in range(60):
        for e in d.turn():
            assert outputs(d.send(e)) == outputs(d.send(e, restored))
    assert same_core(restored, core)


def test_a_snapshot_never_builds_a_class_it_does_not_know(tmp_path: Path) -> None:
    """The codec builds only the games' and the protocol's own types; a blob naming anything else
    is refused in one line, unbuilt, and a pickle (formats 1 and 2) is refused unread."""
    import msgpack

    core = RelayCore(T, seed=1)
    rec, _ = snapshot.record_of(core)
    rec["stats"] = [snapshot.DATACLASS, 0]
    evil = snapshot.MAGIC + b"\x03\x00" + msgpack.packb({"types": [["os.system", []]], "core": rec})
    with pytest.raises(JournalError, match=r"does not know \(os.system\)") as err:
        snapshot.load(evil)
    assert "\n" not in str(err.value)

    ran = tmp_path / "ran"

    class Boom:
        def __reduce__(self) -> tuple[Any, ...]:
            return (Path.touch, (ran,))

    for blob in (pickle.dumps(Boom()), snapshot.MAGIC + b"\x02\x00" + pickle.dumps(Boom())):
        with pytest.raises(JournalError, match="does not read") as err:
            snapshot.load(blob)
        assert "\n" not in str(err.value)
    assert not ran.exists()
