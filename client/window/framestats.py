"""Frame statistics and input-to-screen tracking (pure: time comes in as arguments).

How this works
--------------
The frame loop calls ``frame(start_ns, end_ns, version, presented)`` once per frame: the frame time
is the work of one frame (events, update, and when something changed draw and flip: ``presented``,
whose times are also kept apart), the interval is the time between frame starts.
An input that changes what is drawn is registered with ``input(at_ns, version)``, where
``version`` is the scene's display version that will show it; ``frame`` marks every input whose
version the frame drew as shown, with its delay (input to end of that frame's flip) and the number
of frames it took. An input that took more than one frame to show is *late*: with prediction,
every play and selection is drawn by the frame that handles it, so ``late_inputs`` should be 0.
``mark_steady`` starts a second window that leaves out start-up (window mapping, font and shader
loading, connecting), reported as ``steady``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    s = sorted(values)
    k = (len(s) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


@dataclass
class _Input:
    at_ns: int
    version: int
    frame: int  # the frame index being built when it arrived


@dataclass
class FrameStats:
    frames: int = 0
    frame_ms: list[float] = field(default_factory=list)
    interval_ms: list[float] = field(default_factory=list)
    input_ms: list[float] = field(default_factory=list)
    presented_ms: list[float] = field(default_factory=list)  # the frames drawn and flipped (not skipped)
    input_frames: list[int] = field(default_factory=list)
    late_inputs: int = 0
    inputs: int = 0
    _waiting: list[_Input] = field(default_factory=list)
    _last_start: int | None = None
    _steady: int | None = None  # index of the first frame after start-up (see mark_steady)
    keep: int = 200_000  # samples kept (a long session must not grow without bound)

    def mark_steady(self) -> None:
        """From the next frame on, frames also count as steady-state (start-up work is over)."""
        if self._steady is None:
            self._steady = len(self.frame_ms)

    def input(self, at_ns: int, version: int) -> None:
        self.inputs += 1
        self._waiting.append(_Input(at_ns, version, self.frames))

    def frame(self, start_ns: int, end_ns: int, drawn_version: int, presented: bool = True) -> None:
        if self._last_start is not None:
            self.interval_ms.append((start_ns - self._last_start) / 1e6)
        self._last_start = start_ns
        self.frame_ms.append((end_ns - start_ns) / 1e6)
        if presented:
            self.presented_ms.append((end_ns - start_ns) / 1e6)
            if len(self.presented_ms) > self.keep:
                del self.presented_ms[: self.keep // 2]
        still: list[_Input] = []
        for inp in self._waiting:
            if drawn_version >= inp.version:
                frames = self.frames - inp.frame + 1
                self.input_frames.append(frames)
                self.input_ms.append((end_ns - inp.at_ns) / 1e6)
                if frames > 1:
                    self.late_inputs += 1
            else:
                still.append(inp)
        self._waiting = still
        self.frames += 1
        if len(self.frame_ms) > self.keep:
            del self.frame_ms[: self.keep // 2]
            del self.interval_ms[: self.keep // 2]
            if self._steady is not None:
                self._steady = max(0, self._steady - self.keep // 2)

    def summary(self) -> dict[str, object]:
        out: dict[str, object] = {
            "frames": self.frames,
            "frame_ms": {"p50": round(percentile(self.frame_ms, 0.5), 3),
                         "p99": round(percentile(self.frame_ms, 0.99), 3),
                         "max": round(max(self.frame_ms, default=0.0), 3)},
            "interval_ms": {"p50": round(percentile(self.interval_ms, 0.5), 3),
                            "p99": round(percentile(self.interval_ms, 0.99), 3)},
            "inputs": self.inputs,
            # an input still waiting after two frames is late too (one from the very last frame is not)
            "late_inputs": self.late_inputs + sum(1 for i in self._waiting if self.frames - i.frame >= 2),
            "input_to_screen_ms": {"p50": round(percentile(self.input_ms, 0.5), 3),
                                   "p99": round(percentile(self.input_ms, 0.99), 3),
                                   "max": round(max(self.input_ms, default=0.0), 3)},
            "input_frames_max": max(self.input_frames, default=0),
            "presented_ms": {"frames": len(self.presented_ms),
                             "p50": round(percentile(self.presented_ms, 0.5), 3),
                             "p99": round(percentile(self.presented_ms, 0.99), 3),
                             "max": round(max(self.presented_ms, default=0.0), 3)},
        }
        if self._steady is not None:
            fm = self.frame_ms[self._steady:]
            iv = self.interval_ms[self._steady:]
            out["steady"] = {"frames": len(fm),
                             "frame_ms": {"p50": round(percentile(fm, 0.5), 3), "p99": round(percentile(fm, 0.99), 3),
                                          "max": round(max(fm, default=0.0), 3)},
                             "interval_ms": {"p50": round(percentile(iv, 0.5), 3),
                                             "p99": round(percentile(iv, 0.99), 3)}}
        return out

    def write(self, path: str | Path, extra: dict[str, object] | None = None) -> None:
        p = Path(path)
        if p.parent and not p.parent.exists():
            p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps({**self.summary(), **(extra or {})}, indent=2) + "\n", encoding="utf-8")
