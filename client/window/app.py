"""The BLINK window: pyglet and asyncio on one event loop, scenes, frame statistics, screenshots.

How this works
--------------
One asyncio event loop runs the frame task below, your ``Player``'s model and the bot opponent's
``Player`` and ``Bot``; the MQTT connections themselves (reads, pings, the arrival stamps) run on a
network thread (``client/netthread.py``) whose inbox each frame drains first, and -- when no ``--server`` is
given -- the embedded broker and the relay run in a child process of their own (``blink play``:
``relay/hosting/localproc.py``; a dead child ends the window with exit status 1 and one line), or on this
loop (``LocalServer``, in-process tests). The frame task does, ~60 times a
second and without ever awaiting inside a frame:

    pyglet.clock.tick(); window.dispatch_events()   # X events -> scene input handlers
    session.net.drain()                             # messages the network thread read -> models
    scene.update(now)                               # read the model, update drawables in place
    app.draw(); window.flip()                       # draw the batches, present -- only when the
                                                    # picture changed (``Scene.still``, the HUD)

and then sleeps until the next frame is due (``asyncio.sleep``), which is when the bots and the
messages that woke the loop run. Why the models stay on this loop and only the I/O moved:

- no locks and no races: a network message is applied to the ``ClientModel`` between two frames,
  never while a frame reads it, so a frame always draws one consistent state;
- the round trip the HUD shows is the network's: a ping's send and its pong's arrival are stamped
  on the network thread, which a frame in progress does not hold up (before, the pong waited for
  the frame, and on a busy machine the HUD showed ~100 ms for a ~10 ms round trip);
- input shows on the very next frame by construction: a key handler calls ``Session.act_now``,
  which applies the prediction synchronously inside ``dispatch_events``; the ``update`` and draw
  that follow in the same frame show it, and only the publish waits for the loop;
- network I/O cannot block drawing: it is on its own thread, and every message handler here is
  short (apply to the model); the frame task gets the loop back within a millisecond or so, as the
  frame statistics (``--frame-stats``: interval p99) show. The cost: a long synchronous step in
  any task would delay a frame, so nothing on this loop may block.

Scenes (one per screen): ``MenuScene``, a table scene per game (``TableScene`` for BLINK;
``TakeawayScene``, ``SequenceScene``, ``RyoScene`` on the shared ``TurnBasedScene``), ``ResultsScene``. The app routes
window events to the current scene, draws it and the corner HUD, and switches scenes on request.
Scenes know the app as ``SceneHost`` (``client/window/host.py``), which ``App`` has: this module
imports the scenes and they never import it.

Replays (``blink replay LOG``, the menu's Replays): ``open_replay`` swaps the session for a
``ReplaySession`` (``viewmodels/replay.py``: a spectator model stepped through a recorded match) and
puts the control bar (``scenes/replay.py``) in a strip at the top; the game scene below is the
usual one, in spectator mode, laid out in ``size`` (the window less the strip). The bar gets input
first and moves the replay on each frame before the scene updates.

Headless aids: ``--quit-after`` stops after N seconds, ``--screenshot`` saves the back buffer of
the last frame as a PNG (read before ``flip``), ``--frame-stats`` writes ``FrameStats.summary()``.
Tests drive the same ``App`` in-process: ``inject_key`` queues a key press that the next frame
dispatches, ``next_frame``/``wait_until`` await frames.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Literal, TypeVar

import pyglet
import pyglet.app as pyglet_app

# glGetError after every GL call costs more than the drawing itself under software GL; this has
# to be set before pyglet.gl is first imported (the window modules below import it).
pyglet.options["debug_gl"] = False

from client.window.hud import Hud  # noqa: E402
from client.window.scenes import Scene  # noqa: E402
from client.window.session import (  # noqa: E402
    BOT_LEVELS, GameMode, Session, SessionConfig, level_name, parse_level)
from client.window.sounds import Sounds  # noqa: E402
from client.window.framestats import FrameStats  # noqa: E402

if TYPE_CHECKING:
    from pyglet.app.base import PlatformEventLoop

    from client.lan import Browser
    from client.window.scenes import ReplayBar
    from client.window.viewmodels import Replay, ReplaySession

log = logging.getLogger("blink.window")
T = TypeVar("T")


def table_class(game: str) -> type[Scene]:
    """The scene that plays ``game`` (the window's game registry, ``scenes/registry.py``)."""
    from client.window.scenes import scene_for

    return scene_for(game)

STEADY_AFTER_S = 2.0  # frame statistics also report the frames after this much start-up time
#: The least pause between two frames, even when they are late. A message goes through a chain of
#: callbacks (socket readable -> MQTT client -> queue -> reader task), one loop turn each; with no
#: pause a late frame task is ready on every turn and a whole frame is drawn between two links, so
#: on a busy machine a pong took four frames to arrive (the HUD's RTT in the hundreds of ms).
MIN_FRAME_GAP_S = 0.003


#: What the window opens on: the menu, a game started as the command line says, or a replay.
AppMode = Literal["menu", "replay"] | GameMode


@dataclass
class AppConfig:
    mode: AppMode = "menu"
    code: str | None = None
    bot_reaction_s: float = BOT_LEVELS["normal"]
    width: int = 1100
    height: int = 720
    screenshot: str | None = None
    quit_after: float | None = None
    frame_stats: str | None = None
    mute: bool = False
    fps: float = 60.0
    session: SessionConfig = field(default_factory=SessionConfig)
    replay: Replay | None = None  # mode "replay" shows it (``blink replay``)
    replay_at: int | None = None  # start at this event index (paused), e.g. for a screenshot
    replay_speed: float = 1.0


class App:
    def __init__(self, config: AppConfig, session: Session | None = None) -> None:
        self.config = config
        self.session: Session | ReplaySession = session or Session(config.session)  # (while a replay is shown)
        self.sounds = Sounds(enabled=not config.mute)
        self.stats = FrameStats()
        self.window: pyglet.window.Window | None = None
        self.hud: Hud | None = None
        self.scene: Scene | None = None
        self.bot_reaction_s = config.bot_reaction_s
        self.closing = False
        self.exit_code = 0
        #: Why the game the command line asked for (or the local relay) could not start: ``run`` then
        #: prints it as one line and returns 1. A menu choice that fails sets nothing here.
        self.failure: str | None = None
        self.drawn = 0  # display counter: goes up when the drawn picture changed
        self._seen: tuple[int, int] = (0, 0)
        self._present_left = 2  # frames to present whatever changed (a new window, size or scene)
        self._injected: list[tuple[int, int, int]] = []
        self._input_ts: int | None = None
        self._frame_waiters: list[asyncio.Future[int]] = []
        self._shot: str | None = None
        self._posted: PlatformEventLoop | None = None
        self._starting: asyncio.Task[object] | None = None
        self._ready: asyncio.Event | None = None
        self._started = 0.0
        self.shots_saved: list[str] = []
        self.overlay: ReplayBar | None = None  # the replay's control bar, over the game scene
        self._live_session: Session | None = None  # the menu's session while a replay from the menu is shown
        # Tests: makes the LAN scene's browser from the interfaces, instead of a real one on the network.
        self.lan_browser: Callable[[list[str] | None], Browser] | None = None

    # ----------------------------------------------------------------- window and scenes

    @property
    def size(self) -> tuple[int, int]:
        """The scenes' area: the window, less the replay bar's strip at the top when there is one."""
        if self.window is None:
            w, h = self.config.width, self.config.height
        else:
            w, h = self.window.width, self.window.height
        return w, h - (self.overlay.height if self.overlay is not None else 0)

    @property
    def hud_room(self) -> float:
        """How far from the window's right edge the corner HUD's text may reach: a scene's top
        line keeps clear of it."""
        return self.hud.room if self.hud is not None else 0.0

    def toggle_play_parts(self) -> None:
        if self.hud is not None:
            self.hud.toggle_parts()
            self.present_again()

    @property
    def window_size(self) -> tuple[int, int]:
        if self.window is None:
            return self.config.width, self.config.height
        return self.window.width, self.window.height

    def open(self) -> None:
        """Create the window and the first scene (needs a display)."""
        self.window = pyglet.window.Window(self.config.width, self.config.height, caption="BLINK — " + self.session.config.game,
                                           resizable=True, vsync=False)
        self.window.set_minimum_size(min(640, self.config.width), min(420, self.config.height))
        self.hud = Hud(self.size)
        self.sounds.warm()
        self._posted = pyglet_app.platform_event_loop
        w = self.window

        @w.event
        def on_draw() -> None:
            self.draw()

        @w.event
        def on_key_press(symbol: int, modifiers: int) -> bool:
            return self.key_press(symbol, modifiers)

        @w.event
        def on_text(text: str) -> bool:
            return bool(self.scene and self.scene.on_text(text))

        @w.event
        def on_mouse_press(x: int, y: int, button: int, modifiers: int) -> bool:
            if self.overlay is not None:
                return bool(self.overlay.on_mouse_press(x, y, button, modifiers))
            return bool(self.scene and self.scene.on_mouse_press(x, y, button, modifiers))

        @w.event
        def on_mouse_motion(x: int, y: int, dx: int, dy: int) -> None:
            if self.scene is not None:
                self.scene.on_mouse_motion(x, y)

        @w.event
        def on_mouse_drag(x: int, y: int, dx: int, dy: int, buttons: int, modifiers: int) -> bool:
            if self.overlay is not None:
                return bool(self.overlay.on_mouse_drag(x, y, dx, dy, buttons, modifiers))
            return bool(self.scene and self.scene.on_mouse_drag(x, y, dx, dy, buttons, modifiers))

        @w.event
        def on_mouse_release(x: int, y: int, button: int, modifiers: int) -> bool:
            if self.overlay is not None:
                return bool(self.overlay.on_mouse_release(x, y, button, modifiers))
            return bool(self.scene and self.scene.on_mouse_release(x, y, button, modifiers))

        @w.event
        def on_expose() -> None:  # the window was uncovered (no compositor keeps its pixels): draw again
            self.present_again()

        @w.event
        def on_resize(width: int, height: int) -> None:
            self.present_again()
            if self.overlay is not None:
                self.overlay.resize(width, height)
            if self.hud is not None:  # first: a scene keeps its top line clear of the HUD's room
                self.hud.resize(*self.size)
            if self.scene is not None:
                self.scene.resize(*self.size)
            # returning None lets pyglet's default handler set the viewport and projection

        @w.event
        def on_close() -> bool:
            self.quit()
            return True

        if self.config.mode == "replay":
            assert self.config.replay is not None, "mode replay shows config.replay"
            self.open_replay(self.config.replay, self.config.replay_at, self.config.replay_speed)
            return
        first = "menu" if self.config.mode == "menu" else "table"
        self.goto(first)
        if self.config.mode != "menu":
            self._start(self.config.mode, self.config.code, from_command_line=True)

    def draw(self) -> None:
        scene = self.scene
        if scene is not None:
            pyglet.gl.glClearColor(*scene.clear_colour)
        assert self.window is not None
        self.window.clear()
        if scene is not None:
            scene.draw()
        if self.hud is not None:
            self.hud.draw()
        if self.overlay is not None:
            self.overlay.draw()

    def key_press(self, symbol: int, modifiers: int) -> bool:
        if self.overlay is not None:
            self.overlay.on_key_press(symbol, modifiers)
            return True
        if self.scene is not None:
            self.scene.on_key_press(symbol, modifiers)
        return True  # never let pyglet's default close the window on Esc

    def goto(self, name: str) -> None:
        from client.window.scenes import LanScene, MenuScene, ResultsScene

        cls: type[Scene]
        if name == "table":
            cls = table_class(self.current_game())
        else:
            from client.window.scenes import ReplaysScene

            cls = {"menu": MenuScene, "results": ResultsScene, "lan": LanScene, "replays": ReplaysScene}[name]
        if self.scene is not None:
            self.scene.exit()
        self.scene = cls(self)
        self.scene.enter()
        self.present_again()

    # The window's game registry, asked on the scenes' behalf: it imports every scene, so a scene
    # asks the app rather than import it.
    def scene_class(self, game: str) -> type[Scene] | None:
        """The scene that plays ``game``, or None for a game the window does not play."""
        from client.window.scenes import scene_for

        try:
            return scene_for(game)
        except ValueError:
            return None

    def game_title(self, game: str) -> str:
        from client.window.scenes import title

        return title(game)

    def score_word(self, game: str) -> str:
        from client.window.scenes import score_word

        return score_word(game)

    def current_game(self) -> str:
        """The game being played: the match's (joined or watched), else the one chosen."""
        model = self.session.model
        if model is not None and model.game:
            return model.game
        return self.session.config.game

    def set_game(self, game: str, players: int | None = None) -> None:
        """Menu choice of game and seats; the command line's --settings apply to its own game only."""
        cfg = self.session.config
        if not hasattr(self, "_settings_for"):
            self._settings_for = (cfg.game, dict(cfg.settings))
        cfg.game = game
        cfg.settings = dict(self._settings_for[1]) if game == self._settings_for[0] else {}
        if players is not None:
            cfg.players = players

    def command_line_settings(self) -> tuple[str, dict[str, object]]:
        """The game the command line chose and its --settings, which apply to that game only."""
        if hasattr(self, "_settings_for"):  # set by the first ``set_game``
            return self._settings_for
        cfg = self.session.config
        return cfg.game, dict(cfg.settings)

    def bot_level_name(self) -> str:
        return level_name(self.bot_reaction_s)

    def set_bot_level(self, name: str) -> None:
        self.bot_reaction_s = parse_level(name)

    def start_game(self, mode: GameMode, code: str | None = None, url: str | None = None,
                   prefix: str | None = None) -> None:
        """Menu choice: switch to the table now, connect in the background."""
        self._start(mode, code, url, prefix)

    def _start(self, mode: GameMode, code: str | None = None, url: str | None = None, prefix: str | None = None,
               from_command_line: bool = False) -> None:
        """Start a game. A failure shows in the window ("Cannot play") whoever asked for it; only one
        of the command line's own (``blink play --bot``...) also ends the command with status 1 and
        its reason as one line (``failure``): a menu choice that failed (a mistyped code) was
        answered in the window, and the player may well go on to play."""

        async def go() -> None:
            if self._ready is not None:
                await self._ready.wait()
            session = self.session
            if not isinstance(session, Session):  # a replay is shown: nothing to start
                return
            if session.status == "error" and session.address is None:
                return
            try:
                await play(session)
            except Exception as exc:  # noqa: BLE001 - shown in the window
                session.fail(exc)
                if from_command_line:
                    self.failure = session.message

        async def play(session: Session) -> None:
            if mode == "bot":
                await session.play_bot(self.bot_reaction_s)
            elif mode == "host":
                await session.host()
            elif mode == "join":
                await session.join(code or "")
            elif mode == "quick":
                await session.quick()
            elif mode == "watch":
                await session.watch(code or "")
            elif mode == "lan":  # a match found on the LAN (scenes/lan.py): another relay
                await session.join_at(url or "", code or "", prefix)
            else:
                raise ValueError(f"unknown mode {mode!r}")

        if self.session.status == "error" and self.session.address is not None:
            self.session.status, self.session.message = "ready", ""
        if self.session.address is not None:
            self.failure = None  # a new start: what failed before is behind the player
        if self._starting is not None:
            self._starting.cancel()
        self._starting = self.session.spawn(go())
        self.goto("table")

    def back_to_menu(self) -> None:
        if self._starting is not None:  # still connecting: stop that first
            self._starting.cancel()
            self._starting = None
        self.session.spawn(self.session.leave())
        self.goto("menu")

    def interrupted(self, sig: int) -> None:
        """A signal: close as a quit does; Ctrl-C (SIGINT) then ends the command with status 130, as
        a shell expects of an interrupted program, while SIGTERM (a service manager's stop) is a
        normal quit."""
        if sig == signal.SIGINT and not self.exit_code:
            self.exit_code = 130
        self.quit()

    def quit(self) -> None:
        self.closing = True

    # ----------------------------------------------------------------- replays

    def open_replay(self, replay: Replay, at: int | None = None, speed: float = 1.0) -> None:
        """Show a recorded match (``viewmodels/replay.py``) with the control bar over its scene.
        From the menu, the live session is kept and comes back when the replay is left."""
        from client.window.scenes import ReplayBar
        from client.window.viewmodels import ReplaySession

        rs = ReplaySession(replay, name=self.session.config.name, speed=speed)
        if self.config.mode != "replay" and self._live_session is None and isinstance(self.session, Session):
            self._live_session = self.session
        self.session = rs
        rs.seek(at if at is not None else 0, time.time_ns())
        rs.playback.paused = at is not None
        self.overlay = ReplayBar(self, rs)
        if self.hud is not None:
            self.hud.resize(*self.size)
        self.overlay.update(time.time_ns())

    def leave_replay(self) -> None:
        """Esc in a replay: back to the menu it was opened from, or quit (``blink replay``)."""
        if self._live_session is None:
            self.quit()
            return
        self.session, self._live_session = self._live_session, None
        self.overlay = None
        self.present_again()
        if self.hud is not None:
            self.hud.resize(*self.size)
        self.goto("replays")

    @property
    def replay_from_menu(self) -> bool:
        """The replay shown was opened from the menu's list (Esc goes back there, not out)."""
        return self._live_session is not None

    def results_hint(self) -> str:
        return "Home  watch again     Esc  leave the replay" if self.overlay is not None else "M  menu     Q  quit"

    # ----------------------------------------------------------------- input and frames

    def note_input(self) -> None:
        """A scene changed what it shows because of an input: it must be on the next frame."""
        at = self._input_ts if self._input_ts is not None else time.perf_counter_ns()
        self.stats.input(at, self.drawn + 1)

    def inject_key(self, symbol: int, modifiers: int = 0) -> None:
        """Queue a key press (tests, benchmark); dispatched with the next frame's window events.
        The input's time is now, so the measured delay includes the wait for the frame."""
        self._injected.append((time.perf_counter_ns(), symbol, modifiers))

    def step(self) -> None:
        """One frame: events, update, draw, present. Never awaits."""
        t0 = time.perf_counter_ns()
        pyglet.clock.tick()
        w, posted = self.window, self._posted
        assert w is not None and posted is not None, "open() makes the window"
        w.dispatch_events()
        posted.dispatch_posted_events()  # e.g. end-of-sound events from pyglet.media
        if self._injected:
            injected, self._injected = self._injected, []
            for at, symbol, modifiers in injected:
                self._input_ts = at
                try:
                    self.key_press(symbol, modifiers)
                finally:
                    self._input_ts = None
        net = getattr(self.session, "net", None)  # a ReplaySession has none
        if net is not None:
            net.drain()  # what arrived since the last frame: this frame draws the newest state
        now = time.time_ns()
        if self.overlay is not None:
            self.overlay.update(now)
        for _ in range(3):  # a scene may hand over to another during update; the new one draws now
            scene = self.scene
            assert scene is not None
            scene.update(now)
            if self.scene is scene:
                break
        scene = self.scene
        assert scene is not None
        seen = (id(scene), scene.display_version)
        changed = seen != self._seen
        if changed:
            self._seen = seen
            self.drawn += 1
        if self.hud is not None and self.hud.update(self.session.model, now, relay=self.overlay is None):
            changed = True
        # Present only a frame that shows something new: under software GL clearing, drawing and
        # flipping the window is most of a frame's cost, and the last picture stays on screen.
        present = (changed or not scene.still() or self.overlay is not None or self._shot is not None
                   or self._present_left > 0)
        if present:
            self._present_left = max(0, self._present_left - 1)
            w.switch_to()
            # Drawn directly: pyglet's xlib window would queue a dispatched on_draw until the next
            # dispatch_events, i.e. draw one frame late.
            self.draw()
            if self._shot is not None:
                self._save(self._shot)
                self._shot = None
            w.flip()
        t1 = time.perf_counter_ns()
        self.stats.frame(t0, t1, self.drawn, presented=present)
        if self._frame_waiters:
            waiters, self._frame_waiters = self._frame_waiters, []
            for f in waiters:
                if not f.done():
                    f.set_result(self.stats.frames)

    def _save(self, path: str) -> None:
        p = Path(path)
        if p.parent and not p.parent.exists():
            p.parent.mkdir(parents=True, exist_ok=True)
        pyglet.image.get_buffer_manager().get_color_buffer().save(str(p))
        self.shots_saved.append(str(p))

    def present_again(self) -> None:
        """Draw and present the next frames even if no scene says it changed (the window was
        uncovered or resized, a scene or an overlay came or went)."""
        self._present_left = 2

    def request_screenshot(self, path: str) -> None:
        """Save the next frame (as drawn, before it is presented) to ``path``."""
        self._shot = path

    async def next_frame(self) -> int:
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._frame_waiters.append(fut)
        return await fut

    async def wait_until(self, predicate: Callable[[], T], timeout: float = 10.0) -> T:
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError("condition not reached in time")
            await self.next_frame()

    async def frame_loop(self) -> None:
        period = 1.0 / max(1.0, self.config.fps)
        loop = asyncio.get_running_loop()
        next_t = loop.time()
        quit_at = self._started + self.config.quit_after if self.config.quit_after is not None else None
        steady_at = self._started + STEADY_AFTER_S
        while not self.closing:
            if getattr(self.session, "server_lost", None):
                # The local relay's process is gone: nothing can be played; say so and end.
                self.exit_code = 1
                break
            if time.monotonic() >= steady_at:
                self.stats.mark_steady()
            last = quit_at is not None and time.monotonic() >= quit_at
            if last and self.config.screenshot:
                self.request_screenshot(self.config.screenshot)
            self.step()
            if last:
                break
            next_t += period
            delay = next_t - loop.time()
            if delay < -period:  # fell behind (a stall): start afresh instead of racing to catch up
                next_t = loop.time()
                delay = 0.0
            await asyncio.sleep(max(MIN_FRAME_GAP_S, delay))

    # ----------------------------------------------------------------- lifecycle

    async def start_session(self) -> None:
        self._ready = self._ready or asyncio.Event()
        session = self.session
        try:
            await session.start()
        except Exception as exc:  # noqa: BLE001 - shown in the window
            if isinstance(session, Session):
                session.fail(exc)
            self.failure = session.message  # no relay: nothing in this window can be played
        finally:
            self._ready.set()

    async def run(self) -> int:
        """Open the window, run until quit (or ``--quit-after``), clean up. Returns an exit code."""
        self._ready = asyncio.Event()
        self._started = time.monotonic()
        self.open()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, self.interrupted, sig)
            except (NotImplementedError, RuntimeError, ValueError):
                pass
        starter = asyncio.create_task(self.start_session())
        gc.freeze()  # what exists now lives for the whole session: keep it out of every collection
        failed = False
        try:
            await self.frame_loop()
        finally:
            if self.config.screenshot and not self.shots_saved and self.window is not None:
                try:
                    self.request_screenshot(self.config.screenshot)
                    self.step()
                except Exception:  # noqa: BLE001
                    log.exception("screenshot failed")
            if self.config.frame_stats:
                self.stats.write(self.config.frame_stats, {"scene": self.scene.name if self.scene else None,
                                                           "session": self.session.status})
            starter.cancel()
            failed = self.failure is not None and self.session.status == "error"
            if failed and not getattr(self.session, "server_lost", None):  # that one ``blink play`` prints
                print(f"blink play: {self.failure}", file=sys.stderr)
            try:
                await asyncio.wait_for(self.session.close(), timeout=15)
                if self._live_session is not None:  # quit while a replay from the menu was shown
                    await asyncio.wait_for(self._live_session.close(), timeout=15)
            except asyncio.TimeoutError:
                log.warning("the session did not close in time")
            if self.window is not None:
                self.window.close()
                self.window = None
            for sig in (signal.SIGINT, signal.SIGTERM):
                try:
                    loop.remove_signal_handler(sig)
                except (NotImplementedError, RuntimeError, ValueError):
                    pass
        if failed or self.exit_code:
            return self.exit_code or 1
        return 0

    def describe(self) -> dict[str, object]:
        out = self.scene.describe() if self.scene is not None else {}
        if self.overlay is not None:
            out = {**out, "replay": self.overlay.describe()}
        return out
