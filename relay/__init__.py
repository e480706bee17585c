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
- ``relay.hosting``: starting a relay -- in this process, in a child process, as ``blink serve``.

Another package imports a room through its face (its ``__init__``); the face loads each module
when a name is first asked for, so importing it costs nothing.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from relay.model import RelayConfig as RelayConfig

#: Each name of the face and the module of this package that defines it.
_WHERE: dict[str, str] = {"RelayConfig": "model"}

__all__ = ["RelayConfig"]

if not TYPE_CHECKING:  # the type checker reads the imports above; a run loads each module when first asked
    def __getattr__(name: str) -> object:
        where = _WHERE.get(name)
        if where is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        module = importlib.import_module(f"{__name__}.{where}")
        value = module if where == name else getattr(module, name)
        globals()[name] = value
        return value
