"""Sequence Dice's view-model: whose turn, the roll and what it means, the spaces you may play.

How this works
--------------
On top of ``TurnViewModel``: the dice tumble from the start of a turn until the relay's
``dice_rolled`` has arrived and a short minimum has passed (``rolling``), then show the roll, its
total and its meaning (2/12 bonus turn, 10 defensive, 11 wild; ``dice``), also announced on the
message line. When it is your move, ``legal_spaces`` maps each space you may play to its action
(a place, or the removal of an opponent chip). Chips are told apart by a letter as well as colour.
"""

from __future__ import annotations

from protocol import messages as m
from protocol.events import TypedEvent
from protocol.rules import sequence as sq
from client.window.viewmodels.clientview import ClientView
from client.window.viewmodels.turnbased import INFO, NS, RGBA, TurnViewModel, YELLOW

ROLL_MIN_S = 0.7
CHIP_RGB: dict[int, RGBA] = {0: (40, 170, 80, 255), 1: (50, 110, 230, 255), 2: (215, 55, 50, 255)}
CHIP_LETTER = {0: "G", 1: "B", 2: "R"}
WARN: RGBA = (255, 160, 120, 255)


def roll_meaning(total: int) -> str:
    if total in sq.BONUS_TOTALS:
        return f"{total}: place on a {total} — then a BONUS turn"
    if total == sq.DEFENSIVE:
        return "10: DEFENSIVE roll — remove an opponent chip (not on a 2 or 12)"
    if total == sq.WILD:
        return "11: WILD roll — place on any open space"
    return f"{total}: place a chip on an open {total}"


def roll_tag(total: int) -> str:
    return ("BONUS TURN" if total in sq.BONUS_TOTALS else "DEFENSIVE" if total == sq.DEFENSIVE else
            "WILD" if total == sq.WILD else "")


