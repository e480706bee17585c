"""Fair order's decisions in the logs of journalled relays that crash mid-write and, in a cluster,
hand their shard over: every decision line any of them wrote is true (``protocol/fairlog.py``).

The relays and the players' moves are ``tests/test_logs_verify.py``'s, with matches in fair order
whose players never answer a probe (the relay assumes their round trips)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import hypothesis
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from protocol.verify import parse_log, verify
from relay.core import RelayConfig
from tests.test_logs_verify import TOY, Relays, drive_relays, registered


class FairRelays(Relays):
    def config(self) -> RelayConfig:
        return RelayConfig(between_games_s=0.5, waiting_ttl_s=30.0, linger_s=20.0, order="fair",
                           relay_id=f"shard-{self.name}", shards_total=4 if self.cluster else 0)


@hsettings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data(), cluster=st.booleans(), steps=st.integers(10, 80))
def test_every_fair_decision_the_relays_write_verifies(data: st.DataObject, cluster: bool, steps: int) -> None:
    with tempfile.TemporaryDirectory() as tmp, registered(TOY):
        relays = FairRelays(Path(tmp), cluster)
        try:
            drive_relays(relays, data, steps)
            relays.wait(60.0)
        finally:
            relays.close()
        for path in relays.logs:
            decisions: list[Any] = []
            report = verify(parse_log(path.read_text().splitlines(), decisions), relay_lines=decisions)
            assert report.ok, f"{path.name}: {report.summary()}\n{path.read_text()[-3000:]}"
            hypothesis.event("decisions" if decisions else "no decision")
