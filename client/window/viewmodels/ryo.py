"""Roll Your Own's view-model: the die builder, the replay of the relay's rolls, odds and choices.

How this works
--------------
On top of ``TurnViewModel``:

- the *builder*: your six faces while you build (``faces``, the selected face ``sel``), reset to
  the rules' default build at each new game; ``change`` refuses a face below 0, above
  ``max_face`` or past the budget with a message; ``valid`` says whether Build may be pressed;
- the *roll replay*: the relay rolls a whole round in an instant, so each ``dice_rolled`` event is
  queued and shown in turn (``shown_roll``: tumbling for a moment, then every player's face),
  keeping at most a few behind. What the relay says after those rolls (a round or game won, a
  lot drawn) waits in the same queue (``later``), so "you won round 2" shows only once the roll
  that won it has been shown, never beside the animation of an earlier roll;
- the exact odds between your die and each other's (``odds``), and which faces may go up or down
  in the round's (a)/(b) choice (the rules' ``raisable``/``lowerable``).
"""

from __future__ import annotations

from dataclasses import dataclass

from protocol import messages as m
from protocol.events import TypedEvent
from protocol.rules import roll_your_own as ryo
from client.matchstate import MatchState
from client.window.viewmodels.clientview import ClientView
from client.window.viewmodels.turnbased import INFO, NS, RGBA, SOFT, Banner, TurnViewModel, YELLOW

TUMBLE_S = 0.25
SHOW_S = 0.4
QUEUE_MAX = 3

#: A ``dice_rolled`` event: its kind of roll and who rolled what (``rolls``).
Roll = ryo.RyoDiceRolled


def rolls_of(roll: Roll) -> tuple[ryo.FaceRolled, ...]:
    """The rolls a ``dice_rolled`` event lists: each seat, the face of its die that came up and its value."""
    return roll.rolls


@dataclass(frozen=True)
class Said:
    """A queue entry that is a message to show once the rolls before it have been shown."""

    text: str
    colour: RGBA


def count(n: int, noun: str) -> str:
    """``1 roll``, ``6 rolls``."""
    return f"{n} {noun}" + ("" if n == 1 else "s")


