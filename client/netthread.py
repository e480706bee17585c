"""The window's network I/O on a thread of its own: MQTT connections off the frame loop.

How this works
--------------
The window's thread runs one asyncio loop that draws frames (pyglet), and a frame holds that loop
for milliseconds (under software GL, tens of ms on a busy machine). A pong that arrives meanwhile
waits for the frame before it is read and stamped, so the HUD's round trip measured the frame, not
the network. ``NetThread`` runs a second asyncio loop in a daemon thread; ``ThreadedConnection``
puts a ``client.net.Connection`` (aiomqtt client, reader, pinger, reconnects) on it:

- **in**: the connection's reader decodes each message and stamps its arrival (``time.time_ns()``)
  on the network thread, then appends ``(handler, msg, recv_ns)`` to the thread's inbox (a deque:
  appends and pops are atomic). The window thread runs the handlers in ``drain``: the frame loop
  calls it at the start of every frame (a frame draws the newest state), and the first message into
  an empty inbox also schedules one ``drain`` on the window's loop (``call_soon_threadsafe``), so
  bots and coroutines waiting for an answer are woken between frames, and code without a frame loop
  works the same. The model is still only touched by the window's thread: a frame never sees a
  half-applied message;
- **out**: ``request``/``act``/``send_raw`` hand the encoded publish to the network loop with
  ``call_soon_threadsafe`` and return at once (publishes keep their order: the callbacks run in
  order and each starts its publish synchronously). ``watch`` and the like, whose callers must know
  the subscription is in place before they go on, wait for the network loop's answer;
- **clock samples**: the connection's pinger (idle only) runs on the network loop, so a ping's
  ``t0`` and its pong's arrival are both stamped there; a verdict's arrival is stamped there too,
  and a play's ``t0`` is taken by the model just before the act is handed over (one
  ``call_soon_threadsafe``, inside the sample's delay; the clock filter keeps the lowest-delay
  sample). The window's frames delay neither arrival (only the model's use of the sample, which
  needs no precision).

One ``NetThread`` serves every connection of a window (yours, the bots', the recorder's);
``close`` stops its loop and joins the thread. Nothing here imports pyglet.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import logging
import threading
from typing import Callable, Coroutine, TypeVar

from mqttkit import BrokerAddress
from protocol import messages as m
from protocol.codec import encode
from protocol.seal import ClientSeal
from protocol.topics import Topics
from client.net import Connection, Impairment, OnMessage

log = logging.getLogger("blink.net")

T = TypeVar("T")


class NetThread:
    """An asyncio loop in a daemon thread for network I/O, and the inbox the owner's loop drains."""

    def __init__(self, name: str = "blink-net") -> None:
        self.name = name
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._owner: asyncio.AbstractEventLoop | None = None
        self._inbox: collections.deque[tuple[OnMessage, object, int]] = collections.deque()
        self._wake_lock = threading.Lock()
        self._wake_pending = False
        self.delivered = 0  # messages handed to the owner's thread (statistics, tests)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and self.loop is not None

    def start(self) -> None:
        """Start the thread (idempotent); the calling thread's running loop becomes the owner."""
        if self.running:
            return
        self._owner = asyncio.get_running_loop()
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            self.loop = loop
            ready.set()
            try:
                loop.run_forever()
            finally:
                # Whatever is left (a connection not closed in time) is cancelled, then the loop closed.
                pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
                for t in pending:
                    t.cancel()
                if pending:
                    loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.close()

        self._thread = threading.Thread(target=run, name=self.name, daemon=True)
        self._thread.start()
        ready.wait()

    async def call(self, coro: Coroutine[object, None, T]) -> T:
        """Run ``coro`` on the network loop; await its result from the owner's loop."""
        if not self.running:
            coro.close()
            raise ConnectionError("the network thread is not running")
        assert self.loop is not None
        fut: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return await asyncio.wrap_future(fut)
        except asyncio.CancelledError:
            fut.cancel()
            raise

    def post(self, make: Callable[[], Coroutine[object, None, object]]) -> None:
        """Start ``make()`` as a task on the network loop, without waiting (a send)."""
        loop = self.loop
        if loop is None or not self.running:
            return  # closed: sends are dropped, as on a connection that is down

        def spawn() -> None:
            task = loop.create_task(make())
            task.add_done_callback(_log_failure)

        try:
            loop.call_soon_threadsafe(spawn)
        except RuntimeError:
            pass  # the loop closed meanwhile

    # ----------------------------------------------------------------- inbox (network -> owner)

    def deliver(self, handler: OnMessage, msg: object, recv_ns: int) -> None:
        """Network thread: queue one stamped message for the owner's thread and wake it."""
        self._inbox.append((handler, msg, recv_ns))
        with self._wake_lock:
            if self._wake_pending:
                return
            self._wake_pending = True
        owner = self._owner
        if owner is not None:
            try:
                owner.call_soon_threadsafe(self.drain)
            except RuntimeError:
                pass  # the owner's loop is closed: nobody reads any more

    def pending(self) -> list[tuple[object, int]]:
        """What the owner has not drained yet: ``(message, recv_ns)`` in arrival order (a copy)."""
        return [(msg, recv_ns) for _h, msg, recv_ns in list(self._inbox)]

    def drain(self) -> int:
        """Owner's thread: run the handlers of every queued message, in arrival order."""
        with self._wake_lock:
            self._wake_pending = False
        n = 0
        inbox = self._inbox
        while inbox:
            handler, msg, recv_ns = inbox.popleft()
            n += 1
            try:
                handler(msg, recv_ns)
            except Exception:  # noqa: BLE001 - a bug in a handler must not stop the others
                log.exception("handler failed for %s", type(msg).__name__)
        self.delivered += n
        return n

    async def close(self, timeout: float = 5.0) -> None:
        """Stop the loop and join the thread (waiting in a worker thread, not on the owner's loop)."""
        thread, loop = self._thread, self.loop
        if thread is None or loop is None:
            return
        try:
            loop.call_soon_threadsafe(loop.stop)
        except RuntimeError:
            pass
        await asyncio.to_thread(thread.join, timeout)
        if thread.is_alive():
            log.warning("the network thread did not stop in %g s", timeout)
        self._thread = None
        self.loop = None
        self.drain()  # the last messages (a Leave's answer) still reach their handlers


