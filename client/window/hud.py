"""The corner HUD: round-trip time and clock offset to the relay, and the frame rate, live.

How this works
--------------
One label in the app's own batch, drawn over every scene. ``update`` recomputes the text at most
once a second from ``model.clock`` (the lowest-delay ping sample: ``rtt_ns`` and
``offset_ns``) and the frame statistics, and only touches the label when the text changed. While
the connection heals (``model.connection``) it starts with "reconnecting…".
"""

from __future__ import annotations

from typing import Any

import pyglet

from client.window.cards import Layer, label, set_text

NS = 1_000_000_000


def hud_text(rtt_ns: int | None, offset_ns: int | None, fps: float | None) -> str:
    rtt = "RTT —" if rtt_ns is None else f"RTT {rtt_ns / 1e6:.1f} ms"
    off = "offset —" if offset_ns is None else f"offset {offset_ns / 1e6:+.1f} ms"
    parts = [rtt, off]
    if fps is not None:
        parts.append(f"{fps:.0f} fps")
    return "   ".join(parts)


def connection_note(model: Any) -> str:
    """What the corner says about the connection before the figures: nothing while connected."""
    state = getattr(model, "connection", "connected") if model is not None else "connected"
    if state == "lost" or (model is not None and getattr(model, "lost", None)):
        return "CONNECTION LOST — the relay's broker went away   "
    if state == "reconnecting":
        return "reconnecting…   "
    return ""


class Hud:
    def __init__(self, size: tuple[int, int]) -> None:
        self.batch = pyglet.graphics.Batch()
        self.layer = Layer(9)
        self.label = label(self.batch, self.layer.text, 10, (230, 240, 235, 220), "right", "top")
        self._next = 0
        self._frames = 0
        self._since = 0
        self.resize(*size)

    def resize(self, width: int, height: int) -> None:
        f = max(8.0, min(12.0, height / 64))
        self.label.font_size = round(f, 1)
        self.label.position = (width - f, height - f * 0.8, 0)

    def update(self, model: Any, now_ns: int) -> bool:
        """Bring the text up to date; True if it changed (the frame must be drawn)."""
        self._frames += 1
        if now_ns < self._next:
            return False
        fps = None
        if self._since:
            fps = self._frames * NS / max(1, now_ns - self._since)
        self._since, self._frames = now_ns, 0
        self._next = now_ns + NS  # a new text is a new layout (a few ms): once a second is plenty
        clock = model.clock if model is not None else None
        text = hud_text(clock.rtt_ns if clock else None, clock.offset_ns if clock else None, fps)
        text = connection_note(model) + text
        if text == self.label.text:
            return False
        set_text(self.label, text)
        return True

    def draw(self) -> None:
        self.batch.draw()
