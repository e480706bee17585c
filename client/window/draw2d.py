"""Flat 2-D drawing for the turn-based boards: rectangles, rings, hexagons, circles, dice with pips
(pure: builds ``geometry.Tris`` in window coordinates, no pyglet).

How this works
--------------
A ``Canvas`` appends triangles to one ``Tris``; the scene hands that to one ``Mesh`` (blended, so
alpha works) and rebuilds it only when what is drawn changed -- turn-based boards change a few
times a second at most. Everything takes window coordinates (origin bottom-left).
"""

from __future__ import annotations

import math

from client.window.geometry import RGBA, Tris, rounded_outline

#: pip positions on a unit die face (-1..1), per value; 0 has none
PIPS: dict[int, tuple[tuple[float, float], ...]] = {
    0: (),
    1: ((0, 0),),
    2: ((-1, 1), (1, -1)),
    3: ((-1, 1), (0, 0), (1, -1)),
    4: ((-1, 1), (1, 1), (-1, -1), (1, -1)),
    5: ((-1, 1), (1, 1), (0, 0), (-1, -1), (1, -1)),
    6: ((-1, 1), (1, 1), (-1, 0), (1, 0), (-1, -1), (1, -1)),
}


def hex_points(cx: float, cy: float, r: float) -> list[tuple[float, float]]:
    """A pointy-top hexagon of circumradius ``r``."""
    return [(cx + r * math.cos(math.radians(30 + 60 * k)), cy + r * math.sin(math.radians(30 + 60 * k)))
            for k in range(6)]


def axial_to_xy(q: int, r: int, size: float) -> tuple[float, float]:
    """Axial (q, r) to pixel offsets for pointy-top hexagons; r grows downwards on screen, so the
    six face directions of RULES.md (+1,0) (+1,-1) (0,-1) ... go east, north-east, north-west..."""
    x = size * math.sqrt(3) * (q + r / 2)
    y = -size * 1.5 * r
    return x, y


class Canvas:
    def __init__(self) -> None:
        self.t = Tris()

    # --- basic shapes
    def rect(self, x: float, y: float, w: float, h: float, rgba: RGBA, radius: float = 0.0) -> None:
        """A (rounded) rectangle centred on (x, y)."""
        if radius <= 0:
            self.t.quad((x - w / 2, y - h / 2), (x + w / 2, y - h / 2), (x + w / 2, y + h / 2), (x - w / 2, y + h / 2), rgba)
            return
        pts = [(px + x, py + y) for px, py in rounded_outline(w, h, radius)]
        self.t.fan((x, y), pts, rgba)

    def ring(self, x: float, y: float, w: float, h: float, th: float, rgba: RGBA, radius: float = 0.0,
             dashed: bool = False) -> None:
        """A band of thickness ``th`` just outside a w x h (rounded) rectangle centred on (x, y)."""
        segs = 6 if radius > 0 else 1
        inner = [(px + x, py + y) for px, py in rounded_outline(w, h, radius, segs)]
        outer = [(px + x, py + y) for px, py in rounded_outline(w + 2 * th, h + 2 * th, radius + th, segs)]
        if dashed:
            inner, outer = _subdivide(inner, 6), _subdivide(outer, 6)
        self.t.strip(outer, inner, rgba, closed=True, every=2 if dashed else 1)

    def outline(self, pts: list[tuple[float, float]], th: float, rgba: RGBA, dashed: bool = False) -> None:
        """A band of thickness ``th`` outside a convex polygon."""
        cx = sum(p[0] for p in pts) / len(pts)
        cy = sum(p[1] for p in pts) / len(pts)
        outer = []
        for px, py in pts:
            d = math.hypot(px - cx, py - cy) or 1.0
            outer.append((px + (px - cx) / d * th, py + (py - cy) / d * th))
        inner = list(pts)
        if dashed:
            inner, outer = _subdivide(inner, 4), _subdivide(outer, 4)
        self.t.strip(outer, inner, rgba, closed=True, every=2 if dashed else 1)

    def hexagon(self, cx: float, cy: float, r: float, rgba: RGBA) -> None:
        self.t.fan((cx, cy), hex_points(cx, cy, r), rgba)

    def circle(self, cx: float, cy: float, r: float, rgba: RGBA, segs: int = 20) -> None:
        pts = [(cx + r * c, cy + r * s) for c, s in _unit_circle(segs)]
        self.t.fan((cx, cy), pts, rgba)

    def disc_ring(self, cx: float, cy: float, r: float, th: float, rgba: RGBA, segs: int = 24) -> None:
        unit = _unit_circle(segs)
        inner = [(cx + r * c, cy + r * s) for c, s in unit]
        outer = [(cx + (r + th) * c, cy + (r + th) * s) for c, s in unit]
        self.t.strip(outer, inner, rgba, closed=True)

    def line(self, x0: float, y0: float, x1: float, y1: float, th: float, rgba: RGBA) -> None:
        dx, dy = x1 - x0, y1 - y0
        d = math.hypot(dx, dy) or 1.0
        nx, ny = -dy / d * th / 2, dx / d * th / 2
        self.t.quad((x0 + nx, y0 + ny), (x1 + nx, y1 + ny), (x1 - nx, y1 - ny), (x0 - nx, y0 - ny), rgba)

    # --- dice
    def pips(self, cx: float, cy: float, half: float, value: int, rgba: RGBA) -> None:
        """The pips of ``value`` (1-6) inside a square of half-size ``half`` centred on (cx, cy)."""
        spots = PIPS.get(value)
        if spots is None:  # not a die value (Roll Your Own faces go up to 9): show pips in a 3x3 grid
            spots = _grid_spots(value)
        pr = half * (0.2 if value <= 6 else 0.15)
        off = half * 0.58
        for sx, sy in spots:
            self.circle(cx + sx * off, cy + sy * off, pr, rgba, segs=10)

    def die(self, cx: float, cy: float, size: float, value: int, body: RGBA = (245, 245, 240, 255),
            pip: RGBA = (25, 25, 30, 255)) -> None:
        """A die face of side ``size`` showing ``value`` as pips."""
        self.rect(cx, cy, size, size, body, radius=size * 0.18)
        self.pips(cx, cy, size / 2, value, pip)


_UNIT: dict[int, list[tuple[float, float]]] = {}


def _unit_circle(segs: int) -> list[tuple[float, float]]:
    """(cos, sin) of ``segs`` points round the unit circle, computed once per count (a board of
    dice draws thousands of pips: the trigonometry was a good part of a picture's cost)."""
    pts = _UNIT.get(segs)
    if pts is None:
        pts = _UNIT[segs] = [(math.cos(2 * math.pi * k / segs), math.sin(2 * math.pi * k / segs)) for k in range(segs)]
    return pts


def _grid_spots(value: int) -> tuple[tuple[float, float], ...]:
    grid = [(-1, 1), (0, 1), (1, 1), (-1, 0), (0, 0), (1, 0), (-1, -1), (0, -1), (1, -1)]
    order = [0, 2, 6, 8, 4, 3, 5, 1, 7]  # corners first, then centre, then the sides
    return tuple(grid[i] for i in order[: max(0, min(9, value))])


def _subdivide(pts: list[tuple[float, float]], k: int) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    n = len(pts)
    for i in range(n):
        a, b = pts[i], pts[(i + 1) % n]
        for j in range(k):
            f = j / k
            out.append((a[0] + (b[0] - a[0]) * f, a[1] + (b[1] - a[1]) * f))
    return out
