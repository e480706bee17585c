"""The menu: play a bot, host a match, join by code, quick match, LAN games, quit.

How this works
--------------
A fixed list of items drawn once (panels, labels, three sample cards for decoration). Up/Down (or
the mouse) moves the highlight and Enter activates; each item also has its own key. "Join by code"
opens a small text field: letters and digits are typed into it, Enter joins, Esc cancels. The
bot's speed is chosen with Left/Right on the "Play bots" item. The games, their seat counts and
their option presets come from the window's game registry (``scenes/registry.py``) and the games'
own rules. "Replays" opens the list of recorded matches (``scenes/replay.py``). "Options" cycles the chosen game's own presets from RULES.md (Takeaway's layout and
once-per-game re-roll, Sequence's length, Roll Your Own's rolls/rounds/games) and "Turn timer" its
``turn_timer_s`` (off / 15 / 30 s) for the games that take one; they
become the match settings, checked as the relay checks them (``Game.check_new_match``) before a game starts (a refusal
shows in the status line). Untouched, the command line's ``--settings`` for that game stay. Activating an item asks the app to start
that kind of game (``App.start_game``), which switches to the table scene at once; the network
work happens in the session's background task.
"""

from __future__ import annotations

from typing import Literal

from pyglet.window import key, mouse

from protocol.rules import blink, game_for
from client.window import geometry as geo
from client.window.cards import CardView, Layer, fit_label, label, set_color, set_text
from client.window.layout import CARD_ASPECT, logo_cards
from client.window.mesh import Mesh
from client.window.host import SceneHost
from client.window.scenes.base import Scene
from client.window.scenes.registry import WINDOW_GAMES, seat_choices, title, window_game
from client.window.session import BOT_LEVELS

#: The menu's rows: a setting (game, players, bot speed, options, turn timer), a way to start a game,
#: another screen (LAN games, replays), or quitting.
MenuItem = Literal["game", "players", "bot", "host", "join", "watch", "quick", "lan", "options", "timer", "replays",
                   "quit"]
ITEMS: list[tuple[MenuItem, str, str]] = [
    ("game", "G", "Game"),
    ("players", "P", "Players"),
    ("bot", "B", "Play bots"),
    ("host", "H", "Host a match"),
    ("join", "J", "Join by code"),
    ("watch", "W", "Watch by code"),
    ("quick", "K", "Quick match"),
    ("lan", "L", "LAN games"),
    ("options", "O", "Options"),
    ("timer", "T", "Turn timer"),
    ("replays", "R", "Replays"),
    ("quit", "Q", "Quit"),
]
#: the turn timer choices (seconds; 0 = off) for the turn-based games
TIMERS = (0, 15, 30)
MENU_BG = (18, 41, 33)
CODE_CHARS = set("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")


def arrows(text: str, changeable: bool) -> str:
    """A row's value between ◀ ▶ when Left/Right change it; bare when nothing can (BLINK's seats,
    a game with no presets): arrows that do nothing would say otherwise."""
    return f"◀  {text}  ▶" if changeable else text


