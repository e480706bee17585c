"""MQTT plumbing shared by the relay and the client: broker addresses, TLS, socket options, waits, ports.

How this works
--------------
Both sides of the game talk to an MQTT broker and need the same small things: a broker URL parsed
into a ``BrokerAddress`` (host, port, optional user and password, and whether it speaks TLS), the
one ``ssl.SSLContext`` every TLS connection is made with (``tls_context``), the socket options every
connection we open should carry (``NODELAY``), a bounded wait on an ``asyncio.Event``, a stubborn
task cancel (``stop_task``), a subscription the broker must grant (``subscribe_granted``), and a free
loopback port for a broker started here. They live in this package, which imports nothing from
``relay`` or ``client``, so the client's networking does not depend on the server package.

TLS: ``mqtts://`` (or ``ssl://``) in a URL makes the address a TLS one (default port 8883). Its
context is built in one place, ``tls_context(ca, insecure)``: the broker's certificate chain and
host name are checked against the system's CAs, or only the CAs in ``ca`` when given; ``insecure``
turns both checks off and is only ever set by name (``--insecure``). Where the CA file and the
insecure flag come from is the command line (``--ca``, ``--insecure``): they make one ``TLSTrust``,
which travels with the URLs it is for (a command's configuration, the window's session) and goes to
``parse_url`` with each; a URL parsed without one believes the system's CAs. The contexts are cached (loading the system's CAs costs milliseconds, and the
load generator opens hundreds of connections).

Errors
------
Every exception this package raises derives from ``MqttkitError``; each also keeps the builtin
class it has always been, so code that catches that still catches it::

    MqttkitError
    ├── PortInUse (RuntimeError)     nothing can listen where a broker was asked to
    ├── BadURL (ValueError)          a broker URL that cannot be used
    ├── TLSProblem (ValueError)      a CA file that cannot be read or holds no certificate
    ├── MqttError                    the connection could not be made, or it ended (mqttkit.connection)
    │   ├── ConnectRefused           the broker refused CONNECT (``rc``)
    │   ├── NoConnack                the connection ended before CONNECT was answered
    │   └── SubscribeRefused         the broker refused a subscription (``codes``)
    ├── PacketError (ValueError)     bytes from the broker that break MQTT's framing (mqttkit.packets)
    └── LanError (RuntimeError)      a LAN problem, said in its message (mqttkit.lan)
        └── NoMulticast              no interface can send or receive multicast DNS
"""

from __future__ import annotations

import asyncio
import errno
import functools
import os
import re
import socket
import ssl
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal
from urllib.parse import parse_qs, unquote, urlparse

if TYPE_CHECKING:  # aiomqtt is the client's library: imported where it is used
    import aiomqtt
    from paho.mqtt.reasoncodes import ReasonCode

__all__ = ["DEFAULT_MAX_PAYLOAD", "DEFAULT_TLS_PORT", "NODELAY", "PIN", "RELAY_USER", "BadURL", "BrokerAddress", "MqttkitError", "PortInUse", "Scheme",
           "TLSProblem", "TLSTrust", "check_port", "check_tls_pair", "check_tls_port", "check_trust", "connect_problem", "free_port", "granted", "parse_url", "stop_task",
           "subscribe_granted", "tls_context", "tls_refusal", "wait_event"]

#: How a broker URL is spoken: plain MQTT, or MQTT over TLS.
Scheme = Literal["mqtt", "mqtts"]

#: The IANA port of MQTT over TLS: what an ``mqtts://`` URL without a port means.
DEFAULT_TLS_PORT = 8883

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


class MqttkitError(Exception):
    """The root of every exception of ``mqttkit``: catch it to catch any of them."""


class PortInUse(MqttkitError, RuntimeError):
    """A broker could not listen where it was asked to: the message says what to do instead."""


class BadURL(MqttkitError, ValueError):
    pass


class TLSProblem(MqttkitError, ValueError):
    """A CA file that cannot be read or holds no certificate: the message says which and why."""


@dataclass(frozen=True)
class TLSTrust:
    """Whom a TLS connection believes: the CAs in ``ca`` (a PEM file) or the system's; ``insecure``
    believes anyone (no certificate or host name check)."""

    ca: str | None = None
    insecure: bool = False


