"""End-of-run notifications: a JSON body POSTed to webhooks and appended to files (one JSON per line).

Delivery is driven from the store and never holds the controller's loop: a run that ended and has no
``notified_at`` gets its bodies built once (its history judged once), handed to each sink that has not taken it
yet (``runs.notified_sinks``, by sink key), and marked ``notified_at`` once every sink took it. Each sink delivers
from a thread of its own (:class:`Delivery`): a sink that fails is retried with exponential backoff (1 s doubling up
to 5 minutes) while the others go on, and the loop only writes down what the threads report. So a sink sees a run
at least once, a file sink never twice (short of a crash between its write and the store's commit), and a hanging
webhook costs the loop nothing. A controller restart loses none: what was not delivered is still due.

A run that came from a schedule (a nightly) is judged against its history when it is notified
(:func:`orchestrator.stats.history.regressions_for_run`): its ``run.ended`` body carries ``"regressions"``
(unacknowledged, possibly empty) and, when there are some, a second body ``"event": "run.regressed"`` goes to
the same sinks, before the run is marked notified (the same at-least-once delivery).

A sink is named in logs and in the store by its key (``file:<path>``, ``webhook:<12 hex digits of the URL's
SHA-256>``) and a label (a webhook's scheme and host only): a webhook URL often holds its token. Each attempt is
reported back to the loop, which keeps every sink's delivery state in the store (``notify_sinks``, schema 0017,
:mod:`orchestrator.controller.sinkstate`): the web service and ``labctl notifications`` list it.

The sinks come from the controller's ``--notify-*`` options and from the ``[notify]`` table of its lab's file
(orchestrator.labfile), each sink once; :attr:`Notifier.origins` says which.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import queue
import threading
import urllib.request
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

from orchestrator.store.models import Result, Run

log = logging.getLogger(__name__)


def payload(run: Run, results: dict[str, Result]) -> dict[str, Any]:
    counts: dict[str, int] = {}
    for st in run.steps:
        counts[st.state.lower()] = counts.get(st.state.lower(), 0) + 1
    failed = [{"step": st.name, "reason": st.reason} for st in run.steps if st.state == "FAILED"]
    cells = [{"step": st.name, "iops": r.iops, "bw_bytes": r.bw_bytes, "lat_mean_us": (r.lat_mean_ns or 0) / 1e3,
              "lat_max_us": (r.lat_max_ns or 0) / 1e3, "lat_stddev_us": (r.lat_stddev_ns or 0) / 1e3}
             for st in run.steps if st.kind == "measure" and (r := results.get(st.id)) is not None]
    return {"event": "run.ended", "run": run.id, "suite": run.suite_name, "host": run.host,
            "devices": run.devices or [run.device], "state": run.state, "reason": run.reason,
            "submitted_at": run.submitted_at, "started_at": run.started_at, "ended_at": run.ended_at,
            "steps": counts, "failed_steps": failed, "results": cells}


def from_schedule(run: Run) -> str | None:
    """The schedule a run came from (a nightly), else None."""
    by = run.submitted_by or ""
    return by.removeprefix("schedule:") if by.startswith("schedule:") else None


def regressed_payload(run: Run, regressions: list[dict[str, Any]]) -> dict[str, Any]:
    """The second body sent when a scheduled run regressed against its history (orchestrator.stats.history)."""
    return {"event": "run.regressed", "run": run.id, "suite": run.suite_name, "host": run.host,
            "devices": run.devices or [run.device], "schedule": from_schedule(run), "state": run.state,
            "started_at": run.started_at, "ended_at": run.ended_at, "regressions": regressions}


class Sink(Protocol):
    key: str      # stable, secret-free: what runs.notified_sinks records
    label: str    # what logs say
    kind: str     # file | webhook | chat
    target: str   # secret-free: a file's path, a webhook's scheme://host/…

    def deliver(self, data: bytes) -> None:
        """Deliver one body; OSError when it did not arrive."""
        ...


class FileSink:
    kind = "file"

    def __init__(self, path: Path) -> None:
        self.path = path
        self.key = self.label = f"file:{path}"
        self.target = str(path)

    def deliver(self, data: bytes) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("ab") as f:
            f.write(data + b"\n")
            f.flush()
            os.fsync(f.fileno())


class WebhookSink:
    kind = "webhook"

    def __init__(self, url: str, timeout_s: float) -> None:
        self.url, self.timeout_s = url, timeout_s
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"--notify-{self.kind}: not an http(s) URL with a host")
        self.key = f"{self.kind}:" + hashlib.sha256(url.encode()).hexdigest()[:12]
        self.target = f"{parts.scheme}://{parts.hostname}/…"
        self.label = f"{self.kind} {self.target} ({self.key})"

    def body(self, data: bytes) -> bytes:
        return data

    def deliver(self, data: bytes) -> None:
        req = urllib.request.Request(self.url, data=self.body(data), method="POST",
                                     headers={"Content-Type": "application/json",
                                              "User-Agent": "storagelab-controller"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                if not 200 <= resp.status < 300:
                    raise OSError(f"answered {resp.status}")
        except OSError as e:      # (urllib's errors may name the URL, which holds a token: never repeat it)
            raise OSError(str(getattr(e, "reason", None) or getattr(e, "code", None) or e.strerror or
                              type(e).__name__)) from None


class ChatSink(WebhookSink):
    """A chat's incoming webhook (Slack, Mattermost, Rocket.Chat, Google Chat, a Teams connector): ``{"text": ...}``,
    one line a person reads (:func:`chat_text`), where the raw JSON body is refused by the chat."""

    kind = "chat"

    def body(self, data: bytes) -> bytes:
        return json.dumps({"text": chat_text(json.loads(data))}).encode()


def chat_text(body: dict[str, Any]) -> str:
    """``storagelab: run r… (suite nightly, h1:/dev/nvme0n1) SUCCEEDED: 12 steps succeeded`` and, for a nightly, its
    history line; a regression body lists each regression's cell, metric and change."""
    where = f"{body.get('host')}:{','.join(str(d) for d in body.get('devices') or [])}"
    head = f"storagelab: run {body.get('run')} (suite {body.get('suite')}, {where})"
    if body.get("event") == "run.regressed":
        regs = body.get("regressions") or []
        lines = [f"{head} REGRESSED against its history ({len(regs)}):"]
        for r in regs[:10]:
            if isinstance(r, dict):
                pct = r.get("change_pct")
                lines.append(f"- {r.get('cell', '?')} {r.get('metric', '?')}"
                             + (f" {pct:+.1f}%" if isinstance(pct, int | float) else ""))
        if len(regs) > 10:
            lines.append(f"- and {len(regs) - 10} more")
        return "\n".join(lines)
    steps = body.get("steps") or {}
    counts = ", ".join(f"{n} {state}" for state, n in sorted(steps.items())) if isinstance(steps, dict) else ""
    text = f"{head} {body.get('state')}" + (f": {counts}" if counts else "")
    if body.get("reason"):
        text += f" ({body['reason']})"
    failed = body.get("failed_steps") or []
    if failed:
        text += "\nfailed: " + "; ".join(f"{f.get('step')}: {f.get('reason')}" for f in failed[:5]
                                         if isinstance(f, dict))
    if body.get("history"):
        text += f"\n{body['history']}"
    return text


