"""Coloured triangles in a pyglet batch, built once and moved cheaply; opaque unless asked otherwise.

How this works
--------------
``Mesh`` owns one vertex list (positions in its own coordinates, one RGBA colour per vertex, and a
translation) drawn by a minimal shader (no rotation, no ``discard``). ``set(tris)`` uploads a
``geometry.Tris`` -- in place when the vertex count is unchanged, otherwise into a new vertex list
of exactly that size; ``move(x, y)`` only rewrites the translation, which is all an animation
does per frame.

Why opaque: under software GL (llvmpipe, which is what Xvfb and many laptops without drivers give
you) the frame time is dominated by pixels written, and blending reads every pixel back.
Cards, rings and slots are drawn opaque; where something should look translucent over the felt
(a dimmed card, a fading ring), its colours are mixed with the background colour on the CPU
(``bg``) once, when it is set. Only real overlays over other drawables (a text panel) use
``blend=True``.
"""

from __future__ import annotations

from typing import MutableSequence, Protocol, cast

import pyglet
from pyglet.gl import GL_BLEND, GL_ONE_MINUS_SRC_ALPHA, GL_SRC_ALPHA, GL_TRIANGLES, glBlendFunc, glDisable, glEnable
from pyglet.graphics import Batch, Group
from pyglet.graphics.shader import ShaderProgram

from client.window.geometry import Tris

VERTEX = """#version 150 core
in vec2 position;
in vec2 translation;
in vec4 colors;
out vec4 vertex_colors;
uniform WindowBlock { mat4 projection; mat4 view; } window;
void main() {
    gl_Position = window.projection * window.view * vec4(position + translation, 0.0, 1.0);
    vertex_colors = colors;
}
"""
FRAGMENT = """#version 150 core
in vec4 vertex_colors;
out vec4 final_color;
void main() { final_color = vertex_colors; }
"""

BUCKET = 96  # vertex lists are sized in steps of this many vertices

_programs: dict[int, ShaderProgram] = {}


def program() -> ShaderProgram:
    ctx = pyglet.gl.current_context
    assert ctx is not None, "a window (GL context) must exist before drawing"
    key = id(ctx)
    prog = _programs.get(key)
    if prog is None:
        prog = _programs[key] = ctx.create_program((VERTEX, "vertex"), (FRAGMENT, "fragment"))
    return prog


class MeshVertices(Protocol):
    """A vertex list of the mesh shader: pyglet makes one attribute per shader input (position,
    colors, translation), which its own types cannot name."""

    position: MutableSequence[float]
    colors: MutableSequence[int]
    translation: MutableSequence[float]

    def delete(self) -> None: ...


class MeshGroup(Group):
    """Binds the mesh shader; enables blending only for translucent meshes. Equal groups merge."""

    def __init__(self, prog: ShaderProgram, blend: bool, parent: Group | None) -> None:
        super().__init__(parent=parent)
        self.program = prog
        self.blend = blend

    def set_state(self) -> None:
        self.program.bind()
        if self.blend:
            glEnable(GL_BLEND)
            glBlendFunc(GL_SRC_ALPHA, GL_ONE_MINUS_SRC_ALPHA)

    def unset_state(self) -> None:
        if self.blend:
            glDisable(GL_BLEND)
        self.program.unbind()

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, MeshGroup) and other.program is self.program and other.blend == self.blend
                and other.parent == self.parent)

    def __hash__(self) -> int:
        return hash((id(self.program), self.blend, self.parent))


def mix(tris: Tris, alpha: float, bg: tuple[int, int, int]) -> list[int]:
    """Colours made opaque as if drawn with ``alpha`` (times each vertex's own alpha) over ``bg``.
    Remembered on the ``Tris`` (card pictures are cached, so each is mixed once)."""
    key = (alpha, bg)
    done = tris.mixed.get(key)
    if done is None:
        done = tris.mixed[key] = _mix(tris.col, alpha, bg)
        if len(tris.mixed) > 16:
            tris.mixed.pop(next(iter(tris.mixed)))
    return done


