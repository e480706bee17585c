"""The relay: the server that judges every match, over MQTT, and keeps what it judged.

How this works
--------------
The judge (``relay.judge``, pure: no I/O, clocks or randomness) decides every lobby request and
every play; ``relay/core.py`` is the core that holds the judge's parts and turns inputs into
outputs, with its fair-order scheduler (``fair.py``), limits (``limits.py``) and plain data
(``model.py``). ``relay/runtime.py`` is the one ``Relay``: it connects (``link.py``), steps the
core of each shard it serves (``shard.py``, owned by ``ownership.py``), journals every input
before publishing its effects (``publishing.py``, ``sealing.py``) and recovers after a crash. The
rooms around it:

- ``relay.storage``: the journal, the core's snapshots and the event log;
- ``relay.cluster``: shards, leases, journals in NATS JetStream and NATS access;
- ``relay.embedded``: the embedded MQTT broker;
- ``relay.hosting``: starting a relay -- in this process, in a child process, as ``blink serve``;
- ``relay.web``: the spectator page ``blink serve --web`` serves, read from the public stream.

Another package imports a room through its face (its ``__init__``); the face loads each module
when a name is first asked for, so importing it costs nothing.

Errors
------
Every exception this package raises derives from ``RelayError``; one that was a ``RuntimeError``
still is one::

    RelayError
    ├── JournalError           the journal cannot be used as asked: one line (relay.storage)
    │   ├── FencedError        an append from a stale owner, fenced off (relay.storage)
    │   ├── SnapshotError      a snapshot this version cannot read (relay.storage.snapshot)
    │   ├── NotReady           the cluster does not answer yet: worth asking again (relay.cluster.jetstream)
    │   └── ClusterError       the cluster cannot be used as configured (relay.shard)
    │       └── ConfigConflict a shard made under another configuration, or given to two relays
    ├── LeaseError             leases cannot be used as configured (relay.cluster.leaseplan)
    ├── CalloutError           the NATS auth callout cannot be set up (relay.cluster)
    ├── IdentityError (RuntimeError)  the identity file cannot be used (relay.sealing)
    ├── PacketTooLarge         ends an embedded broker's connection (relay.embedded)
    ├── BrokerFailed           ``blink serve``'s own broker could not start (relay.hosting.servebroker)
    ├── ServeError             ``blink serve`` cannot go on: one line and its exit status (relay.hosting)
    ├── NoFreePort             no port to host on the LAN; also a ``mqttkit.lan.LanError`` (relay.hosting.lanhost)
    └── WebError               the spectator page cannot listen as asked: one line (relay.web)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from relay.model import RelayConfig as RelayConfig

#: Each name of the face and the module of this package that defines it.
_WHERE: dict[str, str] = {"RelayConfig": "model"}

__all__ = ["RelayConfig", "RelayError"]


class RelayError(Exception):
    """The root of every exception of ``relay``: catch it to catch any of them."""

if not TYPE_CHECKING:  # the type checker reads the imports above; a run loads each module when first asked
    def __getattr__(name: str) -> object:
        where = _WHERE.get(name)
        if where is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        module = importlib.import_module(f"{__name__}.{where}")
        value = module if where == name else getattr(module, name)
        globals()[name] = value
        return value
