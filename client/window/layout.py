"""Where everything sits on the BLINK table, for any window size (pure: no pyglet).

How this works
--------------
``table_layout(w, h)`` returns a ``TableLayout``: rectangles (centre x, centre y, width, height,
in window pixels with the origin bottom-left as in pyglet) for the opponent's hand, both centre
piles, both draw piles, your three hand slots, and the anchors of the text lines. The card size
is chosen from whichever of width and height is tighter, so a resize keeps the layout sensible
from a small 640 x 420 window to a full screen. The window scene recomputes it on every resize and
moves its drawables; hit-testing for the mouse uses the same rectangles.

``stable_slots`` keeps each hand card in the slot it was in: when a card is played the new card
takes the freed slot instead of the whole hand shifting left, so keys 1/2/3 keep meaning the
card under them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence, TypeVar

CARD_ASPECT = 0.7  # width / height


@dataclass(frozen=True)
class Rect:
    x: float  # centre
    y: float
    w: float
    h: float

    def contains(self, px: float, py: float, pad: float = 0.0) -> bool:
        return abs(px - self.x) <= self.w / 2 + pad and abs(py - self.y) <= self.h / 2 + pad

    @property
    def top(self) -> float:
        return self.y + self.h / 2

    @property
    def bottom(self) -> float:
        return self.y - self.h / 2

    @property
    def left(self) -> float:
        return self.x - self.w / 2

    @property
    def right(self) -> float:
        return self.x + self.w / 2


@dataclass(frozen=True)
class TableLayout:
    w: int
    h: int
    card_w: float
    card_h: float
    hand: tuple[Rect, ...]  # your hand slots, left to right (keys 1, 2, 3, ...)
    opp_hand: tuple[Rect, ...]
    piles: tuple[Rect, Rect]  # pile 0 left, pile 1 right
    my_draw: Rect
    opp_draw: Rect
    top_bar_y: float
    message_y: float  # the bounce / reason line above your hand
    status_y: float  # the band for GO, a stalemate and the pick timer (between piles and hand)
    status_h: float
    hint_y: float  # key hints along the bottom
    centre_y: float  # the middle of the pile row (countdown, overlays)
    font: float  # base font size for the table texts

    def hand_slot_at(self, px: float, py: float) -> int | None:
        for i, r in enumerate(self.hand):
            if r.contains(px, py, pad=4):
                return i
        return None

    def pile_at(self, px: float, py: float) -> int | None:
        for i, r in enumerate(self.piles):
            if r.contains(px, py, pad=self.card_w * 0.25):
                return i
        return None


def table_layout(w: int, h: int, hand_size: int = 3) -> TableLayout:
    w, h = max(int(w), 320), max(int(h), 240)
    font = max(9.0, min(15.0, h / 52))
    top_bar = font * 2.6
    hint = font * 2.4
    keys = font * 2.0  # the 1/2/3 labels under your hand
    message = font * 2.2  # a bounce reason, just above your hand
    status = font * 4.6  # GO / stalemate / pick timer: between the piles and your hand
    pile_labels = font * 2.2
    gap = font * 1.0
    opp_gap = font * 1.9  # between the opponent's row and the piles: the "draw pile" label under theirs
    opp_ratio = 0.52
    # Vertical budget: top bar, opponent row (a smaller card), piles and your hand (a card each).
    ch_v = (h - top_bar - hint - keys - message - status - pile_labels - gap - opp_gap) / (2 + opp_ratio)
    slots = max(hand_size, 3)
    # Horizontal budget: hand slots plus a draw pile on each side, with gaps.
    ch_h = w / ((slots + 2.6) * 1.22 * CARD_ASPECT)
    ch = max(40.0, min(ch_v, ch_h, 300.0))
    cw = ch * CARD_ASPECT
    hgap = cw * 0.22
    cx = w / 2

    hand_y = hint + keys + ch / 2
    hand = tuple(Rect(cx + (i - (slots - 1) / 2) * (cw + hgap), hand_y, cw, ch) for i in range(slots))
    och, ocw = ch * opp_ratio, cw * opp_ratio
    opp_y = h - top_bar - gap * 0.5 - och / 2
    opp_hand = tuple(Rect(cx + (i - (slots - 1) / 2) * (ocw + hgap * 0.6), opp_y, ocw, och) for i in range(slots))
    message_y = hand_y + ch / 2 + message / 2
    status_y = hand_y + ch / 2 + message + status / 2
    lower = hand_y + ch / 2 + message + status + pile_labels + ch / 2  # lowest the piles may sit
    upper = opp_y - och / 2 - opp_gap - ch / 2  # highest
    pile_y = max(lower, (lower + upper) / 2)
    pgap = max(cw * 0.55, w * 0.04)
    piles = (Rect(cx - (cw + pgap) / 2, pile_y, cw, ch), Rect(cx + (cw + pgap) / 2, pile_y, cw, ch))
    my_draw = Rect(hand[-1].right + hgap * 2 + cw / 2, hand_y, cw, ch)
    opp_draw = Rect(opp_hand[-1].right + hgap * 2 + ocw / 2, opp_y, ocw, och)
    return TableLayout(
        w=w, h=h, card_w=cw, card_h=ch, hand=hand, opp_hand=opp_hand, piles=piles, my_draw=my_draw,
        opp_draw=opp_draw, top_bar_y=h - top_bar / 2, message_y=message_y, status_y=status_y,
        status_h=status, hint_y=hint / 2, centre_y=pile_y, font=font,
    )


C = TypeVar("C")


def stable_slots(previous: Sequence[C | None | Empty], hand: Sequence[C | None], size: int) -> list[C | None | Empty]:
    """Place ``hand`` into ``size`` slots, keeping every card that is still in the hand where it was.

    ``previous`` is the last placement (a list of cards, ``None`` for an unknown card being drawn,
    or the ``EMPTY`` marker for no card). Unknown cards are not matched to anything: each new card
    (known or not) fills the first free slot, in hand order."""
    pool = list(hand)
    slots: list[C | None | Empty] = [EMPTY] * size
    for i, card in enumerate(list(previous)[:size]):
        if card is not EMPTY and card is not None and card in pool:
            slots[i] = card
            pool.remove(card)
    for card in pool:
        for i in range(size):
            if slots[i] is EMPTY:
                slots[i] = card
                break
        else:
            slots.append(card)  # a hand bigger than the slots: never with the standard settings
    return slots


class Empty:
    """The marker of a slot with no card (``None`` is a card not known yet)."""

    def __repr__(self) -> str:
        return "EMPTY"


EMPTY = Empty()


def logo_cards(width: float, half_title: float, f: float, card_h: float) -> tuple[float, list[float]]:
    """The menu's decorative cards beside the title: (card width, centre x of each of the three).
    One sits left of the title, two right of it, with a gap between cards so that their corner
    labels never run together ("BLUE 5YELLOW2"); the cards shrink to stay inside the window."""
    gap_title = f * 1.5
    cw = card_h * CARD_ASPECT
    room = width / 2 - half_title - gap_title - f * 0.5  # from the title's end to the window's edge
    cw = max(1.0, min(cw, room / 2.15))
    step = cw * 1.15
    left = width / 2 - half_title - gap_title - cw / 2
    right = width / 2 + half_title + gap_title + cw / 2
    return cw, [left, right, right + step]


def fit_text(text: str, max_w: float, measure: Callable[[str], float]) -> str:
    """``text``, cut at the end with "…" until ``measure(candidate)`` (its drawn width) is at most
    ``max_w``: a long line (an error message) never runs out of the panel drawn behind it."""
    if not text or measure(text) <= max_w:
        return text
    lo, hi = 0, len(text)  # the longest prefix that fits, by bisection (a handful of measures)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if measure(text[:mid].rstrip() + "…") <= max_w:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo].rstrip() + "…"