def _log_failure(task: asyncio.Task[object]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.debug("send failed: %s", task.exception())


class ThreadedConnection:
    """``client.net.Connection``'s surface for the owner's loop, the connection itself on a ``NetThread``.

    ``on_message(msg, recv_ns)`` runs on the owner's thread (it may be replaced, like
    ``Connection.on_message``); ``recv_ns`` was stamped on the network thread when the message was
    read."""

    def __init__(self, net: NetThread, address: BrokerAddress, client_id: str | None = None,
                 topics: Topics | None = None, on_message: OnMessage | None = None,
                 impairment: Impairment | None = None, ping_interval_s: float = 1.0,
                 relay_status: bool = False, seal: ClientSeal | None = None) -> None:
        self.net = net
        self.on_message: OnMessage = on_message or (lambda msg, now: None)
        self.inner = Connection(address, client_id, topics, self._arrived, impairment, ping_interval_s,
                                relay_status=relay_status, seal=seal)
        self.address = self.inner.address
        self.topics = self.inner.topics
        self.client_id = self.inner.client_id
        self.ping_interval_s = ping_interval_s
        self._open = False

    # Read from the owner's thread; plain attributes of the inner connection (atomic reads).
    @property
    def bad_messages(self) -> int:
        return self.inner.bad_messages

    @property
    def lost(self) -> str | None:
        return self.inner.lost

    @property
    def reconnects(self) -> int:
        return self.inner.reconnects

    @property
    def impairment(self) -> Impairment | None:
        return self.inner.impairment

    @impairment.setter
    def impairment(self, value: Impairment | None) -> None:
        # One reference swapped whole: the network thread sees the old or the new one, both usable.
        self.inner.impairment = value if value is not None and value.active else None

    def shard_of(self, match: str) -> str | None:
        return self.inner.shard_of(match)

    def _arrived(self, msg: object, recv_ns: int) -> None:  # network thread
        self.net.deliver(self._handle, msg, recv_ns)

    def _handle(self, msg: object, recv_ns: int) -> None:  # owner's thread
        self.on_message(msg, recv_ns)

    async def __aenter__(self) -> ThreadedConnection:
        self.net.start()
        await self.net.call(self.inner.__aenter__())
        self._open = True
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self, leave: bool = True) -> None:
        if not self.net.running:
            return
        self._open = False
        await self.net.call(self.inner.close(leave=leave))

    async def watch(self, match: str) -> None:
        await self.net.call(self.inner.watch(match))

    async def watch_all(self) -> None:
        await self.net.call(self.inner.watch_all())

    async def watch_lobby(self) -> None:
        await self.net.call(self.inner.watch_lobby())

    async def request(self, msg: object) -> None:
        self.post_request(msg)

    def post_request(self, msg: object) -> None:
        """Send a request without awaiting (encoded here, published by the network loop)."""
        payload = encode(msg)
        topic = self.topics.req(self.client_id)
        self.net.post(lambda: self.inner.send_raw(topic, payload))

    async def act(self, match: str, act: m.Act) -> None:
        self.post_act(match, act)

    def post_act(self, match: str, act: m.Act) -> None:
        payload = encode(act)
        inner = self.inner
        # The shard is read on the network thread, where MatchJoined set it (before anyone acts).
        self.net.post(lambda: inner.send_raw(inner.act_topic(match), payload))

    async def send_raw(self, topic: str, payload: bytes) -> None:
        self.net.post(lambda: self.inner.send_raw(topic, payload))
