"""LAN games in the window: hosting on every interface, the menu's "LAN games" list, joining from it.

Nothing here sends multicast out of the machine: the list is fed by a fake browser (the view-model
purely, then through the real window under Xvfb against a relay on loopback); hosting in-process
replaces the advertiser with a recorder; the real advertiser and browser meet only inside the
network namespaces ``tests/test_lan.py`` makes (``blink play --host`` in A, ``blink lan`` in B).
Every wait is on a condition with a generous deadline.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from client.lan import Host, LanMatch
from client.window.viewmodels import LanGames
from client.window.viewmodels.lan import LOOK_S
from tests.test_lan import Namespaces, netns  # noqa: F401 - the namespace fixture
from tests.test_window import LONG, SCENARIO_S, press, started, stop, until, xdisplay  # noqa: F401

pytestmark = pytest.mark.timeout(SCENARIO_S + 120)


def _host(name: str, address: str, port: int, *codes: str, waiting: int | None = None) -> Host:
    matches = tuple(LanMatch(c, "takeaway", 1, 2) for c in codes)
    return Host(name, address, port, "relay-0", matches, len(codes) if waiting is None else waiting)


# ------------------------------------------------------------------------ the view-model, purely


def test_lan_list_shows_each_host_with_its_open_matches_and_only_matches_can_be_chosen() -> None:
    vm = LanGames(started_s=100.0)
    assert vm.headline(100.5).startswith("looking")
    assert vm.chosen() is None
    vm.set_hosts([_host("desk relay-0", "10.0.0.2", 1883, "ABCD", "EFGH"),
                  _host("attic relay-0", "10.0.0.7", 1884, waiting=0)])
    rows = vm.rows()
    assert [(r.kind, r.text.split()[0]) for r in rows] == [
        ("host", "desk"), ("match", "ABCD"), ("match", "EFGH"), ("host", "attic")]
    assert "10.0.0.2:1883" in rows[0].detail and "2 open matches" in rows[0].detail
    assert "0 open matches" in rows[3].detail
    assert vm.chosen() is not None and vm.chosen().code == "ABCD"  # type: ignore[union-attr]
    assert vm.chosen().url == "mqtt://10.0.0.2:1883"  # type: ignore[union-attr]
    vm.move(+1)
    assert vm.chosen().code == "EFGH"  # type: ignore[union-attr]
    vm.move(+1)
    assert vm.chosen().code == "ABCD"  # type: ignore[union-attr]  # wraps, skipping the headings
    vm.move(-1)
    assert vm.chosen().code == "EFGH"  # type: ignore[union-attr]
    assert vm.headline(101.0) == "2 hosts on the local network, 2 open matches"


def test_lan_choice_survives_a_refresh_and_moves_on_when_its_match_is_gone() -> None:
    vm = LanGames()
    vm.set_hosts([_host("a", "10.0.0.2", 1883, "AAAA", "BBBB")])
    vm.move(+1)
    assert vm.chosen().code == "BBBB"  # type: ignore[union-attr]
    vm.set_hosts([_host("z", "10.0.0.9", 1883, "ZZZZ"), _host("a", "10.0.0.2", 1883, "AAAA", "BBBB")])
    assert vm.chosen().code == "BBBB"  # type: ignore[union-attr]  # the new host above it did not move it
    vm.set_hosts([_host("a", "10.0.0.2", 1883, "AAAA")])
    assert vm.chosen().code == "AAAA"  # type: ignore[union-attr]
    vm.set_hosts([])
    assert vm.chosen() is None
    vm.move(+1)  # nothing to choose: no error
    assert vm.chosen() is None


def test_lan_headline_says_nothing_found_only_after_looking_and_says_why_it_cannot_look() -> None:
    vm = LanGames(started_s=0.0)
    vm.set_hosts([])
    assert vm.headline(LOOK_S / 2).startswith("looking")
    assert vm.headline(LOOK_S + 0.1).startswith("no blink hosts found")
    assert "(+" not in vm.headline(LOOK_S + 0.1)
    vm.fail("no network interface with multicast")
    assert vm.headline(LOOK_S + 0.1) == "⚠ no network interface with multicast"
    many = LanGames()
    many.set_hosts([_host("big", "10.0.0.3", 1883, "AAAA", waiting=14)])
    assert "14 open matches (13 not listed)" in many.rows()[0].detail


# ------------------------------------------------------------------------ through the real window


class FakeBrowser:
    """Stands in for ``client.lan.LanBrowser``: the hosts a test says, no network at all."""

    def __init__(self, hosts: list[Host]) -> None:
        self.found = hosts
        self.closed = False
        self.polls = 0

    def hosts(self, resolve_timeout: float = 1.0) -> list[Host]:
        self.polls += 1
        return list(self.found)

    def close(self) -> None:
        self.closed = True


def _app(game: str = "takeaway", lan: bool = False) -> Any:
    from client.window import App, AppConfig, SessionConfig
    from relay.core import RelayConfig

    session = SessionConfig(name="you", game=game, relay_config=RelayConfig(between_games_s=0.5), seed=3,
                            request_timeout_s=LONG, lan=lan)
    return App(AppConfig(mode="menu", mute=True, session=session))


def test_lan_games_lists_hosts_and_enter_joins_the_chosen_match(xdisplay: str, tmp_path: Path) -> None:
    from pyglet.window import key

    from client import Player
    from relay.hosting import LocalServer

    async def scenario() -> None:
        # "Another machine": a relay on loopback with one open match, found by the fake browser.
        async with LocalServer(None, 5) as other:
            friend = Player(other.address, "friend")
            await friend.__aenter__()
            try:
                code = await friend.create("takeaway", {}, seats=2, timeout=LONG)
                browser = FakeBrowser([_host("desk relay-0", "127.0.0.1", other.address.port, code),
                                       _host("attic relay-1", "127.0.0.1", 1, "XXXX")])
                app = _app()
                app.lan_browser = lambda interfaces: browser
                task = await started(app)
                try:
                    await until(app, lambda: app.describe().get("scene") == "menu")
                    press(app, key.L)
                    shown = await until(app, lambda: app.describe().get("scene") == "lan"
                                        and len(app.describe()["rows"]) == 4
                                        and app.describe()["headline"].startswith("2 hosts") and app.describe())
                    assert [r["kind"] for r in shown["rows"]] == ["host", "match", "host", "match"]
                    assert shown["chosen"] == code
                    assert shown["headline"].startswith("2 hosts on the local network")
                    app.request_screenshot(str(tmp_path / "lan_list.png"))
                    await app.next_frame()
                    press(app, key.DOWN)
                    await until(app, lambda: app.describe()["chosen"] == "XXXX")
                    press(app, key.UP, key.ENTER)
                    await until(app, lambda: app.session.model is not None and app.session.model.match == code
                                and app.session.status == "playing")
                    assert app.session.server_url == f"mqtt://127.0.0.1:{other.address.port}"
                    assert browser.polls >= 1
                    await until(app, lambda: browser.closed)  # leaving the screen stops browsing
                finally:
                    await stop(app, task)
            finally:
                await friend.close()

    asyncio.run(asyncio.wait_for(scenario(), SCENARIO_S))
    assert (tmp_path / "lan_list.png").stat().st_size > 0


def test_hosting_listens_on_every_interface_on_a_stable_port_and_shows_the_lan_address(
        xdisplay: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pyglet.window import key

    import relay.hosting.lanhost as lanmod
    from client import Player
    from mqttkit import BrokerAddress

    adverts: list[tuple[int, str, str]] = []

    class Recorder:  # the advertiser, without multicast
        def __init__(self, port: int, relay_id: str, broker_host: str, *rest: Any) -> None:
            adverts.append((port, relay_id, broker_host))

        async def __aenter__(self) -> Any:
            return self

        async def __aexit__(self, *exc: Any) -> None:
            adverts.append((-1, "closed", ""))

    monkeypatch.setattr(lanmod, "advertise", Recorder)
    monkeypatch.setattr(lanmod, "lan_urls", lambda port, host="0.0.0.0", chosen=None: [f"mqtt://192.0.2.7:{port}"])

    async def scenario() -> None:
        app = _app(game="blink", lan=True)
        task = await started(app)
        try:
            await until(app, lambda: app.describe().get("scene") == "menu" and app.session.status == "ready")
            press(app, key.H)
            await until(app, lambda: app.session.status == "waiting" and app.session.model is not None
                        and app.session.model.match)
            code = app.session.model.match
            port = app.session.server.broker.port
            assert 1883 <= port < 1883 + lanmod.PORT_TRIES and app.session.server.broker.host == "0.0.0.0"
            assert adverts == [(port, "relay-0", "0.0.0.0")]
            shown = await until(app, lambda: app.describe().get("big", "").startswith("Match code") and app.describe())
            assert shown["big"] == f"Match code  {code}"
            assert f"blink play --server mqtt://192.0.2.7:{port} --match {code}" in shown["sub"]
            app.request_screenshot(str(tmp_path / "lan_host.png"))
            await app.next_frame()
            # a friend comes in through the broker listening on every interface
            friend = Player(BrokerAddress("127.0.0.1", port), "friend")
            await friend.__aenter__()
            try:
                await friend.join(code, timeout=LONG)
                await until(app, lambda: app.session.status == "playing")
            finally:
                await friend.close()
        finally:
            await stop(app, task)
        assert adverts[-1] == (-1, "closed", "")

    asyncio.run(asyncio.wait_for(scenario(), SCENARIO_S))


# ------------------------------------------------------------------------ real multicast, in namespaces


@pytest.mark.integration
def test_blink_play_host_in_one_namespace_is_found_by_blink_lan_in_another(
        netns: Namespaces, xdisplay: str, tmp_path: Path) -> None:  # noqa: F811
    spaces = netns
    shot = tmp_path / "host_in_ns.png"
    host = spaces.start(spaces.a, "-m", "client.cli", "play", "--host", "--game", "takeaway", "--mute",
                        "--quit-after", str(SCENARIO_S), "--screenshot", str(shot))
    deadline = time.monotonic() + LONG
    found: dict[str, Any] | None = None
    last: Any = None
    while found is None and time.monotonic() < deadline:
        out = spaces.blink(spaces.b, "lan", "--json", "--timeout", "3", "--interface", spaces.vb)
        assert out.returncode == 0, out.stderr
        last = json.loads(out.stdout)
        found = next((h for h in last if h["matches"]), None)
        assert host.proc.poll() is None, f"blink play ended: {host.seen}"
    assert found is not None, f"no host with a match seen from B in {LONG} s: {last}"
    assert found["address"] == spaces.A_ADDR and found["port"] == 1883
    assert found["matches"][0]["game"] == "takeaway" and found["matches"][0]["seats"] == 2
    assert found["matches"][0]["players"] == 1
    host.proc.terminate()  # SIGTERM: the window quits, saving its screenshot
    assert host.proc.wait(timeout=LONG) == 0
    assert shot.stat().st_size > 0
