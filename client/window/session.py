"""The window's networking side: the local server, your ``Player``, and bot players (no pyglet).

How this works
--------------
A ``Session`` lives on the same asyncio event loop as the window's frame task (see
``client/window/app.py``). It owns:

- the ``LocalServer`` (embedded amqtt broker + relay on a free loopback port) when no ``--server``
  is given, so ``blink play`` works on a fresh machine. Hosting a match (``host``) with
  ``config.lan`` moves it, once, onto every interface on a stable port (1883 or the next free one)
  and advertises it over multicast DNS (``relay/hosting/lanhost.py``); ``server_url`` is then the LAN address
  friends use;
- your ``Player`` (aiomqtt connection + ``ClientModel``), which the scenes read every frame. With
  ``config.net_thread`` (the default) every connection of the session -- yours, the bots', the
  recorder's -- runs on one network thread (``client/netthread.py``): messages are read and stamped
  there and applied to the models on this loop (the frame loop drains them before each frame);
- an opponent bot (a ``Bot`` on its own ``Player``, same loop) for "play a bot", which asks for a
  rematch whenever a match ends, and optionally an autoplay bot driving *your* player.

Starting a game (``play_bot``, ``host``, ``join``, ``quick``) runs as a background task: the frame
loop never awaits the network. ``status``/``message`` say what is going on for the screen, and a
failure becomes a message, never an exception in the frame loop.

With ``config.record_dir`` set (``blink play`` sets the data directory's ``replays/``), every
match played or watched is recorded by a silent extra connection (``client/replays.py``): it
subscribes before the match is created, so the file starts at ``match_created`` (a match watched
by code asks the relay for its past events from seq 1), and ``blink replay`` / the menu's Replays
can play it back. Watching by code starts from the match's first event too (``Player.watch``).

``act_now`` is how the window plays: the prediction is applied synchronously (the very frame that
handled the key already draws the card on the pile) and only the publish is left to a task.
``Player.act`` is a coroutine, so calling it from an input handler would predict one loop turn too
late; ``act_now`` does the same two steps in the other order of scheduling.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Awaitable, Literal, TypeVar

from mqttkit import TLSTrust
from protocol import messages as m
from protocol.rules.base import Rejected
from protocol.topics import DEFAULT_PREFIX, Topics
from client.model import ClientModel
from client.net import Link
from client.netthread import NetThread, ThreadedConnection

if TYPE_CHECKING:  # (imported where used: a session that never hosts never loads the relay)
    from mqttkit import BrokerAddress
    from relay import RelayConfig
    from relay.hosting import ChildServer, LocalServer, lanhost
    from client.bots import Bot
    from client.identity import Identity
    from client.player import Player
    from client.replays import Recorder
    from client.seats import SavedSeat

T = TypeVar("T")

#: What the session is doing, for the screen: nothing yet, starting the local relay, ready, connecting
#: to a relay, waiting for players, playing, failed (``message`` says why), closed.
SessionStatus = Literal["idle", "starting", "ready", "connecting", "waiting", "playing", "error", "closed"]
#: How a game is started: against bots, hosting a match, joining one by code, a quick match, watching
#: one by code, or joining a match found on the LAN (on its host's relay).
GameMode = Literal["bot", "host", "join", "quick", "watch", "lan"]

log = logging.getLogger("blink.window")

#: Opponent speed: median reaction time in seconds (a person needs 0.6-1.5 s to spot a match).
BOT_LEVELS: dict[str, float] = {"easy": 1.6, "normal": 1.0, "hard": 0.6, "expert": 0.35}


def parse_level(text: str | float | None) -> float:
    """``easy``/``normal``/``hard``/``expert`` or a number of seconds -> median reaction seconds."""
    if text is None:
        return BOT_LEVELS["normal"]
    if isinstance(text, (int, float)):
        value = float(text)
    else:
        key = text.strip().lower()
        if key in BOT_LEVELS:
            return BOT_LEVELS[key]
        try:
            value = float(key.removesuffix("s"))
        except ValueError as exc:
            raise ValueError(f"bot level is one of {', '.join(BOT_LEVELS)} or seconds, not {text!r}") from exc
    if not 0.0 <= value <= 30.0:
        raise ValueError(f"bot reaction must be from 0 to 30 seconds, not {value:g}")
    return value


def level_name(reaction_s: float) -> str:
    for name, v in BOT_LEVELS.items():
        if abs(v - reaction_s) < 1e-9:
            return name
    return f"{reaction_s:g} s"


@dataclass
class SessionConfig:
    server_url: str | None = None
    #: Whom an ``mqtts://`` server believes (``--ca``, ``--insecure``), for every URL the session parses.
    trust: TLSTrust = field(default_factory=TLSTrust)
    name: str = "you"
    topics: Topics = field(default_factory=Topics)
    game: str = "blink"
    settings: dict[str, object] = field(default_factory=dict)
    autoplay: bool = False
    autoplay_reaction_s: float = 0.55
    relay_config: RelayConfig | None = None  # for the local relay (tests force decks with it)
    #: Run the local broker + relay in a child process (``blink play`` does: the window's frames
    #: then never delay the relay); False keeps them on this event loop (in-process tests read the
    #: relay's state directly; ``bench/hud_bench.py`` measures both).
    relay_process: bool = False
    #: Run the connections' network I/O (MQTT reads, pings, arrival stamps) on a thread of its own
    #: (``client/netthread.py``): a frame in progress then delays neither a pong nor its stamp.
    #: False keeps them on the window's loop (``bench/hud_bench.py`` measures both).
    net_thread: bool = True
    seed: int | None = None
    ping_interval_s: float = 0.5
    players: int = 2  # seats in a match this window creates; bots fill all but yours
    request_timeout_s: float = 10.0  # how long to wait for the relay's answer to create/join/watch
    #: hosting listens on every interface and advertises itself on the LAN (``blink play`` sets it;
    #: off by default so that tests never send multicast out of the machine)
    lan: bool = False
    lan_port: int = 1883
    lan_interfaces: list[str] | None = None  # advertise only on these (default: every multicast interface)
    rejoin: SavedSeat | None = None  # join takes this seat back with its token
    record_dir: str | None = None  # record every match played or watched here (``client/replays.py``)
    #: The player's key for rated play (``client/identity.py``; ``blink play`` loads it); None: unrated.
    identity: Identity | None = None
    #: Bots take their difficulty's key (``client.identity.bot_identity_path``), so a match against one
    #: is rated: ``blink play`` sets it; off by default so that tests write no key into a data directory.
    bot_identities: bool = False


async def _cancel(tasks: set[asyncio.Task[object]], timeout: float = 5.0) -> None:
    """Cancel tasks and wait for them, cancelling again if one swallowed it (``asyncio.wait_for``
    in Python 3.11 can lose a cancellation that arrives just as its inner future completes)."""
    deadline = time.monotonic() + timeout
    while True:
        pending = [t for t in tasks if not t.done()]
        if not pending:
            return
        left = deadline - time.monotonic()
        if left <= 0:
            log.warning("%d task(s) would not stop", len(pending))
            return
        for t in pending:
            t.cancel()
        await asyncio.wait(pending, timeout=min(0.2, left))


class Session:
    def __init__(self, config: SessionConfig) -> None:
        self.config = config
        self.server: LocalServer | ChildServer | None = None  # ChildServer: ``config.relay_process``
        #: Why the local relay's child process ended on its own (one line), once it has.
        self.server_lost: str | None = None
        self.address: BrokerAddress | None = None
        self.player: Player | None = None
        self.opponent: Player | None = None  # the bot's Player
        self.bot: Bot | None = None  # the opponent Bot
        self.autobot: Bot | None = None  # the Bot driving your player (--autoplay)
        self.opponents: list[Player] = []  # every bot Player (the first is also ``opponent``)
        self.bots: list[Bot] = []
        self.status: SessionStatus = "idle"
        self.message = ""
        self.mode: GameMode | Literal[""] = ""  # how the current game was started ("" none yet)
        self.bot_reaction_s: float | None = None
        self._tasks: set[asyncio.Task[object]] = set()
        self._game_tasks: set[asyncio.Task[object]] = set()
        self._stop = asyncio.Event()  # tells the bots of the current game to stop
        self.lan_urls: list[str] = []  # how friends on the LAN reach the local relay (once hosting)
        self.lan_note = ""  # what hosting on the LAN had to say (port taken, not advertised)
        self._advert: lanhost.advertise | None = None  # advertising the LAN-hosted relay
        self._own: BrokerAddress | None = None  # our loopback way into the LAN-hosted relay
        self.recorder: Recorder | None = None  # the current match's (``config.record_dir``)
        self._rec_conn: Link | None = None
        #: Every connection's network I/O, off the window's loop (``config.net_thread``); the frame
        #: loop drains its inbox (``App.step``).
        self.net: NetThread | None = NetThread() if config.net_thread else None

    # ----------------------------------------------------------------- plumbing

    @property
    def model(self) -> ClientModel | None:
        return self.player.model if self.player is not None else None

    @property
    def server_url(self) -> str:
        if self.lan_urls and self.address is not None and self.address == self._own:
            return self.lan_urls[0]  # what a friend types, not our own loopback way in
        return self.address.url if self.address is not None else (self.config.server_url or "")

    @property
    def join_command(self) -> str:
        """What a friend types to join a match here, up to its code: the URL they reach us on, and
        the topic prefix when it is not the default (else their blink finds no relay)."""
        prefix = self.config.topics.prefix
        option = f" --prefix {prefix}" if prefix != DEFAULT_PREFIX else ""
        return f"blink{option} play --server {self.server_url}"

    @property
    def local(self) -> bool:
        return self.server is not None and self.server.broker is not None

    def spawn(self, coro: Awaitable[T], game: bool = False) -> asyncio.Task[T]:
        task = asyncio.ensure_future(coro)
        bag = self._game_tasks if game else self._tasks
        bag.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[object]) -> None:
        self._tasks.discard(task)
        self._game_tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            self.fail(exc)

    def fail(self, exc: BaseException) -> None:
        """A task of the session failed: say so on the screen (``status`` error, ``message`` why)."""
        from client.player import RequestError

        if isinstance(exc, RequestError):
            text = f"the relay refused: {exc.detail}" if exc.code != "timeout" else exc.detail
        elif isinstance(exc, (ConnectionError, OSError)):
            text = f"network problem: {exc}"
        else:
            text = f"{type(exc).__name__}: {exc}"
            log.error("session task failed", exc_info=exc)
        self.status, self.message = "error", text

    # ----------------------------------------------------------------- server

    async def start(self) -> None:
        """Start the local broker + relay (unless a server URL was given)."""
        from mqttkit import parse_url

        self.status, self.message = "starting", "starting a local relay…"
        if self.config.server_url:
            self.address = parse_url(self.config.server_url, self.config.trust)
        else:
            self.server = await self._local_server()
            self.address = self.server.address
        self.status, self.message = "ready", ""

    async def _local_server(self, host: str = "127.0.0.1", port: int | None = None) -> LocalServer | ChildServer:
        """Start the local broker + relay: in a child process (``config.relay_process``), watched so
        that its end shows at once, or on this loop."""
        from relay.hosting import ChildServer, LocalServer

        server: LocalServer | ChildServer
        if self.config.relay_process:
            server = ChildServer(self.config.seed, self.config.relay_config, host=host, port=port,
                                 topics=self.config.topics)
        else:
            server = LocalServer(None, self.config.seed, self.config.relay_config, host=host, port=port,
                                 topics=self.config.topics)
        await server.__aenter__()

        def ended(_task: object) -> None:
            self._server_ended(server)

        if self.config.relay_process and server.task is not None:
            server.task.add_done_callback(ended)
        return server

    def _server_ended(self, server: LocalServer | ChildServer) -> None:
        lost = getattr(server, "lost", None)
        if lost and server is self.server:  # not one we stopped (closing, or moving onto the LAN)
            log.info("%s", lost)  # ``blink play`` says it once, as its last line
            self.server_lost = lost
            self.status, self.message = "error", f"{lost}: the game cannot go on"

    # ----------------------------------------------------------------- starting a game

    async def _connect(self, name: str, identity: Identity | None = None) -> Player:
        from client.player import Player

        assert self.address is not None, "start() comes first"
        p = Player(self.address, name, self.config.topics, ping_interval_s=self.config.ping_interval_s, net=self.net,
                   identity=identity)
        await p.__aenter__()
        return p

    async def _me(self) -> Player:
        await self.leave()
        self.status, self.message = "connecting", f"connecting to {self.server_url}…"
        self.player = await self._connect(self.config.name, self.config.identity)
        if self.config.autoplay:
            from client.bots import Bot

            self.autobot = Bot(self.player, reaction_s=self.config.autoplay_reaction_s, seed=self.config.seed)
            self.spawn(self._bot_loop(self.autobot, pause_s=4.0), game=True)
        return self.player

    async def _record(self, code: str | None) -> None:
        """Start recording the next match's public events: a silent connection subscribed before
        the match exists (every match's events, ``code`` unknown) or to ``code``'s. A failure here
        only means no recording."""
        if not self.config.record_dir:
            return
        from client.net import Connection, new_client_id
        from client.replays import Recorder

        rec = Recorder(self.config.record_dir, self.config.game)

        def on_message(msg: object, now_ns: int) -> None:
            if isinstance(msg, m.Event):
                rec.offer(msg)
            elif isinstance(msg, m.Snapshot) and msg.game:
                rec.note_game(msg.game)

        conn: Link
        assert self.address is not None, "start() comes first"
        if self.net is not None:
            conn = ThreadedConnection(self.net, self.address, new_client_id("rec"), self.config.topics, on_message,
                                      ping_interval_s=0)
        else:
            conn = Connection(self.address, new_client_id("rec"), self.config.topics, on_message, ping_interval_s=0)
        self.recorder, self._rec_conn = rec, conn  # from now on ``leave`` closes it, even half-open
        try:
            await conn.__aenter__()
            if code is None:
                await conn.watch_all()
            else:
                await conn.watch(code)
        except Exception as exc:  # noqa: BLE001 - the game goes on unrecorded
            log.warning("not recording this match: %s", exc)
            self.recorder = self._rec_conn = None
            try:
                await asyncio.wait_for(conn.close(leave=False), timeout=3)
            except (asyncio.TimeoutError, Exception):  # noqa: BLE001 - closing anyway
                pass
            return
        if code is not None:
            rec.follow(code)
            try:  # a match watched late: its past events from seq 1, so the recording can be replayed
                await conn.request(m.Resync(code, from_seq=1))
            except Exception as exc:  # noqa: BLE001 - recorded from where it is, then
                log.warning("cannot ask for the match's past events: %s", exc)

    def _recording(self, code: str) -> str:
        if self.recorder is not None:
            self.recorder.follow(code)
        return code

    async def play_bot(self, reaction_s: float) -> str:
        """Create a match and seat bot opponents in every other seat (``config.players`` seats)."""
        from client.bots import Bot

        self.mode, self.bot_reaction_s = "bot", reaction_s
        me = await self._me()
        seats = max(2, int(self.config.players))
        await self._record(None)
        code = self._recording(await me.create(self.config.game, self.config.settings, seats=seats,
                                               timeout=self.config.request_timeout_s))
        self.status, self.message = "waiting", f"match {code}: seating the bot{'s' if seats > 2 else ''}…"
        for i in range(1, seats):
            suffix = "" if seats == 2 else f"{i}"
            p = await self._connect(f"bot-{level_name(reaction_s).replace(' ', '')}{suffix}",
                                    self._bot_identity(reaction_s) if seats == 2 else None)
            self.opponents.append(p)
            if self.opponent is None:
                self.opponent = p
            await p.join(code, timeout=self.config.request_timeout_s)
            seed = None if self.config.seed is None else self.config.seed + i
            bot = Bot(p, reaction_s=reaction_s, seed=seed)
            self.bots.append(bot)
            if self.bot is None:
                self.bot = bot
            self.spawn(self._bot_loop(bot, pause_s=0.0), game=True)
        self.status, self.message = "playing", ""
        return code

    def _bot_identity(self, reaction_s: float) -> Identity | None:
        """A bot's key, its difficulty's (a match of several bots of one difficulty is not rated: one
        key cannot sit twice); None when the session gives bots none or the file cannot be used."""
        if not self.config.bot_identities:
            return None
        from client.identity import PlayerKeyError, bot_identity_path, load_identity

        try:
            return load_identity(bot_identity_path(reaction_s))
        except PlayerKeyError as exc:
            log.warning("the bot plays unrated: %s", exc)
            return None

    async def watch(self, code: str) -> str:
        """Spectate a running match by code: a read-only view (``Player.watch``)."""
        self.mode = "watch"
        await self.leave()
        self.status, self.message = "connecting", f"connecting to {self.server_url}…"
        self.player = await self._connect(self.config.name)
        await self._record(code.strip().upper())
        got = await self.player.watch(code.strip().upper(), timeout=self.config.request_timeout_s)
        if self.player.model.state() is None:  # a match still waiting for its players: no game to show yet
            self.status, self.message = "waiting", ""
        else:
            self.status, self.message = "playing", ""
        return got

    async def host(self) -> str:
        self.mode = "host"
        await self.leave()
        if self._own is not None:
            self.address = self._own  # back from someone else's relay (a LAN game joined)
        await self._host_on_lan()
        me = await self._me()
        await self._record(None)
        code = self._recording(await me.create(self.config.game, self.config.settings,
                                               seats=max(2, int(self.config.players)),
                                               timeout=self.config.request_timeout_s))
        self._save_seat(me)
        self.status, self.message = "waiting", self.lan_note or "waiting for an opponent"
        self.spawn(self._wait_started(), game=True)
        return code

    async def _host_on_lan(self) -> None:
        """Move the local relay onto every interface, port ``config.lan_port`` or the next free one,
        and advertise it (once per session). Called with no match running (after ``leave``), so the
        loopback relay it replaces has nothing anyone is in. No multicast is not fatal: friends can
        still join by the address shown."""
        from mqttkit import BrokerAddress
        from mqttkit.lan import LanError
        from relay.hosting import lanhost

        if not self.config.lan or not self.local or self.lan_urls:
            return
        notes: list[str] = []
        interfaces = self.config.lan_interfaces
        port = await asyncio.to_thread(lanhost.lan_port, "0.0.0.0", self.config.lan_port, interfaces, notes.append)
        self.status, self.message = "starting", f"opening the local relay to the LAN on port {port}…"
        old, self.server = self.server, None
        try:
            if old is not None:
                await asyncio.wait_for(old.__aexit__(None, None, None), timeout=5)
        except (asyncio.TimeoutError, Exception):  # noqa: BLE001 - replaced anyway
            pass
        self.server = await self._local_server("0.0.0.0", port)
        self.address = self._own = BrokerAddress("127.0.0.1", port)  # our own players come in on loopback
        self.lan_urls = lanhost.lan_urls(port, "0.0.0.0", interfaces) or [f"mqtt://127.0.0.1:{port}"]
        relay_id = getattr(self.config.relay_config, "relay_id", None) or "relay-0"
        adv = lanhost.advertise(port, relay_id, "0.0.0.0", interfaces, self.config.topics)
        try:
            await adv.__aenter__()
            self._advert = adv
        except LanError as exc:
            notes.append(f"not advertised on the LAN ({exc}); friends can still join by address")
        self.lan_note = "; ".join(notes)
        log.info("hosting on the LAN: %s%s", ", ".join(self.lan_urls), f" ({self.lan_note})" if self.lan_note else "")

    async def join_at(self, url: str, code: str, prefix: str | None = None) -> str:
        """Join match ``code`` on another relay (a host found on the LAN)."""
        from mqttkit import parse_url

        self.mode = "join"
        await self.leave()
        self.address = parse_url(url, self.config.trust)
        if prefix and prefix != self.config.topics.prefix:
            self.config.topics = Topics(prefix, self.config.topics.shard)
        me = await self._me()
        await self._record(code.strip().upper())
        got = await me.join(code.strip().upper(), timeout=self.config.request_timeout_s)
        self.status, self.message = "playing", ""
        return got

    async def join(self, code: str) -> str:
        self.mode = "join"
        me = await self._me()
        saved = self.config.rejoin
        if saved is not None and saved.match == code.strip().upper():
            got = await me.rejoin(saved.match, saved.token, timeout=self.config.request_timeout_s)
        else:
            await self._record(code.strip().upper())
            got = await me.join(code.strip().upper(), timeout=self.config.request_timeout_s)
        self._save_seat(me)
        self.status, self.message = "playing", ""
        return got

    def _save_seat(self, me: Player) -> None:
        """Keep the seat's token in the data directory (``blink play --rejoin``): for a server
        others use -- a local relay ends with this window."""
        if not self.config.server_url or not me.model.token or me.model.seat is None or me.model.match is None:
            return
        from client import seats

        try:
            seats.save(seats.SavedSeat(self.config.server_url, me.model.match, me.model.seat, me.model.name,
                                       me.model.token), "play")
        except OSError:
            pass  # no data directory: the game goes on, only --rejoin will not find it

    async def quick(self) -> str:
        self.mode = "quick"
        me = await self._me()
        await self._record(None)
        code = self._recording(await me.quick(self.config.game, self.config.settings,
                                              timeout=self.config.request_timeout_s))
        self._save_seat(me)
        self.status, self.message = ("playing", "") if len(me.model.players) >= 2 else ("waiting", "waiting for an opponent")
        if self.status == "waiting":
            self.spawn(self._wait_started(), game=True)
        return code

    async def _wait_started(self) -> None:
        while self.player is not None:
            if self.player.model.predictor is not None and self.player.model.state() is not None:
                self.status, self.message = "playing", ""
                return
            await self.player.wait_change(timeout=0.5)

    async def _bot_loop(self, bot: Bot, pause_s: float) -> None:
        """Run a bot through matches; when one ends, ask for a rematch (after ``pause_s``)."""
        player = bot.player
        stop = self._stop
        while not stop.is_set():
            await bot.run(until_over=True, stop=stop)
            await asyncio.sleep(pause_s)
            if player.match_over() and not stop.is_set():
                await player.rematch()
            while player.match_over() and not stop.is_set():
                await player.wait_change(timeout=0.5)

    # ----------------------------------------------------------------- in a game

    def act_now(self, action: object) -> m.Act | Rejected:
        """Predict ``action`` now (drawn by this very frame), then publish it in the background."""
        p = self.player
        if p is None:
            return Rejected("no_match", "not in a match")
        return p.act_nowait(action)

    def rematch(self) -> None:
        if self.player is not None:
            self.spawn(self.player.rematch(), game=True)

    async def leave(self) -> None:
        """Leave the current match (a running match is forfeited) and stop its bots."""
        self._stop.set()
        await _cancel(self._game_tasks)
        self._game_tasks.clear()
        self._stop = asyncio.Event()
        players = [self.player] + [p for p in self.opponents if p is not None]
        if self.opponent is not None and self.opponent not in players:
            players.append(self.opponent)
        self.player = self.opponent = None
        self.opponents = []
        self.bots = []
        for p in players:
            if p is not None:
                try:
                    await asyncio.wait_for(p.close(), timeout=3)
                except (asyncio.TimeoutError, Exception):  # noqa: BLE001 - closing anyway
                    pass
        self.bot = self.autobot = None
        if self._rec_conn is not None:
            conn, self._rec_conn = self._rec_conn, None
            try:
                await asyncio.wait_for(conn.close(leave=False), timeout=3)
            except (asyncio.TimeoutError, Exception):  # noqa: BLE001 - closing anyway
                pass
        if self.recorder is not None:
            self.recorder.close()
            self.recorder = None
        if self.status != "error":
            self.status, self.message = ("ready" if self.address is not None else "idle"), ""

    async def close(self) -> None:
        await self.leave()
        await _cancel(self._tasks)
        if self._advert is not None:
            adv, self._advert = self._advert, None
            try:
                await asyncio.wait_for(adv.__aexit__(None, None, None), timeout=5)
            except (asyncio.TimeoutError, Exception):  # noqa: BLE001 - closing anyway
                pass
        if self.server is not None:
            server, self.server = self.server, None
            try:
                await asyncio.wait_for(server.__aexit__(None, None, None), timeout=5)
            except (asyncio.TimeoutError, Exception):  # noqa: BLE001
                pass
        if self.net is not None:
            await self.net.close()
        self.status = "closed"
