"""What a scene may use of the app that shows it: ``SceneHost``.

How this works
--------------
The app (``client/window/app.py``) makes every scene, passing itself; it imports the scenes, so a
scene cannot import it back without closing a circle. Scenes instead know the app as this
protocol, the members they use and nothing else, and ``App`` has them (mypy checks that wherever
the app hands itself to a scene). This module imports neither the app nor any scene, so both sides
can import it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Protocol

if TYPE_CHECKING:
    from client.window.session import GameMode
    from client.lan import Browser
    from client.window.session import Session
    from client.window.sounds import Sounds
    from client.window.viewmodels import Replay, ReplaySession


class SceneHost(Protocol):
    # ----------------------------------------------------------------- what the scenes read

    @property
    def session(self) -> Session | ReplaySession: ...  # a ReplaySession while a replay is shown
    @property
    def sounds(self) -> Sounds: ...
    @property
    def overlay(self) -> object | None: ...  # the replay's control bar, when one is over the scene
    @property
    def size(self) -> tuple[int, int]: ...  # the scenes' area: the window less the replay bar
    @property
    def window_size(self) -> tuple[int, int]: ...
    @property
    def hud_room(self) -> float: ...  # the corner HUD's widest text, from the right edge
    @property
    def lan_browser(self) -> Callable[[list[str] | None], Browser] | None: ...  # replaces the real LAN browser
    @property
    def replay_from_menu(self) -> bool: ...  # the replay shown was opened from the menu's list

    def current_game(self) -> str: ...
    def command_line_settings(self) -> tuple[str, dict[str, object]]: ...
    def bot_level_name(self) -> str: ...
    def results_hint(self) -> str: ...

    # The window's game registry imports every scene, so scenes ask the app (``scenes/registry.py``).
    def scene_class(self, game: str) -> type[object] | None: ...  # None: a game the window does not play
    def game_title(self, game: str) -> str: ...
    def score_word(self, game: str) -> str: ...

    # ----------------------------------------------------------------- what the scenes ask for

    def note_input(self) -> None: ...
    def toggle_play_parts(self) -> None: ...  # the HUD's second line: the last play's time in parts
    def goto(self, name: str) -> None: ...
    def set_game(self, game: str, players: int | None = None) -> None: ...
    def set_bot_level(self, name: str) -> None: ...
    def start_game(self, mode: GameMode, code: str | None = None, url: str | None = None,
                   prefix: str | None = None) -> None: ...
    def back_to_menu(self) -> None: ...
    def open_replay(self, replay: Replay, at: int | None = None, speed: float = 1.0) -> None: ...
    def leave_replay(self) -> None: ...
    def quit(self) -> None: ...
