"""The turn-based scenes (Takeaway, Sequence, Roll Your Own) in the real window under Xvfb, against a
real relay (embedded broker on a free loopback port) and bots: moves made with synthetic clicks and
keys are drawn on the very next frame (predicted, marked pending), then the confirmed state matches
the relay's. Screenshots go to each test's ``tmp_path``; every wait is on a condition with a
generous deadline (``LONG``), so the tests hold on a busy machine.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from protocol.rules import roll_your_own as ryo
from protocol.rules import sequence as sq
from protocol.rules import takeaway as tk
from relay.core import RelayConfig
from tests.test_window import LONG, ROOT, SCENARIO_S, started, stop, until, xdisplay  # noqa: F401 - the Xvfb fixture

pytestmark = pytest.mark.timeout(SCENARIO_S + 120)

MODULES = {"takeaway": tk, "sequence": sq, "ryo": ryo}


def make_app(game: str, *, players: int = 2, bot_s: float = 0.8, settings: dict[str, Any] | None = None,
             mode: str = "bot", server_url: str | None = None, code: str | None = None) -> Any:
    from client.window import App, AppConfig, SessionConfig

    session = SessionConfig(name="you", game=game, settings=dict(settings or {}), players=players,
                            relay_config=RelayConfig(between_games_s=0.5), seed=11, server_url=server_url,
                            request_timeout_s=LONG)
    return App(AppConfig(mode=mode, code=code, bot_reaction_s=bot_s, mute=True, session=session))


def relay_view_wire(app: Any) -> Any:
    model = app.session.model
    match = app.session.server.relay.core.matches[model.match]
    mod = MODULES[model.game]
    return mod.to_wire(mod.view(match.state, model.seat))


def confirmed_wire(app: Any) -> Any:
    model = app.session.model
    return MODULES[model.game].to_wire(model.predictor.confirmed)


async def settle_and_match_relay(app: Any) -> None:
    """Wait until the own move is confirmed and what the window holds equals the relay's view."""
    await until(app, lambda: app.describe()["pending"] == 0, LONG)
    await until(app, lambda: confirmed_wire(app) == relay_view_wire(app), LONG)


def click(app: Any, x: float, y: float) -> None:
    from pyglet.window import mouse

    app.window.dispatch_event("on_mouse_motion", int(x), int(y), 0, 0)
    app.window.dispatch_event("on_mouse_press", int(x), int(y), mouse.LEFT, 0)


def shot(app: Any, folder: Path, name: str) -> Path:
    p = folder / f"dice_{name}.png"
    app.request_screenshot(str(p))
    return p


@pytest.mark.integration
def test_takeaway_reroll_claim_and_a_refused_locked_blink(xdisplay: str, tmp_path: Path) -> None:
    from pyglet.window import key

    async def scenario() -> None:
        app = make_app("takeaway")
        task = await started(app)
        try:
            def my_turn() -> bool:
                d = app.describe()
                if app.session.model is None:
                    return False
                return d.get("phase") == "turn" and d.get("current") == app.session.model.seat and d["pending"] == 0

            await until(app, my_turn, LONG)
            await app.next_frame()
            assert app.describe()["banner"] == "YOUR TURN" and app.describe()["buttons"]["reroll"]
            shot(app, tmp_path, "takeaway_my_turn")
            await app.next_frame()
            # the re-roll (Space): predicted at once, then greyed for the rest of the turn
            app.window.dispatch_event("on_key_press", key.SPACE, 0)
            await app.next_frame()
            d = app.describe()
            assert d["phase"] == "rolling" and d["pending"] == 1, d
            await until(app, lambda: app.describe()["phase"] == "turn" and app.describe()["pending"] == 0, LONG)
            await app.next_frame()
            assert app.describe()["buttons"]["reroll"] is False
            # a locked Blink (the middle of the hex19 cluster is) is refused locally with its
            # reason, nothing changes
            state = app.session.model.state()
            coords = state.coords()
            locked = [c for c in coords if tk.is_locked(coords, c)]
            assert locked
            click(app, *app.scene.cell_centre(*locked[0]))
            await app.next_frame()
            d = app.describe()
            assert "locked" in d["message"] and len(d["cells"]) == len(coords)
            shot(app, tmp_path, "takeaway_refused")
            await app.next_frame()
            # claim a free Blink with the mouse: gone from the cluster on the next frame, pending
            free = tk.free_cells(coords)
            q, r = free[0]
            face = state.face_at((q, r))
            before = len(state.claims)
            click(app, *app.scene.cell_centre(q, r))
            p = shot(app, tmp_path, "takeaway_predicted")
            await app.next_frame()
            d = app.describe()
            assert [q, r] not in [c[:2] for c in d["cells"]], d
            assert d["claims"][before] == [app.session.model.seat, q, r, face] and d["pending"] == 1
            assert p.exists()
            await settle_and_match_relay(app)
            shot(app, tmp_path, "takeaway_confirmed")
            await app.next_frame()
            assert app.stats.summary()["late_inputs"] == 0
        finally:
            assert await stop(app, task) == 0

    asyncio.run(asyncio.wait_for(scenario(), SCENARIO_S))


