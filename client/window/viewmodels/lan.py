"""The menu's "LAN games" screen as data (pure: no pyglet, no network).

How this works
--------------
The scene polls a ``client.lan.LanBrowser`` off the frame loop and hands each answer to
``LanGames.set_hosts``; ``rows()`` turns the hosts into the lines drawn: one heading per host
(name, address, relay) followed by one row per open match it advertises. Only match rows can be
chosen: Up/Down (``move``) walk them and Enter joins ``chosen()`` -- the match's relay URL, code and
topic prefix are all the app needs. The choice is kept by (address, code), so a refreshed list does
not move the highlight onto another match. ``headline`` says what is going on: still looking (for
the first ``LOOK_S`` seconds), how many hosts, nothing found, or why browsing is impossible here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from client.lan import Host

#: How long the screen says "looking" before it says what it found (hosts answer within ~1 s).
LOOK_S = 2.0


@dataclass(frozen=True)
class LanRow:
    kind: str  # "host" (a heading) | "match" (can be joined)
    text: str
    detail: str = ""
    url: str = ""
    code: str = ""
    prefix: str = ""

    @property
    def key(self) -> tuple[str, str]:
        return (self.url, self.code)


class LanGames:
    def __init__(self, started_s: float = 0.0) -> None:
        self.started_s = started_s
        self.hosts: list[Host] = []
        self.error = ""
        self.answers = 0  # how many times the browser answered
        self._chosen: tuple[str, str] | None = None

    def set_hosts(self, hosts: Sequence[Host]) -> None:
        self.hosts = list(hosts)
        self.answers += 1
        if self._chosen not in [r.key for r in self.matches()]:
            first = self.matches()
            self._chosen = first[0].key if first else None

    def fail(self, reason: str) -> None:
        self.error = reason

    def rows(self) -> list[LanRow]:
        out: list[LanRow] = []
        for h in self.hosts:
            more = max(0, int(h.waiting) - len(h.matches))
            open_ = f"{h.waiting} open match{'es' if h.waiting != 1 else ''}" + (f" ({more} not listed)" if more else "")
            out.append(LanRow("host", str(h.name), f"{h.address}:{h.port}   ·   {open_}", h.url, "", h.prefix))
            for m in h.matches:
                out.append(LanRow("match", f"{m.code}   {m.game}", f"{m.taken}/{m.seats} seated   ·   Enter joins",
                                  h.url, m.code, h.prefix))
        return out

    def matches(self) -> list[LanRow]:
        return [r for r in self.rows() if r.kind == "match"]

    def chosen(self) -> LanRow | None:
        return next((r for r in self.matches() if r.key == self._chosen), None)

    def move(self, step: int) -> None:
        keys = [r.key for r in self.matches()]
        if not keys:
            return
        i = keys.index(self._chosen) if self._chosen in keys else -step if step > 0 else 0
        self._chosen = keys[(i + step) % len(keys)]

    def choose(self, row: LanRow) -> None:
        if row.kind == "match":
            self._chosen = row.key

    def headline(self, now_s: float) -> str:
        if self.error:
            return f"⚠ {self.error}"
        if not self.hosts:
            if now_s - self.started_s < LOOK_S or not self.answers:
                return "looking for blink games on the local network…"
            return "no blink hosts found on the local network yet — a friend hosts with \"Host a match\""
        n = len(self.hosts)
        k = len(self.matches())
        return f"{n} host{'s' if n != 1 else ''} on the local network, {k} open match{'es' if k != 1 else ''}"

    def looks(self, now_s: float) -> tuple[object, ...]:
        """Everything drawn: the scene redraws only when this changes."""
        return (tuple(self.rows()), self._chosen, self.headline(now_s))
