"""Watching a match from its first event: the model files the relay's re-sent past events as
history (not applied twice, not announced as news), and the window's watch -- against a real relay
on the embedded broker, under Xvfb -- holds the match from ``seq`` 1 and records it from seq 1.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from protocol import messages as m
from protocol.rules import takeaway as tk
from relay.core import RelayConfig
from tests.test_window import LONG, SCENARIO_S, started, stop, until, xdisplay  # noqa: F401 - the Xvfb fixture

pytestmark = pytest.mark.timeout(SCENARIO_S + 120)


# ------------------------------------------------------------------------------ the model, pure


def _events(code: str, n: int) -> list[m.Event]:
    return [m.Event(code, s, 1000 + s, 0, "player_joined" if s > 1 else "match_created", {"seat": s})
            for s in range(1, n + 1)]


def test_re_sent_past_events_become_history_in_seq_order_and_are_not_news() -> None:
    from client import ClientModel
    from client.window.viewmodels import EventFeed

    model = ClientModel("c1", "spectator")
    model.spectate("ABCDE")
    assert model.watch_from() == m.Resync("ABCDE", from_seq=1)
    past = _events("ABCDE", 9)
    # live events 7 and 8 came first (the relay's answer is a burst behind them)
    assert model.on_message(past[6], 1) == [] and model.on_message(past[7], 2) == []
    feed = EventFeed()
    assert [e.seq for e, _ in feed.take_current(model)] == [7, 8]
    version = model.version
    for ev in past:  # the relay re-sends 1..9; 7 and 8 again
        model.on_message(ev, 3)
    assert [e.seq for e in model.events] == list(range(1, 10))
    assert model.events[0].type == "match_created"
    assert model.history == set(range(1, 7))  # 9 was news (after 8), 7 and 8 were had already
    assert model.version > version
    assert [e.seq for e, _ in feed.take_current(model)] == [9]
    assert [e.seq for e, _ in EventFeed().take_current(model)] == [7, 8, 9]  # a new scene: news only


def test_a_full_history_keeps_the_newest() -> None:
    from client import ClientModel
    from client.model import PAST_KEPT

    model = ClientModel("c1", "player")  # a player's history is shorter than a spectator's
    maxlen = model.events.maxlen
    assert maxlen is not None and maxlen < PAST_KEPT
    evs = _events("ABCDE", maxlen + 10)
    model.match = "ABCDE"
    for ev in evs[10:]:
        model.on_message(ev, 1)
    for ev in evs[:10]:  # older than everything kept: nothing to make room for
        model.on_message(ev, 2)
    assert [e.seq for e in model.events] == list(range(11, maxlen + 11))


def test_the_past_of_a_watched_match_comes_after_its_snapshot_without_being_applied_again() -> None:
    """Real relay core output: a spectator's model given the retained snapshot, then the answer to
    ``Resync(from_seq=1)``: the state is the snapshot's (the events are not applied on top)."""
    from client import ClientModel
    from relay.core import Publish
    from tests.test_relay_core import T
    from tests.test_viewmodels import Room

    room = Room()
    code = room.open("takeaway")
    room.until(lambda: room.match.state is not None and room.match.state.phase == "turn")
    for _ in range(3_000):  # play a while: claims by whoever is to move
        state = room.match.state
        if room.match.seq >= 15 or room.match.status != "playing":
            break
        if state.phase == "turn":
            acts = [a for a in tk.legal_actions(state, state.current) if isinstance(a, tk.ClaimBlink)]
            if acts:
                room.act("ab"[state.current], acts[0])
        room.tick(0.05)
    assert room.match.seq >= 15
    model = ClientModel("s", "spectator")
    model.spectate(code)
    out = [o for o in room.h.send(T.req("s"), model.watch_from()) if isinstance(o, Publish)]
    snap = [o.msg for o in out if isinstance(o.msg, m.Snapshot)]
    past = [o.msg for o in out if isinstance(o.msg, m.Event) and o.topic == T.client("s")]
    assert snap and [e.seq for e in past] == list(range(1, room.match.seq + 1))
    model.on_message(snap[-1], room.h.now)  # the snapshot first (retained: at subscribe)
    assert model.predictor is not None
    state = model.predictor.confirmed
    for ev in past:
        assert model.on_message(ev, room.h.now) == []
    assert model.predictor.confirmed is state and model.predictor.confirmed_seq == room.match.seq
    assert [e.seq for e in model.events] == list(range(1, room.match.seq + 1))
    assert model.history == set(range(1, room.match.seq + 1))
    assert tk.to_wire(model.predictor.confirmed) == tk.to_wire(tk.view(room.match.state, None))


