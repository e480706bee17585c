"""The load generator (``blink load``): thousands of simulated players against one relay, from one process.

How this works
--------------
Each simulated player is one MQTT connection (``mqttkit.connection.MqttConnection``) with its own
client id (a broker with the shipped ACL confines every client to its own request and action
topics) that speaks the relay's protocol directly: ``CreateMatch`` / ``JoinMatch`` on
``lobby/req/{client}``, ``Act`` on the match's action topic, and on ``c/{client}`` the relay's
``MatchJoined``, ``ViewUpdated``, ``PrivateUpdate``, verdicts and pongs. Like the real client it
also subscribes to its match's public events and snapshot (so the broker carries what it would
carry for real windows). The PUBLISHes of one socket read reach ``LoadPlayer.on_messages`` as one
list, stamped once; only what the player acts on is decoded: its private topic and, for a game
that sends less (``Game.apply_event``; BLINK does: a whole view only on joining and at a game's
start and end), its match's events, which it applies in seq order with the private update after
each (``catch_up``). The two players of a match receive the same bytes for each event: the first
to read them decodes them -- the messages and each event's game fact -- for both
(``LoadPlayer.shared``; decoded values are immutable). The
snapshot -- and the events of a game that sends whole views -- are counted, never unpacked. The places that turn what arrived into the state a player acts on are
``LoadPlayer.apply_view`` and ``catch_up`` (and ``state``).

Moves come from the real rules engine (``game_for(game)``: ``from_wire``, ``legal_actions`` via the
bots' policy, ``apply`` for the prediction, ``action_to_wire``). A player plays on its predicted
state -- the last confirmed view plus its own plays not yet confirmed, as the window's client
does -- with at most three plays awaiting a verdict, so at human pace it keeps its own rhythm
whatever the relay does: a relay that falls behind shows as growing verdict times and unanswered
plays, not as a politely slower generator. ``--pace human`` waits a reaction time before each
move, log-normal around ``--reaction`` (0.35 s) like ``client/bots.py``; ``--pace max`` plays at
once. Matches use the game's short settings (``Game.quick_settings``: for BLINK one game, 0.5 s countdown) and both players ask
for a rematch when a match is over, so the load stays steady for ``--duration``. Like the
client's clock sync, a player takes its round trip from its plays (each verdict carries the
relay's receive and send times: ``protocol/clock.py``) and pings only while idle: every ``--ping``
seconds (1), spread evenly over the players, a player with no verdict within that period is
pinged. ``rtt_ms`` reports every round trip taken, from plays and pongs alike.

Everything is driven by callbacks and timers, not a task per player; the players' reaction
timers are one heap of tuples in the run with one loop timer for its earliest (``LoadRun.later``),
not a ``TimerHandle`` each on the loop's heap (whose every comparison is a Python call). Matches are set up in
bounded batches (64 connects and 32 create/join exchanges in flight), the first one alone: a
broker with no relay, or one that does not answer, is found at once and reported in one line.
Players start to play (and ping) when every match is set up, so the set-up meets a relay with
nothing else to do; their first moves are spread over a second or more (one more per 1,000
players), and the measured window opens when every player has started. At its end players stop,
verdicts get a bounded grace (5 s), and what never came back is counted as ``unanswered``. A
periodic 50 ms timer measures this process's own event-loop lag: when that grows, the generator,
not the relay, is the limit. Relay CPU and memory come from ``/proc/<pid>`` (the ``blink serve``
started here, or ``--relay-pid``).

Without ``--server`` a ``blink serve`` (embedded amqtt broker + relay) is started as a separate
process on a free port, in its own session (the terminal's Ctrl-C reaches only this process,

Which MQTT client
-----------------
Players are ``mqttkit`` connections, the relay's own client: pure asyncio (one ``asyncio.Protocol``
and one keep-alive timer per connection, no thread, no task per player); the PUBLISHes of one
socket read arrive as ONE list (one callback, one timestamp, no per-message handler chain); a play
goes out as bytes packed by ``pack_publish`` in one ``write``; a dropped connection is told by
``on_close`` (no task waiting on it). Per message that costs a fraction of the CPU of a
general-purpose MQTT library, and per connection a fraction of its memory
(``bench/mqtt_clients_bench.py`` compares them); aiomqtt stays the library of the real client.

The parts: ``client/tools/load_config.py`` (the run's settings, limits and pure helpers),
``client/tools/load_player.py`` (one simulated player) and this module (the run: set-up, the
measured window, the relay started here, the report).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import math
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from typing import TYPE_CHECKING, Callable, TypedDict

from client.tools.load_config import (CLOSE_TIMEOUT_S, CONNECT_TIMEOUT_S, CONNECTS_IN_FLIGHT,
                                      KEEPALIVE_S, LAG_PERIOD_S, RELAY_WAIT_S, SERVE_START_S, SETUPS_IN_FLIGHT,
                                      START_SPREAD_S, TIMER_SLACK_S, LoadConfig, LoadError, Spread, check_config,
                                      percentiles, proc_cpu_s, proc_rss_mb, raise_fd_limit, settings_for)
from client.tools.load_player import LoadPlayer
from protocol import messages as m
from protocol.clock import ping_due
from protocol.codec import DecodeError, decode
from protocol.rules import game_for
from protocol.topics import Topics

if TYPE_CHECKING:
    from mqttkit import BrokerAddress
    from mqttkit.packets import Message

log = logging.getLogger("blink.load")


class LoadRun:
    def __init__(self, cfg: LoadConfig, address: BrokerAddress, loop: asyncio.AbstractEventLoop) -> None:
        self.cfg = cfg
        self.address = address
        #: Sealed play (a URL with a pin): the relay's status, from which each player keys its own seal.
        self.relay_status: tuple[str, bytes] | None = None
        self.loop = loop
        self.topics = cfg.topics
        self.rules = game_for(cfg.game)
        self.reaction_s = cfg.reaction_s if cfg.pace == "human" else 0.0
        self.rng = random.Random(cfg.seed)
        self.connect_sem = asyncio.Semaphore(CONNECTS_IN_FLIGHT)
        self.setup_sem = asyncio.Semaphore(SETUPS_IN_FLIGHT)
        self.players: list[LoadPlayer] = []
        self.acting = False
        self.closing = False
        self.window_start = 0  # perf_counter_ns; 0 until the window opens
        self.window_end = 0
        # counters
        self.actions = 0
        self.accepted = 0
        self.rejected: Counter[str] = Counter()
        self.verdict_ms: list[float] = []
        self.rtt_ms: list[float] = []  # round trips: a play's verdict (its stamps) or a pong
        self.pings = 0
        self.lag_ms: list[float] = []
        self.bounced = 0
        self.messages_in = 0
        self.bad_messages = 0
        self.lost_connections = 0
        self.request_rejected: Counter[str] = Counter()
        self.setup_failed: Counter[str] = Counter()
        self.matches_up = 0
        self.setup_given_up = False
        # The players' reaction timers: one heap here, one loop timer for its earliest (see ``later``).
        self._timers: list[tuple[float, int, Callable[..., None], tuple[object, ...]]] = []
        self._timer_order = itertools.count()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf

    def later(self, delay: float, fn: Callable[..., None], *args: object) -> None:
        """Call ``fn(*args)`` in ``delay`` seconds. Every player's reactions share one heap of plain
        tuples and one loop timer (the earliest's): thousands of pending ``TimerHandle``s on the
        loop's own heap cost a Python-level comparison each step of every push and pop."""
        when = self.loop.time() + delay
        heapq.heappush(self._timers, (when, next(self._timer_order), fn, args))
        if when < self._timer_at:
            if self._timer is not None:
                self._timer.cancel()
            self._timer_at = when
            self._timer = self.loop.call_at(when, self._run_timers)

    def stop_timers(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timers.clear()
        self._timer_at, self._timer = math.inf, None

    def _run_timers(self) -> None:
        timers = self._timers
        loop = self.loop
        end = loop.time() + TIMER_SLACK_S
        while timers and timers[0][0] <= end:
            _, _, fn, args = heapq.heappop(timers)
            try:
                fn(*args)
            except Exception:  # noqa: BLE001 - a bug in one callback must not stop the others' timers
                log.exception("a player's timer failed")
        if timers:
            self._timer_at = timers[0][0]
            self._timer = loop.call_at(self._timer_at, self._run_timers)
        else:
            self._timer_at, self._timer = math.inf, None

    def in_window(self, t: int) -> bool:
        return self.window_start > 0 and t >= self.window_start and (not self.window_end or t <= self.window_end)

    def sent(self, now_ns: int) -> None:
        if self.in_window(now_ns):
            self.actions += 1

    def verdict(self, sent_ns: int | None, msg: m.ActionAccepted | m.ActionRejected, now_ns: int) -> None:
        if sent_ns is None or not self.in_window(sent_ns):
            return
        self.verdict_ms.append((now_ns - sent_ns) / 1e6)
        if isinstance(msg, m.ActionAccepted):
            self.accepted += 1
        else:
            self.rejected[msg.code] += 1

    def round_trip(self, rtt_ns: int) -> None:
        if self.window_start and not self.window_end:
            self.rtt_ms.append(rtt_ns / 1e6)

    def unanswered(self) -> int:
        return sum(1 for p in self.players for t in p.awaiting.values() if self.in_window(t))

    # --- set-up

    async def setup_match(self, i: int) -> None:
        a = LoadPlayer(self, f"p{i}a", random.Random(self.rng.random()))
        b = LoadPlayer(self, f"p{i}b", random.Random(self.rng.random()))
        a.shared = b.shared = {}
        self.players += (a, b)
        async with self.setup_sem:
            if self.setup_given_up:
                raise LoadError("not set up: the relay had stopped answering set-up requests")
            await asyncio.gather(a.connect(), b.connect())
            assert a.joined is not None and b.joined is not None
            try:
                a.request(m.CreateMatch(name=a.name, game=self.cfg.game, settings=settings_for(self.cfg.game),
                                        seats=2))
                code = await _answer(a.joined, self.cfg.timeout_s)
                b.request(m.JoinMatch(name=b.name, match=code))
                await _answer(b.joined, self.cfg.timeout_s)
            except LoadError:
                # A relay that lets a set-up time out will not answer the next ones sooner: run with
                # the matches that are up rather than wait for every one to time out in turn.
                self.setup_given_up = True
                raise
        self.matches_up += 1

    # --- background timers

    async def lag_probe(self) -> None:
        period_ns = int(LAG_PERIOD_S * 1e9)
        while True:
            t = time.perf_counter_ns()
            await asyncio.sleep(LAG_PERIOD_S)
            lag = max(0, time.perf_counter_ns() - t - period_ns) / 1e6
            if self.window_start and not self.window_end:
                self.lag_ms.append(lag)

    async def pinger(self) -> None:
        """Each player's turn comes every ``ping_s``, spread evenly over time (not all at once); it
        is pinged then only if idle -- no verdict within ``ping_s`` (``protocol.clock.ping_due``)."""
        if self.cfg.ping_s <= 0:
            return
        tick = 0.1
        period_ns = int(self.cfg.ping_s * 1e9)
        i = 0
        while True:
            await asyncio.sleep(tick)
            if not self.acting:
                continue
            players = [p for p in self.players if p.match is not None]
            if not players:
                continue
            count = max(1, round(len(players) * tick / self.cfg.ping_s))
            now, since = time.time_ns(), time.perf_counter_ns()
            window = bool(self.window_start and not self.window_end)
            for _ in range(min(count, len(players))):
                i = (i + 1) % len(players)
                if ping_due(players[i].answered_ns, since, period_ns):
                    players[i].request(m.Ping(t0=now))
                    if window:
                        self.pings += 1


async def _answer(fut: asyncio.Future[str], timeout_s: float) -> str:
    try:
        return await asyncio.wait_for(asyncio.shield(fut), timeout_s)
    except asyncio.TimeoutError as exc:
        raise LoadError(f"no answer from a relay within {timeout_s:g} s") from exc


async def wait_for_relay(address: BrokerAddress, topics: Topics) -> tuple[str, bytes] | None:
    """A relay announces itself on ``relay/+/status`` (retained); none online -> LoadError. With a
    pin (sealed play): the relay's status as it came (topic, payload), which keys every player."""
    from mqttkit.connection import connect

    if address.pin is not None:
        from client.sealing import SealProblem, new_seal, pinned_status

        try:
            # (a sealed relay restates its status every 4 s: one a stranger overwrote comes again)
            topic, sealed, _ = await pinned_status(address, topics, new_seal(address.pin), max(RELAY_WAIT_S, 5.0))
        except SealProblem as exc:
            raise LoadError(str(exc)) from None
        except Exception as exc:  # noqa: BLE001 - refused, unreachable: one line
            raise LoadError(f"cannot reach the MQTT broker at {address.url}: {exc or type(exc).__name__}") from exc
        return topic, sealed

    online = asyncio.Event()

    def on_messages(messages: list[Message]) -> None:
        for message in messages:
            try:
                msg = decode(message.payload)
            except DecodeError:
                continue
            if isinstance(msg, m.RelayStatus) and msg.online:
                online.set()

    try:
        conn = await connect(address.host, address.port, client_id=f"ldmon{os.urandom(5).hex()}",
                             on_messages=on_messages, username=address.username, password=address.password,
                             keepalive=KEEPALIVE_S, timeout=CONNECT_TIMEOUT_S, tls=address.ssl_context())
    except Exception as exc:  # noqa: BLE001 - refused, unreachable, no answer, a refused CONNECT: one line each
        raise LoadError(f"cannot reach the MQTT broker at {address.url}: {exc or type(exc).__name__}") from exc
    try:
        await conn.subscribe([(topics.relay_status("+"), 0)])
        try:
            await asyncio.wait_for(online.wait(), RELAY_WAIT_S)
        except asyncio.TimeoutError as exc:
            raise LoadError(f"no relay on {address.url}: none announced itself on {topics.relay_status('+')} within "
                            f"{RELAY_WAIT_S:g} s (start one with `blink serve --broker {address.url}`)") from exc
    except Exception as exc:
        if isinstance(exc, LoadError):
            raise
        raise LoadError(f"cannot reach the MQTT broker at {address.url}: {exc or type(exc).__name__}") from exc
    finally:
        await conn.disconnect()
    return None


# ------------------------------------------------------------------------------------ the local relay


class LocalRelay:
    """``blink serve`` with its embedded broker on a free port, as a child process."""

    def __init__(self, topics: Topics, seed: int | None) -> None:
        from mqttkit import free_port

        self.port = free_port()
        self.topics = topics
        self.seed = seed
        self.proc: asyncio.subprocess.Process | None = None
        self._err = tempfile.TemporaryFile()
        self.data_dir = ""

    @property
    def url(self) -> str:
        return f"mqtt://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    async def start(self) -> None:
        # A private journal directory, removed in stop(): never the user's, never another run's.
        self.data_dir = tempfile.mkdtemp(prefix="blink-load-relay-")
        # --embedded: what this reports (and its match limit) is the embedded broker's, even where
        # plain `blink serve` would run an installed Mosquitto.
        cmd = [sys.executable, "-m", "client.cli", "--prefix", self.topics.prefix, "serve", "--port", str(self.port),
               "--data", self.data_dir, "--embedded"]
        if self.seed is not None:
            cmd += ["--seed", str(self.seed)]
        self.proc = await asyncio.create_subprocess_exec(
            *cmd, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=self._err,
            start_new_session=True, preexec_fn=_die_with_parent)
        assert self.proc.stdout is not None
        try:
            line = await asyncio.wait_for(self.proc.stdout.readline(), SERVE_START_S)
        except asyncio.TimeoutError:
            line = b""
        if b"running" not in line:
            await self.stop()
            self._err.seek(0)
            why = [x for x in self._err.read().decode(errors="replace").splitlines() if x.strip()]
            raise LoadError(f"the local relay (blink serve) did not start: {why[-1] if why else 'no output'}")

    async def stop(self) -> None:
        proc = self.proc
        if proc is None:
            return
        if proc.returncode is None:
            try:
                proc.send_signal(signal.SIGINT)  # blink serve stops cleanly on SIGINT
                await asyncio.wait_for(proc.wait(), 5)
            except (asyncio.TimeoutError, ProcessLookupError):
                try:
                    proc.kill()
                except ProcessLookupError:
                    pass
                await proc.wait()
        self._err.close()
        if self.data_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)


def _die_with_parent() -> None:
    """In the child, before exec: get SIGTERM when the parent dies, however it dies (Linux)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - elsewhere, the orderly stop still applies
        pass


# ------------------------------------------------------------------------------------ driving it


class LoadReport(TypedDict):
    """What a run measured (``run_load``): what ``--json`` prints and ``format_table`` shows. Times
    in ms and seconds as the keys say; ``rejected``, ``setup_failed`` and ``request_rejected`` count
    each reason."""

    matches: int
    matches_running: int
    players: int
    game: str
    pace: str
    server: str
    relay_local: bool  # the relay is the blink serve started here
    library: str
    setup_s: float
    duration_s: float
    actions: int
    actions_per_s: float
    accepted: int
    rejected: dict[str, int]
    bounced_locally: int
    verdict_ms: Spread
    unanswered: int
    rtt_ms: Spread  # round trips: one per verdict (its stamps) and per pong
    pings: int  # pings sent in the window (a player is pinged only while idle)
    generator_lag_ms: Spread
    generator_cpu_pct: float | None
    generator_us_per_msg: float | None
    relay_pid: int | None
    relay_cpu_pct: float | None
    relay_rss_mb: float | None
    load_avg_1m: float
    messages_in: int
    bad_messages: int
    lost_connections: int
    setup_failed: dict[str, int]
    request_rejected: dict[str, int]
    interrupted: bool



async def run_load(cfg: LoadConfig, progress: Callable[[str], None] | None = None,
                   stop: asyncio.Event | None = None) -> LoadReport:
    """Set up ``cfg.matches`` matches, play for ``cfg.duration_s``, and return the figures."""
    from mqttkit import parse_url

    check_config(cfg)
    raise_fd_limit(2 * cfg.matches + 8)
    # A dropped player connection is counted (lost_connections), not logged line by line; a failing
    # message callback (a bug here) still is. Restored at the end: a caller's own logging is its own.
    mqtt_log = logging.getLogger("blink.mqtt")
    mqtt_level = mqtt_log.level
    mqtt_log.setLevel(logging.ERROR)
    stop = stop or asyncio.Event()
    local = LocalRelay(cfg.topics, cfg.seed) if cfg.server is None else None
    started = time.monotonic()
    run: LoadRun | None = None
    background: list[asyncio.Task[None]] = []
    try:
        if local is not None:
            await local.start()
        address = parse_url(local.url if local is not None else cfg.server or "", cfg.trust)
        relay_pid = local.pid if local is not None else cfg.relay_pid
        status = await wait_for_relay(address, cfg.topics) if local is None else None
        run = LoadRun(cfg, address, asyncio.get_running_loop())
        run.relay_status = status
        background = [asyncio.create_task(run.lag_probe()), asyncio.create_task(run.pinger())]
        # The first match alone: a broker that refuses us or a relay that does not answer shows at once.
        try:
            await run.setup_match(0)
        except LoadError:
            raise
        except Exception as exc:  # noqa: BLE001 - a refused or failed connection: one line
            raise LoadError(f"cannot reach the MQTT broker at {address.url}: {exc or type(exc).__name__}") from exc
        setups = [asyncio.create_task(run.setup_match(i)) for i in range(1, cfg.matches)]
        if setups:
            waiter = asyncio.create_task(stop.wait())
            while not all(t.done() for t in setups) and not stop.is_set():
                await asyncio.wait([waiter, *[t for t in setups if not t.done()]], timeout=1.0,
                                   return_when=asyncio.FIRST_COMPLETED)
                if progress:
                    progress(f"setting up: {run.matches_up}/{cfg.matches} matches")
            waiter.cancel()
            for t in setups:
                if not t.done():
                    t.cancel()
            for t in setups:
                try:
                    await t
                except asyncio.CancelledError:
                    run.setup_failed["interrupted"] += 1
                except LoadError as exc:
                    run.setup_failed[str(exc)] += 1
                except Exception as exc:  # noqa: BLE001
                    run.setup_failed[f"{type(exc).__name__}: {exc}"] += 1
        setup_s = time.monotonic() - started

        # Players start now, on a relay that had only set-up to do until now (a relay busy with the
        # first matches' plays would make the set-up of the last ones time out). Their first moves
        # are spread out (thousands of them in one instant is a burst, not a load), and the
        # measured window opens once every player has started.
        run.acting = True
        spread = START_SPREAD_S * (1 + len(run.players) / 1000)
        for p in run.players:
            run.later(run.rng.uniform(0.0, spread), p.poke)
        waiter = asyncio.create_task(stop.wait())
        await asyncio.wait([waiter], timeout=spread)
        cpu0 = proc_cpu_s(relay_pid) if relay_pid else None
        own0 = time.process_time()
        msgs0 = run.messages_in
        run.window_start = time.perf_counter_ns()
        deadline = time.monotonic() + cfg.duration_s
        while not stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            await asyncio.wait([waiter], timeout=min(1.0, left))
            if local is not None and local.proc is not None and local.proc.returncode is not None:
                raise LoadError(f"the local relay (blink serve) stopped during the run, status {local.proc.returncode}")
            if progress:
                progress(_progress_line(run, cfg, relay_pid))
        waiter.cancel()
        run.window_end = time.perf_counter_ns()
        run.acting = False
        wall = (run.window_end - run.window_start) / 1e9
        own_cpu = time.process_time() - own0
        window_msgs = run.messages_in - msgs0
        cpu1 = proc_cpu_s(relay_pid) if relay_pid else None
        rss = proc_rss_mb(relay_pid) if relay_pid else None

        # Grace: verdicts still on their way.
        grace_end = time.monotonic() + (1.0 if stop.is_set() else run.cfg.grace_s)
        while run.unanswered() and time.monotonic() < grace_end:
            await asyncio.sleep(0.05)
        result: LoadReport = {
            "matches": cfg.matches,
            "matches_running": run.matches_up,
            "players": 2 * run.matches_up,
            "game": cfg.game,
            "pace": cfg.pace,
            "server": address.url,
            "relay_local": local is not None,
            "library": "mqttkit",
            "setup_s": round(setup_s, 2),
            "duration_s": round(wall, 2),
            "actions": run.actions,
            "actions_per_s": round(run.actions / wall, 1) if wall > 0 else 0.0,
            "accepted": run.accepted,
            "rejected": dict(run.rejected),
            "bounced_locally": run.bounced,
            "verdict_ms": percentiles(run.verdict_ms),
            "unanswered": run.unanswered(),
            "rtt_ms": percentiles(run.rtt_ms, ("p50", "p99")),
            "pings": run.pings,
            "generator_lag_ms": percentiles(run.lag_ms, ("p50", "p99", "max")),
            "generator_cpu_pct": round(own_cpu / wall * 100, 1) if wall > 0 else None,
            # all included (the library, decoding, choosing and sending), per message received
            "generator_us_per_msg": round(own_cpu / window_msgs * 1e6, 1) if window_msgs else None,
            "relay_pid": relay_pid,
            "relay_cpu_pct": (round((cpu1 - cpu0) / wall * 100, 1)
                              if cpu0 is not None and cpu1 is not None and wall > 0 else None),
            "relay_rss_mb": rss,
            "load_avg_1m": round(os.getloadavg()[0], 2),  # a busy machine explains many a tail
            "messages_in": run.messages_in,
            "bad_messages": run.bad_messages,
            "lost_connections": run.lost_connections,
            "setup_failed": dict(run.setup_failed),
            "request_rejected": dict(run.request_rejected),
            "interrupted": stop.is_set(),
        }
        return result
    finally:
        try:
            for t in background:
                t.cancel()
            if run is not None:
                run.acting = False
                run.closing = True
                run.stop_timers()
                await _close_all(run.players, leave=local is None)
            if local is not None:
                await local.stop()
        finally:
            mqtt_log.setLevel(mqtt_level)


async def _close_all(players: list[LoadPlayer], leave: bool) -> None:
    sem = asyncio.Semaphore(256)

    async def one(p: LoadPlayer) -> None:
        async with sem:
            await p.close(leave)

    tasks = [asyncio.create_task(one(p)) for p in players]
    if tasks:
        _, pending = await asyncio.wait(tasks, timeout=CLOSE_TIMEOUT_S)
        for t in pending:
            t.cancel()


def _progress_line(run: LoadRun, cfg: LoadConfig, relay_pid: int | None) -> str:
    elapsed = max(1e-9, (time.perf_counter_ns() - run.window_start) / 1e9)
    recent = run.verdict_ms[-2000:]
    v = percentiles(recent, ("p50", "p99"))
    lag = percentiles(run.lag_ms[-200:], ("p99",))
    return (f"{elapsed:5.0f}/{cfg.duration_s:g} s  {run.matches_up} matches  {run.actions} actions "
            f"({run.actions / elapsed:.0f}/s)  verdict p50 {_fmt(v['p50'])} p99 {_fmt(v['p99'])} ms  "
            f"awaiting {run.unanswered()}  lag p99 {_fmt(lag['p99'])} ms")


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def format_table(r: LoadReport) -> str:
    v, lag, rtt = r["verdict_ms"], r["generator_lag_ms"], r["rtt_ms"]
    rejected = ", ".join(f"{k} {n}" for k, n in sorted(r["rejected"].items(), key=lambda kv: -kv[1])) or "none"
    relay = (f"cpu {_fmt(r['relay_cpu_pct'])} %   rss {_fmt(r['relay_rss_mb'])} MB   (pid {r['relay_pid']}"
             f"{', with its embedded broker' if r['relay_local'] else ''})") if r["relay_pid"] else "not local (use --relay-pid)"
    lines = [
        f"blink load: {r['matches_running']}/{r['matches']} matches ({r['players']} players), {r['game']}, "
        f"{r['pace']} pace, {r['duration_s']} s on {r['server']}{'  [interrupted]' if r['interrupted'] else ''}",
        f"  actions          {r['actions']} ({r['actions_per_s']}/s)   accepted {r['accepted']}   rejected: {rejected}",
        f"  verdict ms       p50 {_fmt(v['p50'])}   p90 {_fmt(v['p90'])}   p99 {_fmt(v['p99'])}   max {_fmt(v['max'])}"
        f"   (n {v['n']})",
        f"  unanswered       {r['unanswered']}",
        f"  round trip ms    p50 {_fmt(rtt['p50'])}   p99 {_fmt(rtt['p99'])}   (n {rtt['n']}; pings {r['pings']},"
        " only while idle)",
        f"  generator        lag p50 {_fmt(lag['p50'])} ms   p99 {_fmt(lag['p99'])} ms   cpu {_fmt(r['generator_cpu_pct'])} %"
        f"   ({_fmt(r['generator_us_per_msg'])} µs per message received)",
        f"  relay            {relay}",
        f"  machine          load average {r['load_avg_1m']} (1 min)",
        f"  set-up           {r['setup_s']} s" + (f"   failed: {sum(r['setup_failed'].values())}" if r["setup_failed"] else "")
        + (f"   lost connections: {r['lost_connections']}" if r["lost_connections"] else ""),
    ]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------ command line