@pytest.mark.integration
def test_sequence_legal_spaces_and_a_placed_chip(xdisplay: str, tmp_path: Path) -> None:
    async def scenario() -> None:
        app = make_app("sequence", players=3, bot_s=0.6)
        task = await started(app)
        try:
            def my_move() -> bool:
                d = app.describe()
                if app.session.model is None or app.session.model.state() is None:
                    return False
                me = app.session.model.seat
                return (d.get("phase") == "move" and d.get("current") == me and not d.get("rolling")
                        and d["pending"] == 0 and bool(sq.legal_actions(app.session.model.state(), me)))

            await until(app, my_move, LONG)
            await app.next_frame()
            d = app.describe()
            assert d["banner"] == "YOUR TURN" and d["drawn_spaces"] == 36
            shot(app, tmp_path, "sequence_my_move")
            await app.next_frame()
            state = app.session.model.state()
            me = app.session.model.seat
            action = sq.legal_actions(state, me)[0]
            click(app, *app.scene.space_centre(action.row, action.col))
            shot(app, tmp_path, "sequence_predicted")
            await app.next_frame()
            d = app.describe()
            after = d["chips"][action.row][action.col]
            if isinstance(action, sq.PlaceChip):
                assert after == state.colour(me), d
            else:
                assert after is None
            assert d["pending"] == 1  # still unconfirmed on this frame
            assert len(d["sent_tags"]) == 1  # one tag, clear of the chip's rim
            for tag in d["sent_tags"]:  # inside the chip (radius 0.3 of a space), clear of its rim
                assert (tag["x"], tag["y"]) == (tag["cx"], tag["cy"])
                half_w, half_h = tag["w"] / 2, tag["h"] / 2
                assert (half_w ** 2 + half_h ** 2) ** 0.5 <= 0.3 * tag["side"], tag
            await settle_and_match_relay(app)
            shot(app, tmp_path, "sequence_confirmed")
            await app.next_frame()
            assert app.stats.summary()["late_inputs"] == 0
        finally:
            assert await stop(app, task) == 0

    asyncio.run(asyncio.wait_for(scenario(), SCENARIO_S))


