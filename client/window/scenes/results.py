"""The match result: who won, game by game, and the rematch.

How this works
--------------
A spectator (watching by code, or a replay) gets the same screen in the third person ("A beat
B 2–1", "bot won" per game) and no rematch key. Reads the model's ``match_state`` (wins, per-game results, winner) and the public events
(``match_over`` reason, ``rematch_requested``); a rated player also reads its rating change
(``RatingChanged``, kept by the model). R asks the relay for a rematch
(``Player.rematch``); when both players asked, the relay starts a new game, the match status goes
back to ``playing`` and this scene hands over to a fresh table scene. M (or Esc) goes back to
the menu, Q quits.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Mapping

from pyglet.window import key

from client.window import geometry as geo
from client.window.cards import Layer, label, set_color, set_text
from client.window.mesh import Mesh
from client.window.host import SceneHost
from client.window.scenes.base import Scene
from client.window import texts
from client.matchstate import MatchState
from client.results import game_line, match_result_line, rating_line
from protocol.rules import game_for
from protocol.match import MATCH_EVENTS, MATCH_REASON_LABELS, GameStarted, MatchOver, RematchRequested, RematchStarted


def _reason_labels(game: str) -> Mapping[str, str]:
    """The game's own words for why its games ended (the relay's match reasons where it has none)."""
    try:
        return game_for(game).all_reason_labels
    except ValueError:
        return MATCH_REASON_LABELS


class ResultsScene(Scene):
    name = "results"
    clear_colour = (0.07, 0.16, 0.13, 1.0)

    def __init__(self, app: SceneHost) -> None:
        super().__init__(app)
        b = self.batch
        self.l_back, self.l_front = Layer(1), Layer(2)
        self.panel = Mesh(b, self.l_back.mesh, bg=(18, 41, 33))
        self.title = label(b, self.l_front.text, 36, (255, 255, 255, 255), "center", "center", bold=True)
        self.score = label(b, self.l_front.text, 20, (255, 230, 150, 255), "center", "center", bold=True)
        self.games = [label(b, self.l_front.text, 14, (220, 235, 225, 255), "center", "center") for _ in range(9)]
        self.rematch_lbl = label(b, self.l_front.text, 14, (255, 220, 120, 255), "center", "center")
        self.rating_lbl = label(b, self.l_front.text, 14, (170, 215, 255, 255), "center", "center")
        self.hint = label(b, self.l_front.text, 13, (200, 225, 210, 255), "center", "center", text=texts.OVER_HINTS)
        self.asked = False
        self._key: object = None
        self.resize(*app.size)

    def resize(self, width: int, height: int) -> None:
        self._size = (width, height)
        self._lines = -1  # re-place on the next update, when the number of games is known
        self._key = None

    def _place(self, lines: int) -> None:
        width, height = self._size
        f = max(9.0, min(15.0, height / 52))
        t = geo.Tris()
        pw = min(width * 0.86, f * 50)
        self._pw = pw
        ph = min(height * 0.9, f * (19.7 + 2.0 * lines))
        geo.rounded_rect(t, pw, ph, f * 1.5, (10, 30, 24, 230))
        geo.rounded_ring(t, pw, ph, f * 1.5, 2.0, (255, 220, 120, 180))
        self.panel.set(t)
        self.panel.move(width / 2, height / 2)
        top = height / 2 + ph / 2
        self.title.font_size = round(f * 2.4, 1)
        self.title.position = (width / 2, top - f * 3.4, 0)
        self.score.font_size = round(f * 1.5, 1)
        self.score.position = (width / 2, top - f * 6.6, 0)
        for i, g in enumerate(self.games):
            g.font_size = round(f * 1.05, 1)
            g.position = (width / 2, top - f * (9.4 + 2.0 * i), 0)
        self.rating_lbl.font_size = round(f * 1.1, 1)
        self.rating_lbl.position = (width / 2, height / 2 - ph / 2 + f * 6.8, 0)
        self.rematch_lbl.font_size = round(f * 1.1, 1)
        self.rematch_lbl.position = (width / 2, height / 2 - ph / 2 + f * 4.6, 0)
        self.hint.font_size = round(f * 1.0, 1)
        self.hint.position = (width / 2, height / 2 - ph / 2 + f * 2.0, 0)
        self._lines = lines

    def update(self, now_ns: int) -> None:
        session = self.app.session
        model = session.model
        if model is None:
            return
        ms = MatchState.read(model.match_state)
        if ms.status == "playing":  # the rematch started
            self.app.goto("table")
            return
        k = (model.version, self.asked)
        if k == self._key:
            return
        self._key = k
        watching = model.spectating or model.seat is None
        seat = model.seat if model.seat is not None else -1  # -1: a spectator, nobody is "you"
        names = list(model.players)
        wins = list(ms.wins)
        winner = ms.winner
        reason = ""
        asked: set[int] = set()
        for ev in model.events:  # once a change (``_key``), not each frame
            match MATCH_EVENTS.read(ev):
                case MatchOver(reason=why):
                    reason = why
                case RematchRequested(player=who):
                    asked.add(who)
                case RematchStarted() | GameStarted():
                    asked.clear()
        if watching:
            title = match_result_line(names, replace(ms, status="over"))
        elif winner is None:
            title = "Match drawn"
        elif winner == seat:
            title = "You win the match!"
        else:
            title = f"{names[winner] if winner < len(names) else 'opponent'} wins the match"
        if reason == "forfeit":
            title += "  (forfeit)"
        set_text(self.title, title)
        set_color(self.title, (140, 255, 170, 255) if winner == seat else (255, 255, 255, 255))
        if watching:
            set_text(self.score, "   ".join(f"{n} {w}" for n, w in zip(names, wins)))
        elif len(names) == 2:
            set_text(self.score, texts.score_line(names, wins, seat))
        else:
            set_text(self.score, "   ".join(f"{n} {w}" for n, w in zip(names, wins)))
        results = list(ms.results or ())
        if min(len(results), len(self.games)) != self._lines:
            self._place(min(len(results), len(self.games)))
        # a long title (three players' names) is made smaller to stay inside the panel
        full = round(max(9.0, min(15.0, self._size[1] / 52)) * 2.4, 1)  # as ``_place`` sizes it
        if self.title.font_size != full:
            self.title.font_size = full
        while self.title.content_width > getattr(self, "_pw", 1e9) * 0.94 and self.title.font_size > 10:
            self.title.font_size = round(self.title.font_size * 0.9, 1)
        for i, g in enumerate(self.games):
            if i < len(results):
                set_text(g, game_line(i, results[i], names, seat, _reason_labels(self.app.current_game()),
                                      self.app.score_word(self.app.current_game())))
            else:
                set_text(g, "")
        others = [i for i in range(len(names)) if i != seat]
        waiting = [names[i] for i in others if i not in asked]
        if watching:
            keen = [names[i] for i in others if i in asked]
            line = (f"{', '.join(keen)} want{'s' if len(keen) == 1 else ''} a rematch" if keen
                    else f"replay of match {model.match}" if self.app.overlay is not None
                    else "you watched this match")
        elif seat in asked and not waiting:
            line = "starting the rematch…"
        elif seat in asked or self.asked:
            line = f"rematch asked — waiting for {', '.join(waiting) or 'the others'}"
        elif any(i in asked for i in others):
            keen = [names[i] for i in others if i in asked]
            line = f"{', '.join(keen)} want{'s' if len(keen) == 1 else ''} a rematch — press R"
        else:
            line = "press R for a rematch"
        set_text(self.rematch_lbl, line)
        rated = model.rating if not watching and model.rating is not None and model.rating.match == model.match else None
        set_text(self.rating_lbl, "" if rated is None else rating_line(rated.before, rated.after, rated.matches))
        set_text(self.hint, self.app.results_hint() if watching else texts.OVER_HINTS)
        self.display_version += 1

    def on_key_press(self, symbol: int, modifiers: int) -> bool:
        model = self.app.session.model
        if symbol == key.R and model is not None and not model.spectating:
            if not self.asked:
                self.app.note_input()
                self.asked = True
                self.app.session.rematch()
            return True
        if symbol in (key.M, key.ESCAPE):
            self.app.note_input()
            self.app.back_to_menu()
            return True
        if symbol == key.Q:
            self.app.quit()
            return True
        return False

    def describe(self) -> dict[str, object]:
        return {"scene": self.name, "title": self.title.text, "score": self.score.text,
                "games": [g.text for g in self.games if g.text], "rematch": self.rematch_lbl.text,
                "rating": self.rating_lbl.text}
