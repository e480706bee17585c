"""A cluster relay's game space: ``total`` shards, each with its own journal.

How this works
--------------
``ShardedSpace`` is the ``relay.ownership.Space`` of a relay of several (the module header there
says what a space answers). Each shard speaks as ``shard-{n}`` under ``Topics(prefix, shard)``, with
its own match list and codes that name it; every request is routed to one shard by
``relay/cluster/shards.py``, from the topic and the payload alone. Each shard is journalled apart
(``open_journal``, called when the shard is gained) and its recovered core is checked against the
shard's name, count and prefix before anything is replayed (``relay.shard.check_shard``). The relay
has a status topic of its own beside its shards', and subscribes once to every shard's actions with
QoS 0: NATS's MQTT makes a JetStream consumer for every QoS-1 subscription (4 s each to be refused
while a node was away), and the connection skips the actions of shards it does not serve by their
topic bytes (``filtered``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Final

from protocol.match import Order
from protocol.topics import Topics
from relay.cluster import shards
from relay.core import RelayConfig, RelayCore
from relay.ownership import JournalOpener, Presence, RelayStarted
from relay.shard import check_shard
from relay.storage import Journal

#: A relay of several subscribes with QoS 0 (see the module header).
SUB_QOS: Final = 0


class ShardedSpace:
    """``total`` shards of a cluster, each journalled apart by ``open_journal``."""

    ahead: Sequence[str] = ()

    def __init__(self, total: int, open_journal: JournalOpener) -> None:
        self.total = shards.check_total(total)
        self.names = frozenset(shards.shard_names(total))
        self.open_journal = open_journal

    def refuse(self, shard: str) -> str | None:
        if shard in self.names:
            return None
        return (f"was handed shard {shard!r}, which is not one of the {self.total} shards of --shards-total "
                f"{self.total}: every relay must be started with the same count")

    def core(self, shard: str, topics: Topics, config: RelayConfig, seed: int) -> RelayCore:
        cfg = dataclasses.replace(config, relay_id=f"shard-{shard}", shards_total=self.total)
        return RelayCore(Topics(topics.prefix, shard), cfg, seed)

    def open(self, shard: str) -> Journal | None:
        return self.open_journal(shard)

    def check(self, shard: str, prefix: str) -> Callable[[RelayCore], None] | None:
        return check_shard(shard, self.total, prefix)

    def route(self, topic: str, payload: bytes, prefix: str) -> str:
        head = f"{prefix}/lobby/req/"
        if topic.startswith(head):
            return shards.route_request(topic[len(head):], payload, self.total)
        return shards.shard_of_act_topic(topic, prefix) or ""

    def tag(self, shard: str) -> str | None:
        return shard

    def presence(self, relay_id: str, topics: Topics) -> Presence:
        prefix = topics.prefix
        status = f"{prefix}/relays/{relay_id}/status"  # the relay's own, beside its shards'
        # A topic a SUBSCRIBE: a refusal is asked again for it alone.
        return Presence(status, status, [[(topics.req_all, SUB_QOS)], [(f"{prefix}/m/+/+/act/+", SUB_QOS)]],
                        filtered=True, patient=True)

    def started(self, relay_id: str, seed: int, order: Order, ts: int) -> RelayStarted:
        return {"kind": "relay_started", "ts": ts, "relay": relay_id, "shards_total": self.total, "order": order}


__all__ = ["SUB_QOS", "ShardedSpace"]