class SequenceViewModel(TurnViewModel[sq.State]):
    timer_events = (sq.SequenceTurnStarted, sq.SequenceDiceRolled)

    def __init__(self, title: str) -> None:
        super().__init__(title, sq.State)
        self.roll_until = 0

    def acting(self, state: sq.State) -> list[int]:
        if state.phase == "rolloff":
            return list(state.contenders)
        return [] if state.current is None or state.phase == "over" else [state.current]

    def rolling(self, state: sq.State, now_ns: int) -> bool:
        if state.phase == "over":  # the last roll stays shown beside the result
            return False
        return state.phase in ("roll", "rolloff") or now_ns < self.roll_until

    def prompt(self, model: ClientView, state: sq.State, now_ns: int) -> tuple[str, str]:
        if state.phase == "rolloff":
            return "rolling for who goes first…", "rolling for who goes first…"
        if self.rolling(state, now_ns) or state.total is None:
            return "the relay is rolling your dice…", "the relay is rolling the dice…"
        total = state.total
        return (roll_meaning(total) + "  —  click a highlighted space",
                f"rolled {total}: " + roll_meaning(total).split(": ", 1)[1])

    def seat_colour(self, state: sq.State, seat: int) -> RGBA:
        return CHIP_RGB[state.colour(seat)]

    def seat_mark(self, state: sq.State, seat: int) -> str:
        return CHIP_LETTER[state.colour(seat)]

    def score_text(self, state: sq.State, seat: int) -> str:
        return f"{state.count(state.colour(seat))}/{state.settings.chips_per_colour} chips"

    def row_text(self, model: ClientView, state: sq.State, seat: int) -> str:
        col = sq.COLOURS[state.colour(seat)]
        team = ""
        if state.players == 4:
            mates = [self.pname(model, s) for s in sq.seats_of(state.colour(seat), 4) if s != seat]
            team = f"  ·  team with {mates[0]}" if mates else ""
        return f"{col} chips{team}"

    def hints(self, state: sq.State, me: int | None) -> str:
        return (f"click a highlighted space     SEQUENCE = {state.settings.sequence_length} in a row, column or "
                "diagonal     2/12 bonus · 10 defensive · 11 wild     Esc  menu")

    def animating(self, state: sq.State, now_ns: int) -> object:
        if self.rolling(state, now_ns):
            return now_ns // (NS // 12)
        return None

    def turn_of(self, state: sq.State) -> int | None:
        return state.turn

    def on_event(self, ev: m.Event, what: TypedEvent, model: ClientView, state: sq.State | None, now_ns: int) -> None:
        match what:
            case sq.SequenceTurnStarted(player=who, turn=turn, bonus=bonus):
                self.roll_until = now_ns + int(ROLL_MIN_S * NS)
                if bonus:
                    self.say(f"BONUS TURN for {self.pname(model, who)}!", now_ns, YELLOW, turn=turn)
            case sq.SequenceDiceRolled(player=who, turn=turn, total=total):
                self.roll_until = max(self.roll_until, now_ns + int(ROLL_MIN_S * NS * 0.5))
                name = self.pname(model, who)
                if total in sq.BONUS_TOTALS:
                    self.say(f"{name} rolled {total}: BONUS turn after this one!", now_ns, YELLOW, turn=turn)
                elif total == sq.DEFENSIVE:
                    self.say(f"{name} rolled 10: DEFENSIVE — remove an opponent chip", now_ns, WARN, turn=turn)
                elif total == sq.WILD:
                    self.say(f"{name} rolled 11: WILD — any open space", now_ns, (170, 220, 255, 255), turn=turn)
            case sq.NoMove(player=who, total=total, reason=reason):  # said of a turn already over, in the past tense
                why = reason.replace("_", " ")
                self.say(f"{self.pname(model, who)} rolled {total} and could not move ({why})", now_ns,
                         (255, 200, 120, 255))
            case sq.FirstPlayer(player=who):
                self.say(f"{self.pname(model, who)} rolled highest and goes first", now_ns, INFO)
            case sq.ChipRemoved(player=who, colour=colour) if who != self.me(model):
                self.say(f"{self.pname(model, who)} removed a {colour} chip", now_ns, WARN)

    def leaver(self, what: TypedEvent) -> int | None:
        return what.player if isinstance(what, sq.SequencePlayerLeft) else None

    def result_line(self, model: ClientView, state: sq.State) -> str:
        if state.phase != "over":
            return ""
        if not state.winners:
            return "Draw: the turn limit was reached"
        col = sq.COLOURS[state.colour(state.winners[0])].upper()
        who = " & ".join(self.pname(model, s) for s in state.winners)
        won = "You win" if self.me(model) in state.winners else who + " win" + ("s" if len(state.winners) == 1 else "")
        if state.reason == "forfeit":
            return f"{won} ({col}): the others left"
        return f"SEQUENCE! {won} ({col})"

    # ------------------------------------------------------------------ the board

    def legal_spaces(self, state: sq.State, me: int | None,
                     now_ns: int) -> dict[tuple[int, int], sq.PlaceChip | sq.RemoveChip]:
        """The spaces you may play now, each with its action (a place wins over a removal)."""
        legal: dict[tuple[int, int], sq.PlaceChip | sq.RemoveChip] = {}
        if me is None or state.phase != "move" or state.current != me or self.rolling(state, now_ns):
            return legal
        for a in sq.legal_actions(state, me):
            if not isinstance(a, (sq.PlaceChip, sq.RemoveChip)):
                continue
            if (a.row, a.col) not in legal or isinstance(a, sq.PlaceChip):
                legal[(a.row, a.col)] = a
        return legal

    @staticmethod
    def pending_spaces(model: ClientView | None) -> set[tuple[int, int]]:
        return {(a.row, a.col) for a in TurnViewModel.pending(model) if isinstance(a, (sq.PlaceChip, sq.RemoveChip))}

    def dice(self, state: sq.State, now_ns: int) -> tuple[tuple[int, int] | None, str, str]:
        """The dice panel: (faces to show, or None while tumbling / before a roll; the total line;
        the tag of a special roll)."""
        if self.rolling(state, now_ns):
            return None, "rolling…", ""
        if state.dice is None:
            return None, "", ""
        return state.dice, f"total {sum(state.dice)}", roll_tag(state.total) if state.total is not None else ""
