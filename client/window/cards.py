"""Drawing one BLINK card (face, back, unknown, empty slot) with pyglet, built once, updated in place.

How this works
--------------
A ``CardView`` is a card-sized set of drawables in a batch: a ``Mesh`` for the picture (shapes
from ``geometry``), a second ``Mesh`` for a ring around it (selected, pending, bounced, just
landed), and labels for the corner digits and the colour word. ``show(card, style, w, h)``
rebuilds only when what it shows changes; ``move(x, y)`` moves everything without a rebuild, which
is all an animation does per frame. Draw order comes from ``Layer`` groups: within a layer the
pictures draw first, then rings, then text; a higher layer (a card flying back to the hand)
draws over a lower one.

Readability without colour: every symbol is a real shape with a dark outline, the count is
printed as a digit in two corners, and the colour is written out at the bottom of the card.
"""

from __future__ import annotations

from typing import Mapping

import pyglet
from pyglet.font.base import Font
from pyglet.graphics import Batch, Group

from protocol.rules import blink

from client.window import geometry as geo
from client.window.layout import EMPTY, Empty
from client.window.mesh import Mesh
from client.window.viewmodels import CardStyle, RingKind

FONT = ("DejaVu Sans", "Arial", "Helvetica", "Liberation Sans")
FELT = (15, 77, 51)  # the table's clear colour, for opaque "translucency" (see mesh.py)

RING_COLOURS: Mapping[RingKind, tuple[int, int, int, int]] = {
    "select": (255, 255, 255, 255),
    "pending": (255, 176, 0, 255),
    "bounce": (235, 50, 50, 255),
    "landed": (90, 230, 120, 255),
    "flash": (120, 200, 255, 255),
    "pick": (255, 220, 80, 255),
}


class Layer:
    """Three ordered groups: pictures, then rings, then text."""

    def __init__(self, order: int) -> None:
        self.mesh = Group(order=order * 10)
        self.ring = Group(order=order * 10 + 1)
        self.text = Group(order=order * 10 + 2)


def label(batch: Batch, group: Group, size: float = 12, color: tuple[int, int, int, int] = (255, 255, 255, 255),
          anchor_x: str = "left", anchor_y: str = "baseline", bold: bool = False, text: str = "",
          x: float = 0, y: float = 0) -> pyglet.text.Label:
    return pyglet.text.Label(text, x=x, y=y, font_name=FONT, font_size=size, color=color, anchor_x=anchor_x,  # type: ignore[arg-type]
                             anchor_y=anchor_y, weight="bold" if bold else "normal",  # type: ignore[arg-type]
                             batch=batch, group=group)


def set_text(lbl: pyglet.text.Label, text: str) -> None:
    """Change a label's text only when it differs (a new text means a new layout)."""
    if lbl.text != text:
        lbl.text = text


def fit_label(lbl: pyglet.text.Label, text: str, max_w: float, size: float, min_size: float | None = None) -> None:
    """Show ``text`` in ``lbl`` at font ``size`` within ``max_w``: first smaller (down to
    ``min_size``), then cut at the end with "…" -- a label never runs off its panel or the window,
    whatever it is told to say (an error message included)."""
    from client.window.layout import fit_text

    if lbl.font_size != size:
        lbl.font_size = size
    set_text(lbl, text)
    if min_size is not None and lbl.content_width > max_w > 0:
        smaller = max(min_size, int(size * max_w / lbl.content_width * 10) / 10)
        if smaller < size:
            lbl.font_size = smaller

    def measure(candidate: str) -> float:
        set_text(lbl, candidate)
        return float(lbl.content_width)

    set_text(lbl, fit_text(text, max_w, measure))


def set_color(lbl: pyglet.text.Label, rgba: tuple[int, int, int, int]) -> None:
    if tuple(lbl.color) != rgba:
        lbl.color = rgba


_fonts: dict[float, Font] = {}


def glyph_font(size: float) -> Font:
    font = _fonts.get(size)
    if font is None:
        font = _fonts[size] = pyglet.font.load(FONT, size, weight="bold")
    return font


class GlyphText:
    """A few characters drawn as sprites of the font's own glyph textures.

    A card's digits and colour word change with every play; a pyglet ``Label`` would lay its text
    out again each time (about a third of a millisecond). Here a change only swaps sprite images
    and moves them, and all sprites share the font's texture, so they draw in one call."""

    def __init__(self, batch: Batch, group: Group, capacity: int) -> None:
        self.batch, self.group = batch, group
        self.capacity = capacity
        self.sprites: list[pyglet.sprite.Sprite] = []
        self.text = ""
        self._key: object = None

    def set(self, text: str, size: float, rgba: tuple[int, int, int, int], x: float, y: float,
            anchor_x: str = "left", anchor_y: str = "baseline") -> None:
        text = text[: self.capacity]
        key = (text, size, rgba, x, y, anchor_x, anchor_y)
        if key == self._key:
            return
        self._key, self.text = key, text
        if not text:
            for sp in self.sprites:
                if sp.visible:
                    sp.visible = False
            return
        font = glyph_font(size)
        glyphs, _ = font.get_glyphs(text)
        width = sum(g.advance for g in glyphs)
        ox = x - {"left": 0.0, "center": width / 2, "right": float(width)}[anchor_x]
        oy = y - {"baseline": 0.0, "top": float(font.ascent), "bottom": float(font.descent),
                  "center": (font.ascent + font.descent) / 2}[anchor_y]
        for i, g in enumerate(glyphs):
            px, py = round(ox + g.vertices[0]), round(oy + g.vertices[1])
            if i < len(self.sprites):
                sp = self.sprites[i]
                if sp.image is not g:
                    sp.image = g
                sp.position = (px, py, 0)
                if not sp.visible:
                    sp.visible = True
            else:
                sp = pyglet.sprite.Sprite(g, px, py, batch=self.batch, group=self.group)
                self.sprites.append(sp)
            sp.color = rgba
            ox += g.advance
        for sp in self.sprites[len(glyphs):]:
            if sp.visible:
                sp.visible = False

    def delete(self) -> None:
        for sp in self.sprites:
            sp.delete()
        self.sprites.clear()