@pytest.mark.integration
def test_ryo_builder_build_reveal_and_odds(xdisplay: str, tmp_path: Path) -> None:
    from pyglet.window import key

    async def scenario() -> None:
        app = make_app("ryo", bot_s=0.5, settings={"rolls_per_round": 2, "rounds_per_game": 2, "games_per_match": 1})
        task = await started(app)
        try:
            await until(app, lambda: app.describe().get("phase") == "build" and "build" in app.describe()["buttons"],
                                 15)
            await app.next_frame()
            d = app.describe()
            faces = d["builder"]
            assert sum(faces) == 21 and d["buttons"]["build"] and not d["buttons"]["plus0"]  # budget used up
            shot(app, tmp_path, "ryo_builder")
            await app.next_frame()
            # − on face 1 by mouse, then + on face 6 by keys: the total stays within the budget
            b = next(x for x in app.scene.buttons if x.id == "minus0")
            click(app, b.rect.x, b.rect.y)
            await app.next_frame()
            assert app.describe()["builder"][0] == faces[0] - 1 and app.describe()["buttons"]["plus5"]
            app.window.dispatch_event("on_key_press", key._6, 0)
            app.window.dispatch_event("on_key_press", key.UP, 0)
            await app.next_frame()
            want = [faces[0] - 1] + faces[1:5] + [faces[5] + 1]
            assert app.describe()["builder"] == want
            app.window.dispatch_event("on_key_press", key.ENTER, 0)
            await app.next_frame()
            d = app.describe()
            me = app.session.model.seat
            assert d["built"][me] and d["dice"][me] == want, d  # predicted at once
            assert d["pending"] == 1  # still unconfirmed on this frame
            shot(app, tmp_path, "ryo_built")
            await settle_and_match_relay(app)
            # the reveal: every die, and the exact odds against the others
            await until(app, lambda: app.describe()["phase"] != "build", LONG)
            await app.next_frame()
            state = app.session.model.state()
            assert state.dice[me] == tuple(want)  # only your own moves change your die
            shot(app, tmp_path, "ryo_revealed")
            await app.next_frame()
            # the round's choice, when it is ours: (a) raise a face (a +1 button) or, as the winner,
            # drop one (a −1 button); the die changes on the next frame
            def my_choice() -> Any:
                st = app.session.model.state()
                if st.phase == "choice" and st.chooser == me:
                    return "raise"
                if st.phase == "lower" and st.round_winner == me:
                    return "lower"
                return st.phase == "over" and "over"
            kind = await until(app, my_choice, LONG)
            if kind != "over":
                await app.next_frame()
                st = app.session.model.state()
                i = (ryo.raisable if kind == "raise" else ryo.lowerable)(st, me)[0]
                # The relay rolled the whole round at once; the question waits until the rolls that
                # led to it have been shown (never "you lost the round" beside a tumbling die).
                d = app.describe()
                if d["banner"].startswith("ROLLING"):
                    assert not any(x.id.startswith(kind) for x in app.scene.buttons), d["buttons"]
                await until(app, lambda: any(x.id == f"{kind}{i}" for x in app.scene.buttons), LONG)
                assert app.describe()["banner"].startswith("YOUR TURN")
                b = next(x for x in app.scene.buttons if x.id == f"{kind}{i}")
                shot(app, tmp_path, f"ryo_{kind}_prompt")
                await app.next_frame()
                click(app, b.rect.x, b.rect.y)
                await app.next_frame()
                shown = app.describe()["dice"][me][i]
                assert shown == st.dice[me][i] + (1 if kind == "raise" else -1)
                await settle_and_match_relay(app)
            assert app.stats.summary()["late_inputs"] == 0
        finally:
            assert await stop(app, task) == 0

    asyncio.run(asyncio.wait_for(scenario(), SCENARIO_S))


@pytest.mark.integration
def test_watching_a_match_by_code_is_read_only(xdisplay: str, tmp_path: Path) -> None:
    from client import Bot
    from relay.hosting import LocalServer
    from client import Player

    async def scenario() -> None:
        async with LocalServer(None, 5, RelayConfig(between_games_s=0.5)) as server:
            async with Player(server.address, "ann") as a, Player(server.address, "bob") as b:
                code = await a.create("takeaway", {}, seats=2, timeout=LONG)
                await b.join(code, timeout=LONG)
                stop_ev = asyncio.Event()
                bots = [asyncio.create_task(Bot(p, reaction_s=0.3, seed=i).run(stop=stop_ev)) for i, p in enumerate((a, b))]
                app = make_app("blink", mode="watch", server_url=server.address.url, code=code)
                task = await started(app)
                try:
                    await until(app, lambda: app.describe().get("scene") == "takeaway"
                                         and app.describe().get("phase") == "turn", LONG)
                    await until(app, lambda: app.describe()["banner"].startswith("WATCHING"), LONG)
                    d = app.describe()
                    assert d["buttons"]["reroll"] is False
                    # the players pause, and the window has seen all they did: no announcement of a claim
                    # of theirs can replace the answer to the click below
                    stop_ev.set()
                    await asyncio.gather(*bots, return_exceptions=True)
                    await until(app, lambda: not a.model.predictor.pending and not b.model.predictor.pending)
                    await until(app, lambda: app.session.model.predictor.confirmed_seq
                                >= server.relay.core.matches[code].seq)
                    await app.next_frame()  # the scene announces what the model holds at its next frame
                    cells = app.session.model.state().coords()
                    q, r = tk.free_cells(cells)[0]
                    click(app, *app.scene.cell_centre(q, r))
                    await app.next_frame()
                    assert "spectators" in app.describe()["message"]
                    shot(app, tmp_path, "takeaway_watching")
                    await app.next_frame()
                finally:
                    stop_ev.set()
                    for t in bots:
                        t.cancel()
                    await asyncio.gather(*bots, return_exceptions=True)
                    assert await stop(app, task) == 0

    asyncio.run(asyncio.wait_for(scenario(), SCENARIO_S))