def test_the_recorder_writes_a_late_watched_match_from_seq_1_in_order(tmp_path: Path) -> None:
    import json

    from client.replays import HOLD_FOR_START, Recorder

    evs = _events("ABCDE", 12)
    rec = Recorder(tmp_path)
    rec.follow("ABCDE")
    for ev in evs[9:11]:  # live events first ...
        rec.offer(ev)
    assert rec.path is None  # ... held: nothing written before seq 1
    for ev in evs[:10]:  # ... then the relay's re-sent past, 10 again
        rec.offer(ev)
    rec.offer(evs[11])
    rec.close()
    (path,) = tmp_path.iterdir()
    assert [json.loads(line)["seq"] for line in path.read_text().splitlines()] == list(range(1, 13))

    # a lost event: the ones after it are held a while, then written with the gap
    rec = Recorder(tmp_path / "gap")
    rec.follow("ABCDE")
    many = _events("ABCDE", HOLD_FOR_START + 5)
    for ev in many[:1] + many[2:]:
        rec.offer(ev)
    rec.close()
    (path,) = (tmp_path / "gap").iterdir()
    seqs = [json.loads(line)["seq"] for line in path.read_text().splitlines()]
    assert seqs == [1] + list(range(3, HOLD_FOR_START + 6))


# ------------------------------------------------------------------------------ the window


def _make_app(server_url: str, code: str, record_dir: Path) -> Any:
    from client.window import App, AppConfig, SessionConfig

    session = SessionConfig(name="you", game="takeaway", relay_config=RelayConfig(between_games_s=0.5), seed=11,
                            server_url=server_url, request_timeout_s=LONG, record_dir=str(record_dir))
    return App(AppConfig(mode="watch", code=code, bot_reaction_s=0.8, mute=True, session=session))


@pytest.mark.integration
def test_the_window_watching_late_holds_the_match_from_seq_1_and_records_it(xdisplay: str, tmp_path: Path) -> None:
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
                # late: the match has been going a while when the window starts watching
                deadline = asyncio.get_running_loop().time() + LONG
                while a.model.last_event_seq < 12:
                    assert asyncio.get_running_loop().time() < deadline, "the bots did not play"
                    await a.wait_change(0.5)
                app = _make_app(server.address.url, code, tmp_path / "replays")
                task = await started(app)
                try:
                    def whole() -> bool:
                        if app.session.model is None:
                            return False
                        seqs = [e.seq for e in app.session.model.events]
                        return len(seqs) > 12 and seqs == list(range(1, seqs[-1] + 1))

                    await until(app, lambda: app.describe().get("scene") == "takeaway" and whole(), LONG)
                    model = app.session.model
                    assert model.events[0].type == "match_created" and model.events[1].type == "seat_taken"
                    assert len(model.history) >= 12  # the past came as history, the rest live
                    # the state is the relay's, not the past applied on top of the snapshot
                    relay_match = server.relay.core.matches[code]
                    await until(app, lambda: model.predictor.confirmed_seq == relay_match.seq or stop_ev.is_set(), LONG)
                    stop_ev.set()
                    for t in bots:
                        t.cancel()
                    await asyncio.gather(*bots, return_exceptions=True)
                    await until(app, lambda: model.predictor.confirmed_seq == relay_match.seq, LONG)
                    assert tk.to_wire(model.predictor.confirmed) == tk.to_wire(tk.view(relay_match.state, None))
                    app.request_screenshot(str(tmp_path / "watch_takeaway.png"))
                    await app.next_frame()
                    await app.next_frame()
                finally:
                    stop_ev.set()
                    for t in bots:
                        t.cancel()
                    await asyncio.gather(*bots, return_exceptions=True)
                    assert await stop(app, task) == 0
                files = list((tmp_path / "replays").iterdir())
                assert len(files) == 1
                import json
                seqs = [json.loads(line)["seq"] for line in files[0].read_text().splitlines()]
                assert seqs[0] == 1 and seqs == list(range(1, len(seqs) + 1)) and len(seqs) >= 12
                assert (tmp_path / "watch_takeaway.png").stat().st_size > 10_000

    asyncio.run(asyncio.wait_for(scenario(), SCENARIO_S))


@pytest.mark.integration
def test_a_frame_that_shows_nothing_new_is_not_drawn_and_one_that_does_is(xdisplay: str, tmp_path: Path) -> None:
    """Waiting on your own turn nothing changes: the window skips drawing those frames (only the
    HUD's once-a-second text is drawn); the pointer moving onto a Blink is drawn by that frame."""
    from tests.test_window_dice import make_app

    async def scenario() -> None:
        app = make_app("takeaway", bot_s=1000.0)
        task = await started(app)
        try:
            await until(app, lambda: app.describe().get("phase") == "turn"
                                 and app.describe()["banner"].startswith("YOUR TURN"), LONG)
            for _ in range(5):
                await app.next_frame()
            frames, drawn = app.stats.frames, len(app.stats.presented_ms)
            for _ in range(40):
                await app.next_frame()
            assert app.stats.frames - frames == 40
            assert len(app.stats.presented_ms) - drawn < 20, "unchanged frames were drawn"
            cell = sorted(app.scene._hex)[0]
            x, y = app.scene.cell_centre(*cell)
            drawn = len(app.stats.presented_ms)
            app.window.dispatch_event("on_mouse_motion", int(x), int(y), 0, 0)
            await app.next_frame()
            assert len(app.stats.presented_ms) == drawn + 1 and app.scene.hover == ("cell", *cell)
            shot = tmp_path / "hover.png"
            app.request_screenshot(str(shot))  # a screenshot draws its frame even when nothing changed
            await app.next_frame()
            assert shot.stat().st_size > 10_000
        finally:
            assert await stop(app, task) == 0

    asyncio.run(asyncio.wait_for(scenario(), SCENARIO_S))
