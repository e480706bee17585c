"""What the window says, in the real window under Xvfb: a replay of your own match says "your
pile" (never "you's pile"), shows no pile keys (← → step the replay there) and leaves Esc to the
replay's bar; after a rematch the game count starts again with the score; a seat named "you" is not
"you (you)"; a bad watch code says "Cannot watch"; a replay with no game to show says why, never
"connecting…". Screenshots go to each test's tmp_path.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from client.matchstate import MatchState
from client.window import texts
from relay.hosting import LocalServer
from tests.test_replay import drive
from tests.test_window import LONG, SCENARIO_S, started, stop, until, xdisplay  # noqa: F401

pytestmark = pytest.mark.timeout(SCENARIO_S + 120)


def _renamed(lines: list[str], old: str, new: str) -> list[str]:
    """The log with a player's name changed (names are not part of what the seeds commit to)."""
    def walk(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: walk(x) for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x) for x in v]
        return new if v == old else v
    return [json.dumps(walk(json.loads(line))) for line in lines]


def test_the_words_for_names_and_hints() -> None:
    assert texts.possessive("you") == "your" and texts.possessive("ann") == "ann's"
    assert texts.possessive("james") == "james'"
    assert texts.with_you("you", True) == "you" and texts.with_you("ann", True) == "ann  (you)"
    assert texts.with_you("you", False) == "you"
    assert texts.replay_hint("watching a (bottom) and b (top)     Esc  menu") == "watching a (bottom) and b (top)"
    assert texts.replay_hint("Esc  menu") == ""
    assert MatchState.read({"status": "playing", "results": []}).game_number(4) == 1
    assert MatchState.read({"status": "over", "results": [{}, {}]}).game_number(4) == 2
    assert MatchState.read({"status": "playing"}).game_number(4) == 5  # no results listed: the relay's index


def test_a_replay_of_your_own_match_after_a_rematch_reads_right(xdisplay: str, tmp_path: Path) -> None:  # noqa: F811
    from pyglet.window import key

    from client.window import App, AppConfig
    from client.window.scenes.table import TableScene
    from client.window import SessionConfig
    from client.window.viewmodels import load_replay

    lines, _ = drive("blink", seed=11, rematch=True)
    replay = load_replay(_renamed(lines, "ann", "you"))
    kinds = [s.event.type for s in replay.steps]
    again = kinds.index("rematch_started")
    at = next(i for i in range(again, len(kinds)) if kinds[i] == "card_played")  # the rematch's first game

    async def scenario() -> None:
        app = App(AppConfig(mode="replay", mute=True, session=SessionConfig(game="blink"), replay=replay,
                            replay_at=at))
        task = await started(app)
        try:
            await until(app, lambda: app.describe()["replay"]["index"] == at)
            await app.next_frame()
            await app.next_frame()
            scene = app.scene
            assert isinstance(scene, TableScene)
            piles = [lbl.text for lbl in scene.pile_lbls]
            draws = [lbl.text for lbl in scene.draw_lbls]
            assert "your pile" in piles and "p1's pile" in piles, piles
            shown = " ".join(piles + draws + [scene.hint_lbl.text, scene.info_lbl.text])
            assert "you's" not in shown and "←" not in shown and "→" not in shown, shown
            assert "Esc" not in scene.hint_lbl.text and "Esc quit" in app.overlay.keys_lbl.text
            assert scene.info_lbl.text.startswith("game 1 · best of 3"), scene.info_lbl.text
            assert " 0 – 0 " in scene.score_lbl.text, scene.score_lbl.text
            app.request_screenshot(str(tmp_path / "replay_rematch.png"))
            await app.next_frame()
            app.inject_key(key.END)
            await until(app, lambda: app.describe()["replay"]["index"] == len(replay) - 1)
        finally:
            await stop(app, task)

    asyncio.run(asyncio.wait_for(scenario(), SCENARIO_S))


@pytest.mark.integration
def test_a_seat_named_you_and_a_bad_watch_code(xdisplay: str, tmp_path: Path) -> None:  # noqa: F811
    from client.window import App, AppConfig, SessionConfig

    async def scenario() -> None:
        async with LocalServer(None, 3) as server:
            session = SessionConfig(server_url=server.address.url, name="you", request_timeout_s=LONG)
            app = App(AppConfig(mode="watch", code="ZZZZZ", mute=True, session=session))
            task = await started(app)
            try:
                await until(app, lambda: app.describe().get("big") == "Cannot watch", LONG)
                app.request_screenshot(str(tmp_path / "watch_error.png"))
                await app.next_frame()
            finally:
                assert await stop(app, task) == 1

    asyncio.run(asyncio.wait_for(scenario(), SCENARIO_S))

    async def takeaway() -> None:
        session = SessionConfig(name="you", game="takeaway", players=2, autoplay=False, seed=4,
                                request_timeout_s=LONG, settings={"turn_timer_s": 0.0})
        app = App(AppConfig(mode="bot", bot_reaction_s=0.3, mute=True, session=session))
        task = await started(app)
        try:
            await until(app, lambda: app.scene is not None and app.scene.name == "takeaway"
                        and bool(getattr(app.scene, "vm", None)) and app.session.model is not None
                        and app.session.model.state() is not None, LONG)
            rows = app.scene.vm.rows(app.session.model)  # type: ignore[union-attr]
            mine = [r.name for r in rows if r.mine]
            assert mine == ["you"], [r.name for r in rows]
            app.request_screenshot(str(tmp_path / "takeaway_you.png"))
            await app.next_frame()
        finally:
            await stop(app, task)

    asyncio.run(asyncio.wait_for(takeaway(), SCENARIO_S))


@pytest.mark.integration
def test_a_replay_of_a_game_left_before_its_end_says_so(xdisplay: str, tmp_path: Path) -> None:  # noqa: F811
    from client.window import App, AppConfig, SessionConfig
    from client.window.viewmodels import load_replay

    replay = load_replay(drive("blink", seed=3, leave_after=5)[0])

    async def scenario() -> None:
        app = App(AppConfig(mode="replay", mute=True, session=SessionConfig(game="blink"), replay=replay,
                            replay_at=6))
        task = await started(app)
        try:
            await until(app, lambda: app.describe()["sub"] == "this game was left before its end: a forfeit never "
                                                             "reveals its cards")
            assert app.describe()["big"] == "BLINK"
            app.request_screenshot(str(tmp_path / "replay_left_game.png"))
            await app.next_frame()
        finally:
            await stop(app, task)

    asyncio.run(asyncio.wait_for(scenario(), SCENARIO_S))
