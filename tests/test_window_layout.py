"""What a player sees does not run into itself: every scene in the real window under Xvfb, at the
default size and at 640 x 480, measured rather than eyeballed.

Each scenario plays a short match (the window's own player on autoplay against bots) and, at the
moments that matter -- mid-game, the game-over banner, the results, a replay, the menu -- takes
every text drawn (its box from its position, anchors and laid-out size, the corner HUD included)
and checks that no two intersect, that no text runs into a card (BLINK), that BLINK's text band
covers no pile (but for the countdown, over face-down piles) and keeps its texts inside it, that a
turn-based game's result strip covers nothing of its board (the winning line, every player's dice
row), and that every text is inside the window. Screenshots of each moment go to the test's
tmp_path.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any, Iterable

import pytest

from relay.core import RelayConfig
from tests.test_window import LONG, SCENARIO_S, started, stop, until, xdisplay  # noqa: F401

pytestmark = pytest.mark.timeout(SCENARIO_S + 120)

SIZES = [(1100, 720), (640, 480)]
Box = tuple[float, float, float, float]  # left, bottom, right, top
#: Line boxes are as tall as the font's ascent + descent; glyphs fill less. Two lines closer than
#: that are fine as long as their letters do not touch: only this middle part of a box counts.
INK = 0.8


def text_box(lbl: Any) -> Box | None:
    """Where a visible label's letters are, or None for a label that shows nothing."""
    if not getattr(lbl, "visible", True) or not lbl.text.strip() or lbl.color[3] == 0:
        return None
    w, h = float(lbl.content_width), float(lbl.content_height)
    x, y = float(lbl.x), float(lbl.y)
    left = {"left": x, "center": x - w / 2, "right": x - w}[lbl.anchor_x]
    bottom = {"center": y - h / 2, "top": y - h, "bottom": y, "baseline": y - h * 0.25}[lbl.anchor_y]
    pad = h * (1 - INK) / 2
    return left, bottom + pad, left + w, bottom + h - pad


def rect_box(r: Any) -> Box:
    return r.left, r.bottom, r.right, r.top


def meet(a: Box, b: Box, slack: float = 0.5) -> bool:
    return a[0] < b[2] - slack and b[0] < a[2] - slack and a[1] < b[3] - slack and b[1] < a[3] - slack


def labels_of(obj: Any) -> Iterable[tuple[str, Any]]:
    """The labels a scene (or the replay bar) keeps as attributes, one level into lists and dicts."""
    import pyglet

    for name, value in vars(obj).items():
        if isinstance(value, pyglet.text.Label):
            yield name, value
        elif isinstance(value, (list, tuple)):
            for i, v in enumerate(value):
                if isinstance(v, pyglet.text.Label):
                    yield f"{name}[{i}]", v


def drawn_texts(app: Any) -> dict[str, Any]:
    """Every text on screen now, by a name saying where it comes from."""
    from client.window.scenes import TurnBasedScene
    from client.window.scenes.turnbased import PARTS

    scene = app.scene
    out: dict[str, Any] = {}
    if isinstance(scene, TurnBasedScene):
        for part in PARTS:
            for i, lbl in enumerate(scene.drawn_labels(part)):
                out[f"{part}[{i}] {lbl.text!r}"] = lbl
    else:
        for name, lbl in labels_of(scene):
            out[f"{name} {lbl.text!r}"] = lbl
    if app.overlay is not None:
        for name, lbl in labels_of(app.overlay):
            out[f"replay.{name} {lbl.text!r}"] = lbl
    if app.hud is not None:
        out[f"hud {app.hud.label.text!r}"] = app.hud.label
    return out