class CardView:
    """One card on the table, drawn in a ``CardStyle`` with an optional ring."""

    def __init__(self, batch: Batch, layer: Layer, bg: tuple[int, int, int] = FELT) -> None:
        self.mesh = Mesh(batch, layer.mesh, bg=bg)
        self.ring = Mesh(batch, layer.ring, bg=bg)
        self.tl = GlyphText(batch, layer.text, 2)
        self.br = GlyphText(batch, layer.text, 2)
        self.word = GlyphText(batch, layer.text, 10)
        self.mid = GlyphText(batch, layer.text, 4)
        self._text: dict[str, tuple[str, float, tuple[int, int, int, int]]] = {}
        self.card: blink.Card | None = None
        self.style: CardStyle = "none"
        self.w = self.h = 0.0
        self.x = self.y = 0.0
        self.alpha = 1.0
        self.ring_kind: RingKind | None = None
        self._key: object = None
        self._ring_key: object = None

    # -- content -------------------------------------------------------------------------------

    def show(self, card: blink.Card | Empty | None, style: CardStyle, w: float, h: float, alpha: float = 1.0,
             mid: str = "") -> None:
        if isinstance(card, Empty):
            card = None
        key = (None if card is None else str(card), style, round(w, 1), round(h, 1), round(alpha, 2), mid)
        if key == self._key:
            return
        self._key = key
        self.card, self.style, self.w, self.h, self.alpha = card, style, w, h, alpha
        a = int(255 * alpha)
        text: dict[str, tuple[str, float, tuple[int, int, int, int]]] = {}
        if style == "face" and card is not None:
            self.mesh.set(geo.card_face(card.count, card.colour, card.shape, round(w, 1), round(h, 1)), alpha)
            m = geo.CardMetrics(w, h)
            digit, word = geo.face_labels(card.count, card.colour)
            ink = _over_face(geo.INK, alpha)
            text["tl"] = text["br"] = (digit, round(m.corner_font, 1), ink)
            text["word"] = (word, round(m.word_font, 1), _over_face((70, 70, 80, 255), alpha))
        elif style in ("back", "unknown"):
            self.mesh.set(geo.card_back(round(w, 1), round(h, 1), unknown=style == "unknown"), alpha)
            size = round(max(8.0, h * (0.22 if style == "unknown" else 0.16)), 1)
            text["mid"] = (mid or ("?" if style == "unknown" else ""), size, (240, 240, 250, a))
        elif style == "slot":
            self.mesh.set(geo.slot_outline(round(w, 1), round(h, 1)), alpha)
            text["mid"] = (mid, round(max(8.0, h * 0.12), 1), (255, 255, 255, int(120 * alpha)))
        else:
            self.mesh.set(None)
        self._text = text
        self._place()

    def set_ring(self, kind: RingKind | None, alpha: float = 1.0) -> None:
        alpha = round(max(0.0, min(1.0, alpha)) * 8) / 8  # fades in a few steps: no rebuild every frame
        key = (kind, round(self.w, 1), round(self.h, 1), alpha if kind else 0)
        if key == self._ring_key:
            return
        self._ring_key = key
        self.ring_kind = kind
        if kind is None or self.style == "none" or alpha <= 0:
            self.ring.set(None)
            return
        thick = max(2.5, self.w * 0.045)
        self.ring.set(geo.ring(round(self.w, 1), round(self.h, 1), round(thick, 1), RING_COLOURS[kind],
                               dashed=kind == "pending"), alpha)

    # -- position ------------------------------------------------------------------------------

    def move(self, x: float, y: float) -> None:
        if x == self.x and y == self.y:
            return
        self.x, self.y = x, y
        self._place()

    def _place(self) -> None:
        x, y, w, h = self.x, self.y, self.w, self.h
        self.mesh.move(x, y)
        self.ring.move(x, y)
        pad = w * 0.07
        none = ("", 10.0, (0, 0, 0, 0))
        t = self._text
        self.tl.set(*t.get("tl", none), x - w / 2 + pad, y + h / 2 - pad * 0.6, "left", "top")
        self.br.set(*t.get("br", none), x + w / 2 - pad, y - h / 2 + pad * 0.6, "right", "bottom")
        self.word.set(*t.get("word", none), x, y - h / 2 + h * 0.035, "center", "bottom")
        self.mid.set(*t.get("mid", none), x, y, "center", "center")

    def contains(self, px: float, py: float) -> bool:
        return self.style != "none" and abs(px - self.x) <= self.w / 2 and abs(py - self.y) <= self.h / 2

    def delete(self) -> None:
        self.mesh.delete()
        self.ring.delete()
        for text in (self.tl, self.br, self.word, self.mid):
            text.delete()


def _over_face(rgba: tuple[int, int, int, int], alpha: float) -> tuple[int, int, int, int]:
    """Text on a card face faded like the face: mixed over the felt, as the mesh is (opaque)."""
    if alpha >= 1.0:
        return rgba
    return (int(rgba[0] * alpha + FELT[0] * (1 - alpha)), int(rgba[1] * alpha + FELT[1] * (1 - alpha)),
            int(rgba[2] * alpha + FELT[2] * (1 - alpha)), 255)