@pytest.mark.integration
@pytest.mark.parametrize("game", ["takeaway", "sequence", "ryo"])
def test_blink_play_game_autoplay_screenshot(xdisplay: str, game: str, tmp_path: Path) -> None:
    out = tmp_path / f"dice_cli_{game}.png"
    proc = subprocess.run([sys.executable, "-m", "client.cli", "play", "--game", game, "--players", "3",
                           "--autoplay", "--mute", "--screenshot", str(out), "--quit-after", "6", "--seed", "4"],
                          capture_output=True, text=True, cwd=ROOT, timeout=4 * LONG,
                          env={**os.environ, "DISPLAY": xdisplay, "XDG_DATA_HOME": str(tmp_path / "data")})
    assert proc.returncode == 0, proc.stderr
    assert out.exists() and out.stat().st_size > 10_000


@pytest.mark.integration
def test_menu_picks_the_game_and_the_players(xdisplay: str, tmp_path: Path) -> None:
    from pyglet.window import key

    async def scenario() -> None:
        app = make_app("blink", mode="menu")
        task = await started(app)
        try:
            await until(app, lambda: app.session.status == "ready", LONG)
            press = lambda *ks: [app.window.dispatch_event("on_key_press", k, 0) for k in ks]  # noqa: E731
            press(key.UP, key.UP, key.RIGHT, key.RIGHT)  # the game item: blink -> takeaway -> sequence
            await app.next_frame()
            assert app.describe()["game"] == "sequence" and app.describe()["players"] == 2
            press(key.DOWN, key.RIGHT, key.RIGHT)  # players: 2 -> 3 -> 4
            await app.next_frame()
            assert app.describe()["players"] == 4
            shot(app, tmp_path, "menu")
            await app.next_frame()
            press(key.B)  # play bots
            await until(app, lambda: app.describe().get("scene") == "sequence"
                                 and app.session.model is not None and len(app.session.model.players) == 4, LONG)
            await until(app, lambda: app.describe().get("phase") in ("roll", "move"), LONG)
            await app.next_frame()
            shot(app, tmp_path, "sequence_four_players")
            await app.next_frame()
            app.window.dispatch_event("on_key_press", key.ESCAPE, 0)
            app.window.dispatch_event("on_key_press", key.ESCAPE, 0)
            await until(app, lambda: app.describe()["scene"] == "menu", LONG)
        finally:
            assert await stop(app, task) == 0

    asyncio.run(asyncio.wait_for(scenario(), SCENARIO_S))


