"""The pyglet window client (``blink play``). Importing this package does not import pyglet:
only ``app``, ``mesh``, ``cards``, ``hud`` and ``scenes`` do; ``geometry``, ``layout``, ``session``,
``sounds``, ``stats`` and ``texts`` are pure and load anywhere."""
