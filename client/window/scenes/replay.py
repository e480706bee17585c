"""The replay's control bar: drawn over whatever game scene shows the replayed match.

How this works
--------------
In replay mode the app's session is a ``ReplaySession`` (``viewmodels/replay.py``) and this bar
sits above the game scene in a strip of its own at the top of the window (the app gives the scenes
the window less this strip): the app gives it input first and draws it last.
Each frame ``update`` moves the playback on (the session feeds the spectator model, the scene
below draws it as it would a live match) and, after a seek, asks the app for a fresh scene (its
animations only run forwards). The bar shows play/pause, the speed, the event counter with the
event's type, and a scrub bar: click or drag on it to seek.

Keys: Space pause/play, ←/→ one event back/forward, 1/2/4 speed, Home/End start/end, Esc leaves.

``ReplaysScene`` is the menu's list of recorded matches (``client/replays.py``).
"""

from __future__ import annotations

import time

import pyglet
from pyglet.window import key

from client.window.cards import fit_label, label, set_color, set_text
from client.window.host import SceneHost
from client.window.scenes.base import Scene
from client.window.viewmodels import ReplaySession

BAR_H = 46
KEYS = "Space play/pause   ← → step   1 2 4 speed   Home End   Esc quit"
KEYS_SHORT = "Space play   ← → step   1 2 4 speed   Esc quit"  # a narrow window: the keys that matter most


class ReplayBar:
    name = "replay-bar"

    def __init__(self, app: SceneHost, session: ReplaySession) -> None:
        self.app = app
        self.session = session
        self.batch = pyglet.graphics.Batch()
        back, front = pyglet.graphics.Group(order=0), pyglet.graphics.Group(order=2)
        mid = pyglet.graphics.Group(order=1)
        self.bg = pyglet.shapes.Rectangle(0, 0, 10, BAR_H, color=(12, 14, 22, 255), batch=self.batch, group=back)
        self.track = pyglet.shapes.Rectangle(0, 0, 10, 6, color=(70, 80, 100, 255), batch=self.batch, group=mid)
        self.fill = pyglet.shapes.Rectangle(0, 0, 0, 6, color=(255, 210, 90, 255), batch=self.batch, group=front)
        self.knob = pyglet.shapes.Circle(0, 0, 7, color=(255, 230, 150, 255), batch=self.batch, group=front)
        self.state_lbl = label(self.batch, front, 13, (255, 255, 255, 255), "left", "center", bold=True)
        self.info_lbl = label(self.batch, front, 11, (210, 220, 235, 255), "right", "center")
        from_menu = app.replay_from_menu
        self._keys = tuple(k.replace("Esc quit", "Esc back to the list") if from_menu else k
                           for k in (KEYS, KEYS_SHORT))
        self.keys_lbl = label(self.batch, front, 10, (160, 170, 190, 255), "left", "center", text=KEYS)
        self.dragging = False
        self._epoch = -1
        self._shown: object = None
        self.height = BAR_H
        self.resize(*app.window_size)

    # ------------------------------------------------------------------ layout

    def resize(self, width: int, height: int) -> None:
        self.w, self.h = width, height
        top = height - BAR_H  # a strip of its own at the top: the scenes lay out below it (``App.size``)
        self.bg.position = (0, top)
        self.bg.width = width
        self.x0, self.x1 = 250.0, max(260.0, width - 24.0)
        self.ty = top + 30
        self.track.position = (self.x0, self.ty - 3)
        self.track.width = self.x1 - self.x0
        self.fill.position = (self.x0, self.ty - 3)
        self.state_lbl.position = (14, top + 30, 0)
        self.info_lbl.position = (width - 14, top + 11, 0)
        self.keys_lbl.position = (14, top + 11, 0)  # under the state, left of the event line (``update``)
        self._shown = None

    def on_bar(self, x: float, y: float) -> bool:
        return y >= self.h - BAR_H

    # ------------------------------------------------------------------ per frame

    def update(self, now_ns: int) -> None:
        s = self.session
        s.tick(now_ns)
        if s.epoch != self._epoch:
            self._epoch = s.epoch
            self.app.goto("table")  # a seek: a fresh scene on the new model
        pb = s.playback
        n = len(s.replay)
        shown = (pb.index, pb.paused, pb.speed, self.w, self.h)
        if shown == self._shown:
            return
        self._shown = shown
        frac = pb.t_s / s.replay.duration_s if s.replay.duration_s > 0 else (pb.index / max(1, n - 1))
        frac = max(0.0, min(1.0, frac))
        self.fill.width = (self.x1 - self.x0) * frac
        self.knob.position = (self.x0 + (self.x1 - self.x0) * frac, self.ty)
        mark = "❚❚ paused" if pb.paused else "▶ playing"
        if pb.paused and pb.at_end:
            mark = "■ end"
        set_text(self.state_lbl, f"REPLAY  {mark}  {pb.speed:g}×")
        ev = s.replay.steps[pb.index].event
        set_text(self.info_lbl, f"event {pb.index + 1}/{n} · {ev.type}")
        # the keys keep clear of the event line: fewer and smaller in a narrow window (cut as a last resort)
        room = self.w - 14 - self.info_lbl.content_width - 16 - 14
        fit_label(self.keys_lbl, self._keys[0], room, 10, min_size=8)
        if self.keys_lbl.text != self._keys[0]:
            fit_label(self.keys_lbl, self._keys[1], room, 10, min_size=8)

    def draw(self) -> None:
        self.batch.draw()

    def describe(self) -> dict[str, object]:
        pb = self.session.playback
        return {"index": pb.index, "events": len(self.session.replay), "paused": pb.paused, "speed": pb.speed,
                "state": self.state_lbl.text, "info": self.info_lbl.text}

    # ------------------------------------------------------------------ input

    def on_key_press(self, symbol: int, modifiers: int) -> bool:
        s, pb = self.session, self.session.playback
        now = time.time_ns()
        if symbol == key.SPACE:
            pb.toggle()
            if pb.index == 0 and not pb.paused:
                s.seek(0, now)
        elif symbol == key.RIGHT:
            s.step(1, now)
        elif symbol == key.LEFT:
            s.step(-1, now)
        elif symbol in (key._1, key.NUM_1):
            pb.set_speed(1.0)
        elif symbol in (key._2, key.NUM_2):
            pb.set_speed(2.0)
        elif symbol in (key._4, key.NUM_4):
            pb.set_speed(4.0)
        elif symbol == key.HOME:
            s.seek(0, now)
        elif symbol == key.END:
            pb.paused = True
            s.seek(len(s.replay) - 1, now)
        elif symbol in (key.ESCAPE, key.Q, key.M):
            self.app.leave_replay()
        else:
            return True  # the game scene below is only watched: its play keys do nothing here
        self.app.note_input()
        return True

    def _seek_x(self, x: float) -> None:
        f = max(0.0, min(1.0, (x - self.x0) / max(1.0, self.x1 - self.x0)))
        s = self.session
        r = s.replay
        i = 0 if f == 0.0 else r.index_at(f * r.duration_s)
        if i != s.playback.index:  # a drag over the same event makes no new scene
            s.seek(i, time.time_ns())

    def on_mouse_press(self, x: int, y: int, button: int, modifiers: int) -> bool:
        if not self.on_bar(x, y):
            return True  # nothing below is clickable in a replay
        if self.x0 - 10 <= x <= self.x1 + 10:
            self.dragging = True
            self._seek_x(x)
            self.app.note_input()
        return True

    def on_mouse_drag(self, x: int, y: int, dx: int, dy: int, buttons: int, modifiers: int) -> bool:
        if self.dragging:
            self._seek_x(x)
        return True

    def on_mouse_release(self, x: int, y: int, button: int, modifiers: int) -> bool:
        self.dragging = False
        return True


