"""labctl finds its lab the way git finds its repository (issue 27: after ``make demo``, ``labctl runs`` said the
store at ~/.storagelab had no schema yet; the demo wrote to ./.lab): the lab file ``lab.toml`` that ``labctl demo`` and
``labctl lab up`` leave, found from the current directory upwards or in ``--lab-dir`` / ``LAB_DIR``; an option given
beats it key by key; a bad file is refused naming the file and every bad key."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from labcontract.errors import ConfigError
from orchestrator import labfile
from orchestrator.cmd.labctl import app
from orchestrator.labctl.common import State
from orchestrator.store.db import make_engine, migrate

runner = CliRunner()


def test_written_then_found_from_a_subdirectory_and_read_back(tmp_path: Path) -> None:
    lab = tmp_path / "checkout" / ".lab"
    path = labfile.write(lab, broker='redis://labctl@127.0.0.1:6399/0?password_file=/x/"q".pass',
                         store=f"sqlite:///{lab / 'store.sqlite'}", by="labctl demo")
    assert path == lab / "lab.toml" and oct(path.stat().st_mode & 0o777) == "0o600"
    deep = tmp_path / "checkout" / "docs" / "sub"
    deep.mkdir(parents=True)
    assert labfile.find(deep, None) == path and labfile.find(tmp_path, None) is None
    assert labfile.find(deep, tmp_path / "other") is None           # a lab dir given: only its own file
    got = labfile.read(path)
    assert got.broker == 'redis://labctl@127.0.0.1:6399/0?password_file=/x/"q".pass'
    assert got.store == f"sqlite:///{lab / 'store.sqlite'}" and got.lab_dir == lab and got.api is None


def test_a_bad_lab_file_is_refused_naming_the_file_and_every_bad_key(tmp_path: Path) -> None:
    bad = tmp_path / "lab.toml"
    bad.write_text('brokr = "redis://x"\nstore = 3\n')
    with pytest.raises(ConfigError) as e:
        labfile.read(bad)
    assert str(bad) in str(e.value) and "brokr: unknown key" in str(e.value)
    assert "store: expected a string" in str(e.value)
    bad.write_text("broker = \n")
    with pytest.raises(ConfigError, match="not TOML"):
        labfile.read(bad)


def test_labctl_uses_the_lab_file_found_upwards_and_an_option_beats_it(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    lab = tmp_path / "checkout" / ".lab"
    store = f"sqlite:///{lab / 'store.sqlite'}"
    lab.mkdir(parents=True)
    migrate(make_engine(store))
    labfile.write(lab, broker="redis://labctl@127.0.0.1:6399/0", store=store)
    (tmp_path / "checkout" / "docs").mkdir()
    monkeypatch.chdir(tmp_path / "checkout" / "docs")
    for var in ("LAB_DIR", "LAB_BROKER_URL", "LAB_STORE_URL", "LAB_API_URL"):
        monkeypatch.delenv(var, raising=False)
    res = runner.invoke(app, ["runs"])
    assert res.exit_code == 0, res.output
    assert State.config.store_url == store and State.config.lab_dir == lab
    assert State.config.broker_url.startswith("redis://labctl@127.0.0.1:6399/0")
    other = f"sqlite:///{tmp_path / 'other.sqlite'}"
    res = runner.invoke(app, ["--store", other, "--broker", "redis://127.0.0.1:1/0", "runs"])
    assert State.config.store_url == other and State.config.broker_url.startswith("redis://127.0.0.1:1/0")
    assert State.config.lab_dir == lab
    (lab / "lab.toml").write_text("store = 1\n")
    res = runner.invoke(app, ["runs"])
    assert res.exit_code == 2 and f"{lab / 'lab.toml'}" in res.output and "store: expected a string" in res.output
    assert os.environ.get("LAB_DIR") is None
