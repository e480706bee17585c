"""How the window ends: its exit status and what it leaves on stderr, in the real window under Xvfb.

- a code mistyped in the menu shows "Cannot play" in the window; the player goes back, plays a bot,
  quits: status 0, and nothing on stderr -- the window already answered the mistake;
- a game the command line asked for that cannot start ends the command with status 1 and its reason
  as one plain line ("blink play: ..."), not a logging record.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest

from tests.test_window import LONG, SCENARIO_S, make_app, press, started, stop, until, xdisplay  # noqa: F401

pytestmark = pytest.mark.timeout(SCENARIO_S + 120)


@pytest.mark.integration
def test_a_mistyped_code_in_the_menu_leaves_a_clean_exit(xdisplay: str, tmp_path: Path,  # noqa: F811
                                                         capfd: pytest.CaptureFixture[str],
                                                         caplog: pytest.LogCaptureFixture) -> None:
    from pyglet.window import key

    async def mistype(app: Any, shot: Path) -> None:
        press(app, key.J)
        await app.next_frame()
        app.window.dispatch_event("on_text", "ZZZZZ")
        await app.next_frame()
        assert app.describe()["code"] == "ZZZZZ"
        press(app, key.ENTER)
        await until(app, lambda: app.session.status == "error" and app.describe().get("big") == "Cannot play")
        app.request_screenshot(str(shot))
        await app.next_frame()
        press(app, key.ESCAPE)
        await until(app, lambda: app.scene.name == "menu")
        await until(app, lambda: app.describe()["status"].startswith("⚠"))  # the menu still says why

    async def scenario() -> int:
        app = make_app(mode="menu", bot_s=5.0)
        task = await started(app)
        try:
            await until(app, lambda: app.session.status == "ready")
            await mistype(app, tmp_path / "mistyped_code.png")
            press(app, key.B)  # the player goes on: a bot game
            await until(app, lambda: app.session.status == "playing"
                        and app.describe().get("phase") in ("countdown", "running"))
            app.request_screenshot(str(tmp_path / "then_a_game.png"))
            await app.next_frame()
            press(app, key.ESCAPE)
            await app.next_frame()
            press(app, key.ESCAPE)  # twice: leave the match
            await until(app, lambda: app.scene.name == "menu" and app.session.status == "ready")
            await mistype(app, tmp_path / "mistyped_again.png")  # and quits from the menu after another typo
        except BaseException:
            await stop(app, task)
            raise
        return await stop(app, task)

    with caplog.at_level(logging.WARNING, logger="blink.window"):
        rc = asyncio.run(asyncio.wait_for(scenario(), SCENARIO_S))
    assert rc == 0
    assert not [r for r in caplog.records if r.name == "blink.window" and r.levelno >= logging.WARNING], \
        [r.getMessage() for r in caplog.records]
    assert "blink play:" not in capfd.readouterr().err


@pytest.mark.integration
def test_a_game_the_command_line_asked_for_that_cannot_start_is_one_line_and_status_1(
        xdisplay: str, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> None:  # noqa: F811
    async def scenario() -> int:
        app = make_app(mode="join")
        app.config.code = "ZZZZZ"  # nobody created it on this fresh local relay
        task = await started(app)
        try:
            await until(app, lambda: app.describe().get("big") == "Cannot play")
        except BaseException:
            await stop(app, task)
            raise
        return await stop(app, task)

    capfd.readouterr()
    with caplog.at_level(logging.WARNING, logger="blink.window"):
        rc = asyncio.run(asyncio.wait_for(scenario(), SCENARIO_S))
    assert rc == 1
    lines = [ln for ln in capfd.readouterr().err.splitlines() if ln.strip()]
    assert [ln for ln in lines if ln.startswith("blink play:")] == [
        "blink play: the relay refused: no match with code 'ZZZZZ'"], lines
    assert not [r for r in caplog.records if r.name == "blink.window" and r.levelno >= logging.WARNING]
