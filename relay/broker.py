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

import asyncio
import errno
import logging
import socket
from dataclasses import dataclass
from urllib.parse import urlparse


async def wait_event(event: asyncio.Event, timeout: float | None) -> bool:
    """Wait for an event at most ``timeout`` seconds; True if it was set.

    ``asyncio.timeout`` rather than ``asyncio.wait_for``: on Python 3.11 ``wait_for`` can swallow a
    cancellation that arrives as the wait ends, and a task that ignores its cancel hangs shutdown."""
    if event.is_set():
        return True
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
        return True
    except TimeoutError:
        return False


#: For every MQTT client connection we open: small publishes written back to back must not wait
#: for a delayed ACK (Nagle's algorithm), which costs about 40 ms a time on Linux.
NODELAY = ((socket.IPPROTO_TCP, socket.TCP_NODELAY, 1),)


class PortInUse(RuntimeError):
    pass


class BadURL(ValueError):
    pass


@dataclass(frozen=True)
class BrokerAddress:
    host: str
    port: int
    username: str | None = None
    password: str | None = None

    @property
    def url(self) -> str:
        return f"mqtt://{self.host}:{self.port}"

    def with_user(self, username: str | None, password: str | None = None) -> BrokerAddress:
        return BrokerAddress(self.host, self.port, username, password)


def parse_url(url: str) -> BrokerAddress:
    """``mqtt://[user[:password]@]host:port`` (or ``host:port``) -> BrokerAddress; BadURL if not."""
    text = url.strip()
    if "://" not in text:
        text = "mqtt://" + text
    try:
        u = urlparse(text)
        port = u.port or 1883
    except ValueError as exc:
        raise BadURL(f"not a broker URL: {url!r} ({exc})") from exc
    if u.scheme not in ("mqtt", "tcp"):
        raise BadURL(f"unsupported scheme {u.scheme!r} in {url!r}: use mqtt://HOST:PORT")
    if not u.hostname:
        raise BadURL(f"no host in {url!r}: use mqtt://HOST:PORT")
    return BrokerAddress(u.hostname, port, u.username or None, u.password or None)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def check_port(host: str, port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                raise PortInUse(
                    f"port {port} on {host} is already in use (another MQTT broker, such as Mosquitto, may be "
                    f"running there). Use that broker with --broker mqtt://{host}:{port}, or pick another "
                    f"port with --port."
                ) from exc
            raise


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
