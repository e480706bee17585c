"""Takeaway Dice's view-model: whose turn, the Blinks you may claim, the re-roll, the claimed dice.

How this works
--------------
On top of ``TurnViewModel``: the cluster's Blinks and which you may claim now (``legal_cells``,
from the rules' ``legal_actions``), whether the re-roll is possible and what its button says
(``reroll``), your claims the relay has not confirmed yet (``pending_cells``), each player's claimed
dice with their worth (a repeated face is worth 10, RULES.md), and the tumbling of the faces while
the relay rolls (``rolling``: from a re-roll request until its ``dice_rolled`` and a short minimum).
Announcements: another player's claim or re-roll, the playing order.
"""

from __future__ import annotations

from protocol import messages as m
from protocol.events import TypedEvent
from protocol.rules import takeaway as tk
from client.window.viewmodels.clientview import ClientView
from client.window.viewmodels.turnbased import INFO, NS, TurnViewModel

ROLL_MIN_S = 0.6


class TakeawayViewModel(TurnViewModel[tk.State]):
    timer_events = (tk.TakeawayTurnStarted,)

    def __init__(self, title: str) -> None:
        super().__init__(title, tk.State)
        self.roll_until = 0
        self.all_cells: set[tuple[int, int]] = set()  # where every Blink of this game stood

    def acting(self, state: tk.State) -> list[int]:
        cur = state.current if state.phase in ("turn", "rolling") else None
        return [] if cur is None else [cur]

    def can_reroll(self, state: tk.State, me: int | None) -> bool:
        return me is not None and any(isinstance(a, tk.Reroll) for a in tk.legal_actions(state, me))

    def prompt(self, model: ClientView, state: tk.State, now_ns: int) -> tuple[str, str]:
        if state.phase == "setup":
            return "", "the relay is rolling the cluster…"
        if state.phase == "rolling":
            return "re-rolling the cluster…", f"{self.pname(model, state.current)} re-rolls the cluster…"
        mine = "click a Blink that is not locked (grey, hatched) to claim it" + (
            "   ·   or re-roll all first (Space)" if self.can_reroll(state, self.me(model)) else "")
        return mine, "choosing a Blink to claim"

    def score_text(self, state: tk.State, seat: int) -> str:
        return f"{state.scores()[seat]} pts"

    def hints(self, state: tk.State, me: int | None) -> str:
        return "click  claim a Blink     Space  re-roll the cluster     a repeated face scores 10     Esc  menu"

    def rolling(self, state: tk.State, now_ns: int) -> bool:
        return state.phase in ("rolling", "setup") or now_ns < self.roll_until

    def animating(self, state: tk.State, now_ns: int) -> object:
        if self.rolling(state, now_ns):
            return now_ns // (NS // 12)
        return None

    def on_event(self, ev: m.Event, what: TypedEvent, model: ClientView, state: tk.State | None, now_ns: int) -> None:
        me = self.me(model)
        match what:
            case tk.TakeawayDiceRolled(reason="setup"):
                self.roll_until = now_ns + int(ROLL_MIN_S * NS)
            case tk.TakeawayDiceRolled(reason="reroll", player=who):
                self.roll_until = max(self.roll_until, now_ns + int(ROLL_MIN_S * NS))
                if who != me:
                    self.say(f"{self.pname(model, who)} re-rolled the whole cluster", now_ns)
            case tk.RerollRequested():
                self.roll_until = now_ns + int(ROLL_MIN_S * NS)
            case tk.BlinkClaimed(player=who, face=face) if who != me:
                self.say(f"{self.pname(model, who)} claimed a {face}", now_ns, INFO)
            case tk.OrderDecided(order=order):
                self.say("playing order: " + " → ".join(self.pname(model, s) for s in order), now_ns, INFO)

    def leaver(self, what: TypedEvent) -> int | None:
        return what.player if isinstance(what, tk.TakeawayPlayerLeft) else None

    def result_line(self, model: ClientView, state: tk.State) -> str:
        scores = state.scores()
        standing = state.standing()
        if not scores or not standing:
            return ""
        best = max(scores[s] for s in standing)  # a leaver is out of the standings
        winners = [s for s in standing if scores[s] == best]
        if len(standing) == 1:
            w = winners[0]
            return ("You win" if w == self.me(model) else f"{self.pname(model, w)} wins") + ": the others left"
        if len(winners) > 1:
            return "Shared win: " + " & ".join(self.pname(model, s) for s in winners) + f" with {best}"
        w = winners[0]
        return ("You win" if w == self.me(model) else f"{self.pname(model, w)} wins") + f" with {best} points"

    # ------------------------------------------------------------------ the board

    def cluster(self, state: tk.State) -> set[tuple[int, int]]:
        """Every place a Blink of this game stood (claimed ones leave an outline: nothing shifts)."""
        cells = {(q, r) for q, r, _ in state.cells}
        claimed = {(q, r) for _, q, r, _ in state.claims}
        if state.phase == "setup" or not (self.all_cells >= cells | claimed):
            self.all_cells = cells | claimed
        return self.all_cells or cells

    def legal_cells(self, state: tk.State, me: int | None) -> set[tuple[int, int]]:
        """The Blinks you may claim now (none when it is not your turn)."""
        if me is None or state.phase != "turn" or state.current != me:
            return set()
        return {(a.q, a.r) for a in tk.legal_actions(state, me) if isinstance(a, tk.ClaimBlink)}

    def reroll(self, state: tk.State, me: int | None) -> tuple[str, bool]:
        """The re-roll button: (its text, whether it may be pressed)."""
        can = self.can_reroll(state, me)
        if me is None:
            return "re-roll (players only)", False
        if not (state.phase == "turn" and state.current == me):
            return "re-roll (on your turn)", False
        if can:
            return "Re-roll all dice  (Space)", True
        if state.rerolled:
            return "re-rolled this turn", False
        return "re-roll spent (once per game)", False

    @staticmethod
    def pending_cells(model: ClientView | None) -> list[tuple[int, int]]:
        return [(a.q, a.r) for a in TurnViewModel.pending(model) if isinstance(a, tk.ClaimBlink)]

    @staticmethod
    def claimed(state: tk.State, seat: int) -> list[tuple[int, str, bool]]:
        """A player's claimed dice in order: (face, its worth as shown, whether it is a repeat)."""
        seen: set[int] = set()
        out = []
        for face in state.claimed(seat):
            dup = face in seen
            seen.add(face)
            out.append((face, "10" if dup else str(face), dup))
        return out
