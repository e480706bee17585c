"""The peer benchmark's server CPU per play counts every process ``blink serve`` runs, short-lived ones too.

``blink serve`` with its journal forks a child for each snapshot; the child is gone by the next
progress line and its CPU lands in the serve process's reaped-children time. The figure for the
sampled interval must still be a number (it once came out as "-").
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def peers():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("colyseus_vs_blink", ROOT / "bench" / "peers" / "colyseus_vs_blink.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_a_child_gone_by_the_last_line_leaves_the_total_a_number(peers) -> None:  # type: ignore[no-untyped-def]
    first = peers.Sample(0.0, 0, {"relay (blink serve)": 1.0, "mosquitto (7)": 0.5, "blink (9)": 0.01}, None)
    last = peers.Sample(10.0, 1000, {"relay (blink serve)": 1.3, "mosquitto (7)": 0.6}, None)
    figures = peers.SideResult("blink serve+journal", {}, [first, last]).figures()
    assert figures["server_us_per_play"] == {"relay (blink serve)": 300.0, "mosquitto (7)": 100.0}
    assert figures["server_us_per_play_total"] == 400.0


def test_a_child_started_after_the_first_line_counts_from_zero(peers) -> None:  # type: ignore[no-untyped-def]
    first = peers.Sample(0.0, 0, {"relay (blink serve)": 1.0}, None)
    last = peers.Sample(10.0, 1000, {"relay (blink serve)": 1.2, "mosquitto (7)": 0.1}, None)
    figures = peers.SideResult("blink serve", {}, [first, last]).figures()
    assert figures["server_us_per_play_total"] == 300.0


@pytest.mark.skipif(not hasattr(os, "fork"), reason="forks a child")
def test_the_top_process_counts_the_children_it_reaped(peers) -> None:  # type: ignore[no-untyped-def]
    before = peers.cpu_s(os.getpid(), reaped=True)
    pid = os.fork()
    if pid == 0:  # the child burns some CPU, as a forked snapshot does, and ends
        while os.times().user < 0.3:  # a forked child's times start at zero
            pass
        os._exit(0)
    os.waitpid(pid, 0)
    after = peers.cpu_s(os.getpid(), reaped=True)
    own = peers.cpu_s(os.getpid())
    assert before is not None and after is not None and own is not None
    assert after - before >= 0.2  # the child's CPU, now the parent's reaped time
    assert after - own >= 0.2
