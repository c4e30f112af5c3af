"""The lab file: where a lab's pieces are, left by ``make demo`` (``labctl demo``) and ``labctl lab up`` in the lab's
directory, so that a plain ``labctl runs`` afterwards looks at that lab, as git finds its repository.

``<lab dir>/lab.toml``::

    # written by labctl lab up
    lab_dir = "/work/storagelab/.lab"
    broker = "redis://labctl@127.0.0.1:40123/0?password_file=/work/storagelab/.lab/secrets/labctl.pass"
    store = "sqlite:////work/storagelab/.lab/store.sqlite"
    api = "http://127.0.0.1:8080"                # lab up only
    token_file = "/tmp/storagelab-lab-x/web/admin.token"

    [notify]                                     # the lab's end-of-run notifications (optional)
    webhook = ["https://ci.lab/hooks/storagelab"]
    file = ["/var/log/storagelab/runs.jsonl"]
    chat = ["https://hooks.slack.com/services/T0/B0/XXXX"]

``[notify]`` names where the controller started for this lab (``labctl controller`` finding this file, the one
``labctl lab up`` and ``labctl demo`` start) sends a run's end, beside its ``--notify-*`` options (orchestrator.
controller.notify; ``--no-lab-notify`` ignores the file's): at most :data:`MAX_SINKS` of each, URLs http(s) with a
host, file paths absolute. A chat's webhook URL is its secret: the file is mode 600 and no error repeats a URL.

No broker secret is written in it: a broker URL names its password *file* (labcontract.brokerauth). How labctl finds it
(:func:`find`): ``--lab-dir`` / ``LAB_DIR`` given: that directory's; else the nearest ``.lab/lab.toml`` from the current
directory upwards (``make demo`` runs the lab in the checkout's ``.lab``). An option or environment variable given
beats the file, key by key; the file beats the built-in defaults.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from labcontract.errors import ConfigError

NAME = "lab.toml"
DIR = ".lab"                  # where make demo keeps its lab, found from the current directory upwards
MAX_BYTES = 64 << 10
TEXT_KEYS = ("broker", "store", "api")
PATH_KEYS = ("lab_dir", "token_file")
NOTIFY = "notify"
NOTIFY_KEYS = ("webhook", "file", "chat")       # the controller's --notify-webhook, --notify-file, --notify-chat
MAX_SINKS = 16                                  # of each kind
MAX_URL = 2048
MAX_PATH = 4096


@dataclass(frozen=True)
class Notify:
    """The lab's notification sinks (the ``[notify]`` table), each list in its file's order, without repeats."""

    webhook: tuple[str, ...] = ()
    file: tuple[Path, ...] = ()
    chat: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.webhook or self.file or self.chat)

    def plus(self, other: Notify) -> Notify:
        """These sinks and ``other``'s (each once, these first)."""
        return Notify(tuple(dict.fromkeys((*self.webhook, *other.webhook))),
                      tuple(dict.fromkeys((*self.file, *other.file))),
                      tuple(dict.fromkeys((*self.chat, *other.chat))))


@dataclass(frozen=True)
class LabFile:
    path: Path
    lab_dir: Path | None = None
    broker: str | None = None
    store: str | None = None
    api: str | None = None
    token_file: Path | None = None
    notify: Notify = field(default_factory=Notify)


def find(cwd: Path, lab_dir: Path | None) -> Path | None:
    """The lab file labctl uses: ``lab_dir``'s when a lab directory is given, else the nearest ``.lab/lab.toml`` from
    ``cwd`` upwards; None when there is none."""
    if lab_dir is not None:
        path = lab_dir / NAME
        return path if path.is_file() else None
    for d in (cwd, *cwd.parents):
        path = d / DIR / NAME
        if path.is_file():
            return path
    return None