def overlaps(app: Any) -> list[str]:
    """What on screen runs into what (empty: nothing)."""
    from client.window.scenes.table import TableScene
    from client.window.scenes import TurnBasedScene

    w, h = app.window_size
    boxes = {k: b for k, lbl in drawn_texts(app).items() if (b := text_box(lbl)) is not None}
    found = []
    for k, b in boxes.items():
        if b[0] < -0.5 or b[2] > w + 0.5 or b[1] < -0.5 or b[3] > h + 0.5:
            found.append(f"{k} leaves the window: {tuple(round(v) for v in b)}")
    names = sorted(boxes)
    scene = app.scene
    over_part = isinstance(scene, TurnBasedScene)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            if over_part and (a.startswith("over[") != b.startswith("over[")) and \
                    "board[" in (a if b.startswith("over[") else b):
                continue  # a result or status panel is drawn over the board: checked below as a panel
            if meet(boxes[a], boxes[b]):
                found.append(f"{a} runs into {b}")
    if isinstance(scene, TableScene) and scene.board is not None and scene.board.playing:
        lay = scene.layout
        cards = {"hand": lay.hand, "opp_hand": lay.opp_hand, "piles": lay.piles,
                 "draw": (lay.my_draw, lay.opp_draw)}
        panel = scene.band_rect  # the text band, when one is drawn
        for k, b in boxes.items():
            if k.startswith(("big_", "sub_")):
                continue  # the band's own texts are on its panel, checked as the panel
            for what, rects in cards.items():
                for j, r in enumerate(rects):
                    if meet(b, rect_box(r)):
                        found.append(f"{k} runs into the card {what}[{j}]")
        if panel is not None and scene.band_where != "screen":
            for j, r in enumerate(lay.piles):  # only the countdown may: the piles are face down then
                if meet(rect_box(panel), rect_box(r)) and scene.board.phase != "countdown":
                    found.append(f"the {scene.band_where} band covers pile {j}")
            for k, b in boxes.items():
                if not k.startswith(("big_", "sub_", "hud")) and meet(rect_box(panel), b):
                    found.append(f"the {scene.band_where} band covers {k}")
                if k.startswith(("big_", "sub_")) and not (panel.bottom <= b[1] and b[3] <= panel.top):
                    found.append(f"{k} is not inside its band")
    if over_part and scene.over_rect is not None:
        for k, b in boxes.items():
            if k.startswith("board[") and meet(rect_box(scene.over_rect), b):
                found.append(f"the result panel covers {k}")
    return found


async def look(app: Any, path: Path) -> None:
    """Check what is on screen now, then save it (the next frame) for a person to look at."""
    found = overlaps(app)
    app.request_screenshot(str(path))
    await app.next_frame()
    assert not found, f"{path.name}: " + "; ".join(found)


def make(game: str, size: tuple[int, int], players: int = 2, settings: dict[str, Any] | None = None,
         record: Path | None = None, bot_s: float = 0.3) -> Any:
    from client.window import App, AppConfig, SessionConfig

    session = SessionConfig(name="you", game=game, players=players, settings=dict(settings or {}), seed=5,
                            autoplay=True, autoplay_reaction_s=0.1, request_timeout_s=LONG,
                            relay_config=RelayConfig(between_games_s=1.0),
                            record_dir=str(record) if record is not None else None)
    return App(AppConfig(mode="bot", bot_reaction_s=bot_s, width=size[0], height=size[1], mute=True,
                         session=session))


def shown(app: Any, key: str) -> str:
    return str(app.describe().get(key) or "")