_SSL_LIBRARY_TAIL = re.compile(r"\s*\(_ssl\.c:\d+\)")
_VERIFY_FAILED = re.compile(r"\[SSL: CERTIFICATE_VERIFY_FAILED\] certificate verify failed: (.*)")
_NO_HANDSHAKE = ("WRONG_VERSION_NUMBER", "UNEXPECTED_EOF_WHILE_READING", "RECORD_LAYER_FAILURE", "EOF occurred",
                 "PACKET_LENGTH_TOO_LONG", "UNEXPECTED_RECORD")


def tls_refusal(problem: BaseException | str) -> str | None:
    """One line for a TLS handshake that failed (a certificate refused, a broker that does not
    speak TLS), from the exception or its text (aiomqtt keeps only the text); None if it is not one."""
    if isinstance(problem, ssl.SSLCertVerificationError) and problem.verify_message:
        return f"the broker's certificate was refused: {problem.verify_message.rstrip('.')}"
    if not isinstance(problem, (str, ssl.SSLError)):
        return None
    text = _SSL_LIBRARY_TAIL.sub("", str(problem))
    refused = _VERIFY_FAILED.search(text)
    if refused:
        return f"the broker's certificate was refused: {refused.group(1).rstrip('.')}"
    if "[SSL" in text or isinstance(problem, ssl.SSLError):
        if any(sign in text for sign in _NO_HANDSHAKE):
            return f"no TLS handshake with the broker ({text}): does it speak plain MQTT? then use mqtt://"
        return f"TLS failed: {text}"
    return None


def connect_problem(exc: BaseException, address: BrokerAddress) -> str:
    """Why a connection to ``address`` failed, in one line: a TLS refusal worded for a person, and
    for a plain address that was dropped before its CONNACK the hint that it may want TLS."""
    text = tls_refusal(exc) or tls_refusal(str(exc)) or str(exc) or type(exc).__name__
    if address.tls is None and any(sign in text.lower() for sign in ("connection was lost", "closed", "reset", "eof",
                                                                      "timed out")):
        text += " (if the broker speaks TLS, use mqtts://)"
    elif address.tls is not None and not text.startswith(("the broker's certificate", "no TLS handshake")) and any(
            sign in text.lower() for sign in ("connection was lost", "reset", "eof")):
        # A plain listener (Mosquitto's) drops a TLS hello without a word.
        text += " (no TLS handshake: does it speak plain MQTT? then use mqtt://)"
    return text


def check_trust(trust: TLSTrust) -> TLSTrust:
    """``trust`` once its CA file is checked (``TLSProblem`` in one line if unusable): the command
    line's ``--ca`` is refused before anything connects."""
    if trust.ca is not None:
        tls_context(trust.ca, trust.insecure)
    return trust


@functools.cache
def tls_context(ca: str | None = None, insecure: bool = False) -> ssl.SSLContext:
    """The client side's TLS context (see the module header); ``TLSProblem`` for a bad CA file."""
    try:
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca)
    except FileNotFoundError as exc:
        raise TLSProblem(f"no such CA file: {ca}") from exc
    except PermissionError as exc:
        raise TLSProblem(f"cannot read the CA file {ca}: permission denied") from exc
    except (ssl.SSLError, OSError, ValueError) as exc:
        raise TLSProblem(f"the CA file {ca} holds no usable PEM certificate ({exc})") from exc
    if insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def check_tls_pair(cert: str | None, key: str | None, option: str = "--tls-cert") -> tuple[str, str] | None:
    """A server's certificate and key files, checked to load and to belong together (a broker that
    cannot use them would fail only when it starts, or worse, at the first handshake); None when
    neither is given, ``TLSProblem`` in one line otherwise."""
    if cert is None and key is None:
        return None
    if cert is None or key is None:
        raise TLSProblem(f"{option} and {option.replace('cert', 'key')} go together: give both")
    for what, path in (("certificate", cert), ("key", key)):
        if not os.path.isfile(path):
            raise TLSProblem(f"no such {what} file: {path}")
        if not os.access(path, os.R_OK):
            raise TLSProblem(f"cannot read the {what} file {path}: permission denied")
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert, key)
    except ssl.SSLError as exc:
        reason = exc.reason or str(exc)
        if reason == "KEY_VALUES_MISMATCH":
            raise TLSProblem(f"the key {key} does not belong to the certificate {cert}") from exc
        raise TLSProblem(f"cannot load the certificate {cert} with the key {key}: {reason}") from exc
    except OSError as exc:
        raise TLSProblem(f"cannot load the certificate {cert} with the key {key}: {exc.strerror or exc}") from exc
    return cert, key


