"""What the window shows, computed from the client model and the time (pure: no pyglet, no clock).

How this works
--------------
Each scene of the window is split in two:

- a *view-model* here: it reads the client model (``client/model.py``) through ``ClientView``
  (``clientview.py``: what the window reads, read-only; a game's state narrowed to that game's
  class) and the time it is given (``now_ns``), keeps the little state a screen needs between
  frames (which hand card is selected, a bounce in flight, when the countdown ends, the last
  message), and answers "what is on the screen now" as plain data (frozen dataclasses, strings,
  numbers);
- a *renderer* in ``client/window/scenes/``: pyglet batches built once, brought in line with what
  the view-model says when it changed, and input handlers that ask the view-model what a key or a
  click means before sending the action.

So everything the player reads can be tested by feeding a model real relay messages, without a
window (tests/test_viewmodels.py); importing this package never imports pyglet (a test checks).

``replay.py`` turns a recorded event log into the spectator models a replay shows (``blink
replay``, the menu's Replays): the game scenes draw them as they would a live match.

``feed.EventFeed`` is how every view-model reads the model's event history: only the events of the
current game and newer, each once -- a new scene must not act on an earlier match's ``match_over``.
"""
