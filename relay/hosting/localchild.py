"""The child side of ``relay.hosting.localproc.ChildServer``: ``python -m relay.hosting.localchild PARENT_PID``.

How this works
--------------
See relay/hosting/localproc.py: the parent sends its settings as one line on stdin; this process starts a
``relay.hosting.local.LocalServer`` (embedded broker + relay), answers with one JSON line on a private copy
of its stdout, and stops when its stdin reaches EOF (the parent stopped it or died) or when the
parent dies (``relay.hosting.localproc.die_with_parent``). It lives apart from localproc.py so that the
parent's side (what ``blink play`` imports) never loads the relay and the broker it starts in the child.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from typing import IO, cast

from protocol.topics import Topics
from relay.hosting.localproc import LocalChildSettings, child_settings
from relay.model import RelayConfig


async def _serve(settings: LocalChildSettings, out: IO[str]) -> None:
    from relay.hosting.local import LocalServer

    try:
        config = settings["config"]
        server = LocalServer(None, settings["seed"], None if config is None else RelayConfig.from_plain(config),
                             host=settings["host"], port=settings["port"], topics=Topics(**settings["topics"]),
                             max_payload=settings["max_payload"])
    except (KeyError, TypeError, ValueError) as exc:  # settings this version does not read: one line to the parent
        out.write(json.dumps({"error": f"bad settings from the parent: {exc!r}"}) + "\n")
        out.flush()
        return
    try:
        await server.start()
    except Exception as exc:  # noqa: BLE001 - reported to the parent as one line
        await server.stop()
        out.write(json.dumps({"error": f"{type(exc).__name__}: {exc}"}) + "\n")
        out.flush()
        return
    assert server.broker is not None
    out.write(json.dumps({"ready": True, "host": server.broker.host, "port": server.broker.port}) + "\n")
    out.flush()
    loop = asyncio.get_running_loop()
    eof = loop.create_future()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)

    async def watch_stdin() -> None:
        while await reader.read(4096):
            pass
        if not eof.done():
            eof.set_result(None)

    watcher = asyncio.create_task(watch_stdin())
    relay_task = server.task
    waits: set[asyncio.Future[None]] = {eof}
    if relay_task is not None:
        waits.add(relay_task)
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        failed = relay_task is not None and relay_task.done() and not relay_task.cancelled() and relay_task.exception()
        await server.stop()
    if failed:
        raise SystemExit(f"the local relay failed: {failed!r}")


def main(argv: list[str]) -> int:
    started = child_settings(argv, bad_status=2)
    if isinstance(started, int):
        return started
    line, out = started
    settings = cast(LocalChildSettings, line)  # as the parent wrote it; a line this version does not read fails in one line
    levels = settings.get("log_levels", {})
    from mqttkit.logsetup import log_to_stderr

    log_to_stderr(levels.get("", logging.WARNING))  # not basicConfig: a handler added before made it a no-op
    for name, level in levels.items():
        if name:
            logging.getLogger(name).setLevel(level)
    asyncio.run(_serve(settings, out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
