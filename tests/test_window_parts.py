"""The HUD's second line: the last play's time in parts, shown on a key at the table.

A pure test of the arithmetic, and the real window under Xvfb against its own relay in fair order:
a play made with the keyboard, then ``P``, and the line shows that play's parts, adding up to its
confirmation; ``P`` again hides it.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.test_window import FAST, LONG, RACE, SCENARIO_S, make_app, press, started, stop, until, xdisplay  # noqa: F401

MS = 1_000_000
pytestmark = pytest.mark.timeout(SCENARIO_S + 120)


def test_a_verdicts_parts_come_from_its_stamps_and_the_clock_offset() -> None:
    from client.window.playparts import parts_text, play_parts

    # The client's clock is 1 s behind the relay's; the play left at 10.000 s (client), reached the
    # relay at 11.020 s, was held 100 ms, its verdict left at 11.125 s, came at 10.150 s (client),
    # and the frame that drew it began 4 ms later.
    v = SimpleNamespace(sent_ns=10_000 * MS, answered_ns=10_150 * MS, hold_ns=100 * MS, recv_ns=11_020 * MS,
                        relay_sent_ns=11_125 * MS, offset_ns=1_000 * MS)
    parts = play_parts(v, 10_154 * MS)
    assert parts == {"uplink": 20.0, "held": 100.0, "judging": 5.0, "downlink": 25.0, "drawing": 4.0}
    assert parts_text(parts) == "last play: uplink 20  held 100  judging 5  downlink 25  drawing 4 ms"
    assert play_parts(SimpleNamespace(**{**vars(v), "recv_ns": 0}), 0) is None  # a verdict without stamps
    assert parts_text(None) == "last play: —"


@pytest.mark.integration
def test_the_last_plays_parts_are_on_the_hud_at_a_key(xdisplay: str, tmp_path: Path) -> None:  # noqa: F811
    from pyglet.window import key

    async def scenario() -> None:
        app = make_app(mode="bot", decks=(RACE,), bot_s=20.0, settings={**FAST, "countdown_s": 0.6, "order": "fair"})
        task = await started(app)
        try:
            await until(app, lambda: app.describe().get("phase") == "running" and app.describe()["big"] == "")
            await until(app, lambda: app.session.model.clock.offset_ns is not None)
            assert app.hud.parts_label.text == ""
            press(app, key.P)
            await until(app, lambda: app.hud.parts_label.text == "last play: —")  # no play yet
            press(app, key._1, key.LEFT)
            await until(app, lambda: app.session.model.verdicts and "uplink" in app.hud.parts_label.text)
            verdict = app.session.model.verdicts[-1]
            assert verdict.ok
            text = app.hud.parts_label.text
            got = dict((name, float(v)) for name, v in re.findall(r"(\w+) (-?\d+)", text))
            assert list(got) == ["uplink", "held", "judging", "downlink", "drawing"], text
            confirm_ms = verdict.confirm_ns / MS
            # the first four add up to the play -> verdict time (each shown rounded to a ms)
            assert abs(sum(v for k, v in got.items() if k != "drawing") - confirm_ms) <= 3, (text, confirm_ms)
            assert all(v >= 0 for k, v in got.items() if k != "judging") and got["held"] == round(verdict.hold_ns / MS)
            app.request_screenshot(str(tmp_path / "hud_parts.png"))
            await app.next_frame()
            press(app, key.P)
            await until(app, lambda: app.hud.parts_label.text == "")
        finally:
            assert await stop(app, task) == 0

    asyncio.run(asyncio.wait_for(scenario(), SCENARIO_S))
    assert (tmp_path / "hud_parts.png").stat().st_size > 0
