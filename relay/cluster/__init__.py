"""Several relays serving one game: shards, leases, journals in JetStream and NATS access.

How this works
--------------
Every match lives in one of ``total`` shards; ``shards.py`` routes each request to exactly one shard
from the topic and payload alone, the same on every relay, and ``space.py`` is the relay's space of
those shards (``ShardedSpace``, a ``relay.ownership.Space``). Which relay serves which shard is
decided by leases in a NATS cluster's JetStream (``leases.py``, over the pure decisions of
``leaseplan.py``), and a shard's journal is then a JetStream stream (``jetstream.py``) that the
next owner replays after a takeover. ``natsauth.py`` writes the NATS nodes' authorization (``python
-m relay.cluster.natsauth``), and ``natscallout.py`` answers the nodes' auth callout so that every
player may use only its own topics.

The face loads each module when a name is first asked for, so a relay without a cluster never
loads nats-py.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from relay.cluster.jetstream import JetStreamJournal as JetStreamJournal, NatsLink as NatsLink, START_WAIT_S as START_WAIT_S, shown as shown
    from relay.cluster.leases import NatsLeases as NatsLeases, ThreadedLeases as ThreadedLeases
    from relay.cluster.natsauth import secure_node_conf as secure_node_conf, write_nats_auth as write_nats_auth
    from relay.cluster.natscallout import CalloutError as CalloutError
    from relay.cluster import shards as shards
    from relay.cluster.space import ShardedSpace as ShardedSpace

#: Each name of the face and the module of this package that defines it.
_WHERE: dict[str, str] = {"CalloutError": "natscallout", "JetStreamJournal": "jetstream", "NatsLeases": "leases", "NatsLink": "jetstream", "START_WAIT_S": "jetstream", "ShardedSpace": "space", "ThreadedLeases": "leases", "secure_node_conf": "natsauth", "shards": "shards", "shown": "jetstream", "write_nats_auth": "natsauth"}

__all__ = ["CalloutError", "JetStreamJournal", "NatsLeases", "NatsLink", "START_WAIT_S", "ShardedSpace", "ThreadedLeases", "secure_node_conf", "shards", "shown", "write_nats_auth"]

if not TYPE_CHECKING:  # the type checker reads the imports above; a run loads each module when first asked
    def __getattr__(name: str) -> object:
        where = _WHERE.get(name)
        if where is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        module = importlib.import_module(f"{__name__}.{where}")
        value = module if where == name else getattr(module, name)
        globals()[name] = value
        return value
