"""The embedded MQTT broker (amqtt, MQTT 3.1.1) and broker URLs.

How this works
--------------
``blink serve`` without ``--broker`` (and ``blink match`` / ``blink play`` without ``--server``)
run an amqtt broker inside the same asyncio loop as the relay, so one command gives a working
server with nothing else installed. Before starting it we bind the port ourselves once, so that a
taken port is reported as a clear ``PortInUse`` (with a hint) rather than a traceback from deep
inside amqtt.
"""

from __future__ import annotations

import logging

# The helpers below moved to ``mqttkit`` (shared with the client); re-exported for older importers.
from mqttkit import NODELAY, BadURL, BrokerAddress, PortInUse, check_port, free_port, parse_url, wait_event

__all__ = ["NODELAY", "BadURL", "BrokerAddress", "EmbeddedBroker", "PortInUse", "check_port", "free_port",
           "parse_url", "wait_event"]


class EmbeddedBroker:
    """An amqtt broker listening on host:port, anonymous, inside the running event loop."""

    def __init__(self, host: str = "127.0.0.1", port: int = 1883) -> None:
        self.host = host
        self.port = port
        self._broker: object | None = None

    @property
    def address(self) -> BrokerAddress:
        return BrokerAddress(self.host, self.port)

    async def start(self) -> None:
        check_port(self.host, self.port)
        for name in ("amqtt", "transitions"):
            logging.getLogger(name).setLevel(logging.CRITICAL)
        from amqtt.broker import Broker

        config = {
            "listeners": {"default": {"type": "tcp", "bind": f"{self.host}:{self.port}", "max_connections": 1000}},
            "plugins": {"amqtt.plugins.authentication.AnonymousAuthPlugin": {"allow_anonymous": True}},
        }
        broker = Broker(config)
        try:
            await broker.start()
        except Exception as exc:  # noqa: BLE001 - amqtt wraps bind errors in BrokerError
            if "address already in use" in str(exc).lower():
                raise PortInUse(f"port {self.port} on {self.host} is already in use; use --broker") from exc
            raise
        self._broker = broker

    async def stop(self) -> None:
        if self._broker is not None:
            broker, self._broker = self._broker, None
            try:
                await broker.shutdown()  # type: ignore[attr-defined]
            except Exception:  # noqa: BLE001 - shutting down: nothing left to protect
                pass
