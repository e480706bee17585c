"""The embedded broker: blink's own MQTT broker on amqtt, for a relay that brings its broker along.

How this works
--------------
``EmbeddedBroker`` (``broker.py``) starts amqtt on a port with blink's access rules (``access.py``:
who may publish and subscribe where, checked at CONNECT and per packet), a reader per connection
that splits whole packets, applies the size limit, the pace and the per-client rate gate
(``gate.py``), and a fast path that routes QoS 0/1 PUBLISHes itself (``route.py``). amqtt is
untyped: ``amqttapi.py`` is the one place that names its parts. A relay of the same process stands
inside the broker (``inprocess.py``, the relay's ``Connector`` that ``EmbeddedBroker.connector``
gives): the broker's routing hands it the players' messages and writes its outputs to the
subscribers' sockets, with no socket between the two. Starting processes is hosting's work, and
this room imports nothing of it.

The face loads each module when a name is first asked for, so a relay on an outside broker never
loads amqtt.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from relay.embedded.access import Access as Access
    from relay.embedded.broker import EmbeddedBroker as EmbeddedBroker
    from relay.embedded.gate import PacketTooLarge as PacketTooLarge

#: Each name of the face and the module of this package that defines it.
_WHERE: dict[str, str] = {"Access": "access", "EmbeddedBroker": "broker", "PacketTooLarge": "gate"}

__all__ = ["Access", "EmbeddedBroker", "PacketTooLarge"]

if not TYPE_CHECKING:  # the type checker reads the imports above; a run loads each module when first asked
    def __getattr__(name: str) -> object:
        where = _WHERE.get(name)
        if where is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        module = importlib.import_module(f"{__name__}.{where}")
        value = module if where == name else getattr(module, name)
        globals()[name] = value
        return value
