"""The menu in the real window under Xvfb: the chosen game's own title and tagline, every item's
detail clear of its name, and the status line -- an error included -- inside the window, at the
default size and at the smallest one. Screenshots go to each test's tmp_path.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.test_window import SCENARIO_S, press, started, stop, until, xdisplay  # noqa: F401

pytestmark = pytest.mark.timeout(SCENARIO_S + 120)


def _check_menu(scene: Any, width: int) -> None:
    from client.window.scenes import title
    from client.window.scenes.registry import window_game

    game = scene.describe()["game"]
    assert scene.title.text == title(game) and scene.tagline.text == window_game(game).tagline
    for lbl in (scene.title, scene.tagline, scene.status):
        assert lbl.content_width <= width * 0.96 + 1, (lbl.text, lbl.content_width, width)
    for name, detail in zip(scene.texts, scene.details):
        if not detail.text:
            continue
        name_right = name.x + name.content_width
        detail_left = detail.x - detail.content_width  # anchored on its right
        assert name_right + 4 <= detail_left, (name.text, detail.text, name_right, detail_left)
    cards = [view.style for view in scene.samples]
    assert cards == (["face"] * 3 if game == "blink" else ["none"] * 3), (game, cards)


@pytest.mark.parametrize("width,height", [(1100, 720), (640, 420)])
def test_the_menu_names_the_chosen_game_and_every_line_fits(xdisplay: str, tmp_path: Path,  # noqa: F811
                                                            width: int, height: int) -> None:
    from pyglet.window import key

    from client.window import App, AppConfig
    from client.window.scenes.registry import WINDOW_GAMES
    from client.window import SessionConfig

    async def scenario() -> None:
        # a server where nothing listens: the menu's status line gets a long network error to fit
        session = SessionConfig(name="you", game="blink", server_url="mqtt://127.0.0.1:1", request_timeout_s=5)
        app = App(AppConfig(mode="menu", mute=True, width=width, height=height, session=session))
        task = await started(app)
        try:
            from client.window.scenes import MenuScene

            scene = app.scene
            assert isinstance(scene, MenuScene)
            for i, game in enumerate(WINDOW_GAMES):
                if i:
                    press(app, key.G)
                await until(app, lambda: scene.describe()["game"] == game)
                await app.next_frame()
                _check_menu(scene, width)
                app.request_screenshot(str(tmp_path / f"menu_{game}_{width}.png"))
                await app.next_frame()
            scene.error = "takeaway settings: " + "a refusal far too long for one line of the menu " * 4
            await app.next_frame()
            await app.next_frame()
            assert scene.status.text.startswith("⚠ takeaway settings") and scene.status.text.endswith("…")
            _check_menu(scene, width)
            app.request_screenshot(str(tmp_path / f"menu_error_{width}.png"))
            await app.next_frame()
        finally:
            await stop(app, task)

    asyncio.run(asyncio.wait_for(scenario(), SCENARIO_S))


def test_arrows_only_on_rows_left_and_right_change(xdisplay: str, tmp_path: Path) -> None:  # noqa: F811
    from pyglet.window import key

    from client.window import App, AppConfig
    from client.window.scenes import MenuScene
    from client.window.scenes.registry import WINDOW_GAMES, seat_choices, window_game
    from client.window import SessionConfig

    async def scenario() -> None:
        app = App(AppConfig(mode="menu", mute=True, session=SessionConfig(name="you", game="blink")))
        task = await started(app)
        try:
            scene = app.scene
            assert isinstance(scene, MenuScene)
            await until(app, lambda: app.session.status == "ready" and "fps" in app.hud.label.text)
            assert "RTT" not in app.hud.label.text  # nothing measured before a game: no dashes either
            for i, game in enumerate(WINDOW_GAMES):
                if i:
                    press(app, key.G)
                await until(app, lambda: scene.describe()["game"] == game)
                await app.next_frame()
                entry = window_game(game)
                for row, changes in (("game", True), ("players", len(seat_choices(game)) > 1),
                                     ("options", len(entry.presets) > 1), ("timer", entry.turn_timer)):
                    text = scene.details[scene.row(row)].text
                    assert ("◀" in text and "▶" in text) == changes, (game, row, text)
                    # and Left/Right there do what the arrows say
                    scene.index = scene.row(row)
                    before = (scene.describe()["players"], scene.describe()["options"], scene.describe()["timer"],
                              scene.describe()["game"])
                    if row != "game":
                        press(app, key.RIGHT)
                        await app.next_frame()
                        after = (scene.describe()["players"], scene.describe()["options"],
                                 scene.describe()["timer"], scene.describe()["game"])
                        assert (after != before) == changes, (game, row, before, after)
                        press(app, key.LEFT)
                        await app.next_frame()
                app.request_screenshot(str(tmp_path / f"menu_rows_{game}.png"))
                await app.next_frame()
                scene.index = scene.row("game")
        finally:
            await stop(app, task)

    asyncio.run(asyncio.wait_for(scenario(), SCENARIO_S))