class MenuScene(Scene):
    name = "menu"
    clear_colour = (0.07, 0.16, 0.13, 1.0)

    def __init__(self, app: SceneHost) -> None:
        super().__init__(app)
        b = self.batch
        self.l_back = Layer(1)
        self.l_front = Layer(2)
        self.index = 2
        levels = list(BOT_LEVELS)
        current = app.bot_level_name()
        self.levels = levels if current in levels else levels + [current]
        self.level = self.levels.index(current)
        self.typing = False
        self.typing_for: Literal["join", "watch"] = "join"  # what Enter does with the typed code
        self.code = ""
        self.games = list(WINDOW_GAMES)
        game = app.session.config.game
        self.game = self.games.index(game) if game in self.games else 0
        self.players = max(2, int(getattr(app.session.config, "players", 2)))
        self.option = {g: 0 for g in self.games}  # the chosen preset per game
        self.timer = {g: 0 for g in self.games}  # the chosen index into TIMERS per game
        self.touched: set[tuple[str, str]] = set()  # (game, "options"|"timer") the player changed here
        self.error = ""  # settings the rules refused
        self._eat_text = False  # the J that opened the code field also arrives as text: drop it
        self.title = label(b, self.l_front.text, 48, (255, 255, 255, 255), "center", "center", bold=True, text="BLINK")
        self.tagline = label(b, self.l_front.text, 14, (200, 230, 215, 255), "center", "center",
                             text="the speed-card race: match colour, shape or count — faster than them")
        self.panels = [Mesh(b, self.l_back.mesh, bg=MENU_BG) for _ in ITEMS]
        self.keys = [label(b, self.l_front.text, 15, (255, 220, 120, 255), "center", "center", bold=True, text=k)
                     for _, k, _ in ITEMS]
        self.texts = [label(b, self.l_front.text, 16, (255, 255, 255, 255), "left", "center", bold=True, text=t)
                      for _, _, t in ITEMS]
        self.details = [label(b, self.l_front.text, 12, (200, 225, 210, 255), "right", "center") for _ in ITEMS]
        self.status = label(b, self.l_front.text, 11, (190, 215, 200, 255), "center", "center")
        self.hint = label(b, self.l_front.text, 11, (190, 215, 200, 255), "center", "center",
                          text="↑ ↓  choose     Enter  start     ← →  change game / players / bot speed / options     Q  quit")
        self.samples = [CardView(b, self.l_back, bg=MENU_BG) for _ in range(3)]
        self._sample_cards = [blink.Card(3, "red", "star"), blink.Card(5, "blue", "moon"),
                              blink.Card(2, "yellow", "triangle")]
        self._rects: list[tuple[float, float, float, float]] = []
        self._key: object = None
        self._f, self._iw, self._size = 15.0, 630.0, tuple(app.size)
        self._titled: object = None  # (game, size) the title, tagline and sample cards were last laid out for
        self.resize(*app.size)

    def resize(self, width: int, height: int) -> None:
        f = max(9.0, min(15.0, height / 52))
        self.title.font_size = round(f * 3.6, 1)
        self.title.position = (width / 2, height - f * 4.6, 0)
        self.tagline.font_size = round(f, 1)
        self.tagline.position = (width / 2, height - f * 9.4, 0)
        iw = min(width * 0.8, f * 42)
        top = height - f * 12.4
        # the rows share what is left above the status line
        pitch = min(f * 3.15, (top - f * 6.2) / max(1, len(ITEMS) - 1))
        ih = min(f * 2.6, pitch * 0.86)
        self._rects = []
        for i in range(len(ITEMS)):
            y = top - i * pitch
            self._rects.append((width / 2, y, iw, ih))
            self.keys[i].font_size = round(f * 1.15, 1)
            self.keys[i].position = (width / 2 - iw / 2 + f * 2, y, 0)
            self.texts[i].font_size = round(f * 1.2, 1)
            self.texts[i].position = (width / 2 - iw / 2 + f * 4, y, 0)
            self.details[i].font_size = round(f * 0.9, 1)
            self.details[i].position = (width / 2 + iw / 2 - f * 1.2, y, 0)
        self.status.font_size = round(f * 0.9, 1)
        self.status.position = (width / 2, f * 4.2, 0)
        self.hint.font_size = round(f * 0.9, 1)
        self.hint.position = (width / 2, f * 1.8, 0)
        self._f, self._iw, self._size = f, iw, (width, height)
        self._titled = None
        self._key = None

    def _place_title(self, game: str) -> None:
        """The chosen game's title and tagline; BLINK's decorative sample cards either side of its
        title, clear of the tagline below it (the dice games have no cards)."""
        width, height = self._size
        f = self._f
        if self._titled == (game, self._size):
            return
        self._titled = (game, self._size)
        fit_label(self.title, title(game), width * 0.94, round(f * 3.6, 1), min_size=round(f * 1.8, 1))
        fit_label(self.tagline, window_game(game).tagline, width * 0.94, round(f, 1), min_size=round(f * 0.8, 1))
        cw, xs = logo_cards(width, self.title.content_width / 2, f, f * 6.4)
        ch = cw / CARD_ASPECT
        y = height - f * 4.6
        cards = game == "blink"
        for view, card, x in zip(self.samples, self._sample_cards, xs):
            view.show(card if cards else None, "face" if cards else "none", cw, ch)
            view.move(x, y)

    def update(self, now_ns: int) -> None:
        s = self.app.session
        k = (self.index, self.level, self.typing, self.typing_for, self.game, self.players, self.code, s.status,
             s.message, s.server_url, tuple(self._rects), tuple(self.option.items()), tuple(self.timer.items()),
             self.error)
        if k == self._key:
            return
        self._key = k
        for i, (panel, rect) in enumerate(zip(self.panels, self._rects)):
            x, y, w, h = rect
            t = geo.Tris()
            colour = (40, 120, 90, 255) if i == self.index else (20, 60, 48, 255)
            geo.rounded_rect(t, w, h, h * 0.3, colour)
            if i == self.index:
                geo.rounded_ring(t, w, h, h * 0.3, 2.0, (255, 220, 120, 255))
            panel.set(t)
            panel.move(x, y)
        game = self.games[self.game]
        self._place_title(game)
        allowed = seat_choices(game)
        if self.players not in allowed:
            self.players = min(allowed, key=lambda n: abs(n - self.players))
        set_text(self.details[0], arrows(window_game(game).menu_line, len(self.games) > 1))
        set_text(self.details[1], arrows(str(self.players), len(allowed) > 1)
                 + ("   (bots fill the other seats)" if len(allowed) > 1 else f"   ({self.players}-player game)"))
        set_text(self.details[2], f"{self.levels[self.level]}  (← →)")
        set_text(self.details[3], "open to the LAN, with a code to share")
        for i, what in ((4, "join"), (5, "watch")):
            if self.typing and self.typing_for == what:
                set_text(self.details[i], f"code: {self.code}_   Enter {what} · Esc cancel")
                set_color(self.details[i], (255, 255, 255, 255))
            else:
                set_text(self.details[i], "type the code a friend shows you" if what == "join"
                         else "spectate a running match (read-only)")
                set_color(self.details[i], (200, 225, 210, 255))
        set_text(self.details[6], "first free opponent on the server")
        set_text(self.details[self.row("lan")], "matches hosted on the local network")
        set_text(self.details[self.row("options")], arrows(self.option_label(game), len(window_game(game).presets) > 1))
        set_text(self.details[self.row("timer")], arrows(self.timer_label(game), window_game(game).turn_timer))
        set_text(self.details[self.row("replays")], "watch a recorded match again")
        set_text(self.details[self.row("quit")], "")
        f, iw, (width, _) = self._f, self._iw, self._size
        for i, (text, detail) in enumerate(zip(self.texts, self.details)):
            # a detail keeps to the right of its item's name, whatever it says
            room = iw - f * 4 - text.content_width - f * 1.0 - f * 1.2
            fit_label(detail, detail.text, room, round(f * 0.9, 1), min_size=round(f * 0.7, 1))
        if self.error:
            status, colour = f"⚠ {self.error}", (255, 140, 120, 255)
        elif s.status == "error":
            status, colour = f"⚠ {s.message}", (255, 140, 120, 255)
        else:
            where = ("local relay on " if s.local else "server ") + (s.server_url or "…")
            status, colour = f"{where}{'   ·   ' + s.message if s.message else ''}", (190, 215, 200, 255)
        fit_label(self.status, status, width * 0.96, round(f * 0.9, 1), min_size=round(f * 0.65, 1))
        set_color(self.status, colour)
        self.display_version += 1

    @staticmethod
    def row(what: MenuItem) -> int:
        return next(i for i, item in enumerate(ITEMS) if item[0] == what)

    def activate(self, i: int) -> None:
        what = ITEMS[i][0]
        if what not in ("join", "watch", "game", "players", "options", "timer"):
            self.app.note_input()  # a new scene (or the end) is what shows it
        self.index = i
        if what == "quit":
            self.app.quit()
        elif what == "replays":
            self.app.goto("replays")
        elif what == "game":
            self.cycle(+1)
        elif what in ("players", "options", "timer"):
            self.cycle(+1)
        elif what == "lan":  # its own screen (scenes/lan.py): hosts found on the local network
            self.app.goto("lan")
        elif what in ("join", "watch"):
            if self.typing and self.typing_for == what and self.code:
                self._choose()
                self.app.start_game(what, code=self.code)
            else:
                self.typing, self.typing_for = True, what
        elif what == "bot":
            if self._choose():
                self.app.set_bot_level(self.levels[self.level])
                self.app.start_game("bot")
        elif what in ("host", "quick"):
            if self._choose():
                self.app.start_game(what)

    def option_label(self, game: str) -> str:
        presets = window_game(game).presets
        if len(presets) > 1 and (game, "options") not in self.touched and self._cli(game):
            return "from --settings"
        return presets[self.option.get(game, 0)][0]

    def timer_label(self, game: str) -> str:
        if not window_game(game).turn_timer:
            return "not used by this game"
        if (game, "timer") not in self.touched and "turn_timer_s" in self._cli(game):
            return f"{self._cli(game)['turn_timer_s']} s (from --settings)"
        t = TIMERS[self.timer[game]]
        return f"{t} s to act" if t else "off"

    def _cli(self, game: str) -> dict[str, object]:
        """The command line's --settings, which apply to its own game only."""
        own = self.app.command_line_settings()
        return dict(own[1]) if own[0] == game else {}

    def settings_for(self, game: str) -> dict[str, object]:
        """The match settings for ``game``: the command line's, overlaid with what was chosen here."""
        out = self._cli(game)
        entry = window_game(game)
        if len(entry.presets) > 1 and ((game, "options") in self.touched or not out):
            out.update(entry.presets[self.option[game]][1])
        if entry.turn_timer and ((game, "timer") in self.touched or "turn_timer_s" not in out):
            t = TIMERS[self.timer[game]]
            if t or "turn_timer_s" in out:
                out["turn_timer_s"] = float(t)
        return out

    def _choose(self) -> bool:
        """Take the chosen game, seats and settings; False (and the reason shown) when the rules
        refuse the settings."""
        game = self.games[self.game]
        settings = self.settings_for(game)
        try:
            game_for(game).check_new_match(settings, self.players)
        except ValueError as e:
            self.error = f"{game} settings: {e}"
            self._key = None
            return False
        self.error = ""
        self.app.set_game(game, self.players)
        self.app.session.config.settings = settings
        return True

    def cycle(self, step: int) -> None:
        """Left/Right on the game, players or bot-speed item."""
        what = ITEMS[self.index][0]
        if what == "game":
            self.game = (self.game + step) % len(self.games)
            allowed = seat_choices(self.games[self.game])
            if self.players not in allowed:
                self.players = allowed[0]
        elif what == "players":
            allowed = seat_choices(self.games[self.game])
            j = allowed.index(self.players) if self.players in allowed else 0
            self.players = allowed[(j + step) % len(allowed)]
        elif what == "bot":
            self.level = (self.level + step) % len(self.levels)
        elif what == "options":
            game = self.games[self.game]
            n = len(window_game(game).presets)
            if n > 1:
                self.option[game] = (self.option[game] + step) % n
                self.touched.add((game, "options"))
        elif what == "timer":
            game = self.games[self.game]
            if window_game(game).turn_timer:
                self.timer[game] = (self.timer[game] + step) % len(TIMERS)
                self.touched.add((game, "timer"))
        self.error = ""
        self._key = None

    def _looks(self) -> tuple[object, ...]:
        return (self.index, self.level, self.typing, self.code, self.game, self.players,
                tuple(self.option.items()), tuple(self.timer.items()))

    def on_key_press(self, symbol: int, modifiers: int) -> bool:
        before = self._looks()
        used = self._key_press(symbol)
        if self._looks() != before:
            self.app.note_input()  # it must show on the next frame
        return used

    def _key_press(self, symbol: int) -> bool:
        if self.typing:
            if symbol in (key.ENTER, key.RETURN, key.NUM_ENTER):
                if self.code:
                    self._choose()
                    self.app.start_game(self.typing_for, code=self.code)
                return True
            if symbol == key.BACKSPACE:
                self.code = self.code[:-1]
                return True
            if symbol == key.ESCAPE:
                self.typing, self.code = False, ""
                return True
            return True  # letters arrive through on_text
        if symbol in (key.UP, key.W):
            self.index = (self.index - 1) % len(ITEMS)
        elif symbol in (key.DOWN, key.S):
            self.index = (self.index + 1) % len(ITEMS)
        elif symbol in (key.LEFT, key.RIGHT, key.A, key.D):
            self.cycle(1 if symbol in (key.RIGHT, key.D) else -1)
        elif symbol in (key.ENTER, key.RETURN, key.NUM_ENTER, key.SPACE):
            self.activate(self.index)
        elif symbol == key.ESCAPE:
            self.app.quit()
        else:
            for i, (_, k, _) in enumerate(ITEMS):
                if symbol == getattr(key, k):
                    self.activate(i)
                    self._eat_text = self.typing and k in ("J", "W")
                    return True
            return False
        return True

    def on_text(self, text: str) -> bool:
        before = self._looks()
        used = self._text(text)
        if self._looks() != before:
            self.app.note_input()
        return used

    def _text(self, text: str) -> bool:
        if not self.typing:
            return False
        if self._eat_text:
            self._eat_text = False
            if text.upper() in ("J", "W"):
                return True
        for ch in text.upper():
            if ch in CODE_CHARS and len(self.code) < 8:
                self.code += ch
        return True

    def on_mouse_press(self, x: int, y: int, button: int, modifiers: int) -> bool:
        if button != mouse.LEFT:
            return False
        for i, (cx, cy, w, h) in enumerate(self._rects):
            if abs(x - cx) <= w / 2 and abs(y - cy) <= h / 2:
                before = self._looks()
                self.activate(i)
                if self._looks() != before:
                    self.app.note_input()
                return True
        return False

    def describe(self) -> dict[str, object]:
        return {"scene": self.name, "index": self.index, "typing": self.typing, "code": self.code,
                "game": self.games[self.game], "players": self.players,
                "level": self.levels[self.level], "status": self.status.text,
                "options": self.option_label(self.games[self.game]), "timer": self.timer_label(self.games[self.game]),
                "settings": self.settings_for(self.games[self.game])}
