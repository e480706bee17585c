"""MQTT plumbing shared by the relay and the client: broker addresses, socket options, waits, ports.

How this works
--------------
Both sides of the game talk to an MQTT broker and need the same small things: a broker URL parsed
into a ``BrokerAddress`` (host, port, optional user and password), the socket options every
connection we open should carry (``NODELAY``), a bounded wait on an ``asyncio.Event``, a stubborn
task cancel (``stop_task``), a subscription the broker must grant (``subscribe_granted``), and a free
loopback port for a broker started here. They live in this package, which imports nothing from
``relay`` or ``client``, so the client's networking does not depend on the server package.
"""

from __future__ import annotations

import asyncio
import errno
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlparse

if TYPE_CHECKING:  # aiomqtt is the client's library: imported where it is used
    import aiomqtt
    from paho.mqtt.reasoncodes import ReasonCode

__all__ = ["DEFAULT_MAX_PAYLOAD", "NODELAY", "RELAY_USER", "BadURL", "BrokerAddress", "PortInUse", "check_port", "free_port", "granted",
           "parse_url", "stop_task", "subscribe_granted", "wait_event"]

#: The largest message payload a broker should pass on, in bytes. The largest legitimate message
#: (a full view of a four-player dice game, or a snapshot) is well under half of it.
DEFAULT_MAX_PAYLOAD = 8192

#: The user name a relay logs in with, on every broker; only the relay knows its password.
RELAY_USER = "relay"

#: For every MQTT client connection we open: small publishes written back to back must not wait
#: for a delayed ACK (Nagle's algorithm), which costs about 40 ms a time on Linux.
NODELAY = ((socket.IPPROTO_TCP, socket.TCP_NODELAY, 1),)


def granted(result: Iterable[int | ReasonCode] | None) -> bool:
    """Whether a SUBACK granted every subscription (MQTT 3.1.1: a QoS each, 0x80 for a refusal)."""
    for code in result or ():
        value = getattr(code, "value", code)
        if isinstance(value, int) and value >= 0x80:
            return False
    return True


async def subscribe_granted(client: aiomqtt.Client, topic: str, qos: int, tries: int = 8, first_wait_s: float = 0.25) -> None:
    """``client.subscribe`` (an aiomqtt client) until the broker grants it. NATS's MQTT refuses a QoS 1
    subscription (SUBACK 0x80) when it cannot make its JetStream consumer in time -- many clients
    connecting at once on a busy machine, or a node away: a client whose private topic is refused
    never hears its answers. After ``tries`` refusals: an ``aiomqtt.MqttError`` (the caller's
    reconnect logic takes over)."""
    import aiomqtt

    wait = first_wait_s
    for attempt in range(tries):
        if granted(await client.subscribe(topic, qos=qos)):
            return
        if attempt + 1 < tries:
            await asyncio.sleep(wait)
            wait = min(2.0, wait * 2)
    raise aiomqtt.MqttError(f"the broker refused the subscription to {topic} {tries} times")


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


async def stop_task(task: asyncio.Task[object], tries: int = 20, wait_s: float = 0.25) -> None:
    """Cancel a task and wait for it, asking again if a library swallowed the cancellation;
    bounded, so shutting down never hangs."""
    for _ in range(tries):
        if task.done():
            break
        task.cancel()
        await asyncio.wait({task}, timeout=wait_s)
    if task.done() and not task.cancelled():
        task.exception()  # mark as retrieved


class PortInUse(RuntimeError):
    """A broker could not listen where it was asked to: the message says what to do instead."""


class BadURL(ValueError):
    pass


@dataclass(frozen=True)
class BrokerAddress:
    host: str
    port: int
    username: str | None = None
    # Never printed: a relay's address carries its secret, and addresses end up in logs and tracebacks.
    password: str | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        """Where the broker is, without credentials (safe to print)."""
        return f"mqtt://{self.host}:{self.port}"

    @property
    def login_url(self) -> str:
        """The URL with user and password: what ``blink serve --broker`` takes. Secret when it has a password."""
        if self.username is None:
            return self.url
        cred = self.username if self.password is None else f"{self.username}:{self.password}"
        return f"mqtt://{cred}@{self.host}:{self.port}"

    def with_user(self, username: str | None, password: str | None = None) -> BrokerAddress:
        return BrokerAddress(self.host, self.port, username, password)

    def public(self) -> BrokerAddress:
        """The same broker, without credentials (what players connect with)."""
        return BrokerAddress(self.host, self.port)


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
    user = unquote(u.username) if u.username else None
    password = unquote(u.password) if u.password else None
    return BrokerAddress(u.hostname, port, user, password)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def check_port(host: str, port: int) -> None:
    """Raise ``PortInUse`` (with a hint) if nothing can listen on host:port."""
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
