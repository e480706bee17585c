"""Window defects, each pinned: pure view-model / layout tests where the defect lives in
data, the real window under Xvfb where it lives in what is drawn.

- the menu's logo cards overlapped ("BLUE 5YELLOW2");
- the "Cannot play" text ran wider than its panel;
- Takeaway's predicted game-over overlay said "You win with 78 points" beside "games won you: 0";
- Roll Your Own said "you won round 2" while the dice animation still showed an earlier roll;
- the results screen of a Takeaway match did not show the points.
(The Sequence "sent" tag is checked in tests/test_window_dice.py's placed-chip test.)
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from protocol.rules import roll_your_own as ryo
from protocol.rules import takeaway as tk
from client.window.layout import CARD_ASPECT, fit_text, logo_cards
from client.results import game_line, points_text
from client.window.viewmodels import RyoViewModel
from client.window.viewmodels.ryo import SHOW_S, TUMBLE_S
from client.window.viewmodels import TakeawayViewModel
from tests.test_viewmodels import S, Room
from tests.test_window import LONG, SCENARIO_S, started, stop, until, xdisplay  # noqa: F401

pytestmark = pytest.mark.timeout(SCENARIO_S + 120)


@pytest.mark.parametrize("width", [640, 800, 1100, 1920])
def test_menu_logo_cards_never_overlap_and_stay_in_the_window(width: int) -> None:
    f = 14.0
    for half_title in (f * 5, f * 8):
        cw, xs = logo_cards(width, half_title, f, f * 6.4)
        assert cw <= f * 6.4 * CARD_ASPECT + 1e-9
        spans = sorted((x - cw / 2, x + cw / 2) for x in xs)
        for (a0, a1), (b0, b1) in zip(spans, spans[1:]):
            assert a1 < b0, f"cards overlap at width {width}: {spans}"
        assert spans[0][0] >= 0 and spans[-1][1] <= width
        # none of them is under the title
        assert all(s1 <= width / 2 - half_title or s0 >= width / 2 + half_title for s0, s1 in spans)


def test_a_long_line_is_cut_to_fit_its_panel_and_a_short_one_is_kept() -> None:
    def width(t: str) -> float:
        return 10.0 * len(t)

    assert fit_text("Cannot play", 500, width) == "Cannot play"
    long = "network problem: [Errno 111] Connect call failed ('127.0.0.1', 1) " * 3
    cut = fit_text(long, 300, width)
    assert cut.endswith("…") and width(cut) <= 300 and long.startswith(cut[:-1])
    assert width(fit_text(long, 5, width)) <= 10  # even a tiny panel: at most the ellipsis


def _takeaway_to_the_last_claim(room: Room) -> tuple[str, Any]:
    """Play a ring (12 Blinks) Takeaway game until one Blink is left; return (client to move, its claim)."""
    room.until(lambda: room.match.state is not None and room.match.state.phase == "turn")
    clients = ["a", "b"]
    for _ in range(5_000):
        state = room.match.state
        if state.phase == "turn":
            client = clients[state.current]
            claims = [a for a in tk.legal_actions(state, state.current) if isinstance(a, tk.ClaimBlink)]
            if len(state.cells) == 1 and claims:
                return client, claims[0]
            if claims:
                room.act(client, claims[0])
        room.tick(0.05)
    raise AssertionError("the game did not reach its last Blink")


def test_takeaway_predicted_game_over_overlay_and_tally_agree() -> None:
    room = Room()
    room.open("takeaway", {"layout": "ring"})
    client, last = _takeaway_to_the_last_claim(room)
    model = room.models[client]
    vm = TakeawayViewModel("Takeaway Dice")
    vm.observe(model, room.h.now)
    _, send = room.send_held(client, last)  # the last claim: predicted here, the relay not told yet
    state = model.state()
    assert state.phase == "over" and (model.match_state or {}).get("status") == "playing"
    banner = vm.banner(model, room.h.now)
    assert banner.kind == "over"
    winners = list(tk.outcome(state).winners)  # type: ignore[union-attr]
    tally = vm.tally(model, state)
    names = list(model.players)
    for seat, name in enumerate(names):
        assert f"{name}: {1 if seat in winners else 0}" in tally, (banner.small, tally)
    if model.seat in winners and len(winners) == 1:
        assert banner.small.startswith("You win with")
    # confirmed: the relay's tally says the same
    send()
    room.tick(0.2)
    vm.observe(model, room.h.now)
    assert (model.match_state or {}).get("wins") == [1 if s in winners else 0 for s in range(2)]
    confirmed = vm.tally(model, model.state())
    for seat, name in enumerate(names):
        assert f"{name}: {1 if seat in winners else 0}" in confirmed, confirmed


def _roll(roll: int) -> ryo.RyoDiceRolled:
    return ryo.RyoDiceRolled(kind="roll", roll=roll, rolls=(ryo.FaceRolled(player=0, face=0, value=5),
                                                            ryo.FaceRolled(player=1, face=0, value=2)))


def _round_won(seat: int, round: int) -> ryo.RoundWon:
    return ryo.RoundWon(player=seat, ryo_game=1, round=round, rounds=(1, 0))


def _ev(what: ryo.RyoDiceRolled | ryo.RoundWon) -> Any:
    """The envelope of an event as the viewmodel gets it beside its class (it reads only the class)."""
    return SimpleNamespace(type=what.TYPE, data={})


def test_ryo_round_won_waits_until_the_rolls_before_it_have_been_shown() -> None:
    vm = RyoViewModel("Roll Your Own")
    model = SimpleNamespace(players=["you", "bot"], spectating=False, seat=0)
    t = 1_000 * S
    for roll in range(6):
        vm.on_event(_ev(_roll(roll)), _roll(roll), model, None, t)
    vm.on_event(_ev(_round_won(0, 2)), _round_won(0, 2), model, None, t)
    step = int((TUMBLE_S + SHOW_S) * S) + 1
    said_at = None
    shown: list[int] = []
    now = t
    for _ in range(40):
        vm.animating(None, now)
        roll = vm.shown_roll(now)
        if roll is not None and (not shown or shown[-1] != roll[0].roll):
            shown.append(roll[0].roll)
        text, _ = vm.message(now)
        if text and said_at is None:
            said_at = now
            assert text == "you won round 2"
            # the roll on screen is the last one, and it has been shown in full
            last, tumbling = vm.shown_roll(now)  # type: ignore[misc]
            assert last.roll == 5 and not tumbling
        now += step // 4
    assert said_at is not None and said_at > t
    assert shown[-1] == 5 and shown == sorted(shown)
    # with no roll queued, a message is said at once
    idle = RyoViewModel("Roll Your Own")
    idle.on_event(_ev(_round_won(1, 1)), _round_won(1, 1), model, None, t)
    assert idle.message(t)[0] == "bot won round 1"


def test_results_lines_show_the_points_of_a_takeaway_game() -> None:
    reasons = {"highest_score": "highest score"}
    line = game_line(0, {"winners": [0], "reason": "highest_score", "scores": [78, 54]}, ["ann", "bob"], 0,
                     reasons, "points")
    assert line == "game 1:  you won  (highest score)   —   points: you 78 · bob 54"
    shared = game_line(1, {"winners": [0, 1], "reason": "shared_win", "scores": [40, 40]}, ["ann", "bob"], 1,
                       reasons, "points")
    assert "shared: ann & bob" in shared and "points: ann 40 · you 40" in shared
    # a game whose scores mean nothing, or none kept: no points part
    assert "points" not in game_line(0, {"winners": [1], "reason": "out_of_cards"}, ["ann", "bob"], 0, reasons, "")
    assert points_text([0, 0], ["a", "b"], 0) == "" and points_text(["x", 1], ["a", "b"], 0) == ""


def test_the_registry_says_takeaway_scores_are_points(xdisplay: str) -> None:
    from client.window.scenes import score_word

    assert score_word("takeaway") == "points" and score_word("blink") == ""


def test_cannot_play_text_fits_its_panel(xdisplay: str, tmp_path: Path) -> None:
    from client.window import App, AppConfig, SessionConfig

    async def scenario(game: str) -> None:
        # nothing listens on port 1: the session fails with a long "network problem" line
        session = SessionConfig(name="you", game=game, server_url="mqtt://127.0.0.1:1", request_timeout_s=LONG)
        app = App(AppConfig(mode="bot", mute=True, width=640, height=420, session=session))
        task = await started(app)
        try:
            await until(app, lambda: app.session.status == "error")
            for _ in range(3):
                await app.next_frame()
            app.request_screenshot(str(tmp_path / f"cannot_play_{game}.png"))
            await app.next_frame()
            scene = app.scene
            if game == "blink":
                assert scene.describe()["big"] == "Cannot play"
                panel_w = scene.layout.w * 0.94
                for lbl in (scene.big_c, scene.sub_c):
                    assert lbl.content_width <= panel_w, (lbl.text, lbl.content_width, panel_w)
            else:
                labels = [lbl for lbl in scene.drawn_labels("over") if lbl.text]
                assert any(lbl.text == "Cannot play" for lbl in labels)
                for lbl in labels:
                    assert lbl.content_width <= scene.w * 0.9, (lbl.text, lbl.content_width, scene.w)
        finally:
            await stop(app, task)

    for game in ("blink", "takeaway"):
        asyncio.run(asyncio.wait_for(scenario(game), SCENARIO_S))
