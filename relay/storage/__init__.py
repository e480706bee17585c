"""What a relay keeps on disk: its journal, the core's snapshots and the event log.

How this works
--------------
Every input a relay's core is given is journalled before its effects are published
(``journal.py``: ``Journal`` the interface, ``SqliteJournal`` one SQLite file per shard, ``Entry``
= ``Msg`` | ``Tick``); replaying the entries into a fresh core rebuilds it exactly. Every so often
the core's state is written beside the journal (``snapshot.py``: a versioned msgpack blob, ``dump``
and ``load``), so recovery replays only what came after it. ``eventlog.py`` writes the JSON-lines
event log and completes its tail after a crash from the journal.

The face loads each module when a name is first asked for.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from relay.storage.eventlog import EventLog as EventLog, complete_log as complete_log
    from relay.storage.journal import Entry as Entry, FencedError as FencedError, Journal as Journal, JournalError as JournalError, Msg as Msg, SqliteJournal as SqliteJournal, Tick as Tick, default_data_dir as default_data_dir, feed as feed, open_journal as open_journal
    from relay.storage import snapshot as snapshot

#: Each name of the face and the module of this package that defines it.
_WHERE: dict[str, str] = {"Entry": "journal", "EventLog": "eventlog", "FencedError": "journal", "Journal": "journal", "JournalError": "journal", "Msg": "journal", "SqliteJournal": "journal", "Tick": "journal", "complete_log": "eventlog", "default_data_dir": "journal", "feed": "journal", "open_journal": "journal", "snapshot": "snapshot"}

__all__ = ["Entry", "EventLog", "FencedError", "Journal", "JournalError", "Msg", "SqliteJournal", "Tick", "complete_log", "default_data_dir", "feed", "open_journal", "snapshot"]

if not TYPE_CHECKING:  # the type checker reads the imports above; a run loads each module when first asked
    def __getattr__(name: str) -> object:
        where = _WHERE.get(name)
        if where is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        module = importlib.import_module(f"{__name__}.{where}")
        value = module if where == name else getattr(module, name)
        globals()[name] = value
        return value
