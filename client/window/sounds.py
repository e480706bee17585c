"""Sound effects generated in code (raw PCM, no audio files), and never a crash without a device.

How this works
--------------
``pcm(name)`` renders an effect -- a few short tones, each a waveform with a fast attack and a
linear decay -- into 16-bit mono PCM bytes in plain Python (pure, tested without audio). ``Sounds``
wraps each in a pyglet ``StaticMemorySource`` the first time it is needed; ``play(name)`` starts
it and returns at once (pyglet mixes on its own audio thread, nothing here waits). Anything that
goes wrong -- no audio driver, no device, a driver failing on first use -- switches sound off for
the rest of the session with one log line: a missing speaker never stops the game. ``--mute``
never touches the audio system at all.
"""

from __future__ import annotations

import logging
import math
import struct
from functools import lru_cache
from typing import TYPE_CHECKING, Literal, Mapping

if TYPE_CHECKING:
    from pyglet.media.codecs.base import StaticSource

log = logging.getLogger("blink.window")

RATE = 22050
#: The sound cues a viewmodel may ask for: a play landed, a play bounced, a countdown tick, GO, a
#: game won, a stalemate.
Cue = Literal["land", "bounce", "tick", "go", "win", "stalemate"]
Wave = Literal["square", "triangle", "sine"]
#: cue -> tones played one after another: (waveform, frequency Hz, seconds, gain 0..1)
EFFECTS: Mapping[Cue, list[tuple[Wave, float, float, float]]] = {
    "land": [("triangle", 880.0, 0.045, 0.45), ("triangle", 1320.0, 0.07, 0.40)],
    "bounce": [("square", 196.0, 0.08, 0.20), ("square", 139.0, 0.15, 0.20)],
    "tick": [("sine", 660.0, 0.06, 0.35)],
    "go": [("sine", 990.0, 0.16, 0.40)],
    "win": [("triangle", 660.0, 0.10, 0.40), ("triangle", 880.0, 0.10, 0.40), ("triangle", 1320.0, 0.22, 0.40)],
    "stalemate": [("sine", 330.0, 0.12, 0.35), ("sine", 262.0, 0.18, 0.35)],
}


def _wave(kind: Wave, phase: float) -> float:
    p = phase % 1.0
    if kind == "square":
        return 1.0 if p < 0.5 else -1.0
    if kind == "triangle":
        return 4.0 * p - 1.0 if p < 0.5 else 3.0 - 4.0 * p
    return math.sin(2 * math.pi * p)


@lru_cache(maxsize=None)
def pcm(name: Cue, rate: int = RATE) -> bytes:
    """The effect as signed 16-bit little-endian mono samples."""
    samples: list[int] = []
    for kind, freq, secs, gain in EFFECTS[name]:
        n = int(secs * rate)
        attack = max(1, int(0.004 * rate))
        for i in range(n):
            env = min(1.0, i / attack) * (1.0 - i / n)
            samples.append(int(32767 * gain * env * _wave(kind, freq * i / rate)))
    return struct.pack(f"<{len(samples)}h", *samples)


def _static_source(data: bytes) -> StaticSource:
    """A pyglet ``StaticSource`` over PCM bytes (each play gets its own reader of the same bytes)."""
    from pyglet.media.codecs.base import AudioFormat, StaticSource

    class PcmSource(StaticSource):
        def __init__(self, pcm_bytes: bytes) -> None:  # no decoding: the samples are already here
            fmt = AudioFormat(channels=1, sample_size=16, sample_rate=RATE)
            self.audio_format = fmt  # type: ignore[assignment]
            self.video_format = None
            self.info = None
            self._data = pcm_bytes  # type: ignore[assignment]
            self._duration = len(pcm_bytes) / fmt.bytes_per_second  # type: ignore[assignment]

    return PcmSource(data)


class Sounds:
    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self._sources: dict[Cue, StaticSource] = {}
        self.played: list[Cue] = []  # what was asked for (tests read it, even when muted)

    def warm(self) -> None:
        """Load the audio system and render every effect now, at start-up: importing pyglet.media
        alone takes a fifth of a second, which must not land in the middle of a race."""
        if not self.enabled:
            return
        try:
            for name in EFFECTS:
                if name not in self._sources:
                    self._sources[name] = _static_source(pcm(name))
        except Exception as exc:  # noqa: BLE001
            log.warning("sound disabled: %s", exc)
            self.enabled = False

    def play(self, name: Cue) -> None:
        self.played.append(name)
        if len(self.played) > 1000:
            del self.played[:500]
        if not self.enabled or name not in EFFECTS:
            return
        try:
            src = self._sources.get(name)
            if src is None:
                src = self._sources[name] = _static_source(pcm(name))
            src.play()
        except Exception as exc:  # noqa: BLE001 - no sound is better than no game
            log.warning("sound disabled: %s", exc)
            self.enabled = False
