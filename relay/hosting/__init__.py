"""Running a relay: in this process, in a child process, as ``blink serve``, on the LAN.

How this works
--------------
``LocalServer``/``start_local`` (``local.py``) start a relay in the running event loop, with an
embedded broker of its own or against a given broker; ``ClusterServer``/``cluster_server`` start
one relay of a cluster. ``ChildServer`` (``localproc.py``) is the same in a child process
(``python -m relay.hosting.localchild``), so a window and its relay never share an event loop.
``serve.py`` is ``blink serve``: it picks and starts a broker of its own (``servebroker.py``: an
installed Mosquitto configured by ``mosquitto.py`` in a child process, else the embedded broker with
the relay inside it, in this process), then the relay, and advertises it on the LAN
(``lanhost.py``). A child starts with ``localproc.child_settings`` (the relay's in
``localchild.py``). The diagnostics a benchmark asks for are read here, once
(``relay.memdiag.Diagnostics.from_environ``), and handed down.

These are the entry points the client's commands import (tests/test_imports.py). The face loads
each module when a name is first asked for.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from relay.hosting import lanhost as lanhost
    from relay.hosting.local import ClusterServer as ClusterServer, LocalServer as LocalServer, cluster_server as cluster_server, public_nats as public_nats, public_url as public_url, sqlite_opener as sqlite_opener, start_local as start_local, temporary_data_dir as temporary_data_dir
    from relay.hosting.localproc import ChildServer as ChildServer
    from relay.hosting.mosquitto import broker_user as broker_user, write_mosquitto_config as write_mosquitto_config
    from relay.hosting.serve import ServeError as ServeError, ServeOptions as ServeOptions, read_password as read_password, serve_relay as serve_relay, web_address as web_address
    from relay.hosting.servebroker import share_a_port as share_a_port

#: Each name of the face and the module of this package that defines it.
_WHERE: dict[str, str] = {"ChildServer": "localproc", "ClusterServer": "local", "LocalServer": "local", "ServeError": "serve", "ServeOptions": "serve", "broker_user": "mosquitto", "cluster_server": "local", "lanhost": "lanhost", "public_nats": "local", "public_url": "local", "read_password": "serve", "serve_relay": "serve", "share_a_port": "servebroker", "sqlite_opener": "local", "start_local": "local", "temporary_data_dir": "local", "web_address": "serve", "write_mosquitto_config": "mosquitto"}

__all__ = ["ChildServer", "ClusterServer", "LocalServer", "ServeError", "ServeOptions", "broker_user", "cluster_server", "lanhost", "public_nats", "public_url", "read_password", "serve_relay", "share_a_port", "sqlite_opener", "start_local", "temporary_data_dir", "web_address", "write_mosquitto_config"]

if not TYPE_CHECKING:  # the type checker reads the imports above; a run loads each module when first asked
    def __getattr__(name: str) -> object:
        where = _WHERE.get(name)
        if where is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        module = importlib.import_module(f"{__name__}.{where}")
        value = module if where == name else getattr(module, name)
        globals()[name] = value
        return value