# --------------------------------------------------------------------------------------- the list


class ReplaysScene(Scene):
    """The menu's "Replays": the recorded matches (``client/replays.py``), newest first; ↑/↓ and
    Enter (or the row's number key, or a click) open one, Esc goes back to the menu. A log that
    cannot be replayed (cut short, or false) says why in the status line instead."""

    name = "replays"
    clear_colour = (0.07, 0.16, 0.13, 1.0)
    ROWS = 9

    def __init__(self, app: SceneHost) -> None:
        super().__init__(app)
        from client.replays import list_replays

        b = self.batch
        front = pyglet.graphics.Group(order=2)
        back = pyglet.graphics.Group(order=1)
        self.folder: str | None = getattr(app.session.config, "record_dir", None)  # None: the data directory's
        listed = list_replays(self.folder)
        # one that stops before any result cannot be verified, so not watched: counted, not listed
        self.entries = [e for e in listed if e.playable]
        self.left_out = len(listed) - len(self.entries)
        self.index = 0
        self.top = 0
        self.error = ""
        self.title = label(b, front, 30, (255, 255, 255, 255), "center", "center", bold=True, text="Replays")
        # each row two lines: when, which game and who; under it the result of every match in it
        self.rows = [label(b, front, 13, (225, 240, 230, 255), "left", "center") for _ in range(self.ROWS)]
        self.results = [label(b, front, 11, (190, 215, 200, 255), "left", "center") for _ in range(self.ROWS)]
        self.keys = [label(b, front, 13, (255, 220, 120, 255), "center", "center", bold=True) for _ in range(self.ROWS)]
        self.band = pyglet.shapes.Rectangle(0, 0, 10, 10, color=(40, 120, 90, 255), batch=b, group=back)
        self.status = label(b, front, 11, (190, 215, 200, 255), "center", "center")
        self.hint = label(b, front, 11, (190, 215, 200, 255), "center", "center",
                          text="↑ ↓  choose     Enter or 1–9  watch     Esc  menu")
        self._key: object = None
        self.resize(*app.size)

    def resize(self, width: int, height: int) -> None:
        self.w, self.h = width, height
        f = max(9.0, min(15.0, height / 52))
        self.f = f
        self.title.position = (width / 2, height - f * 4, 0)
        self.rx = width / 2 - min(width * 0.9, f * 60) / 2
        self.rw = min(width * 0.9, f * 60)
        for i, (r, res, k) in enumerate(zip(self.rows, self.results, self.keys)):
            y = height - f * (9 + 3.2 * i)
            r.font_size = round(f * 1.0, 1)
            r.position = (self.rx + f * 3.5, y + f * 0.55, 0)
            res.position = (self.rx + f * 3.5, y - f * 0.7, 0)
            k.position = (self.rx + f * 1.5, y, 0)
        self.status.position = (width / 2, f * 4.2, 0)
        self.hint.position = (width / 2, f * 1.8, 0)
        self._key = None

    def row_y(self, i: int) -> float:
        return self.h - self.f * (9 + 3.2 * i)

    def update(self, now_ns: int) -> None:
        k = (self.index, self.top, self.error, self.w, self.h)
        if k == self._key:
            return
        self._key = k
        if self.index < self.top:
            self.top = self.index
        elif self.index >= self.top + self.ROWS:
            self.top = self.index - self.ROWS + 1
        for i in range(self.ROWS):
            j = self.top + i
            row, res = self.rows[i], self.results[i]
            room = self.rw - self.f * 4.5
            if j < len(self.entries):
                e = self.entries[j]
                set_text(self.keys[i], str(i + 1))
                who = " vs ".join(e.players) if len(e.players) <= 2 else ", ".join(e.players)
                fit_label(row, f"{e.date}   {e.game}   {who or '?'}", room, round(self.f * 1.0, 1),
                          min_size=round(self.f * 0.8, 1))
                result = e.result if e.finished else f"stopped early: plays up to the last result · {e.result}"
                fit_label(res, result, room, round(self.f * 0.85, 1), min_size=round(self.f * 0.7, 1))
                set_color(res, (190, 215, 200, 255) if e.finished else (235, 205, 130, 255))
            else:
                set_text(self.keys[i], "")
                fit_label(row, "no recorded matches yet: play one, it is kept here" if j == 0 else "", room,
                          round(self.f * 1.0, 1))
                set_text(res, "")
        sel = self.index - self.top
        self.band.position = (self.rx, self.row_y(sel) - self.f * 1.45)
        self.band.width, self.band.height = self.rw, self.f * 2.9
        self.band.visible = bool(self.entries)
        where = self.folder or "the data directory"
        gone = (f" ({self.left_out} more stop before any result: nothing to watch)" if self.left_out else "")
        fit_label(self.status, f"⚠ {self.error}" if self.error else f"{len(self.entries)} recorded in {where}{gone}",
                  self.w * 0.96, round(self.f * 0.9, 1), min_size=round(self.f * 0.65, 1))
        self.display_version += 1

    def open(self, j: int) -> None:
        from client.window.viewmodels import ReplayError, load_replay

        if not 0 <= j < len(self.entries):
            return
        self.index = j
        path = self.entries[j].path
        try:
            with open(path, encoding="utf-8") as f:
                replay = load_replay(f.read().splitlines(), cut_unfinished=True)
        except (OSError, UnicodeDecodeError, ReplayError, RecursionError) as exc:
            self.error = f"{path.name}: {exc}"  # fitted to the window when drawn
            return
        self.app.open_replay(replay)

    def on_key_press(self, symbol: int, modifiers: int) -> bool:
        self.app.note_input()
        if symbol in (key.UP, key.W):
            self.index = max(0, self.index - 1)
        elif symbol in (key.DOWN, key.S):
            self.index = min(max(0, len(self.entries) - 1), self.index + 1)
        elif symbol in (key.ENTER, key.RETURN, key.NUM_ENTER, key.SPACE):
            self.open(self.index)
        elif key._1 <= symbol <= key._9:
            self.open(self.top + symbol - key._1)
        elif symbol in (key.ESCAPE, key.M):
            self.app.goto("menu")
        elif symbol == key.Q:
            self.app.quit()
        else:
            return False
        return True

    def on_mouse_press(self, x: int, y: int, button: int, modifiers: int) -> bool:
        for i in range(self.ROWS):
            if abs(y - self.row_y(i)) <= self.f * 1.3 and self.rx <= x <= self.rx + self.rw:
                self.app.note_input()
                self.open(self.top + i)
                return True
        return False

    def describe(self) -> dict[str, object]:
        return {"scene": self.name, "index": self.index,
                "rows": [f"{r.text}   —   {res.text}" if res.text else r.text for r, res in zip(self.rows, self.results)
                         if r.text],
                "status": self.status.text}
