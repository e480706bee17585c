"""A play's time in parts, as the HUD's second line shows it (pure: no pyglet, no clock).

How this works
--------------
A verdict (``client.model.Verdict``) carries the relay's stamps -- when the play reached the relay
(``recv_ns``), how long fair order held it (``hold_ns``), when the verdict left (``relay_sent_ns``),
on the relay's wall clock -- beside the player's own send and receipt times and the clock offset
(relay minus client) when it came. So the play splits into uplink, held, judging (the relay's
journal and publish included), downlink -- which add up to the play -> verdict time, the offset
cancelling -- and drawing, from the verdict to the first frame drawn after it (``drawn_ns``).
``blink latency`` splits its plays the same way (``client/tools/latency.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from client.model import Verdict

#: A play's time in parts, in order (as ``blink latency`` reports them).
PARTS = ("uplink", "held", "judging", "downlink", "drawing")


def play_parts(verdict: Verdict, drawn_ns: int) -> dict[str, float] | None:
    """A verdict's play in parts, in ms (None without the stamps: an older relay, a replay). The
    first four add up to the play -> verdict time; drawing is from the verdict to ``drawn_ns``."""
    off = verdict.offset_ns
    recv, sent = verdict.recv_ns, verdict.relay_sent_ns
    if off is None or not recv or not sent:
        return None
    hold = verdict.hold_ns
    ns = {"uplink": recv - (verdict.sent_ns + off), "held": hold, "judging": sent - recv - hold,
          "downlink": verdict.answered_ns + off - sent, "drawing": max(0, drawn_ns - verdict.answered_ns)}
    return {k: v / 1e6 for k, v in ns.items()}


def parts_text(parts: dict[str, float] | None) -> str:
    """The HUD's second line: the last play's parts, or why there are none."""
    if parts is None:
        return "last play: —"
    return "last play: " + "  ".join(f"{name} {parts[name]:.0f}" for name in PARTS) + " ms"


