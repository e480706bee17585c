"""The pyglet window: pure parts (layout, geometry, stats, sounds, texts) and the real window under
Xvfb against a real relay (embedded broker on a free loopback port) with bots and rival players.

The window tests start their own Xvfb on a free display and skip only when the Xvfb binary is
missing. Screenshots go to each test's own ``tmp_path``. They hold on a busy machine: every wait is
on a condition with a generous deadline (``LONG``), never a sleep, and nothing here measures speed
(frame rates and intervals are bench/frame_bench.py's business).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from protocol.rules import blink
from relay.core import RelayConfig
from tests.decks import fixed_deck_games
from client.window import geometry as geo
from client.window.layout import EMPTY, stable_slots, table_layout
from client.window import BOT_LEVELS, parse_level
from client.window.sounds import EFFECTS, RATE, pcm
from client.window import FrameStats, percentile
from client.window.texts import reason_text

ROOT = Path(__file__).resolve().parent.parent
LONG = 120.0  # seconds: a deadline for a condition, generous enough for a machine under heavy load
SCENARIO_S = 480.0  # the whole of one window scenario
# The window, the relay, the broker and the bots share one process and the window draws with software
# GL: on a loaded 2-core machine a scenario can take minutes. Deadlines are for hangs, not for speed.
pytestmark = pytest.mark.timeout(SCENARIO_S + 120)
FAST = {"countdown_s": 0.3, "stalemate_pause_s": 0.2, "pick_time_s": 1.0, "best_of": 1}


# ---------------------------------------------------------------------------------------------------
# pure parts: no display needed


def test_the_window_package_and_cli_do_not_import_pyglet() -> None:
    code = ("import sys, client.cli, client.window, client.window.session, client.window.layout, "
            "client.window.geometry, client.window.framestats, client.window.texts, client.window.sounds; "
            "client.cli.build_parser(); print('pyglet' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_play_arguments() -> None:
    from client.cli import build_parser

    p = build_parser()
    a = p.parse_args(["play"])
    assert a.command == "play" and a.bot is None and not a.autoplay and a.width == 1100
    a = p.parse_args(["play", "--bot", "hard", "--quit-after", "3", "--screenshot", "x.png", "--frame-stats", "s.json"])
    assert a.bot == BOT_LEVELS["hard"] and a.quit_after == 3.0
    assert p.parse_args(["play", "--bot", "0.4"]).bot == 0.4
    assert p.parse_args(["play", "--server", "mqtt://127.0.0.1:1883", "--match", "ABCDE"]).match == "ABCDE"
    with pytest.raises(SystemExit):
        p.parse_args(["play", "--bot", "superhuman"])
    with pytest.raises(SystemExit):
        p.parse_args(["play", "--host", "--quick"])
    with pytest.raises(SystemExit):
        p.parse_args(["play", "--server", "http://nope"])


@pytest.mark.integration
def test_play_refuses_what_it_cannot_do_with_one_line() -> None:
    for args in (["play", "--game", "blink", "--players", "3"], ["play", "--game", "takeaway", "--players", "9"],
                 ["play", "--watch", "ABCDE"], ["play", "--match", "ABCDE"], ["play", "--settings", '{"best_of": 2}']):
        out = subprocess.run([sys.executable, "-m", "client.cli", *args], capture_output=True, text=True, cwd=ROOT,
                             timeout=60, env={**os.environ, "DISPLAY": ""})
        assert out.returncode == 2, (args, out.stderr)
        assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr


@pytest.mark.integration
def test_play_without_a_display_says_so_in_one_line() -> None:
    env = {k: v for k, v in os.environ.items() if k != "DISPLAY"}
    out = subprocess.run([sys.executable, "-m", "client.cli", "play", "--quit-after", "1"], capture_output=True,
                         text=True, cwd=ROOT, timeout=60, env=env)
    assert out.returncode == 1
    assert "cannot open a window" in out.stderr and out.stderr.count("\n") == 1


def test_bot_levels() -> None:
    assert parse_level("easy") > parse_level("normal") > parse_level("hard") > parse_level("expert")
    assert parse_level("0.25") == 0.25 and parse_level("0.5s") == 0.5 and parse_level(None) == BOT_LEVELS["normal"]
    for bad in ("fast", "-1", "99"):
        with pytest.raises(ValueError):
            parse_level(bad)


def test_reason_texts() -> None:
    # a game's codes in the game's words, the relay's own in the window's, any other as its words
    assert reason_text("pile_changed", blink.GAME) == "too slow — pile changed"
    assert reason_text("no_match", blink.GAME) == "doesn't match"
    assert reason_text("no_such_match", blink.GAME) == "that match is gone"
    assert reason_text("malformed") == "the relay could not read that"
    assert reason_text("some_new_code", blink.GAME) == "some new code"


@pytest.mark.parametrize("size", [(640, 420), (1100, 720), (1920, 1080), (800, 1000), (2560, 700)])
def test_layout_fits_any_window_without_overlaps(size: tuple[int, int]) -> None:
    lay = table_layout(*size)
    rects = list(lay.hand) + list(lay.opp_hand) + list(lay.piles) + [lay.my_draw, lay.opp_draw]
    for r in rects:
        assert 0 <= r.left and r.right <= size[0] and 0 <= r.bottom and r.top <= size[1], (size, r)
    for i, a in enumerate(rects):
        for b in rects[i + 1:]:
            apart = a.right <= b.left or b.right <= a.left or a.top <= b.bottom or b.top <= a.bottom
            assert apart, (size, a, b)
    # your hand is below the piles, the opponent above; text lines do not run into the cards
    assert lay.hand[0].top < lay.piles[0].bottom < lay.piles[0].top < lay.opp_hand[0].bottom
    assert lay.hint_y < lay.hand[0].bottom and lay.hand[0].top < lay.message_y < lay.status_y < lay.piles[0].bottom
    assert lay.status_y + lay.status_h / 2 < lay.piles[0].bottom - lay.font * 1.5  # room for the pile labels
    assert lay.card_h >= 60 or size[1] < 500
    # hit-testing uses the same rectangles
    assert lay.hand_slot_at(lay.hand[1].x, lay.hand[1].y) == 1
    assert lay.pile_at(lay.piles[1].x, lay.piles[1].y) == 1 and lay.pile_at(1, 1) is None


def test_stable_slots_keep_cards_where_they_were() -> None:
    a, b, c, d = (blink.Card(n, "red", "star") for n in (1, 2, 3, 4))
    slots = stable_slots([EMPTY] * 3, (a, b, c), 3)
    assert slots == [a, b, c]
    # b is played; an unknown card is drawn (the hand is refilled at the end): it takes b's slot
    slots = stable_slots(slots, (a, c, None), 3)
    assert slots == [a, None, c]
    # the relay says what it was
    slots = stable_slots(slots, (a, c, d), 3)
    assert slots == [a, d, c]
    # the draw pile is empty: the hand shrinks, the others stay put
    assert stable_slots(slots, (a, c), 3) == [a, EMPTY, c]


def test_every_card_picture_is_within_its_card_and_distinct() -> None:
    w, h = 140.0, 200.0
    seen = set()
    for card in blink.standard_deck():
        t = geo.card_face(card.count, card.colour, card.shape, w, h)
        assert t.count % 3 == 0 and len(t.col) == 4 * t.count
        xs, ys = t.pos[0::2], t.pos[1::2]
        assert max(map(abs, xs)) <= w / 2 + w * 0.05 and max(map(abs, ys)) <= h / 2 + h * 0.05
        seen.add(hash((tuple(t.pos), tuple(t.col))))
    assert len(seen) == 60  # no two cards draw the same picture
    # symbols of one card do not overlap: their centres are at least two radii apart
    m = geo.CardMetrics(w, h)
    _, _, aw, ah = m.symbol_area()
    for n in range(1, 6):
        pts, r = geo.symbol_layout(n, aw, ah)
        assert len(pts) == n
        for i, p in enumerate(pts):
            for q in pts[i + 1:]:
                assert ((p[0] - q[0]) ** 2 + (p[1] - q[1]) ** 2) ** 0.5 >= 2 * r


def test_frame_stats_count_late_inputs() -> None:
    s = FrameStats()
    s.frame(0, 2_000_000, drawn_version=1)
    s.input(3_000_000, version=2)  # handled in frame 1
    s.frame(4_000_000, 6_000_000, drawn_version=2)  # shown by it
    s.input(7_000_000, version=3)
    s.frame(8_000_000, 9_000_000, drawn_version=2)  # not shown: late
    s.frame(10_000_000, 11_000_000, drawn_version=3)
    out = s.summary()
    assert out["frames"] == 4 and out["inputs"] == 2 and out["late_inputs"] == 1
    assert out["input_frames_max"] == 2 and out["frame_ms"]["p50"] == pytest.approx(1.5)
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.5) == pytest.approx(2.5)


def test_sounds_are_generated_pcm() -> None:
    for name, tones in EFFECTS.items():
        data = pcm(name)
        assert len(data) == 2 * sum(int(secs * RATE) for _, _, secs, _ in tones)
        assert max(abs(int.from_bytes(data[i:i + 2], "little", signed=True)) for i in range(0, len(data), 50)) > 1000


def test_sound_failure_switches_sound_off_instead_of_crashing(monkeypatch: pytest.MonkeyPatch) -> None:
    from client.window import sounds

    def broken(data: bytes) -> Any:
        raise OSError("no audio device")

    monkeypatch.setattr(sounds, "_static_source", broken)
    s = sounds.Sounds(enabled=True)
    s.play("land")
    s.play("bounce")
    assert s.enabled is False and s.played == ["land", "bounce"]


# ---------------------------------------------------------------------------------------------------
# the real window under Xvfb


def _free_display() -> int:
    for n in range(101, 400):
        if not Path(f"/tmp/.X{n}-lock").exists() and not Path(f"/tmp/.X11-unix/X{n}").exists():
            return n
    raise RuntimeError("no free X display number")


@pytest.fixture(scope="session")  # one X server for the whole run: pyglet keeps its first display
def xdisplay() -> Iterator[str]:
    binary = shutil.which("Xvfb")
    if binary is None:
        pytest.skip("Xvfb is not installed (apt-get install xvfb libgl1-mesa-dri)")
    for _ in range(5):
        n = _free_display()
        proc = subprocess.Popen([binary, f":{n}", "-screen", "0", "1280x800x24", "-nolisten", "tcp"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + LONG
        while time.monotonic() < deadline and proc.poll() is None and not Path(f"/tmp/.X11-unix/X{n}").exists():
            time.sleep(0.05)  # polling for the socket file: the condition, with a deadline
        if proc.poll() is None:
            break
    else:
        pytest.fail("Xvfb would not start")
    old = os.environ.get("DISPLAY")
    os.environ["DISPLAY"] = f":{n}"
    try:
        import pyglet

        pyglet.options["audio"] = ("silent",)
        yield f":{n}"
    finally:
        if old is None:
            os.environ.pop("DISPLAY", None)
        else:
            os.environ["DISPLAY"] = old
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def deck(p0: list[str], p1: list[str], full: bool = True) -> tuple[str, ...]:
    """A deck order whose deal gives player 0 the centre card p0[0], hand p0[1:4], draw p0[4:]..."""
    if not full:
        assert len(p0) == len(p1)
        return tuple(p0 + p1)
    used = set(p0) | set(p1)
    rest = [str(c) for c in blink.standard_deck() if str(c) not in used]
    n0 = 30 - len(p0)
    return tuple(p0 + rest[:n0] + p1 + rest[n0:])


def make_app(*, mode: str = "bot", decks: tuple[tuple[str, ...], ...] | None = None, settings: dict[str, Any] | None = None,
             bot_s: float = 20.0, autoplay: bool = False, autoplay_s: float = 0.05, mute: bool = True,
             size: tuple[int, int] = (1100, 720)) -> Any:
    from client.window import App, AppConfig, SessionConfig

    relay = RelayConfig(games=fixed_deck_games(decks) if decks else None, between_games_s=0.5)
    session = SessionConfig(name="you", settings=dict(settings if settings is not None else FAST), relay_config=relay,
                            autoplay=autoplay, autoplay_reaction_s=autoplay_s, seed=7, request_timeout_s=LONG)
    return App(AppConfig(mode=mode, bot_reaction_s=bot_s, width=size[0], height=size[1], mute=mute, session=session))


async def started(app: Any) -> asyncio.Task[int]:
    """Run the app; return once its window has drawn a frame."""
    task = asyncio.create_task(app.run())
    deadline = time.monotonic() + LONG
    while not (app.window is not None and app.stats.frames > 0):
        if task.done():
            task.result()
            raise RuntimeError("the window ended before its first frame")
        if time.monotonic() > deadline:
            raise TimeoutError("the window did not start")
        await asyncio.sleep(0.01)  # polling for the first frame (no frame waiter exists before it)
    return task


async def until(app: Any, predicate: Any, timeout: float = LONG) -> Any:
    """``app.wait_until``, saying what the window showed when the deadline passed."""
    try:
        return await app.wait_until(predicate, timeout)
    except TimeoutError:
        model = app.session.model
        raise AssertionError(f"not reached in {timeout:g} s; session {app.session.status!r} {app.session.message!r}; "
                             f"phase {getattr(model.state() if model else None, 'phase', None)!r}; "
                             f"shown {app.describe()!r}") from None


async def stop(app: Any, task: asyncio.Task[int]) -> int:
    app.quit()
    return await asyncio.wait_for(task, timeout=LONG)


def press(app: Any, *symbols: int) -> None:
    """Synthetic key events through pyglet's own window event queue: handled by the next frame's
    ``dispatch_events``, exactly like keys from the X server."""
    for s in symbols:
        app.window.dispatch_event("on_key_press", s, 0)


def colour_pixels(path: Path, rect: Any, rgb: tuple[int, ...], tol: int = 40) -> int:
    """How many pixels inside ``rect`` (window coordinates, origin bottom-left) are near ``rgb``."""
    import pyglet

    img = pyglet.image.load(str(path)).get_image_data()
    w = img.width
    data = img.get_data("RGB", w * 3)
    n = 0
    for y in range(int(rect.bottom), int(rect.top)):
        row = y * w * 3
        for x in range(int(rect.left), int(rect.right), 2):
            i = row + 3 * x
            if all(abs(data[i + k] - rgb[k]) <= tol for k in range(3)):
                n += 1
    return n


def relay_match(app: Any) -> Any:
    code = app.session.model.match
    return app.session.server.relay.core.matches[code]


BLUE = geo.PALETTE["blue"][:3]
# Player 0 (the window) has 3-blue-star, which matches the centre 1-red-star by shape; the rival
# has 1-green-moon, which matches it by count. Once the moon is on the pile, the star no longer fits.
RACE = deck(["1-red-star", "3-blue-star", "2-yellow-moon", "5-yellow-moon"],
            ["2-green-triangle", "1-green-moon", "4-green-star", "5-green-star"])


def test_the_window_plays_every_game_through_its_registry(xdisplay: str) -> None:
    from protocol.rules import GAMES
    from client.window.scenes import scene_for, title
    from client.window.scenes.registry import WINDOW_GAMES

    assert set(WINDOW_GAMES) == set(GAMES)
    scenes = {scene_for(name) for name in GAMES}
    assert len(scenes) == len(GAMES)  # one scene class per game
    assert scene_for("roll_your_own") is scene_for("ryo") and title("takeaway")
    with pytest.raises(ValueError):
        scene_for("chess")


@pytest.mark.integration
def test_a_play_is_drawn_on_the_very_next_frame(xdisplay: str, tmp_path: Path) -> None:
    from pyglet.window import key, mouse

    async def scenario() -> None:
        app = make_app(mode="bot", decks=(RACE,), bot_s=20.0, settings={**FAST, "countdown_s": 0.6})
        task = await started(app)
        try:
            await until(app, lambda: app.describe().get("phase") == "countdown"
                                 and app.describe()["big"] in ("1", "GO!"), LONG)
            app.request_screenshot(str(tmp_path / "countdown.png"))
            await app.next_frame()
            await until(app, lambda: app.describe().get("phase") == "running", LONG)
            await until(app, lambda: app.describe()["big"] == "", LONG)  # the GO! band has gone
            before = app.describe()
            assert before["piles"][0] == "1-red-star" and before["hand"][0] == "3-blue-star"
            pile0 = app.scene.layout.piles[0]
            app.request_screenshot(str(tmp_path / "table_before.png"))
            await app.next_frame()
            assert colour_pixels(tmp_path / "table_before.png", pile0, BLUE) == 0
            inputs = app.stats.inputs
            press(app, key._1, key.LEFT)
            app.request_screenshot(str(tmp_path / "table_predicted.png"))
            await app.next_frame()  # one frame: the one that handles the keys
            after = app.describe()
            assert after["piles"][0] == "3-blue-star", after
            assert after["pile_rings"][0] == "pending"  # the relay has not answered yet
            assert after["hand"][0] == "?"  # the card drawn in its place is not known yet
            assert colour_pixels(tmp_path / "table_predicted.png", pile0, BLUE) > 200  # really on screen
            assert app.stats.inputs == inputs + 2 and app.stats.summary()["late_inputs"] == 0
            assert app.stats.summary()["input_frames_max"] == 1
            # confirmed by the relay: the ring goes, the screen equals the relay's state
            await until(app, lambda: app.describe()["pile_rings"][0] != "pending", LONG)
            await until(app, lambda: "?" not in app.describe()["hand"], LONG)
            state = relay_match(app).state
            shown = app.describe()
            assert shown["piles"] == [str(state.top(0)), str(state.top(1))]
            assert sorted(shown["hand"]) == sorted(str(c) for c in state.hands[0])
            app.request_screenshot(str(tmp_path / "table.png"))
            await app.next_frame()

            # the mouse: drag 2-yellow-moon (slot 2) onto pile 1 (2-green-triangle: same count)
            lay = app.scene.layout
            src, dst = lay.hand[1], lay.piles[1]
            w = app.window
            w.dispatch_event("on_mouse_press", int(src.x), int(src.y), mouse.LEFT, 0)
            for k in range(1, 6):
                x = int(src.x + (dst.x - src.x) * k / 5)
                y = int(src.y + (dst.y - src.y) * k / 5)
                w.dispatch_event("on_mouse_drag", x, y, 5, 5, mouse.LEFT, 0)
            await app.next_frame()
            assert app.describe()["piles"][1] == "2-green-triangle"  # still dragging
            w.dispatch_event("on_mouse_release", int(dst.x), int(dst.y), mouse.LEFT, 0)
            await app.next_frame()
            assert app.describe()["piles"][1] == "2-yellow-moon"
            # click a card, then a pile it does not match: refused at once, nothing moves
            w.dispatch_event("on_mouse_press", int(lay.hand[2].x), int(lay.hand[2].y), mouse.LEFT, 0)
            w.dispatch_event("on_mouse_release", int(lay.hand[2].x), int(lay.hand[2].y), mouse.LEFT, 0)
            w.dispatch_event("on_mouse_press", int(lay.piles[0].x), int(lay.piles[0].y), mouse.LEFT, 0)
            await app.next_frame()
            shown = app.describe()
            assert shown["piles"] == ["3-blue-star", "2-yellow-moon"] and shown["hand"][2] == "5-yellow-moon"
            assert shown["message"] == "doesn't match"
            assert app.stats.summary()["late_inputs"] == 0
        finally:
            assert await stop(app, task) == 0

    asyncio.run(asyncio.wait_for(scenario(), SCENARIO_S))


@pytest.mark.integration
def test_a_lost_race_bounces_back_and_the_screen_then_matches_the_relay(xdisplay: str, tmp_path: Path) -> None:
    from pyglet.window import key

    from client.net import Impairment
    from client import Player

    async def scenario() -> None:
        app = make_app(mode="host", decks=(RACE,), settings={**FAST, "countdown_s": 0.3})
        task = await started(app)
        rival = None
        try:
            await until(app, lambda: app.session.status == "waiting" and app.session.model.match, LONG)
            app.request_screenshot(str(tmp_path / "host_waiting.png"))
            await app.next_frame()
            assert app.describe()["big"].startswith("Match code")
            rival = Player(app.session.address, "rival")
            await rival.__aenter__()
            await rival.join(app.session.model.match, timeout=LONG)
            await until(app, lambda: app.describe().get("phase") == "running", LONG)
            await asyncio.wait_for(_until_running(rival), LONG)
            # The window's connection gets a long delay each way: its play reaches the relay after
            # the rival's, and it does not hear of the rival's play before pressing.
            conn = app.session.player.conn
            conn.impairment = Impairment(delay_s=1.0)
            await rival.act(blink.PlayCard("1-green-moon", 0))
            press(app, key._1, key.LEFT)
            app.request_screenshot(str(tmp_path / "race_predicted.png"))
            await app.next_frame()
            shown = app.describe()
            assert shown["piles"][0] == "3-blue-star" and shown["pile_rings"][0] == "pending"
            # the relay's verdict: a bounce, animated back to the hand, with its reason -- all on
            # the frame that took the verdict
            await until(app, lambda: app.describe()["flights"] == ["3-blue-star"], LONG)
            shown = app.describe()
            assert shown["ghost"] == "3-blue-star" and shown["message"] == "too slow — pile changed"
            assert app.session.model.bounces[-1].code == "pile_changed"
            app.request_screenshot(str(tmp_path / "bounce.png"))
            await app.next_frame()
            conn.impairment = None
            await until(app, lambda: not app.describe()["flights"], LONG)
            await until(app, lambda: app.describe()["pile_rings"][0] != "pending", LONG)
            state = relay_match(app).state
            shown = app.describe()
            assert shown["piles"] == [str(state.top(0)), str(state.top(1))] == ["1-green-moon", "2-green-triangle"]
            assert "3-blue-star" in shown["hand"]
            assert sorted(shown["hand"]) == sorted(str(c) for c in state.hands[0])
            assert shown["opp_hand"] == len(state.hands[1])
            assert shown["draw"] == [str(len(state.draw[0])), str(len(state.draw[1]))]
            app.request_screenshot(str(tmp_path / "after_bounce.png"))
            await app.next_frame()
        finally:
            if rival is not None:
                await rival.close()
            await stop(app, task)

    asyncio.run(asyncio.wait_for(scenario(), SCENARIO_S))


async def _until_running(player: Any) -> None:
    while player.model.state() is None or player.model.state().phase != "running":
        await player.wait_change(1.0)


# Nobody can play from the start: hands are green/blue triangles and moons of 4 and 5, the centre
# and draw cards red or yellow stars of 1-3. First a flip (both still have a draw card), then a pick.
STALE = deck(["1-red-star", "4-green-triangle", "5-green-moon", "4-blue-moon", "3-red-star"],
             ["2-red-star", "5-blue-triangle", "4-green-moon", "5-green-triangle", "1-yellow-star"], full=False)


@pytest.mark.integration
def test_the_stalemate_pause_and_the_pick_with_its_timer(xdisplay: str, tmp_path: Path) -> None:
    from pyglet.window import key

    from client import Player

    async def scenario() -> None:
        # a countdown long enough to be drawn (and ticked) even when frames come slowly
        settings = {**FAST, "countdown_s": 3.0, "stalemate_pause_s": 1.0, "pick_time_s": 6.0}
        app = make_app(mode="host", decks=(STALE,), settings=settings, mute=False)
        task = await started(app)
        rival = None
        try:
            await until(app, lambda: app.session.model is not None and app.session.model.match, LONG)
            rival = Player(app.session.address, "rival")
            await rival.__aenter__()
            await rival.join(app.session.model.match, timeout=LONG)
            await until(app, lambda: app.describe().get("phase") == "stalled", LONG)
            assert app.describe()["big"] == "Stalemate" and "flip" in app.describe()["sub"]
            app.request_screenshot(str(tmp_path / "stalemate.png"))
            await app.next_frame()
            await until(app, lambda: app.describe().get("phase") == "picking", LONG)
            await app.next_frame()
            shown = app.describe()
            assert shown["big"] == "Stalemate: choose a card" and shown["timer_bar"]
            assert shown["piles"] == ["3-red-star", "1-yellow-star"]  # the flip happened
            app.request_screenshot(str(tmp_path / "picking.png"))
            await app.next_frame()
            press(app, key._1)
            await app.next_frame()
            assert app.describe()["big"] == "Card chosen"
            # the rival never chooses: the relay does when the time is up; play resumes
            await until(app, lambda: app.describe().get("phase") == "running", LONG)
            await app.next_frame()
            state = relay_match(app).state
            shown = app.describe()
            assert shown["piles"] == ["4-green-triangle", "5-blue-triangle"] == [str(state.top(0)), str(state.top(1))]
            assert sorted(x for x in shown["hand"] if x) == sorted(str(c) for c in state.hands[0])
            assert "stalemate" in app.sounds.played and "tick" in app.sounds.played
        finally:
            if rival is not None:
                await rival.close()
            await stop(app, task)

    asyncio.run(asyncio.wait_for(scenario(), SCENARIO_S))


# Every card red: everything matches, a game is over in a few plays.
REDS = deck([f"{n}-red-star" for n in range(1, 6)], [f"{n}-red-triangle" for n in range(1, 6)], full=False)


@pytest.mark.integration
def test_autoplay_to_the_match_result_then_a_rematch_that_stays_on_the_table(xdisplay: str, tmp_path: Path) -> None:
    """The rematch's table must not find the previous match's ``match_over`` and flip to
    the results while the rematch runs; it shows the results once the rematch itself is over."""
    from pyglet.window import key

    async def scenario() -> None:
        app = make_app(mode="bot", decks=(REDS,), bot_s=0.08, autoplay=True, autoplay_s=0.08)
        task = await started(app)
        try:
            await until(app, lambda: app.describe()["scene"] == "results", LONG)
            await app.next_frame()
            match = relay_match(app)
            assert match.status == "over" and match.winner is not None
            shown = app.describe()
            names = list(app.session.model.players)
            want = "You win the match!" if match.winner == app.session.model.seat else f"{names[match.winner]} wins the match"
            assert shown["title"] == want
            assert shown["games"] and "out of cards" in shown["games"][0]
            app.request_screenshot(str(tmp_path / "results.png"))
            await app.next_frame()
            # slow players for the rematch: it lasts several seconds (longer than the 1.6 s after
            # which a table that saw a match_over goes to the results)
            for bot in (app.session.bot, app.session.autobot):
                bot.reaction_s = 0.8
            first_game = match.game_index
            press(app, key.R)
            await until(app, lambda: app.describe()["scene"] == "table", LONG)
            assert match.status == "playing" and match.game_index > first_game
            tables: set[int] = set()
            scenes: list[str] = []
            deadline = time.monotonic() + 2 * LONG
            while app.describe()["scene"] != "results":  # every frame until the results come back
                assert time.monotonic() < deadline, "the rematch did not end"
                scenes.append(app.describe()["scene"])
                if app.scene.name == "table":
                    tables.add(id(app.scene))
                await app.next_frame()
            assert match.status == "over", "the results came while the rematch was still running"
            assert len(tables) == 1 and set(scenes) == {"table"}, scenes
            app.request_screenshot(str(tmp_path / "rematch_results.png"))
            await app.next_frame()
            assert app.describe()["title"] != "Match drawn"
        finally:
            assert await stop(app, task) == 0

    asyncio.run(asyncio.wait_for(scenario(), SCENARIO_S))


@pytest.mark.integration
def test_a_rated_match_against_a_bot_ends_on_the_rating_change(xdisplay: str, tmp_path: Path) -> None:
    """With a key of its own, and the bot with its difficulty's (as ``blink play`` runs them), the
    match is rated and the results screen says by how much the player's rating moved."""
    from client.identity import load_identity
    from client.window import App, AppConfig, SessionConfig

    async def scenario() -> None:
        relay = RelayConfig(games=fixed_deck_games((REDS,)), between_games_s=0.5)
        session = SessionConfig(name="you", settings=dict(FAST), relay_config=relay, autoplay=True,
                                autoplay_reaction_s=0.08, seed=7, request_timeout_s=LONG,
                                identity=load_identity(tmp_path / "you.key"), bot_identities=True)
        app = App(AppConfig(mode="bot", bot_reaction_s=0.08, width=1100, height=720, mute=True, session=session))
        task = await started(app)
        try:
            await until(app, lambda: app.describe()["scene"] == "results" and bool(app.describe().get("rating")), LONG)
            await app.next_frame()
            shown = app.describe()
            rated = app.session.model.rating
            assert rated is not None and rated.matches == 1
            assert shown["rating"].startswith("your rating 0.00 \u2192 ") and "1 rated match" in shown["rating"]
            won = relay_match(app).winner == app.session.model.seat
            assert (rated.after > rated.before) == won, (shown["rating"], won)
            app.request_screenshot(str(tmp_path / "rated_results.png"))
            await app.next_frame()
        finally:
            await stop(app, task)

    asyncio.run(asyncio.wait_for(scenario(), SCENARIO_S))


