"""Every event log the relay writes is true to `blink verify`: the lobby's corners, a cluster relay's
shard tags, a relay that served no match, and (a property) matches driven through leaves, grace
expiry, forfeits, rematches and crashes.

The relay's judge runs in process here (``RelayCore``, no broker); its log lines are written by the
relay's own ``relay.eventlog`` as ``blink serve --log`` writes them. The integration suite checks
every real relay's log besides (tests/guards.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from client.cli import main
from protocol import messages as m
from protocol.codec import encode
from protocol.topics import Topics
from protocol.verify import parse_log, verify
from relay.core import LogRecord, Publish, RelayConfig, RelayCore
from relay.eventlog import log_rows

T = Topics()
NS = 1_000_000_000


class Lobby:
    """A relay core and the ``blink serve --log`` rows it wrote."""

    def __init__(self, **config: Any) -> None:
        self.core = RelayCore(T, RelayConfig(**config), seed=3)
        self.now = NS
        self.rows: list[dict[str, Any]] = []
        self.out: list[Any] = []

    def take(self, out: list[Any], shard: str | None = None) -> list[Any]:
        self.out.extend(out)
        self.rows.extend(log_rows([o for o in out if isinstance(o, LogRecord)], shard))
        return out

    def send(self, client: str, msg: Any) -> list[Any]:
        return self.take(self.core.handle(T.req(client), encode(msg), self.now))

    def tick(self, dt_s: float) -> list[Any]:
        self.now += int(dt_s * NS)
        return self.take(self.core.tick(self.now))

    def joined(self, client: str) -> m.MatchJoined:
        return next(o.msg for o in reversed(self.out)
                    if isinstance(o, Publish) and o.topic == T.client(client) and isinstance(o.msg, m.MatchJoined))

    def lines(self) -> list[str]:
        return [json.dumps(r) for r in self.rows]

    def verdict(self) -> str:
        return verify(parse_log(self.lines())).summary()


def test_a_match_its_creator_left_before_anyone_joined() -> None:
    lobby = Lobby()
    lobby.send("a", m.CreateMatch(name="ann"))
    code = lobby.joined("a").match
    lobby.send("a", m.Leave(match=code))
    left = [r for r in lobby.rows if r.get("type") == "seat_left"]
    assert left and left[0]["player"] == "ann" and left[0]["seat"] == 0
    assert lobby.verdict() == "true: 1 match, 0 games, 3 events checked"


def test_a_seat_left_while_waiting_names_its_player_and_the_seats_after_it_move_down() -> None:
    lobby = Lobby()
    lobby.send("a", m.CreateMatch(name="ann", game="takeaway", seats=3))
    code = lobby.joined("a").match
    lobby.send("b", m.JoinMatch(name="bob", code=code))
    lobby.send("a", m.Leave(match=code))  # ann (seat 0) leaves: bob is seat 0 now
    lobby.send("c", m.JoinMatch(name="cy", code=code))
    lobby.send("b", m.Leave(match=code))
    lobby.send("c", m.Leave(match=code))  # the last one: the relay closes the match
    left = [(r["player"], r["seat"]) for r in lobby.rows if r.get("type") == "seat_left"]
    assert left == [("ann", 0), ("bob", 0), ("cy", 0)]
    assert lobby.verdict().startswith("true: 1 match, 0 games"), lobby.verdict()
    # The relay closed it: nothing of it may follow.
    rows = lobby.rows + [{**lobby.rows[-1], "seq": lobby.rows[-1]["seq"] + 1, "type": "seat_taken", "player": "dan",
                          "name": "dan", "seat": 0}]
    report = verify(parse_log(json.dumps(r) for r in rows))
    assert not report.ok and "closed" in report.summary()


def test_a_waiting_match_that_expires() -> None:
    lobby = Lobby(waiting_ttl_s=5.0)
    lobby.send("a", m.CreateMatch(name="ann"))
    lobby.tick(6.0)
    assert [r["type"] for r in lobby.rows if "type" in r][-1] == "match_expired"
    assert lobby.verdict() == "true: 1 match, 0 games, 3 events checked"


def test_a_cluster_relays_lines_name_their_shard() -> None:
    lobby = Lobby()
    lobby.take(lobby.core.handle(T.req("a"), encode(m.CreateMatch(name="ann")), lobby.now), shard="3")
    code = lobby.joined("a").match
    lobby.take(lobby.core.handle(T.req("a"), encode(m.Leave(match=code)), lobby.now), shard="3")
    assert all(r["shard"] == "3" for r in lobby.rows)
    assert lobby.verdict().startswith("true: 1 match"), lobby.verdict()
    # One match is judged by one shard: a line naming another is false.
    rows = [dict(r) for r in lobby.rows]
    rows[1]["shard"] = "4"
    report = verify(parse_log(json.dumps(r) for r in rows))
    assert not report.ok and report.first is not None and report.first.line == 2 and "shard" in report.summary()


@pytest.mark.parametrize("content", [
    "",
    '{"kind": "relay_started", "seed": 1, "ts": 5, "order": "arrival", "relay": "relay-1"}\n',
    '{"kind": "relay_started", "ts": 5, "relay": "r2", "shards_total": 4, "order": "arrival"}\n'
    '{"kind": "bad_input", "code": "bad_client_id", "ts": 6, "shard": "1"}\n',
])
def test_a_relay_log_with_no_match_is_true(content: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "relay.jsonl"
    path.write_text(content)
    assert main(["verify", str(path)]) == 0
    out, err = capsys.readouterr()
    assert out == f"{path}: true: no matches\n" and err == ""
