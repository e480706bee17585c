"""The two lanes of the suite (tests/conftest.py): who is marked integration, and what a missing program does."""

from __future__ import annotations

import sys

import pytest

from tests import conftest


@pytest.mark.parametrize("value, ci", [("", False), ("0", False), ("false", False), ("False", False),
                                       ("1", True), ("true", True), ("yes", True)])
def test_ci_is_any_value_but_empty_0_or_false(value: str, ci: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", value)
    assert conftest.in_ci() is ci


def test_a_missing_program_skips_outside_ci_and_fails_under_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(conftest.PROGRAMS, "mosquitto", (lambda: None, "apt-get install mosquitto"))
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="mosquitto is not installed"):
        conftest.require("mosquitto")
    monkeypatch.setenv("CI", "1")
    with pytest.raises(pytest.fail.Exception, match="under CI"):
        conftest.require("mosquitto")
    monkeypatch.setitem(conftest.PROGRAMS, "mosquitto", (lambda: "/bin/mosquitto", ""))
    assert conftest.require("mosquitto") == "/bin/mosquitto"
    with pytest.raises(ValueError):
        conftest.require("no-such-program")


@pytest.mark.parametrize("args, impure", [
    ([sys.executable, "-m", "client.cli", "serve"], "python -m client.cli"),
    ([sys.executable, "-m", "relay.hosting.localchild", "7"], "python -m relay.hosting.localchild"),
    (["/usr/sbin/mosquitto", "-c", "x.conf"], "mosquitto"),
    (("nats-server", "-c", "n1.conf"), "nats-server"),
    ("Xvfb :99", "Xvfb"),
    (["blink", "match"], "blink"),
    ([sys.executable, "-c", "import client.cli"], None),
    ([sys.executable, "-m", "pytest"], None),
    (["setpriv", "--reuid=65534"], None),
])
def test_the_commands_a_fast_test_may_not_start(args: object, impure: str | None) -> None:
    assert conftest._impure_command(args) == impure


class _Item:
    """What ``pytest_collection_modifyitems`` reads of a test and does to it."""

    def __init__(self, *fixtures: str) -> None:
        self.fixturenames = ["request", "tmp_path", *fixtures]
        self.marks: list[pytest.Mark] = []

    def add_marker(self, marker: pytest.MarkDecorator) -> None:
        self.marks.append(marker.mark)


def test_a_broker_window_or_cluster_fixture_marks_its_tests_integration_with_the_programs_they_need() -> None:
    pure, broker, both, trust = _Item("monkeypatch"), _Item("mosquitto"), _Item("xdisplay", "cluster"), _Item("relay_url")
    conftest.pytest_collection_modifyitems(None, [pure, broker, both, trust])  # type: ignore[arg-type, list-item]
    assert pure.marks == []
    assert [(m.name, m.args) for m in broker.marks] == [("integration", ("mosquitto",))]
    assert [(m.name, m.args) for m in both.marks] == [("integration", ("Xvfb", "nats-server"))]
    assert [(m.name, m.args) for m in trust.marks] == [("integration", ())]
    assert {t for tools in conftest.INTEGRATION_FIXTURES.values() for t in tools} <= set(conftest.PROGRAMS)
