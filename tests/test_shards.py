"""Shard routing (relay/cluster/shards.py): every lobby request has exactly one shard, every relay computes
the same one, and a core of a shard only makes codes that route back to it."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

import pytest

from protocol import messages as m
from protocol.codec import encode
from protocol.topics import Topics
from relay import judge
from relay.judge import lobby as core_module
from relay.cluster import shards
from relay.core import RelayConfig, RelayCore
from relay.model import Publish


def test_the_codes_a_core_draws_are_read_as_codes_by_the_routing() -> None:
    """The routing reads a code with the judge's alphabet: every code a single relay's core draws is
    a number of the code space (routed by that number, not hashed)."""
    t = Topics()
    core = RelayCore(t, RelayConfig(max_open_per_client=100), seed=3)
    for i in range(40):
        out = core.handle(t.req(f"p{i}"), encode(m.CreateMatch("n", "takeaway")), 1_000 + i)
        code = next(o.msg.match for o in out if isinstance(o, Publish) and isinstance(o.msg, m.MatchJoined))
        assert set(code) <= set(judge.CODE_ALPHABET)
        number = judge.code_number(code)
        assert number is not None and shards.shard_of_code(code, 7) == str(number % 7)


@pytest.mark.parametrize("total", [1, 2, 3, 7, 64, 1024])
def test_codes_made_for_a_shard_route_back_to_it(total: int) -> None:
    for shard in range(min(total, 9)):
        n = judge.codes_in_shard(shard, total)
        for k in (0, 1, n // 2, n - 1):
            code = judge.code_in_shard(k, shard, total)
            assert len(code) == 5 and set(code) <= set(judge.CODE_ALPHABET)
            assert shards.shard_of_code(code, total) == str(shard)
            assert shards.shard_of_code(code.lower(), total) == str(shard)  # JoinMatch upper-cases
        with pytest.raises(ValueError):
            judge.code_in_shard(n, shard, total)
    assert sum(judge.codes_in_shard(s, total) for s in range(total)) == judge.CODE_SPACE


def test_a_non_code_still_has_exactly_one_shard() -> None:
    for text in ("", "abc", "ABCDEF", "O0I1L", "x" * 500, "ÄÖÜ"):
        s = shards.shard_of_code(text, 5)
        assert s in shards.shard_names(5) and s == shards.shard_of_code(text, 5)


def test_bad_totals_are_refused() -> None:
    for bad in (0, -1, 1025, True, 2.0):
        with pytest.raises(ValueError):
            shards.check_total(bad)  # type: ignore[arg-type]


def test_every_request_kind_routes_as_the_header_says() -> None:
    total = 4
    client = "p" + "ab" * 16
    code = judge.code_in_shard(17, 3, total)
    home = shards.home_shard(client, total)
    by_code = [m.JoinMatch("n", code), m.JoinMatch("n", code.lower()), m.Resync(code), m.Rematch(code),
               m.Rejoin(code, "t"), m.Leave(code)]
    for msg in by_code:
        assert shards.route_request(client, encode(msg), total) == "3", msg
    for msg in (m.CreateMatch("n", "takeaway"), m.Ping(1)):
        assert shards.route_request(client, encode(msg), total) == home
    assert shards.route_request(client, b"\x00garbage", total) == home  # its home shard rejects it
    assert shards.route_request(client, encode(m.Pong(1, 2, 3)), total) == home  # not a request: refused there
    assert shards.route_request(client, encode(m.Leave()), total) == shards.KNOWN
    assert shards.route_request(client, encode(m.Leave(dropped=True)), total) == shards.KNOWN
    assert shards.route_request(client, encode(m.ProbeReply(5)), total) == shards.KNOWN
    for msg in (m.CreateMatch("n"), m.Ping(1), m.Leave(), m.JoinMatch("n", "ZZZZZ")):
        assert shards.route_request(client, encode(msg), 1) == "0"


def test_quick_matches_for_the_same_thing_meet_in_one_shard() -> None:
    total = 8
    a = shards.shard_of_quick("blink", {}, total)
    # the same request spelled differently: an alias, the settings' defaults written out
    from protocol.rules import game_for

    defaults = game_for("blink").check_settings({}, 2)
    assert shards.shard_of_quick("blink", dict(defaults), total) == a
    assert shards.route_request("p1", encode(m.QuickMatch("x", "blink", {})), total) == a
    assert shards.route_request("p2", encode(m.QuickMatch("y", "blink", {})), total) == a
    spread = Counter(shards.shard_of_quick(g, {}, total) for g in ("blink", "takeaway", "sequence", "ryo"))
    assert sum(spread.values()) == 4
    # a bad request still has a shard (which rejects it)
    assert shards.shard_of_quick("nope", {"x": object()}, total) in shards.shard_names(total)


def test_clients_spread_over_home_shards() -> None:
    total = 4
    counts = Counter(shards.home_shard(f"p{i:032x}", total) for i in range(4000))
    assert set(counts) == set(shards.shard_names(total))
    assert min(counts.values()) > 800  # roughly even (1000 each expected)


def test_routing_is_the_same_in_another_process() -> None:
    """Relays are separate processes: the routing must not depend on Python's salted hash."""
    probe = ("from relay.cluster import shards; print(shards.home_shard('pabc', 97), "
             "shards.shard_of_quick('blink', {}, 97), shards.shard_of_code('nonsense', 97))")
    here = f"{shards.home_shard('pabc', 97)} {shards.shard_of_quick('blink', {}, 97)} {shards.shard_of_code('nonsense', 97)}"
    outs = {subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                           env={"PYTHONHASHSEED": str(seed)}).stdout.strip() for seed in (1, 2)}
    assert outs == {here}