@pytest.mark.integration
def test_menu_keys_and_a_resized_window(xdisplay: str, tmp_path: Path) -> None:
    from pyglet.window import key

    async def scenario() -> None:
        app = make_app(mode="menu", bot_s=BOT_LEVELS["normal"])
        task = await started(app)
        try:
            await until(app, lambda: app.session.status == "ready", LONG)
            await app.next_frame()
            assert app.describe()["scene"] == "menu" and "local relay on mqtt://127.0.0.1:" in app.describe()["status"]
            assert app.describe()["index"] == 2 and app.describe()["game"] == "blink"  # "Play bots"
            press(app, key.DOWN, key.DOWN)
            await app.next_frame()
            assert app.describe()["index"] == 4
            press(app, key.J)
            app.window.dispatch_event("on_text", "j")
            app.window.dispatch_event("on_text", "ab1")
            await app.next_frame()
            assert app.describe()["typing"] and app.describe()["code"] == "AB1"
            app.request_screenshot(str(tmp_path / "menu.png"))
            await app.next_frame()
            press(app, key.ESCAPE, key.UP, key.UP, key.RIGHT)
            await app.next_frame()
            assert not app.describe()["typing"] and app.describe()["level"] == "hard"
            press(app, key.ENTER)
            await until(app, lambda: app.describe().get("phase") == "countdown", LONG)
            app.window.set_size(720, 480)
            await until(app, lambda: app.scene.layout.w == 720, LONG)
            await until(app, lambda: app.describe().get("phase") == "running", LONG)
            await app.next_frame()
            lay = app.scene.layout
            for view, rect in zip(app.scene.hand, lay.hand):
                assert (view.x, view.w) == (rect.x, rect.w)
            app.request_screenshot(str(tmp_path / "small_window.png"))
            await app.next_frame()
            press(app, key.ESCAPE, key.ESCAPE)  # twice: leave (forfeit) and back to the menu
            await until(app, lambda: app.describe()["scene"] == "menu", LONG)
        finally:
            assert await stop(app, task) == 0
        assert app.stats.summary()["late_inputs"] == 0

    asyncio.run(asyncio.wait_for(scenario(), SCENARIO_S))