@pytest.mark.integration
@pytest.mark.parametrize("game", ["takeaway", "sequence", "ryo"])
def test_turn_timer_shows_a_countdown(xdisplay: str, game: str, tmp_path: Path) -> None:
    from tests.test_window import colour_pixels

    async def scenario() -> None:
        # the bots never act in time (nor do you): every wait lasts its full 30 s, ended by the relay
        # (a loaded machine may hear of a wait's start seconds late: the window's count lags)
        app = make_app(game, settings={"turn_timer_s": 30}, bot_s=1000.0)
        task = await started(app)
        try:
            await until(app, lambda: app.describe().get("timer") is not None
                                 and app.describe().get("timer") > 20, LONG)
            await app.next_frame()
            first = app.describe()["timer"]
            wait = app.scene.vm._clock  # which wait the countdown is for
            assert 0 < first <= 30
            assert app.session.model.settings["turn_timer_s"] == 30
            bar, colour = app.scene.timer_bar
            assert bar.w > 0
            p = tmp_path / f"timer_{game}.png"
            app.request_screenshot(str(p))
            await app.next_frame()
            await app.next_frame()
            # the bar really is on screen (its filled part, in its colour) and the seconds show
            inner = type(bar)(bar.x, bar.y, bar.w * 0.8, bar.h * 0.6)
            assert colour_pixels(p, inner, colour[:3], tol=30) > 50
            assert any(lbl.text.endswith(" s") for lbl in app.scene.drawn_labels("frame"))
            # it counts down, within the same wait
            await until(app, lambda: (app.describe()["timer"] or 99) <= first - 1.0, LONG)
            assert app.scene.vm._clock == wait
            app.request_screenshot(str(tmp_path / f"timer_{game}_later.png"))
            await app.next_frame()
        finally:
            assert await stop(app, task) == 0

    asyncio.run(asyncio.wait_for(scenario(), SCENARIO_S))


@pytest.mark.integration
def test_turn_timer_is_off_by_default(xdisplay: str, tmp_path: Path) -> None:
    async def scenario() -> None:
        app = make_app("takeaway")
        task = await started(app)
        try:
            await until(app, lambda: app.describe().get("phase") == "turn", LONG)
            await app.next_frame()
            assert app.describe()["timer"] is None and app.scene.timer_bar is None
        finally:
            assert await stop(app, task) == 0

    asyncio.run(asyncio.wait_for(scenario(), SCENARIO_S))


@pytest.mark.integration
def test_menu_options_reach_the_match_settings(xdisplay: str, tmp_path: Path) -> None:
    from pyglet.window import key

    async def scenario() -> None:
        app = make_app("blink", mode="menu")
        task = await started(app)
        try:
            await until(app, lambda: app.session.status == "ready", LONG)
            press = lambda *ks: [app.window.dispatch_event("on_key_press", k, 0) for k in ks]  # noqa: E731
            press(key.UP, key.UP, key.RIGHT)  # the game item: blink -> takeaway
            press(key.O)  # options: the next preset, one re-roll per game
            press(key.T, key.T)  # turn timer: off -> 15 -> 30 s
            await app.next_frame()
            d = app.describe()
            assert d["game"] == "takeaway" and "per game" in d["options"] and d["timer"] == "30 s to act", d
            assert d["settings"] == {"reroll_once_per_game": True, "turn_timer_s": 30.0}
            app.request_screenshot(str(tmp_path / "timer_menu_options.png"))
            await app.next_frame()
            await app.next_frame()
            press(key.B)  # play bots
            await until(app, lambda: app.describe().get("scene") == "takeaway"
                                 and app.session.model is not None and app.session.model.match, LONG)
            match = app.session.server.relay.core.matches[app.session.model.match]
            assert match.settings["reroll_once_per_game"] is True and match.settings["turn_timer_s"] == 30
            await until(app, lambda: app.describe().get("timer") is not None, LONG)
            await app.next_frame()
            assert app.describe()["timer"] <= 30
            app.request_screenshot(str(tmp_path / "timer_takeaway_from_menu.png"))
            await app.next_frame()
            await app.next_frame()
            # back to the menu, choose Roll Your Own: its own presets, checked by its rules
            app.window.dispatch_event("on_key_press", key.ESCAPE, 0)
            app.window.dispatch_event("on_key_press", key.ESCAPE, 0)
            await until(app, lambda: app.describe()["scene"] == "menu", LONG)
            while app.describe()["game"] != "ryo":
                press(key.G)
                await app.next_frame()
            press(key.O)
            await app.next_frame()
            assert app.describe()["options"] == "short 3/2/1"
            assert app.describe()["settings"] == {"rolls_per_round": 3, "rounds_per_game": 2, "games_per_match": 1}
        finally:
            assert await stop(app, task) == 0

    asyncio.run(asyncio.wait_for(scenario(), SCENARIO_S))
