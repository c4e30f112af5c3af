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


def test_the_notify_table_is_read_written_back_and_added_to(tmp_path: Path) -> None:
    """``[notify]``: the sinks of the lab's controller (issue 27, item 4), written by lab up / demo and read back;
    what an option adds keeps the file's, each sink once."""
    lab = tmp_path / ".lab"
    sinks = labfile.Notify(("https://ci.lab/hooks/x?token=s3cret",), (Path("/var/log/storagelab/runs.jsonl"),),
                           ("https://hooks.slack.com/services/T0/B0/XXXX",))
    path = labfile.write(lab, broker=None, store=None, notify=sinks, by="labctl lab up")
    assert oct(path.stat().st_mode & 0o777) == "0o600"          # a chat webhook's URL is its secret
    assert labfile.read(path).notify == sinks
    more = labfile.Notify(("https://ci.lab/hooks/x?token=s3cret", "http://127.0.0.1:9/h"), (Path("/tmp/b.jsonl"),))
    both = labfile.sinks_with(lab, more, "labctl lab up")
    assert both.webhook == ("https://ci.lab/hooks/x?token=s3cret", "http://127.0.0.1:9/h")
    assert both.file == (Path("/var/log/storagelab/runs.jsonl"), Path("/tmp/b.jsonl")) and both.chat == sinks.chat
    assert labfile.sinks_with(tmp_path / "none", labfile.Notify(), "labctl demo") == labfile.Notify()
    assert not labfile.read(labfile.write(tmp_path / "plain", broker=None, store="sqlite:///x")).notify


def test_a_bad_notify_table_is_refused_with_every_problem_and_no_url_repeated(tmp_path: Path) -> None:
    bad = tmp_path / "lab.toml"
    secret = "https://hooks.slack.com/services/T0/B0/s3cret"
    bad.write_text(
        'store = "sqlite:///x"\n[notify]\n'
        f'webhook = ["ftp://files.lab/x", "{secret} with space", 3, ""]\n'
        'file = ["relative/runs.jsonl", "/ok.jsonl"]\n'
        f'chat = "{secret}"\n'
        'mail = ["ops@lab"]\n')
    with pytest.raises(ConfigError) as e:
        labfile.read(bad)
    msg = str(e.value)
    assert msg.startswith(f"{bad}: ")
    for problem in ("notify.webhook[0]: not an http(s) URL with a host",
                    "notify.webhook[1]: holds a space or a control character",
                    "notify.webhook[2]: expected a string, got int", "notify.webhook[3]: empty",
                    "notify.file[0]: not an absolute path", "notify.chat: expected a list of strings, got str",
                    "notify.mail: unknown key (known: webhook, file, chat)"):
        assert problem in msg, msg
    assert "s3cret" not in msg and "files.lab" not in msg
    bad.write_text("[notify]\nwebhook = [" + ", ".join(f'"http://h{i}.lab/"' for i in range(17)) + "]\n")
    with pytest.raises(ConfigError, match=r"notify\.webhook: 17 entries, at most 16"):
        labfile.read(bad)
    bad.write_text('notify = "http://x/"\n')
    with pytest.raises(ConfigError, match=r"notify: expected a table \(\[notify\]\), got str"):
        labfile.read(bad)
    bad.write_text('[notify]\nwebhook = ["http://h.lab:99999/x", "https://h.lab/caf\u00e9"]\nfile = ["/a\\u0007b"]\n')
    with pytest.raises(ConfigError) as e:
        labfile.read(bad)
    assert "notify.webhook[0]: not a URL" in str(e.value)
    assert "notify.webhook[1]: holds a character that is not ASCII (percent-encode it)" in str(e.value)
    assert "notify.file[0]: holds a control character" in str(e.value)