@pytest.mark.integration
def test_blink_play_autoplay_screenshot_and_frame_stats(xdisplay: str, tmp_path: Path) -> None:
    """The command line end to end: frames are drawn, inputs show on the next frame, the PNG is the
    table. How fast the frames come is measured by bench/frame_bench.py, not here."""
    shot, stats = tmp_path / "out.png", tmp_path / "stats.json"
    out = subprocess.run([sys.executable, "-m", "client.cli", "play", "--autoplay", "--screenshot", str(shot),
                          "--quit-after", "20", "--frame-stats", str(stats), "--mute"],
                         capture_output=True, text=True, cwd=ROOT, timeout=4 * LONG,
                         env={**os.environ, "DISPLAY": xdisplay, "XDG_DATA_HOME": str(tmp_path / "data")})
    assert out.returncode == 0, out.stderr
    data = json.loads(stats.read_text())
    assert data["frames"] > 0 and data["frame_ms"]["max"] > 0, data
    assert data["late_inputs"] == 0 and data["scene"] == "table" and data["session"] == "playing"
    # the picture is the table: felt, card faces and the blue backs, not a blank or the menu
    import pyglet

    img = pyglet.image.load(str(shot)).get_image_data()
    raw = img.get_data("RGB", img.width * 3)
    pixels = [tuple(raw[i:i + 3]) for i in range(0, len(raw), 3 * 97)]

    def share(rgb: tuple[int, int, int], tol: int = 12) -> float:
        return sum(1 for p in pixels if all(abs(p[k] - rgb[k]) <= tol for k in range(3))) / len(pixels)

    # what is on the table after 20 s of play varies (hands run low, draw piles run out); whatever the
    # moment, the felt fills most of it and at least one card shows its face
    assert share((15, 77, 51)) > 0.4  # the felt
    assert share(geo.FACE[:3]) > 0.015  # card faces (one card is about 0.035 of the window)


@pytest.mark.integration
def test_joining_a_code_that_does_not_exist_says_why_in_the_window(xdisplay: str, tmp_path: Path) -> None:
    from pyglet.window import key

    from relay.hosting import LocalServer
    from client.window import App, AppConfig, SessionConfig

    async def scenario() -> None:
        async with LocalServer(None, 3) as server:
            session = SessionConfig(server_url=server.address.url, name="you")
            app = App(AppConfig(mode="join", code="ZZZZZ", mute=True, session=session))
            task = await started(app)
            try:
                await until(app, lambda: app.describe().get("big") == "Cannot play", LONG)
                assert "no match" in app.describe()["sub"]
                app.request_screenshot(str(tmp_path / "join_error.png"))
                await app.next_frame()
                press(app, key.ESCAPE)
                await until(app, lambda: app.describe()["scene"] == "menu", LONG)
                assert "no match" in app.describe()["status"]  # the reason stays in view on the menu
            finally:
                assert await stop(app, task) == 1  # the game could not start: exit status 1

    asyncio.run(asyncio.wait_for(scenario(), SCENARIO_S))