@dataclass(frozen=True)
class BrokerAddress:
    host: str
    port: int
    username: str | None = None
    # Never printed: a relay's address carries its secret, and addresses end up in logs and tracebacks.
    password: str | None = field(default=None, repr=False)
    #: Whom to believe when this address speaks TLS (``mqtts://``); None: plain MQTT.
    tls: TLSTrust | None = None
    #: The pin of the relay a sealed client trusts (``?pin=`` in the URL ``blink serve --seal``
    #: prints): its traffic is sealed and only that relay's keys are believed. None: unsealed.
    pin: str | None = None

    @property
    def scheme(self) -> Scheme:
        return "mqtt" if self.tls is None else "mqtts"

    @property
    def url(self) -> str:
        """Where the broker is, without credentials (safe to print), with the relay's pin if any."""
        base = f"{self.scheme}://{self.host}:{self.port}"
        return base if self.pin is None else f"{base}/?pin={self.pin}"

    @property
    def login_url(self) -> str:
        """The URL with user and password: what ``blink serve --broker`` takes. Secret when it has a password."""
        if self.username is None:
            return self.url
        cred = self.username if self.password is None else f"{self.username}:{self.password}"
        pin = "" if self.pin is None else f"/?pin={self.pin}"
        return f"{self.scheme}://{cred}@{self.host}:{self.port}{pin}"

    def ssl_context(self) -> ssl.SSLContext | None:
        """The context to connect with (None for plain MQTT)."""
        return None if self.tls is None else tls_context(self.tls.ca, self.tls.insecure)

    def public(self) -> BrokerAddress:
        """The same broker, without credentials (what players connect with)."""
        return BrokerAddress(self.host, self.port, tls=self.tls, pin=self.pin)

    def pinned(self, pin: str | None) -> BrokerAddress:
        """The same broker, for the relay with this pin (None: unsealed)."""
        return BrokerAddress(self.host, self.port, self.username, self.password, self.tls, pin)


#: A relay's pin as ``blink serve --seal`` prints it: 128 bits in base32 (``protocol.seal.fingerprint``).
PIN = re.compile(r"[a-z2-7]{26}")


def parse_url(url: str, trust: TLSTrust | None = None) -> BrokerAddress:
    """``mqtt[s]://[user[:password]@]host:port[/?pin=PIN]`` (or ``host:port``) -> BrokerAddress; BadURL
    if not. An ``mqtts://`` address believes ``trust`` (default: the system's CAs).
    ``pin`` names the sealed relay to trust; any other query is refused (a mistyped pin must not
    quietly mean an unsealed connection)."""
    text = url.strip()
    if "://" not in text:
        text = "mqtt://" + text
    try:
        u = urlparse(text)
        tls = u.scheme in ("mqtts", "ssl")
        port = u.port or (DEFAULT_TLS_PORT if tls else 1883)
    except ValueError as exc:
        raise BadURL(f"not a broker URL: {url!r} ({exc})") from exc
    if u.scheme not in ("mqtt", "tcp", "mqtts", "ssl"):
        raise BadURL(f"unsupported scheme {u.scheme!r} in {url!r}: use mqtt://HOST:PORT or mqtts://HOST:PORT")
    if not u.hostname:
        raise BadURL(f"no host in {url!r}: use mqtt://HOST:PORT or mqtts://HOST:PORT")
    user = unquote(u.username) if u.username else None
    password = unquote(u.password) if u.password else None
    pin: str | None = None
    if u.query:
        query = parse_qs(u.query, keep_blank_values=True)
        unknown = sorted(set(query) - {"pin"})
        if unknown:
            raise BadURL(f"unknown {unknown[0]!r} in {url!r}: a broker URL takes only ?pin=PIN")
        pins = query["pin"]
        if len(pins) != 1 or PIN.fullmatch(pins[0]) is None:
            raise BadURL(f"not a relay pin in {url!r}: a pin is the 26 letters and digits `blink serve --seal` "
                         "prints in its URL")
        pin = pins[0]
    return BrokerAddress(u.hostname, port, user, password, (trust or TLSTrust()) if tls else None, pin)


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


def check_tls_port(host: str, port: int) -> None:
    """``check_port`` for a TLS listener: its ``PortInUse`` names the TLS port and ``--tls-port``."""
    try:
        check_port(host, port)
    except PortInUse as exc:
        raise PortInUse(f"TLS port {port} on {host} is already in use (another program, perhaps a broker, listens "
                        f"there): pick another with --tls-port") from exc
