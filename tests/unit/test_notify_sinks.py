"""``labctl notifications`` against the store (the API's answer is the same rows: tests/integration/
test_notifications.py): none recorded yet says where sinks are configured; a store its controller has not migrated
to schema 0017 is named as such, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic import command
from typer.testing import CliRunner

from orchestrator.cmd.labctl import app
from orchestrator.notifysinks import NONE_YET
from orchestrator.store.db import alembic_config, make_engine, migrate

runner = CliRunner()


@pytest.fixture(autouse=True)
def no_lab_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    for var in ("LAB_DIR", "LAB_BROKER_URL", "LAB_STORE_URL", "LAB_API_URL", "LAB_TOKEN_FILE"):
        monkeypatch.delenv(var, raising=False)


def test_no_sink_recorded_yet_says_where_sinks_are_configured(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'store.sqlite'}"
    migrate(make_engine(store))
    res = runner.invoke(app, ["--lab-dir", str(tmp_path), "--store", store, "notifications"])
    assert res.exit_code == 0, res.output
    assert res.output.strip() == NONE_YET and "[notify]" in NONE_YET
    res = runner.invoke(app, ["--lab-dir", str(tmp_path), "--store", store, "notifications", "--json"])
    assert res.exit_code == 0 and res.output.strip() == "[]"


def test_a_store_from_before_the_sinks_table_is_named(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'old.sqlite'}"
    command.upgrade(alembic_config(make_engine(store)), "0016")
    res = runner.invoke(app, ["--lab-dir", str(tmp_path), "--store", store, "notifications"])
    assert res.exit_code == 1 and "no notification sinks table yet (schema 0017)" in res.output, res.output


def test_a_sink_that_raises_anything_is_a_failure_named_by_its_type_and_its_thread_goes_on(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A sink's error other than OSError (http.client's InvalidURL names the URL, which may hold a token) is reported
    by its type only, and the sink's thread keeps serving (it used to end the thread: the sink never delivered
    again)."""
    import threading

    from orchestrator.controller.notify import Delivered, Delivery

    calls: list[bytes] = []
    ok = threading.Event()

    class Odd:
        key, label, kind, target = "webhook:0123456789ab", "webhook https://h/… (webhook:0123456789ab)", "webhook", "x"

        def deliver(self, data: bytes) -> None:
            calls.append(data)
            if len(calls) == 1:
                raise ValueError("URL can't contain control characters. '/hooks/s3cret'")
            ok.set()

    step = Delivery([Odd()], background=False)
    step.hand("r1", [b"{}"], [Odd.key])
    assert step.collect() == [Delivered("r1", Odd.key, "ValueError")]
    calls.clear()
    monkeypatch.setattr("orchestrator.controller.notify.BACKOFF_FIRST_S", 0.01)
    threaded = Delivery([Odd()], background=True)
    try:
        threaded.hand("r2", [b"{}"], [Odd.key])
        assert ok.wait(30), "the sink's thread did not retry after the error"
    finally:
        threaded.stop()
    got: list[Delivered] = []
    for _ in range(200):
        got += threaded.collect()
        if any(not d.error for d in got):
            break
        threading.Event().wait(0.05)
    assert got[0] == Delivered("r2", Odd.key, "ValueError", final=False) and got[-1] == Delivered("r2", Odd.key)
    assert "s3cret" not in repr(got) and threaded.pending() == {Odd.key: 0}