def read(path: Path) -> LabFile:
    """The lab file at ``path``; ConfigError naming the file and every key that is wrong."""
    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise ConfigError(str(path), "(file)", f"{size} bytes, over the {MAX_BYTES} of a lab file")
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(str(path), "(file)", f"cannot be read: {e.strerror or e}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(str(path), "(file)", f"not TOML: {e}") from None
    known = (*PATH_KEYS, *TEXT_KEYS, NOTIFY)
    problems = [f"{k}: unknown key (known: {', '.join(known)})" for k in doc if k not in known]
    problems += [f"{k}: expected a string, got {type(v).__name__}" for k, v in doc.items()
                 if k in (*TEXT_KEYS, *PATH_KEYS) and (not isinstance(v, str) or not v or len(v) > 4096)]
    notify, notify_problems = parse_notify(doc.get(NOTIFY, {}))
    problems += notify_problems
    if problems:
        raise ConfigError(str(path), "; ".join(p.split(":")[0] for p in problems), "; ".join(problems))
    paths = {k: Path(doc[k]) for k in PATH_KEYS if k in doc}
    return LabFile(path, paths.get("lab_dir"), doc.get("broker"), doc.get("store"), doc.get("api"),
                   paths.get("token_file"), notify)


def url_problem(url: str) -> str | None:
    """Why ``url`` cannot be a notification webhook (never repeating it: it may hold a token), else None."""
    if len(url) > MAX_URL:
        return f"longer than {MAX_URL} characters"
    if any(ord(c) < 0x21 or ord(c) == 0x7F for c in url):
        return "holds a space or a control character"
    if not url.isascii():
        return "holds a character that is not ASCII (percent-encode it)"
    try:
        parts = urlsplit(url)
        parts.port         # noqa: B018 (a port out of range raises)
    except ValueError:
        return "not a URL"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "not an http(s) URL with a host"
    return None


def path_problem(value: str) -> str | None:
    if len(value) > MAX_PATH:
        return f"longer than {MAX_PATH} characters"
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        return "holds a control character"
    if not Path(value).is_absolute():
        return "not an absolute path"
    return None


def parse_notify(table: Any) -> tuple[Notify, list[str]]:
    """The ``[notify]`` table and every problem of it (``notify.webhook[1]: not an http(s) URL with a host``)."""
    if not isinstance(table, dict):
        return Notify(), [f"{NOTIFY}: expected a table ([notify]), got {type(table).__name__}"]
    problems = [f"{NOTIFY}.{k}: unknown key (known: {', '.join(NOTIFY_KEYS)})" for k in table
                if k not in NOTIFY_KEYS]
    got: dict[str, list[str]] = {}
    for key in NOTIFY_KEYS:
        values = table.get(key, [])
        where = f"{NOTIFY}.{key}"
        if not isinstance(values, list):
            problems.append(f"{where}: expected a list of strings, got {type(values).__name__}")
            continue
        if len(values) > MAX_SINKS:
            problems.append(f"{where}: {len(values)} entries, at most {MAX_SINKS}")
        check = path_problem if key == "file" else url_problem
        for i, v in enumerate(values[:MAX_SINKS + 1]):
            why = f"expected a string, got {type(v).__name__}" if not isinstance(v, str) else \
                "empty" if not v else check(v)
            if why is not None:
                problems.append(f"{where}[{i}]: {why}")
        got[key] = [v for v in values if isinstance(v, str)]
    if problems:
        return Notify(), problems
    return Notify(tuple(dict.fromkeys(got["webhook"])), tuple(dict.fromkeys(Path(p) for p in got["file"])),
                  tuple(dict.fromkeys(got["chat"]))), []


def notify_problems(notify: Notify, where: str = "--notify") -> list[str]:
    """The problems of sinks given as options (``--notify-webhook[0]: ...``), checked as the file's are."""
    _got, problems = parse_notify({"webhook": list(notify.webhook), "file": [str(p) for p in notify.file],
                                   "chat": list(notify.chat)})
    return [p.replace(f"{NOTIFY}.", f"{where}-", 1) for p in problems]


def sinks_with(lab_dir: Path, given: Notify, by: str) -> Notify:
    """The ``[notify]`` sinks of ``lab_dir``'s lab file (if it has one) and ``given`` (options of ``by``, checked as
    the file's are): what ``by`` writes into the lab file it leaves. ConfigError with every problem."""
    problems = notify_problems(given)
    if problems:
        raise ConfigError(by, "; ".join(p.split(":")[0] for p in problems), "; ".join(problems))
    path = lab_dir / NAME
    both = (read(path).notify if path.is_file() else Notify()).plus(given)
    over = [f"--notify-{k}: {n} sinks with the lab file's, at most {MAX_SINKS}" for k, n in (
        ("webhook", len(both.webhook)), ("file", len(both.file)), ("chat", len(both.chat))) if n > MAX_SINKS]
    if over:
        raise ConfigError(f"{by} ({path})", "; ".join(o.split(":")[0] for o in over), "; ".join(over))
    return both


def write(lab_dir: Path, *, broker: str | None, store: str | None, api: str | None = None,
          token_file: Path | None = None, notify: Notify | None = None, by: str = "labctl") -> Path:
    """Write ``<lab_dir>/lab.toml`` (mode 600: a broker URL written by hand may hold a password, a chat webhook
    its token) atomically, with ``notify`` as its ``[notify]`` table."""
    def q(v: str) -> str:
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'

    lines = [f"# written by {by}; labctl run from here (or with LAB_DIR={lab_dir}) uses this lab",
             f"lab_dir = {q(str(lab_dir))}"]
    for key, value in (("broker", broker), ("store", store), ("api", api),
                       ("token_file", None if token_file is None else str(token_file))):
        if value:
            lines.append(f"{key} = {q(value)}")
    if notify:
        lines += ["", f"[{NOTIFY}]      # where the controller of this lab sends the end of each run"]
        for key, values in (("webhook", notify.webhook), ("file", [str(p) for p in notify.file]),
                            ("chat", notify.chat)):
            if values:
                lines.append(f"{key} = [{', '.join(q(v) for v in values)}]")
    path, tmp = lab_dir / NAME, lab_dir / f".{NAME}.tmp"
    lab_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, path)
    return path