def test_act_topic_shard() -> None:
    t = Topics(shard="12")
    assert shards.shard_of_act_topic(t.act("ABCDE", "p1"), t.prefix) == "12"
    assert shards.shard_of_act_topic("blink/v1/lobby/req/p1", t.prefix) is None
    assert shards.shard_of_act_topic("blink/v1/m/", t.prefix) is None


def test_a_sharded_core_makes_codes_of_its_shard_and_lists_them_on_its_own_topic() -> None:
    total = 5
    for shard in ("0", "3"):
        t = Topics(shard=shard)
        core = RelayCore(t, RelayConfig(shards_total=total, max_open_per_client=100), seed=7)
        codes = []
        for i in range(30):
            out = core.handle(t.req(f"p{i}"), encode(m.CreateMatch("n", "takeaway")), 1_000 + i)
            joined = [o.msg for o in out if isinstance(o, Publish) and isinstance(o.msg, m.MatchJoined)]
            assert joined and joined[0].shard == shard
            codes.append(joined[0].match)
            lists = [o.topic for o in out if isinstance(o, Publish) and isinstance(o.msg, m.MatchList)]
            assert lists == [f"{t.match_list}/{shard}"]
        assert {shards.shard_of_code(c, total) for c in codes} == {shard}


def test_the_single_relay_draws_codes_and_lists_as_before() -> None:
    t = Topics()
    core = RelayCore(t, RelayConfig(), seed=7)
    out = core.handle(t.req("p1"), encode(m.CreateMatch("n", "takeaway")), 1_000)
    assert [o.topic for o in out if isinstance(o, Publish) and isinstance(o.msg, m.MatchList)] == [t.match_list]
    # the same seed gives the same first code as the unsharded draw always did
    chance = core_module.SeededChance(core_module.derive(7, "codes"))
    first = "".join(judge.CODE_ALPHABET[chance.randbelow(32)] for _ in range(5))
    assert next(o.msg.match for o in out if isinstance(o, Publish) and isinstance(o.msg, m.MatchJoined)) == first