@pytest.mark.integration
@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_blink_table_result_band_results_and_replay(xdisplay: str, tmp_path: Path,  # noqa: F811
                                                    size: tuple[int, int]) -> None:
    from client import list_replays
    from client.window.viewmodels import load_replay
    from client.window import App, AppConfig, SessionConfig

    tag = f"{size[0]}x{size[1]}"
    rec = tmp_path / "replays"

    async def play() -> None:
        app = make("blink", size, settings={"countdown_s": 0.3, "best_of": 1, "stalemate_pause_s": 0.2,
                                            "pick_time_s": 1.0}, record=rec)
        task = await started(app)
        try:
            await until(app, lambda: shown(app, "phase") == "running" and shown(app, "big") == "")
            await until(app, lambda: app.session.model.clock.rtt_ns is not None and "RTT" in app.hud.label.text)
            await look(app, tmp_path / f"blink_{tag}.png")
            await until(app, lambda: "win" in shown(app, "big") or "Tie" in shown(app, "big"))
            await look(app, tmp_path / f"blink_over_{tag}.png")
            await until(app, lambda: app.scene.name == "results")
            await app.next_frame()
            await look(app, tmp_path / f"blink_results_{tag}.png")
        finally:
            await stop(app, task)

    asyncio.run(asyncio.wait_for(play(), SCENARIO_S))
    entries = list_replays(str(rec))
    assert entries, "the match was not recorded"
    replay = load_replay(Path(entries[0].path).read_text().splitlines(), cut_unfinished=True)

    async def watch() -> None:
        app = App(AppConfig(mode="replay", mute=True, width=size[0], height=size[1], replay=replay, replay_at=20,
                            session=SessionConfig(game="blink")))
        task = await started(app)
        try:
            await until(app, lambda: app.describe()["replay"]["index"] == 20 and shown(app, "phase") == "running")
            for _ in range(3):
                await app.next_frame()
            await look(app, tmp_path / f"replay_{tag}.png")
            assert "RTT" not in app.hud.label.text and "offset" not in app.hud.label.text  # no relay in a replay
        finally:
            await stop(app, task)

    asyncio.run(asyncio.wait_for(watch(), SCENARIO_S))


@pytest.mark.integration
@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("game,players,settings", [
    ("takeaway", 2, {"layout": "ring"}),
    ("sequence", 3, {"sequence_length": 3}),
    ("ryo", 3, {"rolls_per_round": 3, "rounds_per_game": 2, "games_per_match": 1}),
], ids=["takeaway", "sequence", "ryo3"])
def test_turn_based_tables_and_their_result_banner(xdisplay: str, tmp_path: Path, size: tuple[int, int],  # noqa: F811
                                                   game: str, players: int, settings: dict[str, Any]) -> None:
    tag = f"{game}_{size[0]}x{size[1]}"

    async def scenario() -> None:
        app = make(game, size, players=players, settings=settings)
        task = await started(app)
        try:
            if game == "ryo":  # the dice are out and a roll is being shown
                await until(app, lambda: shown(app, "phase") not in ("build", "over")
                            and app.scene.vm.shown_roll(time.time_ns()) is not None)
            else:
                await until(app, lambda: shown(app, "phase") in ("turn", "move"))
            await until(app, lambda: "RTT" in app.hud.label.text)
            await app.next_frame()
            await look(app, tmp_path / f"{tag}.png")
            await until(app, lambda: shown(app, "banner") == "GAME OVER")
            await app.next_frame()
            await look(app, tmp_path / f"{tag}_over.png")
            await until(app, lambda: app.scene.name == "results")
            await app.next_frame()
            await look(app, tmp_path / f"{tag}_results.png")
        finally:
            await stop(app, task)

    asyncio.run(asyncio.wait_for(scenario(), SCENARIO_S))


@pytest.mark.integration
@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_the_menu(xdisplay: str, tmp_path: Path, size: tuple[int, int]) -> None:  # noqa: F811
    from pyglet.window import key

    from client.window import App, AppConfig, SessionConfig
    from tests.test_window import press

    async def scenario() -> None:
        app = App(AppConfig(mode="menu", mute=True, width=size[0], height=size[1],
                            session=SessionConfig(name="you", request_timeout_s=LONG)))
        task = await started(app)
        try:
            await until(app, lambda: app.session.status == "ready")
            for game in ("blink", "takeaway", "sequence", "ryo"):
                await until(app, lambda: app.describe()["game"] == game)
                await app.next_frame()
                await look(app, tmp_path / f"menu_{game}_{size[0]}x{size[1]}.png")
                press(app, key.G)
        finally:
            await stop(app, task)

    asyncio.run(asyncio.wait_for(scenario(), SCENARIO_S))
