"""What every scene has: a batch of drawables built once, and input handlers that become actions.

How this works
--------------
The app (``client/window/app.py``) owns the window and calls the current scene's ``update``
once per frame, then ``draw``. A scene builds its drawables into ``self.batch`` when it is made
and only changes their attributes afterwards. ``display_version`` goes up whenever ``update``
changed what is drawn because of new input or new state; the app's frame statistics use it to
check that every input shows on the frame that handled it, and the app presents a frame only when
it changed or the scene is not ``still`` (an animation between versions). Input handlers return True when they
used the event. A scene knows the app only as ``SceneHost`` (``client/window/host.py``): the app
imports the scenes, never the other way round.
"""

from __future__ import annotations

import pyglet

from client.window.host import SceneHost


class Scene:
    name = "scene"
    clear_colour: tuple[float, float, float, float] = (0.08, 0.09, 0.12, 1.0)

    def __init__(self, app: SceneHost) -> None:
        self.app = app
        self.batch = pyglet.graphics.Batch()
        self.display_version = 0

    def enter(self) -> None:
        """Called when the scene becomes current."""

    def exit(self) -> None:
        """Called when another scene takes over."""

    def resize(self, width: int, height: int) -> None:
        """The window changed size: move the drawables."""

    def update(self, now_ns: int) -> None:
        """Once per frame, before drawing: bring the drawables up to date."""

    def still(self) -> bool:
        """True when the last ``update`` left the picture as it was, apart from what bumped
        ``display_version``: the app then does not draw or present the frame (the screen keeps the
        last one). A scene that moves drawables without bumping it (an animation) says False; the
        default is False, i.e. every frame is drawn."""
        return False

    def draw(self) -> None:
        self.batch.draw()

    # input: return True when the event was used
    def on_key_press(self, symbol: int, modifiers: int) -> bool:
        return False

    def on_text(self, text: str) -> bool:
        return False

    def on_mouse_press(self, x: int, y: int, button: int, modifiers: int) -> bool:
        return False

    def on_mouse_motion(self, x: int, y: int) -> None:
        """The pointer moved (hover highlights)."""

    def on_mouse_drag(self, x: int, y: int, dx: int, dy: int, buttons: int, modifiers: int) -> bool:
        return False

    def on_mouse_release(self, x: int, y: int, button: int, modifiers: int) -> bool:
        return False

    def describe(self) -> dict[str, object]:
        """What the scene shows, as data (tests compare it with the relay's state)."""
        return {"scene": self.name}

    def plays(self, game: str) -> bool:
        """True if this scene is the one that plays ``game``. The app answers from the window's game
        registry (``scenes/registry.py``), which imports every game scene: those never import it."""
        cls = self.app.scene_class(game)
        return cls is None or cls is type(self)  # a game the window does not know: stay, rather than switch for ever
