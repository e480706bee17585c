"""The measuring and launching tools behind ``blink latency``, ``blink load`` and ``blink cluster``, one
module each.

How this works
--------------
``latency`` runs bot matches under a network impairment per seat and reports round trips, play ->
verdict times in parts and who won the races (``bench/fairness.py`` sweeps it). ``load`` drives
thousands of simulated players (``load_player``) against one relay from one process, with its
settings and the report's arithmetic in ``load_config``. ``nats_cluster`` starts and stops a local
NATS cluster (MQTT and JetStream) for the relay's scale-out. Each is a module of its own, with
names of its own (two tools have a ``format_table``): this face lists the modules, and loads each
when it is first asked for, so a command imports only its own tool.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from client.tools import (latency as latency, load as load, load_config as load_config,
                              nats_cluster as nats_cluster)

#: Each name of the face and the module of this package that defines it.
_WHERE: dict[str, str] = {
    "latency": "latency", "load": "load", "load_config": "load_config", "nats_cluster": "nats_cluster",
}

__all__ = ["latency", "load", "load_config", "nats_cluster"]

if not TYPE_CHECKING:  # the type checker reads the imports above; a run loads each module when first asked
    def __getattr__(name: str) -> object:
        where = _WHERE.get(name)
        if where is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        module = importlib.import_module(f"{__name__}.{where}")
        value = module if where == name else getattr(module, name)
        globals()[name] = value
        return value