def _mix(col: list[int], alpha: float, bg: tuple[int, int, int]) -> list[int]:
    if alpha >= 1.0 and (not col or min(col[3::4]) == 255):
        return col  # opaque already (most pictures): nothing to mix
    out = list(col)
    br, bgg, bb = bg
    for i in range(0, len(col), 4):
        a = col[i + 3] / 255.0 * alpha
        if a >= 0.999:
            out[i + 3] = 255
            continue
        out[i] = int(col[i] * a + br * (1 - a))
        out[i + 1] = int(col[i + 1] * a + bgg * (1 - a))
        out[i + 2] = int(col[i + 2] * a + bb * (1 - a))
        out[i + 3] = 255
    return out


class Mesh:
    def __init__(self, batch: Batch, parent: Group | None = None, blend: bool = False,
                 bg: tuple[int, int, int] = (0, 0, 0)) -> None:
        self.batch = batch
        self.group = MeshGroup(program(), blend, parent)
        self.blend = blend
        self.bg = bg
        self.x = 0.0
        self.y = 0.0
        self.count = 0  # vertices in the vertex list (its capacity)
        self.used = 0  # vertices of the picture shown
        self._vl: MeshVertices | None = None
        self._tris: Tris | None = None
        self._alpha = 1.0

    def set(self, tris: Tris | None, alpha: float = 1.0) -> None:
        """Show ``tris`` (None: nothing), faded by ``alpha``. A no-op when nothing changed."""
        if tris is self._tris and alpha == self._alpha:
            return
        self._tris, self._alpha = tris, alpha
        n = 0 if tris is None else tris.count - tris.count % 3
        if n == 0:
            if self._vl is not None:
                self._vl.delete()
                self._vl = None
            self.count = self.used = 0
            return
        assert tris is not None
        pos = tris.pos[: 2 * n]
        if self.blend:
            col = tris.col[: 4 * n]  # a slice is a copy already
            if alpha != 1.0:
                for i in range(3, len(col), 4):
                    col[i] = int(col[i] * alpha)
        else:
            col = mix(tris, alpha, self.bg)[: 4 * n]
        cap = self.count
        if self._vl is not None and cap // 2 < n <= cap:
            # Same vertex list (cheaper than a new one, which makes the batch rebuild its draw
            # list): the new picture's vertices written over the old ones, and where the old one
            # was longer, its rest made zero-area triangles (the tail beyond was zero already).
            self._vl.position[: 2 * n] = pos
            self._vl.colors[: 4 * n] = col
            if n < self.used:
                self._vl.position[2 * n: 2 * self.used] = [0.0] * (2 * (self.used - n))
            self.used = n
            return
        if self._vl is not None:
            self._vl.delete()
        cap = -(-n // BUCKET) * BUCKET  # room to grow a little without a new list
        if cap > n:
            pos = list(pos) + [0.0] * (2 * (cap - n))
            col = list(col) + [0] * (4 * (cap - n))
        self.count, self.used = cap, n
        self._vl = cast(MeshVertices, self.group.program.vertex_list(
            cap, GL_TRIANGLES, self.batch, self.group,
            position=("f", pos), colors=("Bn", col), translation=("f", (self.x, self.y) * cap)))

    def move(self, x: float, y: float) -> None:
        if x == self.x and y == self.y:
            return
        self.x, self.y = x, y
        if self._vl is not None:
            self._vl.translation[:] = (x, y) * self.count

    def delete(self) -> None:
        if self._vl is not None:
            self._vl.delete()
            self._vl = None
        self.count = self.used = 0
        self._tris = None

    def __repr__(self) -> str:
        return f"Mesh({self.used}/{self.count} vertices at {self.x:.0f},{self.y:.0f}{', blended' if self.blend else ''})"
