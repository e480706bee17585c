"""A shard's journal in NATS JetStream: ``JetStreamJournal`` implements ``relay.storage.journal.Journal``.

How this works
--------------
One shard, one stream (``<ns>_journal_<shard>``, one subject ``<ns>.journal.<shard>``, file storage,
replicated on ``replicas`` nodes: by default the most of 3, 2, 1 the cluster accepts). A batch is one
JetStream message: the msgpack'd entries, with headers

- ``Blink-Pos``: the position of its first entry, ``Blink-N``: how many entries (0 for a fence marker),
- ``Blink-Fence``: the newest fence the journal had seen when it was written (so the last message
  always carries the newest fence, and opening the journal needs only the last message),
- ``Nats-Msg-Id``: a nonce per append call, so a retry after a lost acknowledgement is recognised.

Positions are contiguous from 1 and grow across compaction and restarts because every write is
conditional: it carries ``Nats-Expected-Last-Sequence`` = the stream sequence of the last message
this writer knows, so JetStream stores it only if nobody wrote in between (the stream has one
subject: the stream-wide condition is the whole condition). When that
condition fails the writer catches up (reads the messages it missed): if one of them is its own
(the same nonce) the append had in fact succeeded; if one carries a newer fence than the caller's,
the append is refused with ``FencedError``; otherwise it retries at the new end. So two owners can
never interleave writes, and a stale owner learns it is stale on its next append.

``claim(fence)`` (also done by the constructor when given ``fence``) writes an empty fence marker:
after it, a stale owner's next append fails even if the new owner has not written anything yet.
The new owner must claim *before* it replays (``on_gain``: open with the fence, then replay), so
that every append it does not see in its replay is refused.

A batch larger than one message (the server's ``max_payload``, 1 MB by default) is split over
several messages, in order; a crash in between leaves a prefix of the batch, which is what a
crash just after a smaller batch would have left (nothing of it was acknowledged yet).

Snapshots live in a JetStream object store (``<ns>_snap_<shard>``, chunked by nats-py, so MBs are
fine), named by position; the newest two are kept. ``compact(p)`` purges the stream below the
message holding position p+1 (the last message always stays: it carries the position and fence).

nats-py is asyncio; the ``Journal`` interface is synchronous (the relay shell calls it through
``asyncio.to_thread``). A ``NatsLink`` owns a private event loop in a daemon thread and one
connection on it; the sync methods submit coroutines to it and wait (never call them from that
loop's own thread). One link may be shared by the journals of every shard of a relay.

Failures: a server without JetStream, or one that refuses the login (a cluster with blink's
authorization, ``relay/cluster/natsauth.py``, and no or a wrong relay password), is a ``JournalError`` with
one line at once; a cluster that is not ready (nothing listening yet, no JetStream meta leader yet:
``NotReady``) is asked again for up to ``wait_s`` -- a relay waits ``START_WAIT_S``, saying so once
-- and then is one too. URLs are shown without their credentials. While a node is down, requests are retried (the client reconnects
to another node and the streams elect a new leader) until ``op_timeout``; then ``JournalError``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import re
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import msgpack

from relay.storage import Entry, FencedError, JournalError, Msg, Tick

if TYPE_CHECKING:  # nats-py is imported where it is used: a relay without a cluster never loads it
    from nats.aio.client import Client as NATS
    from nats.js.api import ObjectInfo, RawStreamMsg
    from nats.js.client import JetStreamContext
    from nats.js.object_store import ObjectStore

T = TypeVar("T")
#: A coroutine handed to another thread's loop: only its result matters to the caller.
Job = Coroutine[object, None, T]

H_POS = "Blink-Pos"
H_N = "Blink-N"
H_FENCE = "Blink-Fence"
H_ID = "Nats-Msg-Id"
H_EXPECT = "Nats-Expected-Last-Sequence"  # not ...-Subject-Sequence: see the module docstring
WRONG_LAST_SEQ = (10071, 10164)  # JSStreamWrongLastSequenceErrF and its constant form
NOT_TRANSIENT = frozenset({10074})  # JSStreamReplicasNotSupportedErr: replicas > 1 on a standalone server
READ_WINDOW = 64  # messages fetched concurrently while reading
#: One JetStream request's wait for its answer. Short, and retried (``_retrying``): a request sent to
#: a stream whose leader went with a stopped node goes unanswered until the new leader is elected
#: (seconds), and with a long timeout the retry that would succeed came up to the whole timeout
#: after the election. Retries are safe: appends carry an id and the expected last
#: sequence, reads change nothing.
REQUEST_TIMEOUT_S = 1.0
RETRY_MAX_DELAY_S = 0.25
KEEP_SNAPSHOTS = 2
_NAME = re.compile(r"^[A-Za-z0-9_-]+$")


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return " ".join(text.split())


def shown(urls: Sequence[str]) -> str:
    """URLs for a message: without ``user:password@`` (a relay's NATS URLs carry its password)."""
    return ", ".join(u.split("://", 1)[0] + "://" + u.split("://", 1)[1].rpartition("@")[2] if "://" in u
                     else u.rpartition("@")[2] for u in urls)


def parse_servers(servers: str | Sequence[str]) -> list[str]:
    """``nats://a:4222,nats://b:4222`` or a list of URLs -> a list of URLs (``nats://`` added when missing)."""
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    urls = [s.strip() if "://" in s else f"nats://{s.strip()}" for s in items if s.strip()]
    if not urls:
        raise JournalError("no NATS server URL given")
    for url in urls:
        scheme = url.split("://", 1)[0].lower()
        if scheme not in ("nats", "tls", "ws", "wss"):
            raise JournalError(f"{shown([url])} is not a NATS URL (nats://host:port; the MQTT port is for players and relays' "
                               f"MQTT, the NATS port for leases and journals)")
    return urls


#: How long a relay waits for a cluster that is not ready yet (nodes starting, no JetStream leader yet).
START_WAIT_S = 60.0
#: One try at a login: longer than a node's wait for the auth callout's answer (``relay/cluster/natsauth.py``:
#: 5 s), so that a refused login is heard as one, not taken for silence.
ATTEMPT_S = 8.0


class NotReady(JournalError):
    """The cluster does not answer as it will once it is up (nothing listening yet, no JetStream
    leader yet): worth asking again."""


async def connect_jetstream(servers: str | Sequence[str], connect_timeout: float = 5.0,
                            name: str = "blink-relay", wait_s: float = 0.0,
                            say: Callable[[str], None] | None = None) -> NATS:
    """A nats-py connection to a JetStream-enabled cluster, or ``JournalError`` in one line.

    A refused login or a server without JetStream ends it at once. A cluster that is not ready
    (``NotReady``: nothing listening, no JetStream meta leader yet) is asked again every half second
    for up to ``wait_s`` (0: once), said once through ``say``. Once connected, the client reconnects
    for ever (to any node) so that a node going down is ridden out."""
    where = shown(parse_servers(servers))
    deadline = time.monotonic() + wait_s
    told = False
    while True:
        try:
            return await _connect_once(servers, connect_timeout, name)
        except NotReady as exc:
            if time.monotonic() + 0.5 > deadline:
                if wait_s:
                    raise NotReady(f"{exc}, still after {wait_s:.0f} s") from exc
                raise
            if not told and say is not None:
                say(f"waiting for the NATS cluster at {where} to get ready ({exc}); giving up after {wait_s:.0f} s")
                told = True
        await asyncio.sleep(0.5)


async def _connect_once(servers: str | Sequence[str], connect_timeout: float, name: str) -> NATS:
    import nats
    import nats.errors
    import nats.js.errors

    urls = parse_servers(servers)
    where = shown(urls)
    refused: list[Exception] = []

    async def quiet(exc: Exception) -> None:  # nats-py logs every failed attempt otherwise
        if isinstance(exc, nats.errors.AuthorizationError) or "authorization violation" in str(exc).lower():
            refused.append(exc)  # remembered: nats-py then reports only "no servers available"

    def refusal(exc: BaseException | None) -> JournalError | None:
        text = str(exc).lower()
        if refused or isinstance(exc, nats.errors.AuthorizationError) or "authorization" in text:
            how = "a wrong password" if any("@" in u.split("://", 1)[-1] for u in urls) else "no password"
            return JournalError(f"the NATS cluster at {where} refused the relay's login (authorization violation: "
                                f"{how}): give the relay's password (`blink cluster up` writes it to DIR/relay-password; "
                                f"`blink serve --password-file FILE` reads it)")
        return None

    try:
        nc = await asyncio.wait_for(
            nats.connect(servers=urls, name=name, connect_timeout=max(connect_timeout, ATTEMPT_S), allow_reconnect=True,
                         max_reconnect_attempts=2, reconnect_time_wait=0.2, error_cb=quiet),
            timeout=max(connect_timeout, ATTEMPT_S + 2))
    except (asyncio.TimeoutError, nats.errors.NoServersError, OSError, nats.errors.Error) as exc:
        if (no := refusal(exc)) is not None:
            raise no from exc
        why = "timed out" if isinstance(exc, asyncio.TimeoutError) else _one_line(exc)
        raise NotReady(f"cannot reach the NATS cluster at {where} ({why})") from exc
    # A login the node is still weighing (its auth callout, up to 5 s) is returned by nats-py before
    # it is answered: wait for the answer (a refusal closes the connection).
    end = time.monotonic() + ATTEMPT_S
    while not nc.is_connected and not nc.is_closed and time.monotonic() < end:
        await asyncio.sleep(0.05)
    if not nc.is_connected:
        error = nc.last_error
        await close_nats(nc)
        if (no := refusal(error)) is not None:
            raise no from error
        raise NotReady(f"cannot reach the NATS cluster at {where} ({_one_line(error) if error else 'no answer to the login'})")
    try:
        await nc.jetstream(timeout=min(5.0, max(connect_timeout, 2.0))).account_info()
    except (nats.errors.NoRespondersError, nats.js.errors.ServiceUnavailableError) as exc:
        await close_nats(nc)
        if getattr(exc, "err_code", None) is not None:  # "temporarily unavailable": no meta leader yet
            raise NotReady(f"the NATS cluster at {where} does not answer JetStream requests yet "
                           f"({_one_line(exc)})") from exc
        # nats-py reports nobody answering JetStream's API (no JetStream here) as a bare 503
        raise JournalError(f"the NATS server at {where} has no JetStream (enable it: a jetstream {{}} "
                           f"block in its config, or -js)") from exc
    except (nats.js.errors.NoStreamResponseError, asyncio.TimeoutError, nats.errors.TimeoutError,
            nats.errors.ConnectionClosedError) as exc:
        await close_nats(nc)
        if refused:
            raise refusal(refused[0]) or JournalError("refused") from exc
        raise NotReady(f"the NATS cluster at {where} does not answer JetStream requests yet "
                       f"(no JetStream meta leader yet)") from exc
    except Exception as exc:
        await close_nats(nc)
        raise refusal(exc) or JournalError(f"JetStream at {where} is not usable: {_one_line(exc)}") from exc
    if refused:
        await close_nats(nc)
        raise refusal(refused[0]) or JournalError("refused")
    nc.options["max_reconnect_attempts"] = -1  # from now on: keep reconnecting (a node may be down for a while)
    nc.options["reconnect_time_wait"] = 0.5
    return nc


def quiet_refused_closes(loop: asyncio.AbstractEventLoop) -> None:
    """On a loop of our own: leave out the one error nats-py leaves unretrieved when a node refuses
    a login and closes the socket (its own close task then fails on the reset connection); the
    refusal itself is reported, and everything else still goes to the default handler."""
    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        task = context.get("future")
        coro = task.get_coro() if isinstance(task, asyncio.Task) else None
        if (isinstance(context.get("exception"), ConnectionResetError)
                and getattr(coro, "__qualname__", "") == "Client._close"):
            return
        loop.default_exception_handler(context)

    loop.set_exception_handler(handler)


async def bounded(awaitable: Awaitable[T], timeout: float) -> T | None:
    """``awaitable``'s result, or None when it is not done within ``timeout`` (it is then cancelled but
    not waited for: unlike ``asyncio.wait_for``, this never hangs on a task that ignores its cancel --
    nats-py's close and flush swallow ``CancelledError`` in places). Its exceptions are raised."""
    task = asyncio.ensure_future(awaitable)
    done, _ = await asyncio.wait({task}, timeout=timeout)
    if not done:
        task.cancel()
        task.add_done_callback(_consume)
        return None
    return task.result()


def _consume(task: asyncio.Future[T]) -> None:
    if not task.cancelled():
        task.exception()  # retrieved: an abandoned task's failure is not "never retrieved"


async def close_nats(nc: NATS, timeout: float = 5.0) -> None:
    """Close a nats-py connection without ever hanging on it."""
    try:
        await bounded(nc.close(), timeout)
    except Exception:  # noqa: BLE001 -- closing is best effort
        pass


class NatsLink:
    """One nats-py connection on a private event loop (a daemon thread), usable from any other thread."""

    def __init__(self, servers: str | Sequence[str], *, connect_timeout: float = 5.0,
                 request_timeout: float = REQUEST_TIMEOUT_S, name: str = "blink-relay", wait_s: float = 0.0,
                 say: Callable[[str], None] | None = None) -> None:
        self.servers = parse_servers(servers)
        self.request_timeout = request_timeout
        self._loop = asyncio.new_event_loop()
        quiet_refused_closes(self._loop)
        self._thread = threading.Thread(target=self._loop.run_forever, name="blink-nats", daemon=True)
        self._thread.start()
        self._closed = False
        try:
            self.nc: NATS = self.run(connect_jetstream(self.servers, connect_timeout, name, wait_s, say),
                                     wait_s + connect_timeout + ATTEMPT_S + 10)
        except BaseException:
            self._stop_loop()
            raise
        self.js: JetStreamContext = self.nc.jetstream(timeout=request_timeout)

    def run(self, coro: Job[T], timeout: float | None = None) -> T:
        """Run ``coro`` on the link's loop and wait for its result (from any thread but the loop's)."""
        if self._closed:
            coro.close()
            raise JournalError("the NATS connection is closed")
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("NatsLink.run called from its own event loop thread")
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError as exc:
            future.cancel()
            raise JournalError("a NATS request did not finish in time") from exc

    def close(self) -> None:
        if self._closed:
            return
        try:
            self.run(self._close_nc(), 10)
        except Exception:  # noqa: BLE001 -- closing is best effort; the loop goes anyway
            pass
        self._closed = True
        self._stop_loop()

    async def _close_nc(self) -> None:
        await close_nats(self.nc)

    def _stop_loop(self) -> None:
        self._closed = True
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self._loop.close()

    def __enter__(self) -> NatsLink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---------------------------------------------------------------------------------------------- records

def encode_entries(entries: Sequence[Entry]) -> bytes:
    """Rows ``[0, now_ns, topic, payload, wall_ns?]`` and ``[1, now_ns, wall_ns?]``: the wall clock rides
    along when the shell read one (a replay must stamp events with the times first published)."""
    rows: list[list[int | str | bytes]] = []
    for e in entries:
        row: list[int | str | bytes] = [0, e.now_ns, e.topic, bytes(e.payload)] if isinstance(e, Msg) else [1, e.now_ns]
        if e.wall_ns is not None:
            row.append(e.wall_ns)
        rows.append(row)
    return bytes(msgpack.packb(rows, use_bin_type=True))


def decode_entries(data: bytes) -> list[Entry]:
    rows = msgpack.unpackb(data, raw=False)
    out: list[Entry] = []
    for row in rows:
        if row[0] == 0 and len(row) in (4, 5):
            out.append(Msg(str(row[2]), bytes(row[3]), int(row[1]), int(row[4]) if len(row) == 5 else None))
        elif row[0] == 1 and len(row) in (2, 3):
            out.append(Tick(int(row[1]), int(row[2]) if len(row) == 3 else None))
        else:
            raise ValueError(f"unknown entry kind or length {row[0]!r}/{len(row)}")
    return out


def split_batch(batch: Sequence[Entry], limit: int) -> list[list[Entry]]:
    """Consecutive pieces of ``batch`` whose encoding fits in ``limit`` bytes (each at least one entry)."""
    pieces: list[list[Entry]] = []
    current: list[Entry] = []
    size = 8
    for entry in batch:
        n = len(encode_entries([entry]))
        if n > limit:
            raise JournalError(f"one journal entry of {n} bytes is larger than a NATS message may be ({limit})")
        if current and size + n > limit:
            pieces.append(current)
            current, size = [], 8
        current.append(entry)
        size += n
    if current:
        pieces.append(current)
    return pieces


class _Head:
    """What one stored message says about itself."""

    __slots__ = ("seq", "pos", "n", "fence", "nonce")

    def __init__(self, seq: int, headers: dict[str, str] | None) -> None:
        h = headers or {}
        try:
            self.seq = seq
            self.pos = int(h[H_POS])
            self.n = int(h[H_N])
            self.fence = int(h.get(H_FENCE) or 0)
            self.nonce = h.get(H_ID, "")
        except (KeyError, ValueError) as exc:
            raise JournalError(f"journal message {seq} is not a blink record (headers {sorted(h)})") from exc

    @property
    def last(self) -> int:
        return self.pos + self.n - 1


# ---------------------------------------------------------------------------------------------- the journal

class JetStreamJournal:
    """The journal of one shard in JetStream (see the module docstring)."""

    recovery_note: str | None = None

    def __init__(self, link: NatsLink | str | Sequence[str], shard: str, *, namespace: str = "blink",
                 replicas: int | None = None, fence: int | None = None, op_timeout: float = 30.0,
                 connect_timeout: float = 5.0) -> None:
        if not _NAME.match(shard):
            raise JournalError(f"shard name {shard!r} must be letters, digits, '-' or '_'")
        if not _NAME.match(namespace):
            raise JournalError(f"namespace {namespace!r} must be letters, digits, '-' or '_'")
        if replicas is not None and not 1 <= replicas <= 5:
            raise JournalError(f"replicas must be 1..5, not {replicas}")
        self.shard = shard
        self.stream = f"{namespace}_journal_{shard}"
        self.subject = f"{namespace}.journal.{shard}"
        self.bucket = f"{namespace}_snap_{shard}"
        self.op_timeout = op_timeout
        self._own_link = not isinstance(link, NatsLink)
        self.link = link if isinstance(link, NatsLink) else NatsLink(link, connect_timeout=connect_timeout)
        self._mutex = threading.RLock()
        self._closed = False
        self._last = 0  # position of the newest entry
        self._last_seq = 0  # stream sequence of the newest message
        self._fence = 0  # newest fence seen
        self._compacted = 0  # every entry at or below this is gone
        self._snap_pos: int | None = None  # newest snapshot's position, once known
        self.commits = 0
        self.replicas = 0
        try:
            self.replicas = self._call(self._open(replicas))
            if fence is not None:
                self.claim(fence)
        except BaseException:
            self.close()
            raise

    # ---- plumbing

    def _call(self, coro: Job[T], timeout: float | None = None) -> T:
        return self.link.run(coro, (timeout or self.op_timeout) + 5)

    async def _retrying(self, what: str, make: Callable[[], Awaitable[T]]) -> T:
        """Await ``make()`` until it succeeds, retrying transient failures (no leader yet, a node down,
        a reconnect under way) until ``op_timeout``; anything else is raised at once."""
        import nats.errors
        import nats.js.errors

        deadline = time.monotonic() + self.op_timeout
        delay = 0.1
        while True:
            try:
                return await make()
            except (nats.js.errors.ServiceUnavailableError, nats.js.errors.NoStreamResponseError,
                    nats.errors.TimeoutError, nats.errors.NoRespondersError, nats.errors.ConnectionClosedError,
                    nats.errors.ConnectionReconnectingError, nats.errors.StaleConnectionError,
                    asyncio.TimeoutError, OSError) as exc:
                if isinstance(exc, nats.errors.ConnectionClosedError) and self.link.nc.is_closed:
                    raise JournalError(f"cannot {what}: the NATS connection is closed") from exc
                if time.monotonic() + delay > deadline:
                    raise JournalError(f"cannot {what} within {self.op_timeout:.0f} s: {_one_line(exc)}") from exc
            except nats.js.errors.APIError as exc:
                if exc.err_code in NOT_TRANSIENT:
                    raise  # a 500 that no retry changes (e.g. replicas on a standalone server)
                if exc.code in (500, 503) and time.monotonic() + delay <= deadline:
                    pass  # the cluster is electing a leader: try again
                else:
                    raise
            await asyncio.sleep(delay)
            delay = min(RETRY_MAX_DELAY_S, delay * 2)

    async def _open(self, replicas: int | None) -> int:
        import nats.js.errors
        from nats.js.api import DiscardPolicy, StorageType, StreamConfig

        js = self.link.js
        try:
            info = await self._retrying("read the journal stream", lambda: js.stream_info(self.stream))
            got = int(info.config.num_replicas or 1)
        except nats.js.errors.NotFoundError:
            got = 0
            for r in ([replicas] if replicas else [3, 2, 1]):
                config = StreamConfig(name=self.stream, subjects=[self.subject], num_replicas=r,
                                      storage=StorageType.FILE, discard=DiscardPolicy.OLD, deny_delete=True,
                                      description=f"blink journal of shard {self.shard}")
                try:
                    info = await self._retrying("create the journal stream", functools.partial(js.add_stream, config))
                    got = r
                    break
                except nats.js.errors.APIError as exc:
                    if replicas or r == 1 or "replica" not in _one_line(exc).lower() and exc.err_code != 10074:
                        raise JournalError(f"cannot create the journal stream {self.stream}: {_one_line(exc)}") from exc
        self.replicas = got or int(info.config.num_replicas or 1)
        state = info.state
        if state.last_seq:
            if not state.messages:
                raise JournalError(f"the journal stream {self.stream} was emptied by hand (last sequence "
                                   f"{state.last_seq}, no messages): its positions are unknown; delete the stream")
            head = await self._head(state.last_seq)
            first = head if state.first_seq == state.last_seq else await self._head(state.first_seq)
            self._last, self._last_seq, self._fence = head.last, head.seq, head.fence
            self._compacted = first.pos - 1
        await self._snapshots_store()
        return self.replicas

    async def _head(self, seq: int) -> _Head:
        msg = await self._retrying("read the journal", lambda: self.link.js.get_msg(self.stream, seq=seq))
        return _Head(seq, msg.headers)

    async def _get(self, seq: int) -> RawStreamMsg:
        return await self._retrying("read the journal", lambda: self.link.js.get_msg(self.stream, seq=seq))

    def _check_open(self) -> None:
        if self._closed:
            raise JournalError(f"the journal of shard {self.shard} is closed")

    # ---- the interface

    def last_position(self) -> int:
        return self._last

    @property
    def fence(self) -> int:
        """The newest fence this journal has seen."""
        return self._fence

    def claim(self, fence: int) -> int:
        """Become the writer with ``fence``: write a fence marker (refused with ``FencedError`` when a newer
        fence has written). Returns the last position."""
        return self.append([], fence)

    def append(self, batch: Sequence[Entry], fence: int | None = None) -> int:
        with self._mutex:
            self._check_open()
            if fence is not None and fence < self._fence:
                raise FencedError(f"append refused: fence {fence} is older than {self._fence}, "
                                  f"shard {self.shard} has a newer owner")
            if not batch:
                if fence is None:
                    return self._last
                if fence == self._fence:
                    self._call(self._catch_up())  # a cheap check that nobody newer has claimed meanwhile
                    self._refuse_if_stale(fence)
                    return self._last
                self._call(self._publish([], fence))
                return self._last
            limit = max(1024, int(self.link.nc.max_payload) - 4096)
            for piece in split_batch(batch, limit):
                self._call(self._publish(piece, fence))
            return self._last

    def _refuse_if_stale(self, fence: int | None) -> None:
        if fence is not None and self._fence > fence:
            raise FencedError(f"append refused: fence {fence} is older than {self._fence}, "
                              f"shard {self.shard} has a newer owner")

    async def _publish(self, entries: list[Entry], fence: int | None) -> None:
        import nats.js.errors

        payload = encode_entries(entries) if entries else b""
        nonce = uuid.uuid4().hex
        while True:
            self._refuse_if_stale(fence)
            pos = self._last + 1
            newest = max(self._fence, fence or 0)
            headers = {H_POS: str(pos), H_N: str(len(entries)), H_FENCE: str(newest), H_ID: nonce,
                       H_EXPECT: str(self._last_seq)}
            try:
                ack = await self._retrying(
                    "append to the journal",
                    lambda: self.link.js.publish(self.subject, payload, headers=dict(headers), stream=self.stream))
            except nats.js.errors.APIError as exc:
                if exc.err_code not in WRONG_LAST_SEQ:
                    raise JournalError(f"cannot append to the journal of shard {self.shard}: {_one_line(exc)}") from exc
                if await self._catch_up(nonce):
                    self.commits += 1
                    return  # our earlier try had landed
                continue
            if ack.duplicate:  # an earlier try landed and the server remembered its id
                if await self._catch_up(nonce):
                    self.commits += 1
                    return
                raise JournalError(f"the journal of shard {self.shard} reports a duplicate it does not hold")
            self._last_seq = int(ack.seq)
            self._last = pos + len(entries) - 1
            self._fence = newest
            self.commits += 1
            return

    async def _catch_up(self, nonce: str | None = None) -> bool:
        """Read the messages written after the newest one this writer knows; True if one has ``nonce``."""
        info = await self._retrying("read the journal stream", lambda: self.link.js.stream_info(self.stream))
        last_seq, first_seq = int(info.state.last_seq), int(info.state.first_seq)
        found = False
        seq = max(self._last_seq + 1, first_seq)
        while seq <= last_seq:
            top = min(last_seq, seq + READ_WINDOW - 1)
            heads = await asyncio.gather(*(self._head(s) for s in range(seq, top + 1)))
            for head in heads:
                if head.pos != self._last + 1 and self._last_seq >= first_seq - 1:
                    raise JournalError(f"the journal of shard {self.shard} has a gap at message {head.seq} "
                                       f"(position {head.pos}, expected {self._last + 1})")
                self._last, self._last_seq = head.last, head.seq
                self._fence = max(self._fence, head.fence)
                found = found or (nonce is not None and head.nonce == nonce)
            seq = top + 1
        return found

    def read(self, from_position: int = 1) -> Iterator[tuple[int, Entry]]:
        with self._mutex:
            self._check_open()
            info = self._call(self._retrying("read the journal stream",
                                             lambda: self.link.js.stream_info(self.stream)))
            first_seq, last_seq = int(info.state.first_seq), int(info.state.last_seq)
            if not info.state.messages:
                return
            seq = self._call(self._find(max(from_position, 1), first_seq, last_seq))
        while seq <= last_seq:
            top = min(last_seq, seq + READ_WINDOW - 1)
            with self._mutex:
                self._check_open()
                msgs = self._call(self._window(seq, top))
            for s, msg in zip(range(seq, top + 1), msgs):
                head = _Head(s, msg.headers)
                if head.n == 0:
                    continue
                try:
                    entries = decode_entries(msg.data or b"")
                except (ValueError, TypeError, IndexError, msgpack.UnpackException) as exc:
                    raise JournalError(f"journal message {s} of shard {self.shard} is damaged: {exc}") from exc
                if len(entries) != head.n:
                    raise JournalError(f"journal message {s} of shard {self.shard} holds {len(entries)} entries, "
                                       f"its header says {head.n}")
                for i, entry in enumerate(entries):
                    if head.pos + i >= from_position:
                        yield head.pos + i, entry
            seq = top + 1

    async def _window(self, lo: int, hi: int) -> list[RawStreamMsg]:
        import nats.js.errors

        try:
            return list(await asyncio.gather(*(self._get(s) for s in range(lo, hi + 1))))
        except nats.js.errors.NotFoundError as exc:
            raise JournalError(f"the journal of shard {self.shard} was compacted while being read") from exc

    async def _find(self, position: int, lo: int, hi: int) -> int:
        """The sequence of the message holding ``position`` (the first message if it is older, hi+1 if newer)."""
        first = await self._head(lo)
        if position <= first.last:
            return lo
        last = await self._head(hi)
        if position > last.last:
            return hi + 1
        while lo < hi:  # invariant: the message at hi ends at or after position; the one at lo ends before
            mid = (lo + hi) // 2
            if (await self._head(mid)).last >= position:
                hi = mid
            else:
                lo = mid + 1
        return lo

    # ---- snapshots

    async def _snapshots_store(self) -> ObjectStore:
        import nats.js.errors
        from nats.js.api import ObjectStoreConfig, StorageType

        js = self.link.js
        try:
            return await self._retrying("open the snapshot store", lambda: js.object_store(self.bucket))
        except nats.js.errors.BucketNotFoundError:
            pass
        except nats.js.errors.NotFoundError:
            pass
        config = ObjectStoreConfig(bucket=self.bucket, storage=StorageType.FILE, replicas=self.replicas,
                                   description=f"blink snapshots of shard {self.shard}")
        try:
            return await self._retrying("create the snapshot store", lambda: js.create_object_store(self.bucket, config=config))
        except nats.js.errors.APIError as exc:
            raise JournalError(f"cannot create the snapshot store {self.bucket}: {_one_line(exc)}") from exc

    async def _names(self, store: ObjectStore) -> list[tuple[int, str]]:
        """(position, name) of every snapshot, newest first (read without a consumer: see ``_latest``)."""
        infos = await self._retrying("list the snapshots", self._snapshot_infos)
        return [(pos, str(meta.name)) for pos, meta in infos]

    def save_snapshot(self, position: int, blob: bytes | bytearray) -> None:
        with self._mutex:
            self._check_open()
            if not self._compacted <= position <= self._last:
                raise JournalError(f"a snapshot must stand for a stored position ({self._compacted}..{self._last}), "
                                   f"not {position}")
            self._call(self._save(position, bytes(blob)), self.op_timeout * 2)
            self.commits += 1
            self._snap_pos = max(self._snap_pos or 0, position)

    async def _save(self, position: int, blob: bytes) -> None:
        store = await self._snapshots_store()
        name = f"snap-{position:020d}"
        try:
            await self._retrying("save a snapshot", lambda: store.put(name, blob))
        except Exception as exc:
            if isinstance(exc, JournalError):
                raise
            raise JournalError(f"cannot save a snapshot of shard {self.shard}: {_one_line(exc)}") from exc
        for _, old in (await self._names(store))[KEEP_SNAPSHOTS:]:
            try:
                await self._retrying("drop an old snapshot", functools.partial(store.delete, old))
            except Exception:  # noqa: BLE001 -- an old snapshot left behind is only wasted space
                pass

    def latest_snapshot(self) -> tuple[int, bytes] | None:
        with self._mutex:
            self._check_open()
            return self._call(self._latest(), self.op_timeout * 2)

    async def _latest(self) -> tuple[int, bytes] | None:
        """The newest readable snapshot, read without a consumer: nats-py's object store lists and
        reads through consumers, and making a consumer needs the cluster's meta leader, which may be
        seconds away while a node is down -- just when a takeover reads a snapshot. Here every read is a
        direct get from the snapshot stream's own leader: the objects' meta subjects from the stream's
        state, each object's info, then its chunks one by one (checked against its SHA-256)."""
        await self._snapshots_store()  # made if missing
        for pos, info in await self._retrying("list the snapshots", self._snapshot_infos):
            try:
                blob = await self._retrying("read a snapshot", functools.partial(self._read_object, info))
            except Exception:  # noqa: BLE001 -- damaged or half-deleted: the older one stands in
                continue
            self._snap_pos = max(self._snap_pos or 0, pos)
            return pos, blob
        return None

    async def _snapshot_infos(self) -> list[tuple[int, ObjectInfo]]:
        """(position, ObjectInfo) of every snapshot, newest first."""
        import base64
        import json

        import nats.js.errors
        from nats.js.api import ObjectInfo

        stream = f"OBJ_{self.bucket}"
        head = f"$O.{self.bucket}.M."
        info = await self.link.js.stream_info(stream, subjects_filter=f"{head}>")
        out = []
        for subject in (info.state.subjects or {}):
            try:
                name = base64.urlsafe_b64decode(subject[len(head):].encode()).decode()
            except (ValueError, UnicodeDecodeError):
                continue
            if not name.startswith("snap-") or not name[5:].isdigit():
                continue
            try:
                msg = await self.link.js.get_msg(stream, subject=subject)
                meta = ObjectInfo.from_response(json.loads(msg.data or b"{}"))
            except nats.js.errors.NotFoundError:
                continue  # deleted meanwhile
            except (ValueError, TypeError, KeyError):
                continue
            if meta.deleted or not meta.nuid:
                continue
            out.append((int(name[5:]), meta))
        return sorted(out, key=lambda pi: pi[0], reverse=True)

    async def _read_object(self, meta: ObjectInfo) -> bytes:
        import base64
        import hashlib

        stream = f"OBJ_{self.bucket}"
        subject = f"$O.{self.bucket}.C.{meta.nuid}"
        data = bytearray()
        seq = 1
        for _ in range(int(meta.chunks or 0)):
            msg = await self.link.js.get_msg(stream, seq=seq, subject=subject, next=True)
            data += msg.data or b""
            if msg.seq is None:
                raise JournalError(f"a chunk of snapshot {meta.name} of shard {self.shard} has no sequence")
            seq = msg.seq + 1
        if len(data) != int(meta.size or 0):
            raise JournalError(f"snapshot {meta.name} of shard {self.shard} is {len(data)} bytes, not {meta.size}")
        digest = str(meta.digest or "")
        if "=" in digest:
            want = base64.urlsafe_b64decode(digest.split("=", 1)[1])
            if hashlib.sha256(data).digest() != want:
                raise JournalError(f"snapshot {meta.name} of shard {self.shard} does not match its digest")
        return bytes(data)

    def compact(self, up_to_position: int) -> int:
        with self._mutex:
            self._check_open()
            if up_to_position <= self._compacted:
                return 0
            if up_to_position > self._last:
                raise JournalError(f"cannot compact up to {up_to_position}: the journal ends at {self._last}")
            if self._snap_pos is None or self._snap_pos < up_to_position:
                self._call(self._latest(), self.op_timeout * 2)
            if self._snap_pos is None or self._snap_pos < up_to_position:
                raise JournalError(f"cannot compact up to {up_to_position}: no snapshot covers it "
                                   f"(newest snapshot: {self._snap_pos})")
            return self._call(self._compact(up_to_position))

    async def _compact(self, up_to: int) -> int:
        js = self.link.js
        info = await self._retrying("read the journal stream", lambda: js.stream_info(self.stream))
        first_seq, last_seq = int(info.state.first_seq), int(info.state.last_seq)
        keep = min(await self._find(up_to + 1, first_seq, last_seq), last_seq)  # the last message always stays
        if keep <= first_seq:
            return 0
        head = await self._head(keep)
        await self._retrying("compact the journal", lambda: js.purge_stream(self.stream, seq=keep))
        dropped = head.pos - 1 - self._compacted
        self._compacted = head.pos - 1
        self.commits += 1
        return max(0, dropped)

    def close(self) -> None:
        with self._mutex:
            if self._closed:
                return
            self._closed = True
            if self._own_link and hasattr(self, "link"):
                self.link.close()

    def __enter__(self) -> JetStreamJournal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["JetStreamJournal", "NatsLink", "bounded", "close_nats", "connect_jetstream", "parse_servers", "decode_entries", "encode_entries"]
