"""Card pictures as plain triangles: the geometry of BLINK cards, with no pyglet and no GL.

How this works
--------------
Every picture is a ``Tris``: a flat list of x, y positions (three vertices per triangle, in the
card's own coordinates, origin at the card's centre) and a parallel flat list of RGBA bytes, one
colour per vertex. ``client.window.mesh.Mesh`` uploads a ``Tris`` into one vertex list of a batch,
and moving a card only changes its translation, so a card is built once per (card, size, style)
and cached here (``card_face``/``card_back`` are memoised).

The symbols are real shapes -- a five-pointed star, an upright triangle, a crescent moon -- each
with a dark outline so that shape and count stay readable without colour (a colour-blind player
sees a star as a star). The count is also printed as a digit in the corners and the colour named
in words at the bottom of the card; the window adds those as labels (``face_labels``).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from functools import lru_cache

RGBA = tuple[int, int, int, int]

# Colours chosen to stay apart in lightness too (yellow light, blue dark), not only in hue.
PALETTE: dict[str, RGBA] = {
    "red": (214, 44, 38, 255),
    "yellow": (246, 196, 22, 255),
    "green": (34, 150, 72, 255),
    "blue": (34, 92, 204, 255),
    "purple": (130, 60, 180, 255),
    "orange": (240, 120, 20, 255),
    "black": (40, 40, 40, 255),
    "pink": (230, 110, 170, 255),
}
INK: RGBA = (28, 28, 36, 255)
FACE: RGBA = (250, 247, 238, 255)
BACK: RGBA = (38, 58, 120, 255)
BACK_PATTERN: RGBA = (70, 96, 170, 255)
SHADOW: RGBA = (0, 0, 0, 70)


def colour_of(name: str) -> RGBA:
    """The fill for a colour name; unknown colours (a custom deck) get a stable made-up colour."""
    if name in PALETTE:
        return PALETTE[name]
    h = sum(ord(c) * (i + 7) for i, c in enumerate(name))
    return (60 + h % 170, 60 + (h // 7) % 170, 60 + (h // 49) % 170, 255)


@dataclass(eq=False)
class Tris:
    pos: list[float] = field(default_factory=list)
    col: list[int] = field(default_factory=list)
    #: colours already mixed over a background, by (alpha, background): see mesh.mix
    mixed: dict[tuple[float, tuple[int, int, int]], list[int]] = field(default_factory=dict, repr=False)

    @property
    def count(self) -> int:
        return len(self.pos) // 2

    def tri(self, a: tuple[float, float], b: tuple[float, float], c: tuple[float, float], rgba: RGBA) -> None:
        self.pos.extend((a[0], a[1], b[0], b[1], c[0], c[1]))
        self.col.extend(rgba * 3)

    def quad(self, a: tuple[float, float], b: tuple[float, float], c: tuple[float, float], d: tuple[float, float],
             rgba: RGBA) -> None:
        self.tri(a, b, c, rgba)
        self.tri(a, c, d, rgba)

    def fan(self, centre: tuple[float, float], ring: list[tuple[float, float]], rgba: RGBA) -> None:
        """A closed convex (or star-shaped around ``centre``) polygon as a fan of triangles."""
        n = len(ring)
        for i in range(n):
            self.tri(centre, ring[i], ring[(i + 1) % n], rgba)

    def strip(self, a: list[tuple[float, float]], b: list[tuple[float, float]], rgba: RGBA,
              closed: bool = False, every: int = 1) -> None:
        """Quads between two polylines of equal length (a band); ``every=2`` leaves gaps (dashes)."""
        n = len(a)
        last = n if closed else n - 1
        for i in range(last):
            if every > 1 and (i // 2) % every:
                continue
            j = (i + 1) % n
            self.tri(a[i], a[j], b[j], rgba)
            self.tri(a[i], b[j], b[i], rgba)

    def extend(self, other: Tris) -> None:
        self.pos.extend(other.pos)
        self.col.extend(other.col)


# --- primitive outlines ----------------------------------------------------------------------------


@functools.lru_cache(maxsize=1024)
def rounded_outline(w: float, h: float, r: float, segs: int = 4) -> list[tuple[float, float]]:
    """Points around a rounded rectangle centred on the origin, counter-clockwise. Cached: a board
    redraws the same few hundred rectangles; callers only read the list."""
    r = max(0.0, min(r, w / 2, h / 2))
    hw, hh = w / 2 - r, h / 2 - r
    pts: list[tuple[float, float]] = []
    for cx, cy, start in ((hw, hh, 0), (-hw, hh, 90), (-hw, -hh, 180), (hw, -hh, 270)):
        for k in range(segs + 1):
            a = math.radians(start + 90 * k / segs)
            pts.append((cx + r * math.cos(a), cy + r * math.sin(a)))
    return pts


def rounded_rect(t: Tris, w: float, h: float, r: float, rgba: RGBA, dx: float = 0.0, dy: float = 0.0) -> None:
    pts = [(x + dx, y + dy) for x, y in rounded_outline(w, h, r)]
    t.fan((dx, dy), pts, rgba)


def rounded_border(t: Tris, w: float, h: float, r: float, b: float, rgba: RGBA) -> None:
    """A band of width ``b`` just inside the edge of a ``w`` x ``h`` rounded rectangle."""
    t.strip(rounded_outline(w, h, r), rounded_outline(w - 2 * b, h - 2 * b, max(0.0, r - b)), rgba, closed=True)


def drop_shadow(t: Tris, w: float, h: float, r: float, dx: float, dy: float, rgba: RGBA) -> None:
    """A shadow to the lower right (dx > 0, dy < 0): only the two slivers that peek out from under
    the card, so no pixel is filled twice for it and it costs four triangles."""
    x0, x1, y0, y1 = -w / 2 + r, w / 2, -h / 2, h / 2 - r
    t.quad((x0 + dx, y0 + dy), (x1 + dx, y0 + dy), (x1 + dx, y0), (x0 + dx, y0), rgba)  # below
    t.quad((x1, y0 + dy), (x1 + dx, y0 + dy), (x1 + dx, y1 + dy), (x1, y1 + dy), rgba)  # right


def rounded_ring(t: Tris, w: float, h: float, r: float, thickness: float, rgba: RGBA, dashed: bool = False) -> None:
    """A band of ``thickness`` just outside a ``w`` x ``h`` rounded rectangle (a selection ring)."""
    segs = 6
    inner = rounded_outline(w, h, r, segs)
    outer = rounded_outline(w + 2 * thickness, h + 2 * thickness, r + thickness, segs)
    if dashed:
        inner, outer = _subdivide(inner, 3), _subdivide(outer, 3)
    t.strip(outer, inner, rgba, closed=True, every=2 if dashed else 1)


def _subdivide(pts: list[tuple[float, float]], k: int) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    n = len(pts)
    for i in range(n):
        (x0, y0), (x1, y1) = pts[i], pts[(i + 1) % n]
        for s in range(k):
            f = s / k
            out.append((x0 + (x1 - x0) * f, y0 + (y1 - y0) * f))
    return out


# --- symbols ---------------------------------------------------------------------------------------


def star_points(cx: float, cy: float, r: float) -> list[tuple[float, float]]:
    pts = []
    for i in range(10):
        rad = r if i % 2 == 0 else r * 0.45
        a = math.radians(90 + 36 * i)
        pts.append((cx + rad * math.cos(a), cy + rad * math.sin(a)))
    return pts


def triangle_points(cx: float, cy: float, r: float) -> list[tuple[float, float]]:
    # An equilateral triangle looks smaller than a star of the same circumradius: enlarge it a bit.
    R = r * 1.22
    cy -= r * 0.14
    return [(cx + R * math.cos(math.radians(a)), cy + R * math.sin(math.radians(a))) for a in (90, 210, 330)]


def crescent_band(cx: float, cy: float, r: float, grow: float = 0.0,
                  n: int = 9) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """A crescent moon (horns to the right) as two arcs from horn to horn: the edge of a disc and the
    edge of the disc that bites it, both running round the left side. Pairing the arcs point by point
    gives a band of quads. ``grow`` widens the crescent evenly (offset curves of circles are circles),
    which is how its outline is drawn."""
    R0 = r * 1.02
    d, rc0 = R0 * 0.5, R0 * 0.85  # the biting disc: centre offset and radius
    R, rc = R0 + grow, rc0 - grow
    ox = cx - R0 * 0.25  # shift left so the crescent's mass sits on the symbol's centre
    xi = (d * d + R * R - rc * rc) / (2 * d)  # where the circles cross, from the disc's centre
    yi = math.sqrt(max(0.0, R * R - xi * xi))
    a_top = math.atan2(yi, xi)
    b_top = math.atan2(yi, xi - d)
    outer, inner = [], []
    for k in range(n + 1):
        f = k / n
        a = a_top + f * (2 * math.pi - 2 * a_top)
        b = b_top + f * (2 * math.pi - 2 * b_top)
        outer.append((ox + R * math.cos(a), cy + R * math.sin(a)))
        inner.append((ox + d + rc * math.cos(b), cy + rc * math.sin(b)))
    return outer, inner


def symbol(t: Tris, shape: str, cx: float, cy: float, r: float, fill: RGBA, outline: float) -> None:
    """One symbol: an outline in ink (the same shape, a little larger), then the fill."""
    for grow, rgba in ((outline, INK), (0.0, fill)):
        rr = r + grow
        if shape == "star":
            t.fan((cx, cy), star_points(cx, cy, r * 1.12 + grow * 1.6), rgba)
        elif shape == "triangle":
            p = triangle_points(cx, cy, r + grow * 2.0)
            t.tri(p[0], p[1], p[2], rgba)
        elif shape == "moon":
            outer, inner = crescent_band(cx, cy, r, grow)
            t.strip(outer, inner, rgba)
        else:  # a shape this drawing code does not know (a custom deck): a plain disc
            pts = [(cx + rr * math.cos(a * math.pi / 8), cy + rr * math.sin(a * math.pi / 8)) for a in range(16)]
            t.fan((cx, cy), pts, rgba)


def symbol_layout(count: int, aw: float, ah: float) -> tuple[list[tuple[float, float]], float]:
    """Centres of ``count`` symbols in an ``aw`` x ``ah`` area (origin at its centre) and their radius.
    The radius is the same for every count on a card size, so counts compare at a glance."""
    r = min(aw / 4.8, ah / 7.2)
    qx, qy = aw / 4, ah / 3.0
    layouts: dict[int, list[tuple[float, float]]] = {
        1: [(0.0, 0.0)],
        2: [(0.0, qy * 0.75), (0.0, -qy * 0.75)],
        3: [(0.0, qy), (0.0, 0.0), (0.0, -qy)],
        4: [(-qx, qy * 0.75), (qx, qy * 0.75), (-qx, -qy * 0.75), (qx, -qy * 0.75)],
        5: [(-qx, qy), (qx, qy), (0.0, 0.0), (-qx, -qy), (qx, -qy)],
    }
    if count in layouts:
        return list(layouts[count]), r
    # Larger counts (custom decks): a grid of two columns.
    rows = (count + 1) // 2
    r = min(aw / 4.3, ah / (rows * 2.3))
    pts = []
    for i in range(count):
        row, col = divmod(i, 2)
        x = 0.0 if (count % 2 and i == count - 1) else (-qx if col == 0 else qx)
        y = ah / 2 - (row + 0.5) * ah / rows
        pts.append((x, y))
    return pts, r


# --- whole cards -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class CardMetrics:
    w: float
    h: float

    @property
    def radius(self) -> float:
        return self.w * 0.09

    @property
    def border(self) -> float:
        return max(1.5, self.w * 0.025)

    @property
    def corner_font(self) -> float:
        return max(7.0, self.h * 0.105)

    @property
    def word_font(self) -> float:
        return max(6.0, self.h * 0.058)

    def symbol_area(self) -> tuple[float, float, float, float]:
        """(cx, cy, w, h) of the area the symbols fill: clear of the corner digits and colour word."""
        top = self.h * 0.5 - self.h * 0.15  # clear of the corner digit
        bottom = -self.h * 0.5 + self.h * 0.14  # clear of the colour word and the other digit
        return 0.0, (top + bottom) / 2, self.w * 0.66, top - bottom


@lru_cache(maxsize=512)
def card_face(count: int, colour: str, shape: str, w: float, h: float) -> Tris:
    m = CardMetrics(w, h)
    t = Tris()
    # Each pixel is written about once (software GL is bound by pixels): shadow sliver, border
    # band, face, then the symbols on top.
    drop_shadow(t, w, h, m.radius, w * 0.03, -w * 0.035, SHADOW)
    rounded_border(t, w, h, m.radius, m.border, INK)
    rounded_rect(t, w - 2 * m.border, h - 2 * m.border, m.radius - m.border, FACE)
    acx, acy, aw, ah = m.symbol_area()
    centres, r = symbol_layout(count, aw, ah)
    outline = max(1.2, r * 0.16)
    fill = colour_of(colour)
    for x, y in centres:
        symbol(t, shape, acx + x, acy + y, r, fill, outline)
    return t


@lru_cache(maxsize=64)
def card_back(w: float, h: float, unknown: bool = False) -> Tris:
    m = CardMetrics(w, h)
    t = Tris()
    drop_shadow(t, w, h, m.radius, w * 0.03, -w * 0.035, SHADOW)
    rounded_border(t, w, h, m.radius, m.border * 2, (230, 230, 235, 255))
    rounded_rect(t, w - 4 * m.border, h - 4 * m.border, max(0.0, m.radius - 2 * m.border), BACK)
    # A lattice of small diamonds.
    cols, rows = 4, 6
    dw, dh = (w - 6 * m.border) / cols, (h - 6 * m.border) / rows
    for i in range(cols):
        for j in range(rows):
            cx = -w / 2 + 3 * m.border + dw * (i + 0.5)
            cy = -h / 2 + 3 * m.border + dh * (j + 0.5)
            t.quad((cx + dw * 0.32, cy), (cx, cy + dh * 0.32), (cx - dw * 0.32, cy), (cx, cy - dh * 0.32),
                   BACK_PATTERN if not unknown else (110, 110, 130, 255))
    return t


@lru_cache(maxsize=64)
def slot_outline(w: float, h: float) -> Tris:
    """An empty place for a card: a faint dashed outline."""
    t = Tris()
    rounded_ring(t, w - 4, h - 4, CardMetrics(w, h).radius, 2.0, (255, 255, 255, 70), dashed=True)
    return t


@lru_cache(maxsize=64)
def ring(w: float, h: float, thickness: float, rgba: RGBA, dashed: bool = False) -> Tris:
    t = Tris()
    rounded_ring(t, w, h, CardMetrics(w, h).radius, thickness, rgba, dashed)
    return t


def face_labels(count: int, colour: str) -> tuple[str, str]:
    """The corner digit and the colour word printed on a face."""
    return str(count), colour.upper()
