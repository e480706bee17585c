"""``blink serve --web``: the spectator page's HTTP server, in the relay's own process.

How this works
--------------
A small HTTP/1.1 server on ``asyncio.start_server`` (the standard library: nothing to install, no
framework for five routes), one request per connection (``Connection: close``):

- ``/``: the list page; ``/matches.json``: the list it reads every second (live matches, then
  recent ones: ``relay/web/book.py``) and each game's leaderboard (asked of the relay every
  ``RATINGS_EVERY_S`` while the list is read);
- ``/m/CODE``: one match's page, or 404 with words for a code the relay does not have;
  ``/m/CODE/events``: that match as Server-Sent Events -- one ``data:`` line of JSON per change
  (the first one the whole table), a comment every ``KEEPALIVE_S`` so a proxy keeps it open. The
  browser's ``EventSource`` reconnects by itself and is sent the whole table again, so a page
  follows its match through a dropped connection or a restarted relay;
- ``/static/NAME``: the page's own script, style and card drawing, shipped in the package
  (``relay/web/static/``) and read once.

Why SSE from this process rather than MQTT over WebSocket from the broker: no broker blink runs
(the embedded one, Mosquitto as configured, NATS) needs a WebSocket listener or a second set of
access rules for browsers, the page needs no MQTT client in JavaScript (none may come from a CDN,
none is shipped), and the browser is sent the table already advanced by the game's own rules
(the Python engines) instead of applying events itself. Where the events come from is still only
the public stream: ``relay/web/feed.py`` reads it as any spectator does.

A request is bounded: its head in ``HEAD_LIMIT`` bytes within ``HEAD_TIMEOUT_S``; at most
``MAX_STREAMS`` event streams at once (then 503); a stream whose reader falls ``QUEUE_FRAMES``
frames behind is closed (its browser reconnects and gets the whole table). Every page is sent with
a content security policy that allows only this server's own scripts and styles.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from importlib import resources
from urllib.parse import unquote, urlsplit

from mqttkit import BrokerAddress
from protocol.rules import GAMES
from relay import RelayError
from relay.web.book import Book, FrameData
from relay.web.feed import Feed

log = logging.getLogger("blink.web")

HEAD_LIMIT = 16 * 1024
HEAD_TIMEOUT_S = 10.0
KEEPALIVE_S = 15.0
MAX_STREAMS = 256
QUEUE_FRAMES = 512
CODE_MAX = 16
RATINGS_EVERY_S = 5.0

#: The files of ``relay/web/static/`` a page may ask for, and their types.
STATIC = {
    "list.html": "text/html; charset=utf-8",
    "match.html": "text/html; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
    "cards.js": "text/javascript; charset=utf-8",
    "list.js": "text/javascript; charset=utf-8",
    "match.js": "text/javascript; charset=utf-8",
}
SECURITY = ("Content-Security-Policy: default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
            "connect-src 'self'\r\nX-Content-Type-Options: nosniff\r\nReferrer-Policy: no-referrer\r\n")
REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 503: "Service Unavailable"}


class WebError(RelayError):
    """The page cannot be served as asked (its port is taken): one line."""


@dataclass(frozen=True)
class WebAddress:
    """Where the page listens: ``--web [HOST:]PORT`` (HOST default 127.0.0.1, this machine only)."""

    host: str
    port: int

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"


def parse_web(text: str, default_host: str = "127.0.0.1") -> WebAddress:
    """``PORT`` or ``HOST:PORT`` (``[V6]:PORT``); ValueError naming what is wrong."""
    text = text.strip()
    host, sep, port_text = text.rpartition(":")
    if not sep:
        host = default_host
    host = host.strip("[]") if host.startswith("[") else host
    if sep and not host:
        raise ValueError(f"no host before the port in {text!r} (give PORT or HOST:PORT)")
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise ValueError(f"not a port: {port_text!r} (give PORT or HOST:PORT, the port 1 to 65535)")
    return WebAddress(host, int(port_text))


def _static(name: str) -> bytes:
    return resources.files("relay.web").joinpath("static", name).read_bytes()


class WebServer:
    """The page's server and its spectator feed: ``async with WebServer(...)`` binds the port (or
    raises ``WebError``), serves until the block ends; ``follow(broker)`` starts reading the matches."""

    def __init__(self, prefix: str, listen: WebAddress) -> None:
        self.listen = listen
        self.prefix = prefix
        self.book = Book()
        self.feed: Feed | None = None
        self._files = {name: _static(name) for name in STATIC}
        self._streams: dict[str, set[asyncio.Queue[FrameData | None]]] = {}
        self._server: asyncio.Server | None = None
        self._feed_task: asyncio.Task[None] | None = None
        self._handlers: set[asyncio.Task[object]] = set()
        self.port = listen.port
        self._ratings_asked = -RATINGS_EVERY_S

    @property
    def url(self) -> str:
        return WebAddress(self.listen.host, self.port).url

    async def __aenter__(self) -> WebServer:
        try:
            self._server = await asyncio.start_server(self._handle, self.listen.host, self.listen.port,
                                                      reuse_address=True, limit=HEAD_LIMIT)
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                raise WebError(f"--web: port {self.listen.port} on {self.listen.host} is already in use: pick "
                               "another with --web [HOST:]PORT") from exc
            raise WebError(f"--web: cannot listen on {self.listen.host} port {self.listen.port}: "
                           f"{exc.strerror or exc}") from exc
        sockets = self._server.sockets
        if sockets:
            self.port = int(sockets[0].getsockname()[1])
        return self

    def follow(self, broker: BrokerAddress) -> None:
        """Read the matches of the relay on ``broker`` (as a spectator: its public address)."""
        self.feed = Feed(broker, self.prefix, self.book, self._on_frames)
        self._feed_task = asyncio.create_task(self.feed.run(), name="blink-web-feed")

    async def __aexit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.close()
        for queues in self._streams.values():
            for q in queues:
                _offer(q, None)
        if self._feed_task is not None:
            self._feed_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._feed_task
        if self.feed is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.feed.close(), 2.0)
        for task in list(self._handlers):
            task.cancel()
        if self._handlers:
            await asyncio.wait(self._handlers, timeout=2.0)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)

    # -- the feed's frames to the open pages --------------------------------------------------------

    def _on_frames(self, code: str, frames: list[FrameData]) -> None:
        for q in self._streams.get(code, ()):
            for frame in frames:
                if not _offer(q, frame):
                    break

    # -- HTTP -------------------------------------------------------------------------------------

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
        try:
            await self._serve_one(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError,
                asyncio.CancelledError):
            pass
        finally:
            if task is not None:
                self._handlers.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 1.0)

    async def _serve_one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT_S)
        except (asyncio.LimitOverrunError, ValueError):
            await self._send(writer, 400, "text/plain; charset=utf-8", b"request head too large\n")
            return
        line = head.split(b"\r\n", 1)[0].decode("latin-1")
        parts = line.split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            await self._send(writer, 400, "text/plain; charset=utf-8", b"not an HTTP request\n")
            return
        method, target = parts[0], parts[1]
        if method not in ("GET", "HEAD"):
            await self._send(writer, 405, "text/plain; charset=utf-8", b"only GET and HEAD\n", extra="Allow: GET, HEAD\r\n")
            return
        body_wanted = method == "GET"
        path = unquote(urlsplit(target).path)
        if path in ("/", "/index.html"):
            await self._file(writer, "list.html", body_wanted)
        elif path == "/matches.json":
            self._ask_ratings()
            body = json.dumps({"matches": self.book.summaries(time.time_ns()),
                               "leaderboards": self.book.leaderboards()}).encode()
            await self._send(writer, 200, "application/json", body, body_wanted)
        elif path.startswith("/static/") and path[len("/static/"):] in STATIC:
            await self._file(writer, path[len("/static/"):], body_wanted)
        elif path.startswith("/m/"):
            rest = path[len("/m/"):]
            code, _, tail = rest.partition("/")
            code = code.upper()
            if not self._known(code):
                await self._not_found(writer, code, body_wanted)
            elif tail == "":
                await self._file(writer, "match.html", body_wanted)
            elif tail == "events" and body_wanted:
                await self._events(reader, writer, code)
            else:
                await self._not_found(writer, None, body_wanted)
        else:
            await self._not_found(writer, None, body_wanted)

    def _ask_ratings(self) -> None:
        """While the list is read, the leaderboards are asked for every ``RATINGS_EVERY_S``."""
        now = time.monotonic()
        if self.feed is not None and now - self._ratings_asked >= RATINGS_EVERY_S:
            self._ratings_asked = now
            self.feed.ask_ratings(list(GAMES))

    def _known(self, code: str) -> bool:
        return 0 < len(code) <= CODE_MAX and code.isalnum() and self.book.knows(code)

    async def _file(self, writer: asyncio.StreamWriter, name: str, body_wanted: bool = True) -> None:
        await self._send(writer, 200, STATIC[name], self._files[name], body_wanted)

    async def _not_found(self, writer: asyncio.StreamWriter, code: str | None, body_wanted: bool) -> None:
        if code is not None:
            shown = _html(code[:CODE_MAX])
            words = (f"No match {shown} on this relay: the code is wrong, or the match ended long enough ago "
                     "that the relay no longer lists it.")
        else:
            words = "Nothing here: this server has the list of matches and a page per match."
        body = (f"<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>Not found - blink</title>"
                f"<link rel=\"stylesheet\" href=\"/static/style.css\"></head><body><main><h1>Not found</h1>"
                f"<p class=\"notfound\">{words}</p><p><a href=\"/\">All matches</a></p></main></body></html>").encode()
        await self._send(writer, 404, "text/html; charset=utf-8", body, body_wanted)

    async def _send(self, writer: asyncio.StreamWriter, status: int, ctype: str, body: bytes,
                    body_wanted: bool = True, extra: str = "") -> None:
        head = (f"HTTP/1.1 {status} {REASONS[status]}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
                f"Cache-Control: no-store\r\nConnection: close\r\n{SECURITY}{extra}\r\n").encode()
        writer.write(head + body if body_wanted else head)
        await writer.drain()

    async def _events(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, code: str) -> None:
        """One page's stream of its match (see the module header)."""
        if sum(len(qs) for qs in self._streams.values()) >= MAX_STREAMS:
            await self._send(writer, 503, "text/plain; charset=utf-8", b"too many pages open: try again later\n",
                             extra="Retry-After: 5\r\n")
            return
        q: asyncio.Queue[FrameData | None] = asyncio.Queue(QUEUE_FRAMES)
        queues = self._streams.setdefault(code, set())
        first = not queues
        queues.add(q)
        try:
            if first:
                self.book.watch(code)
                await self._resubscribe()
            writer.write((f"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-store\r\n"
                          f"Connection: keep-alive\r\n{SECURITY}\r\nretry: 1000\n\n").encode())
            writer.write(_sse(self.book.frame(code, now_ns=time.time_ns())))
            await writer.drain()
            gone = asyncio.ensure_future(reader.read(1))  # a browser sends nothing more: EOF is its leaving
            try:
                while not gone.done():
                    got: asyncio.Task[FrameData | None] = asyncio.ensure_future(q.get())
                    done, _ = await asyncio.wait({got, gone}, timeout=KEEPALIVE_S,
                                                 return_when=asyncio.FIRST_COMPLETED)
                    if got not in done:
                        got.cancel()
                        if not gone.done():
                            writer.write(b": keep-alive\n\n")
                            await writer.drain()
                        continue
                    frame = got.result()
                    if frame is None:
                        return
                    writer.write(_sse(frame))
                    await _drained(writer.drain())
            finally:
                gone.cancel()
        finally:
            queues.discard(q)
            if not queues:
                self._streams.pop(code, None)
                self.book.unwatch(code)
                await self._resubscribe()

    async def _resubscribe(self) -> None:
        if self.feed is not None:
            await self.feed.resubscribe()


def _offer(q: asyncio.Queue[FrameData | None], frame: FrameData | None) -> bool:
    """Queue a frame for a stream; a stream too far behind is ended (its page reconnects)."""
    try:
        q.put_nowait(frame)
        return True
    except asyncio.QueueFull:
        while not q.empty():
            q.get_nowait()
        q.put_nowait(None)
        return False


async def _drained(drain: Awaitable[None]) -> None:
    await asyncio.wait_for(drain, KEEPALIVE_S)


def _sse(frame: FrameData) -> bytes:
    return b"data: " + json.dumps(frame, separators=(",", ":"), default=str).encode() + b"\n\n"


def _html(text: str) -> str:
    return (text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
            .replace("'", "&#39;"))


__all__ = ["WebAddress", "WebError", "WebServer", "parse_web"]