class Notifier:
    def __init__(self, webhooks: list[str] | None = None, files: list[Path] | None = None,
                 timeout_s: float = 3.0, *, background: bool = False, chats: list[str] | None = None,
                 origins: dict[str, str] | None = None) -> None:
        self.webhooks = list(webhooks or [])
        self.chats = list(chats or [])
        self.files = list(files or [])
        self.timeout_s = timeout_s
        self.background = background    # the daemon's: each sink from a thread (Delivery); else pass by pass
        self.origins = dict(origins or {})  # sink key -> where it was configured ("lab file", "option")

    @property
    def enabled(self) -> bool:
        return bool(self.webhooks or self.files or self.chats)

    def sinks(self) -> list[Sink]:
        """Every sink; ValueError for a URL that is not http(s) (the daemon checks at its start)."""
        return [*(FileSink(p) for p in self.files), *(WebhookSink(u, self.timeout_s) for u in self.webhooks),
                *(ChatSink(u, self.timeout_s) for u in self.chats)]

    def send(self, body: dict[str, Any]) -> None:
        """Deliver to every sink now; raise on the first that fails."""
        data = encode(body)
        for sink in self.sinks():
            sink.deliver(data)


def encode(body: dict[str, Any]) -> bytes:
    return json.dumps(body, sort_keys=True).encode()


