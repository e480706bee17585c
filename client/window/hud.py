"""The corner HUD: round-trip time and clock offset to the relay, and the frame rate, live.

How this works
--------------
One label in the app's own batch, drawn over every scene. ``update`` recomputes the text at most
once a second from ``model.clock`` (the lowest-delay recent clock sample -- a play's verdict
while the player plays, a ping while idle: ``rtt_ns`` and ``offset_ns``) and the frame statistics, and only touches the label when the text changed. While
the connection heals (``model.connection``) it starts with "reconnecting…". With no relay to
measure -- the menu before a game, a replay (a log has no relay) -- it shows the frame rate only,
never a dash where a round trip would be. ``room`` is how wide its text can get: scenes keep their
top line clear of it.

A key (``P`` at the table) shows a second line under it: the player's last play's time in parts
(``play_parts``), from the stamps its verdict carried and the clock offset -- to the relay
(uplink), held for fair order, judged (journal and publish included), back (downlink), and until
the frame that drew the verdict (drawing; the HUD notes the first frame after a new verdict). A play
held for fairness shows at once all the same: the prediction drew it on the frame after the key
press, and only its confirmation (the pending ring going) waits.
"""

from __future__ import annotations

import pyglet

from client.model import Verdict
from client.window.cards import Layer, label, set_text
from client.window.playparts import parts_text, play_parts
from client.window.viewmodels import ClientView

NS = 1_000_000_000


#: the widest text the HUD shows in play (``Hud.room``)
WIDEST = "RTT 999.9 ms   offset +999.9 ms   999 fps"


def hud_text(rtt_ns: int | None, offset_ns: int | None, fps: float | None, relay: bool = True) -> str:
    """The HUD's line; ``relay`` False: there is no relay to measure (the frame rate only)."""
    parts = []
    if relay:
        parts.append("RTT —" if rtt_ns is None else f"RTT {rtt_ns / 1e6:.1f} ms")
        parts.append("offset —" if offset_ns is None else f"offset {offset_ns / 1e6:+.1f} ms")
    if fps is not None:
        parts.append(f"{fps:.0f} fps")
    return "   ".join(parts)


def connection_note(model: ClientView | None) -> str:
    """What the corner says about the connection before the figures: nothing while connected."""
    state = model.connection if model is not None else "connected"
    if state == "lost" or (model is not None and model.lost):
        return "CONNECTION LOST — the relay's broker went away   "
    if state == "reconnecting":
        return "reconnecting…   "
    return ""


class Hud:
    def __init__(self, size: tuple[int, int]) -> None:
        self.batch = pyglet.graphics.Batch()
        self.layer = Layer(9)
        self.label = label(self.batch, self.layer.text, 10, (230, 240, 235, 220), "right", "top")
        self.parts_label = label(self.batch, self.layer.text, 10, (230, 240, 235, 220), "right", "top")
        self.show_parts = False  # the last play's parts on the second line (a key toggles it)
        self._verdict: Verdict | None = None  # the last verdict seen, and the first frame after it came
        self._drawn_ns = 0
        self._stale = False
        self._next = 0
        self._frames = 0
        self._since = 0
        self.room = 0.0  # from the window's right edge, what the widest text takes (``WIDEST``)
        self.resize(*size)

    def resize(self, width: int, height: int) -> None:
        f = max(8.0, min(12.0, height / 64))
        self.label.font_size = round(f, 1)
        self.label.position = (width - f, height - f * 0.8, 0)
        self.parts_label.font_size = round(f, 1)
        self.parts_label.position = (width - f, height - f * 2.6, 0)
        probe = pyglet.text.Label(WIDEST, font_name=self.label.font_name, font_size=round(f, 1))
        self.room = f + float(probe.content_width)
        probe.delete()

    def update(self, model: ClientView | None, now_ns: int, relay: bool = True) -> bool:
        """Bring the text up to date; True if it changed (the frame must be drawn). ``relay``
        False: nothing to measure a round trip to (a replay, the menu)."""
        self._frames += 1
        drawn = self._parts(model, now_ns)
        if now_ns < self._next:
            return drawn
        fps = None
        if self._since:
            fps = self._frames * NS / max(1, now_ns - self._since)
        self._since, self._frames = now_ns, 0
        self._next = now_ns + NS  # a new text is a new layout (a few ms): once a second is plenty
        clock = model.clock if model is not None else None
        relay = relay and model is not None
        text = hud_text(clock.rtt_ns if clock else None, clock.offset_ns if clock else None, fps, relay)
        text = (connection_note(model) if relay else "") + text
        if text == self.label.text:
            return drawn
        set_text(self.label, text)
        return True

    def toggle_parts(self) -> None:
        self.show_parts = not self.show_parts
        self._stale = True  # the second line is brought up to date (or cleared) on the next frame

    def _parts(self, model: ClientView | None, now_ns: int) -> bool:
        """Note a new verdict's first frame and, when shown, bring the parts line up to date; True
        if the line changed."""
        verdicts = model.verdicts if model is not None else None
        last = verdicts[-1] if verdicts else None
        if last is not self._verdict:
            self._verdict, self._drawn_ns = last, now_ns  # this frame is the one that draws it
            self._stale = True
        if not self._stale:
            return False
        self._stale = False
        text = parts_text(play_parts(last, self._drawn_ns) if last is not None else None) if self.show_parts else ""
        if text == self.parts_label.text:
            return False
        set_text(self.parts_label, text)
        return True

    def draw(self) -> None:
        self.batch.draw()