def test_sinks_given_as_options_are_checked_as_the_files_are(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as e:
        labfile.sinks_with(tmp_path, labfile.Notify(("file:///etc/passwd",), (Path("rel.jsonl"),)), "labctl lab up")
    assert "--notify-webhook[0]: not an http(s) URL with a host" in str(e.value)
    assert "--notify-file[0]: not an absolute path" in str(e.value) and str(e.value).startswith("labctl lab up: ")
    labfile.write(tmp_path, broker=None, store=None,
                  notify=labfile.Notify(tuple(f"http://h{i}.lab/" for i in range(16))))
    with pytest.raises(ConfigError, match="--notify-webhook: 17 sinks with the lab file's, at most 16"):
        labfile.sinks_with(tmp_path, labfile.Notify(("http://one-more.lab/",)), "labctl demo")


def test_the_controller_of_a_lab_delivers_to_its_lab_file_sinks_and_its_options_unless_told_not_to(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``labctl controller`` finds the lab file as every labctl command does: its [notify] sinks and the --notify-*
    options, each once, the origin of each recorded; --no-lab-notify ignores the file's."""
    import orchestrator.cmd.controller as controller_cmd

    lab = tmp_path / ".lab"
    labfile.write(lab, broker=None, store=f"sqlite:///{lab / 'store.sqlite'}",
                  notify=labfile.Notify(("https://ci.lab/h?token=s3cret",), (Path("/tmp/lab.jsonl"),)))
    got: list[dict[str, object]] = []
    monkeypatch.setattr(controller_cmd, "main", lambda *a, **kw: got.append(kw))
    monkeypatch.chdir(tmp_path)
    for var in ("LAB_DIR", "LAB_BROKER_URL", "LAB_STORE_URL", "LAB_API_URL"):
        monkeypatch.delenv(var, raising=False)
    res = runner.invoke(app, ["controller", "--notify-file", "rel.jsonl", "--notify-webhook",
                              "https://ci.lab/h?token=s3cret"])
    assert res.exit_code == 0, res.output
    assert got[-1]["lab_notify"] == labfile.Notify(("https://ci.lab/h?token=s3cret",), (Path("/tmp/lab.jsonl"),))
    assert got[-1]["lab_file"] == lab / "lab.toml"
    notifier = controller_cmd.notifier_of(
        labfile.Notify(got[-1]["notify_webhooks"], tuple(Path(p).absolute() for p in got[-1]["notify_files"]),  # type: ignore[arg-type]
                       ()), got[-1]["lab_notify"], lab / "lab.toml")  # type: ignore[arg-type]
    assert notifier.webhooks == ["https://ci.lab/h?token=s3cret"]              # once
    assert notifier.files == [Path("/tmp/lab.jsonl"), tmp_path / "rel.jsonl"] and notifier.background
    assert sorted(notifier.origins.values()) == ["lab file", "lab file", "option"]
    assert notifier.origins[f"file:{tmp_path / 'rel.jsonl'}"] == "option"
    res = runner.invoke(app, ["controller", "--no-lab-notify"])
    assert res.exit_code == 0 and got[-1]["lab_notify"] == labfile.Notify()
    with pytest.raises(SystemExit) as stop:
        controller_cmd.notifier_of(labfile.Notify(("ftp://x/",), (Path("/a\x01"),)), labfile.Notify(), None)
    assert stop.value.code == 2


def test_lab_up_refuses_bad_sinks_before_starting_anything(tmp_path: Path) -> None:
    """``lab up --notify-*``: every problem of the sinks given, named before a process starts; not for --vms."""
    res = runner.invoke(app, ["lab", "up", "--lab-dir", str(tmp_path / "lab"), "--notify-webhook", "ftp://x/s3cret",
                              "--notify-chat", "https://chat.lab/\u00e9"])
    assert res.exit_code == 1 and "s3cret" not in res.output, res.output
    assert "--notify-webhook[0]: not an http(s) URL with a host" in res.output
    assert "--notify-chat[0]: holds a character that is not ASCII" in res.output
    assert not (tmp_path / "lab" / "redis").exists()
    res = runner.invoke(app, ["lab", "up", "--vms", "2", "--lab-dir", str(tmp_path / "vm"), "--notify-file", "/x"])
    assert res.exit_code == 2 and "--notify-* is not for --vms" in res.output