class RyoViewModel(TurnViewModel[ryo.State]):
    timer_events = (ryo.BuildStarted, ryo.ChoiceStarted, ryo.LowerChosen)

    def __init__(self, title: str) -> None:
        super().__init__(title, ryo.State)
        self.faces: list[int] = []
        self.sel = 0
        self._build_for: tuple[int, int] | None = None  # (predictor game, ryo game) the builder was made for
        self._queue: list[Roll | Said] = []  # dice_rolled events to replay, and what to say after them
        self._showing: tuple[Roll, int] | None = None  # (event, start ns)

    # ------------------------------------------------------------------ what is going on

    def acting(self, state: ryo.State) -> list[int]:
        if state.phase == "build":
            return [p for p in range(state.players) if not state.built[p]]
        if state.phase == "choice" and state.chooser is not None:
            return [state.chooser]
        if state.phase == "lower" and state.round_winner is not None:
            return [state.round_winner]
        return []

    def prompt(self, model: ClientView, state: ryo.State, now_ns: int) -> tuple[str, str]:
        s = state.settings
        if state.phase == "build":
            return (f"build your die: six faces, 0–{s.max_face} pips each, at most {s.budget} in all, then Build"
                    f" (game {state.game})", "building their secret dice…")
        if state.phase in ("rolling", "rolloff"):
            return "", "the relay rolls every die at once…"
        if state.phase == "choice":
            w = self.pname(model, state.round_winner) if state.round_winner is not None else "the winner"
            return (f"you lost the round — (a) raise one face by 1: click +1 or keys 1–6   ·   (b) make {w} lower "
                    "their die: B", "lost the round and chooses (a) raise or (b) lower the winner")
        if state.phase == "lower":
            return ("you won the round, and the loser chose (b): pick one of your faces to drop by 1 "
                    "(click −1, or 1–6)", "chooses which face of their die drops by 1")
        return "", ""

    def idle_banner(self, state: ryo.State) -> str:
        return "ROLLING — every die at once" if state.phase in ("rolling", "rolloff") else "waiting for the relay"

    def score_text(self, state: ryo.State, seat: int) -> str:
        # games *won*: the settings' numbers are wins needed, not games played (``rules_line``)
        if not state.game_wins:
            return ""
        return f"{count(state.game_wins[seat], 'game')} won"

    def row_text(self, state: ryo.State, seat: int) -> str:
        if not state.roll_wins:
            return ""
        line = f"won: {count(state.roll_wins[seat], 'roll')} · {count(state.round_wins[seat], 'round')}"
        if state.phase == "build":
            line += "   ·   " + ("built ✓" if state.built[seat] else "building…")
        return line

    @staticmethod
    def rules_line(state: ryo.State) -> tuple[str, str]:
        """Where the match is, and what wins what: each of the three settings is a number of wins
        (first to it), so there is no fixed number of games -- with three players a match of
        "3 games" can take seven."""
        s = state.settings
        return (f"game {state.game} · round {state.round}",
                f"first to win {count(s.rolls_per_round, 'roll')} takes the round, "
                f"{count(s.rounds_per_game, 'round')} the game, {count(s.games_per_match, 'game')} the match")

    def hints(self, state: ryo.State, me: int | None) -> str:
        if state.phase == "build":
            return "1–6  pick a face     ↑ ↓  or  + −  change it     Enter  build     Esc  menu"
        if state.phase in ("choice", "lower"):
            return "1–6  choose a face     B  make the winner lower (choice b)     Esc  menu"
        return "first to win a roll-count wins the round · rounds win the game · games win the match     Esc  menu"

    def on_event(self, ev: m.Event, what: TypedEvent, model: ClientView, state: ryo.State | None, now_ns: int) -> None:
        match what:
            case ryo.RyoDiceRolled():
                self._queue.append(what)
            case ryo.RoundWon(player=who, round=rnd):
                self.later(f"{self.pname(model, who)} won round {rnd}", now_ns, YELLOW)
            case ryo.GameWon(player=who, ryo_game=game, games=games):
                last = state is not None and max(games, default=0) >= state.settings.games_per_match
                # the match's last game starts nothing: the banner says who won the match
                self.later(f"{self.pname(model, who)} won game {game}" + (" and the match" if last else
                                                                          " — new dice next"), now_ns, YELLOW)
            case ryo.FaceRaised(player=who):
                self.later(f"{self.pname(model, who)} raised a face", now_ns, INFO)
            case ryo.NoChoice():
                self.later("no face can change: next round", now_ns, INFO)
            case ryo.LotDrawn(player=who):
                self.later(f"identical dice: {self.pname(model, who)} wins by lot", now_ns, YELLOW)

    def leaver(self, what: TypedEvent) -> int | None:
        return what.player if isinstance(what, ryo.RyoPlayerLeft) else None

    def later(self, text: str, now_ns: int, colour: RGBA) -> None:
        """Say ``text`` once every roll that came before it has been shown (at once if none)."""
        if self._queue or self._showing_now(now_ns):
            self._queue.append(Said(text, colour))
        else:
            self.say(text, now_ns, colour)

    def observe(self, model: ClientView | None, now_ns: int) -> None:
        super().observe(model, now_ns)
        self._advance(now_ns)  # a message waiting on a roll shows on the frame that roll ends

    def result_line(self, model: ClientView, state: ryo.State) -> str:
        if state.phase != "over" or state.winner is None:
            return ""
        won = ("You win the match" if state.winner == self.me(model)
               else f"{self.pname(model, state.winner)} wins the match")
        return won + (": the others left" if len(state.standing()) == 1 else "")

    def tally(self, model: ClientView, state: ryo.State | None = None) -> str:
        """The games each won: one relay game is the whole match here (its games are inside the
        state), so the relay's own tally would count the match, not its games."""
        if state is None or not state.game_wins:
            return super().tally(model, state)
        names = list(model.players)
        won = "   ".join(f"{names[i] if i < len(names) else i}: {w}" for i, w in enumerate(state.game_wins))
        over = state.phase == "over" or MatchState.read(model.match_state).over
        return f"games won  {won}" + ("   ·   match over — results follow" if over else "")

    # ------------------------------------------------------------------ the roll replay

    def animating(self, state: ryo.State, now_ns: int) -> object:
        self._advance(now_ns)
        if self._showing is None:
            return None
        ev, t0 = self._showing
        if now_ns - t0 < TUMBLE_S * NS:
            return ("tumble", id(ev), now_ns // (NS // 14))
        # (the frame's key changes when the roll has been shown: the choice it decided may show then)
        return ("show", id(ev)) if self._showing_now(now_ns) else ("shown", id(ev))

    def deciding(self, now_ns: int) -> bool:
        """Is a roll still being shown (or waiting to be)? The relay rolls a whole round at once, so
        the state already asks the loser to choose while the rolls that made them lose are replayed:
        the question, its buttons and keys wait until the last of them has been shown."""
        return self._showing_now(now_ns) or any(not isinstance(e, Said) for e in self._queue)

    def banner(self, model: ClientView | None, now_ns: int) -> Banner:
        state = self.state(model)
        if (model is not None and state is not None and state.phase in ("choice", "lower")
                and not self.game_over(model, state) and self.deciding(now_ns)):
            return Banner("theirs", "ROLLING…", "the relay rolled every die at once: watch the rolls")
        return super().banner(model, now_ns)

    def _showing_now(self, now_ns: int) -> bool:
        return self._showing is not None and now_ns - self._showing[1] < (TUMBLE_S + SHOW_S) * NS

    def _advance(self, now_ns: int) -> None:
        if self._showing_now(now_ns):
            return
        rolls = [i for i, e in enumerate(self._queue) if not isinstance(e, Said)]
        if len(rolls) > QUEUE_MAX:  # too far behind: skip the oldest rolls (their messages still show)
            skip = set(rolls[: len(rolls) - QUEUE_MAX])
            self._queue = [e for i, e in enumerate(self._queue) if i not in skip]
        while self._queue and isinstance(said := self._queue[0], Said):
            self._queue.pop(0)
            self.say(said.text, now_ns, said.colour)
        if self._queue:
            roll = self._queue.pop(0)
            assert not isinstance(roll, Said)  # (the loop above took every message in front)
            self._showing = (roll, now_ns)
        elif self._showing is not None and now_ns - self._showing[1] > 4 * NS:
            self._showing = None

    def shown_roll(self, now_ns: int) -> tuple[Roll, bool] | None:
        """The roll being shown: (its ``dice_rolled`` data, whether it is still tumbling)."""
        if self._showing is None:
            return None
        ev, t0 = self._showing
        return ev, now_ns - t0 < TUMBLE_S * NS

    def roll_words(self, model: ClientView, roll: Roll) -> str:
        parts = [f"{self.pname(model, r.player)} {r.value}" for r in rolls_of(roll)]
        # not numbered: the relay counts rolls over the whole match ("roll 508" beside "won: 3 rolls")
        kind = "roll-off (lowest chooses)" if roll.kind == "rolloff" else "rolled"
        return f"{kind}:  " + "   ".join(parts)

    @staticmethod
    def odds(mine: ryo.Die, theirs: ryo.Die) -> tuple[float, float]:
        """(chance your die beats theirs in one roll, chance theirs beats yours); ties beat nobody."""
        return ryo.beat_probability(mine, theirs), ryo.beat_probability(theirs, mine)

    # ------------------------------------------------------------------ the builder

    def builder(self, model: ClientView, state: ryo.State) -> list[int]:
        """Your faces while building (a new game starts from the rules' default build)."""
        k = (model.predictor.game if model.predictor else 0, state.game)
        if k != self._build_for or len(self.faces) != ryo.FACES:
            self._build_for = k
            try:
                self.faces = list(ryo.default_build(state.settings, None))
            except ValueError:
                self.faces = [0] * ryo.FACES
            self.sel = 0
        return self.faces

    def change(self, model: ClientView | None, i: int, delta: int, now_ns: int) -> bool:
        """+/− on face ``i``; False when there is nothing to build. A refused change says why."""
        state = self.state(model)
        if model is None or state is None or state.phase != "build":
            return False
        self.builder(model, state)
        s = state.settings
        v = self.faces[i] + delta
        self.sel = i
        self.version += 1
        if v < 0:
            self.say("a face cannot go below 0", now_ns, SOFT)
        elif v > s.max_face:
            self.say(f"a face cannot go above {s.max_face}", now_ns, SOFT)
        elif delta > 0 and sum(self.faces) + delta > s.budget:
            self.say(f"the budget is {s.budget}: lower another face first", now_ns, SOFT)
        else:
            self.faces[i] = v
        return True

    def select(self, i: int) -> None:
        self.sel = i % ryo.FACES
        self.version += 1

    def can_raise(self, state: ryo.State, seat: int, face: int, delta: int) -> bool:
        """Whether builder face ``face`` may go by ``delta`` (the + and − buttons)."""
        s = state.settings
        v = self.faces[face]
        return v < s.max_face and sum(self.faces) < s.budget if delta > 0 else v > 0

    def valid(self, state: ryo.State) -> bool:
        s = state.settings
        return bool(ryo.is_valid_build(tuple(self.faces), s.budget, s.max_face))

    def build_action(self) -> ryo.BuildDie:
        return ryo.BuildDie(tuple(self.faces))
