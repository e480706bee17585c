"""The menu's "LAN games" screen: blink hosts on the local network and their open matches.

How this works
--------------
On ``enter`` a background task starts a ``client.lan.LanBrowser`` (zeroconf runs in its own
thread) and asks it for the hosts every ``POLL_S``; both calls run in a worker thread, because
resolving a host can wait on the network and the frame loop must never wait. The answers go into
the pure view-model (``viewmodels/lan.py``); ``update`` redraws only when what it shows changed.
Up/Down choose a match, Enter joins it on its host's relay (``App.start_game("lan", ...)``), Esc
goes back to the menu. ``app.lan_browser`` (a callable returning a started browser) replaces the
real one in tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import TYPE_CHECKING

from pyglet.window import key, mouse

from client.window import geometry as geo
from client.window.cards import Layer, label, set_color, set_text
from client.window.mesh import Mesh
from client.window.host import SceneHost
from client.window.scenes.base import Scene
from client.window.viewmodels import LanGames, LanRow

if TYPE_CHECKING:
    from client.lan import Browser

POLL_S = 0.5
ROWS = 12  # rows drawn at most (hosts and matches together)
BG = (18, 41, 33)


def _real_browser(interfaces: list[str] | None) -> Browser:
    from client.lan import LanBrowser

    return LanBrowser(interfaces).start()


class LanScene(Scene):
    name = "lan"
    clear_colour = (0.07, 0.16, 0.13, 1.0)

    def __init__(self, app: SceneHost) -> None:
        super().__init__(app)
        b = self.batch
        self.l_back, self.l_front = Layer(1), Layer(2)
        self.vm = LanGames(time.monotonic())
        self.title = label(b, self.l_front.text, 30, (255, 255, 255, 255), "center", "center", bold=True,
                           text="LAN games")
        self.headline = label(b, self.l_front.text, 13, (200, 230, 215, 255), "center", "center")
        self.panels = [Mesh(b, self.l_back.mesh, bg=BG) for _ in range(ROWS)]
        self.texts = [label(b, self.l_front.text, 15, (255, 255, 255, 255), "left", "center", bold=True)
                      for _ in range(ROWS)]
        self.details = [label(b, self.l_front.text, 12, (200, 225, 210, 255), "right", "center")
                        for _ in range(ROWS)]
        self.hint = label(b, self.l_front.text, 11, (190, 215, 200, 255), "center", "center",
                          text="↑ ↓  choose a match     Enter  join     Esc  back to the menu")
        self._rects: list[tuple[float, float, float, float]] = []
        self._shown: list[LanRow] = []
        self._key: object = None
        self._task: asyncio.Task[None] | None = None
        self.resize(*app.size)

    # ----------------------------------------------------------------- browsing (off the frame loop)

    def enter(self) -> None:
        self._task = asyncio.ensure_future(self._poll())

    def exit(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _poll(self) -> None:
        from mqttkit.lan import LanError

        make = self.app.lan_browser or _real_browser
        try:
            browser = await asyncio.to_thread(make, self.app.session.config.lan_interfaces)
        except LanError as exc:
            self.vm.fail(f"cannot look for LAN games here: {exc}")
            return
        try:
            while True:
                try:
                    hosts = await asyncio.to_thread(browser.hosts, POLL_S)
                except LanError as exc:
                    self.vm.fail(str(exc))
                    return
                self.vm.set_hosts(hosts)
                await asyncio.sleep(POLL_S)
        finally:
            with contextlib.suppress(Exception):
                await asyncio.shield(asyncio.to_thread(browser.close))

    # ----------------------------------------------------------------- drawing

    def resize(self, width: int, height: int) -> None:
        f = max(9.0, min(15.0, height / 52))
        self.title.font_size = round(f * 2.4, 1)
        self.title.position = (width / 2, height - f * 3.6, 0)
        self.headline.font_size = round(f * 0.95, 1)
        self.headline.position = (width / 2, height - f * 6.6, 0)
        iw = min(width * 0.86, f * 46)
        top = height - f * 9.4
        pitch = min(f * 2.9, (top - f * 4.4) / max(1, ROWS - 1))
        ih = pitch * 0.86
        self._rects = []
        for i in range(ROWS):
            y = top - i * pitch
            self._rects.append((width / 2, y, iw, ih))
            self.texts[i].font_size = round(f * 1.1, 1)
            self.details[i].font_size = round(f * 0.9, 1)
            self.texts[i].position = (width / 2 - iw / 2 + f * 1.2, y, 0)
            self.details[i].position = (width / 2 + iw / 2 - f * 1.2, y, 0)
        self.hint.font_size = round(f * 0.9, 1)
        self.hint.position = (width / 2, f * 1.8, 0)
        self._key = None

    def update(self, now_ns: int) -> None:
        k = (self.vm.looks(time.monotonic()), tuple(self._rects))
        if k == self._key:
            return
        self._key = k
        rows = self.vm.rows()[:ROWS]
        chosen = self.vm.chosen()
        self._shown = rows
        set_text(self.headline, self.vm.headline(time.monotonic()))
        for i, (panel, rect) in enumerate(zip(self.panels, self._rects)):
            x, y, w, h = rect
            t = geo.Tris()
            if i < len(rows):
                row = rows[i]
                if row.kind == "host":
                    set_text(self.texts[i], row.text)
                    set_color(self.texts[i], (255, 220, 120, 255))
                else:
                    on = chosen is not None and row.key == chosen.key
                    set_text(self.texts[i], "     " + row.text)
                    set_color(self.texts[i], (255, 255, 255, 255))
                    geo.rounded_rect(t, w - h, h, h * 0.3, (40, 120, 90, 255) if on else (20, 60, 48, 255))
                    if on:
                        geo.rounded_ring(t, w - h, h, h * 0.3, 2.0, (255, 220, 120, 255))
                set_text(self.details[i], row.detail)
            else:
                set_text(self.texts[i], "")
                set_text(self.details[i], "")
            panel.set(t)
            panel.move(x + (h / 2 if i < len(rows) and rows[i].kind == "match" else 0), y)
        err = bool(self.vm.error)
        set_color(self.headline, (255, 140, 120, 255) if err else (200, 230, 215, 255))
        self.display_version += 1

    # ----------------------------------------------------------------- input

    def join(self) -> bool:
        row = self.vm.chosen()
        if row is None:
            return False
        self.app.note_input()
        self.app.start_game("lan", code=row.code, url=row.url, prefix=row.prefix)
        return True

    def on_key_press(self, symbol: int, modifiers: int) -> bool:
        before = self.vm.chosen()
        if symbol in (key.UP, key.W):
            self.vm.move(-1)
        elif symbol in (key.DOWN, key.S):
            self.vm.move(+1)
        elif symbol in (key.ENTER, key.RETURN, key.NUM_ENTER, key.SPACE):
            return self.join()
        elif symbol in (key.ESCAPE, key.BACKSPACE):
            self.app.note_input()
            self.app.goto("menu")
            return True
        else:
            return False
        if self.vm.chosen() != before:
            self.app.note_input()
        return True

    def on_mouse_press(self, x: int, y: int, button: int, modifiers: int) -> bool:
        if button != mouse.LEFT:
            return False
        for row, (cx, cy, w, h) in zip(self._shown, self._rects):
            if row.kind == "match" and abs(x - cx) <= w / 2 and abs(y - cy) <= h / 2:
                self.vm.choose(row)
                return self.join()
        return False

    def describe(self) -> dict[str, object]:
        chosen = self.vm.chosen()
        return {"scene": self.name, "headline": self.headline.text,
                "rows": [{"kind": r.kind, "text": r.text, "detail": r.detail, "code": r.code, "url": r.url}
                         for r in self.vm.rows()],
                "chosen": chosen.code if chosen else None}