@dataclass(frozen=True)
class Delivered:
    """What a sink reports of one attempt: ``run`` delivered (``error`` empty) or not. ``final``: the run is no
    longer in the sink's hands (delivered, or in step mode failed and handed again later); a failed attempt of a
    sink's thread is not final (the thread retries it)."""

    run: str
    sink: str
    error: str = ""
    final: bool = True


BACKOFF_FIRST_S, BACKOFF_MAX_S = 1.0, 300.0


class Delivery:
    """Each sink's deliveries, in order, from a thread of its own (``background``), retried with exponential backoff;
    or, with ``background=False`` (tests that drive the controller pass by pass), in the calling thread, once per
    hand-over. The loop hands runs over with :meth:`hand` and collects what arrived with :meth:`collect`."""

    def __init__(self, sinks: list[Sink], *, background: bool = True) -> None:
        self.sinks = {s.key: s for s in sinks}
        self.background = background
        self._done: queue.Queue[Delivered] = queue.Queue()
        self._queues: dict[str, queue.Queue[tuple[str, list[bytes]] | None]] = {}
        self._threads: list[threading.Thread] = []
        self.in_flight: dict[str, set[str]] = {}       # run -> sinks it is handed to and not reported back
        self._stop = threading.Event()
        if background:
            for key, sink in self.sinks.items():
                q: queue.Queue[tuple[str, list[bytes]] | None] = queue.Queue()
                self._queues[key] = q
                t = threading.Thread(target=self._serve, args=(sink, q), name=f"notify {key}", daemon=True)
                t.start()
                self._threads.append(t)

    def hand(self, run: str, bodies: list[bytes], sinks: list[str]) -> None:
        self.in_flight.setdefault(run, set()).update(sinks)
        for key in sinks:
            if self.background:
                self._queues[key].put((run, bodies))
            else:
                self._done.put(self._once(self.sinks[key], run, bodies))

    def collect(self) -> list[Delivered]:
        out: list[Delivered] = []
        while True:
            try:
                d = self._done.get_nowait()
            except queue.Empty:
                return out
            left = self.in_flight.get(d.run) if d.final else None
            if left is not None:
                left.discard(d.sink)
                if not left:
                    del self.in_flight[d.run]
            out.append(d)

    def pending(self) -> dict[str, int]:
        """Per sink, the runs handed to it and not delivered yet."""
        counts = dict.fromkeys(self.sinks, 0)
        for sinks in self.in_flight.values():
            for key in sinks:
                counts[key] = counts.get(key, 0) + 1
        return counts

    def stop(self) -> None:
        self._stop.set()
        for q in self._queues.values():
            q.put(None)

    @staticmethod
    def _once(sink: Sink, run: str, bodies: list[bytes]) -> Delivered:
        try:
            for data in bodies:
                sink.deliver(data)
        except OSError as e:
            log.warning("notification of run %s to %s failed: %s", run, sink.label, e, extra={"run": run})
            return Delivered(run, sink.key, str(e) or type(e).__name__)
        except Exception as e:   # never the end of a sink's thread; its message may name the URL: only its type
            log.warning("notification of run %s to %s failed: %s", run, sink.label, type(e).__name__,
                        extra={"run": run})
            return Delivered(run, sink.key, type(e).__name__)
        return Delivered(run, sink.key)

    def _serve(self, sink: Sink, q: queue.Queue[tuple[str, list[bytes]] | None]) -> None:
        while not self._stop.is_set():
            item = q.get()
            if item is None:
                return
            run, bodies = item
            wait = BACKOFF_FIRST_S
            while not self._stop.is_set():
                d = self._once(sink, run, bodies)
                if not d.error:
                    self._done.put(d)
                    break
                self._done.put(replace(d, final=False))      # its state is shown; the run stays in flight
                log.info("run %s to %s: retried in %.0f s", run, sink.label, wait, extra={"run": run})
                if self._stop.wait(wait):
                    return
                wait = min(wait * 2, BACKOFF_MAX_S)
