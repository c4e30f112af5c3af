"""The controller's intake: every agent event and CLI command it reads, decoded and applied in isolation.

Streams (protocol 5): each agent appends only to its own ``lab:events:<host>`` (its Redis ACL user can
write no other), so an event's host is its stream's; CLI commands arrive on ``lab:commands``. The
controller reads them all through one consumer group, found by SCAN and from the hosts the store
knows, and recreates groups and streams when Redis answers NOGROUP (a Redis restarted empty).

Poison-proof: an entry that cannot be decoded, is refused (wrong host, not the attempt running there,
another protocol version, too large...) or fails to apply for a reason of its own goes to the dead-letter
stream with the reason, and is acknowledged and deleted; the loop goes on. Transient faults (Redis down,
the store locked or full) are not data: they propagate (see :func:`transient`), nothing is acknowledged,
and the pass is replayed from the pending entries once the fault is gone.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol

import redis
from sqlalchemy import select
from sqlalchemy.orm import Session

from labcontract.errors import ProtocolError
from labcontract.protocol import (
    COMMANDS_STREAM,
    DEADLETTER_STREAM,
    EVENTS_GROUP,
    EVENTS_STREAM,
    EVENTS_STREAM_PREFIX,
    HOST_RE,
    PROTOCOL_VERSION,
    REPLY_TO_RE,
    WEB_COMMANDS_STREAM,
    OtherVersion,
    Register,
    decode_event,
    other_version_register,
    parse_json,
)
from orchestrator.controller.transient import transient_kind
from orchestrator.states import ACTIVE_STEP, TERMINAL_STEP, StepState
from orchestrator.store.models import Attempt, Host

if TYPE_CHECKING:
    from sqlalchemy.orm import sessionmaker

    from labcontract.protocol import AnyEvent


class Applier(Protocol):
    """What the intake uses of the controller (it never imports the controller, which owns it)."""

    redis: redis.Redis
    sessions: sessionmaker[Session]

    def handle_event(self, ev: AnyEvent | OtherVersion, source: str | None = None) -> None: ...

    def _apply_event(self, s: Session, ev: AnyEvent | OtherVersion, source: str | None = None) -> None: ...

    def handle_command(self, raw: str | bytes, stream: str = ...) -> None: ...

log = logging.getLogger(__name__)

CONSUMER = "controller-1"
BATCH = 32                      # entries per stream and read (with proto-max-bulk-len: a read's memory is bounded)
DEADLETTER_MAXLEN = 10_000      # approximate: the dead-letter stream keeps about this many entries
DEADLETTER_RAW_BYTES = 4096     # of a refused entry, this much is kept
DISCOVER_EVERY_S = 2.0          # SCAN for new agents' streams this often
LOG_EVERY_S = 60.0              # a refusal of one kind is logged at warning once per interval
Entry = tuple[str, dict[bytes, bytes]]
COMMAND_STREAMS = frozenset({COMMANDS_STREAM, WEB_COMMANDS_STREAM})   # labctl's, the web service's (protocol 7)


def transient(e: BaseException) -> bool:
    """A fault of the surroundings (retry later, acknowledge nothing), not of the entry being applied: Redis down
    or restarted empty, the store locked or full (orchestrator.controller.transient); WRONGTYPE on a reply key, an
    IntegrityError, a bad artifact... are the entry's own."""
    return transient_kind(e) is not None


def host_of(stream: str) -> str | None:
    """The agent a per-host events stream belongs to (None: the legacy stream or not an events stream)."""
    if not stream.startswith(EVENTS_STREAM_PREFIX):
        return None
    return stream[len(EVENTS_STREAM_PREFIX):]


def valid_reply_to(reply_to: object) -> bool:
    return isinstance(reply_to, str) and REPLY_TO_RE.fullmatch(reply_to) is not None


def salvage_reply_to(data: object) -> str | None:
    """Where to send an error about a command that could not be decoded, if it names a proper reply list."""
    reply_to = data.get("reply_to") if isinstance(data, dict) else None
    return reply_to if isinstance(reply_to, str) and valid_reply_to(reply_to) else None


def command_refusal(raw: str | bytes, e: ProtocolError) -> tuple[str, str | None]:
    """Why a command is refused (another protocol version: the error a wrong-version labctl is answered with) and
    where to answer, if the entry names a proper reply list."""
    try:
        data = parse_json(raw, "command")
    except ProtocolError:
        return str(e), None
    if isinstance(data, dict) and data.get("v") != PROTOCOL_VERSION:
        return wrong_version(data.get("v")), salvage_reply_to(data)
    return str(e), salvage_reply_to(data)


def wrong_version(v: object) -> str:
    """The error a command of another protocol version is answered with at once."""
    who = "labctl" if isinstance(v, int) and v < PROTOCOL_VERSION else "the controller"
    return (f"protocol version {repr(v)[:20]} is not spoken here; this controller speaks {PROTOCOL_VERSION} "
            f"— upgrade {who}")


def incompatible_reason(reg: OtherVersion) -> str:
    who = "agent" if reg.v < PROTOCOL_VERSION else "controller"
    return (f"agent {reg.agent_version} speaks protocol {reg.v}; this controller speaks {PROTOCOL_VERSION} "
            f"— upgrade the {who}")


def mark_incompatible(s: Session, ev: OtherVersion, now: float) -> None:
    """An agent of another protocol version: shown as such (``labctl hosts``), never dispatched to (scheduling);
    its next compatible registration clears it."""
    host = s.get(Host, ev.host)
    if host is None:
        host = Host(name=ev.host)
        s.add(host)
    reason = incompatible_reason(ev)
    if host.incompatible != reason:
        log.error("host %s is incompatible: %s; nothing is dispatched to it", ev.host, reason, extra={"host": ev.host})
        # its attempts in flight cannot report to this controller: say so where they are shown, not only in a log
        for att in s.scalars(select(Attempt).where(Attempt.host == ev.host,
                                                   Attempt.state.in_([str(x) for x in ACTIVE_STEP]))):
            att.reason = att.step.reason = f"its end cannot be received: host {ev.host} is incompatible ({reason})"
            log.error("attempt %s: %s", att.id, att.reason, extra={"run": att.step.run_id, "step": att.step.name,
                                                                   "host": ev.host})
    host.incompatible, host.agent_version, host.protocol_version, host.last_seen = reason, ev.agent_version, ev.v, now


def judge(att: Attempt | None, attempt_id: str, kind: str, source: str) -> bool:
    """Whether an agent's event about an attempt is applied: True, or False for a duplicate of what is already
    applied (changes nothing); refused (ProtocolError) unless the attempt exists, was dispatched to the host
    the event came from, and is its step's current attempt in a state where that event makes sense."""
    if att is None:
        raise ProtocolError(f"{kind} for unknown attempt {attempt_id}")
    if att.host != source:
        raise ProtocolError(f"{kind} for attempt {att.id} from host {source}; it was dispatched to {att.host}")
    attempts = att.step.attempts
    current = bool(attempts) and attempts[-1].id == att.id
    if att.state in TERMINAL_STEP:
        return kind == "step_started"          # an orphan still running: the controller stops it
    if current and kind == "step_started":
        return att.state != StepState.RUNNING  # RUNNING: a duplicate; LOST: an orphan, stopped
    if current:
        return True
    raise ProtocolError(f"{kind} for attempt {att.id} ({att.state}), which is not the current attempt of step "
                        f"{att.step.id} ({attempts[-1].id if attempts else 'none'})")


class Streams:
    """The streams the controller reads: commands, the legacy events stream and every agent's own."""

    def __init__(self, client: redis.Redis, clock: Any = time.monotonic) -> None:
        self.redis, self.clock = client, clock
        self.names: set[str] = set()
        self._scanned_at: float | None = None
        self._ignored: set[str] = set()

    def ensure(self, names: Iterable[str]) -> None:
        for name in names:
            try:
                self.redis.xgroup_create(name, EVENTS_GROUP, id="0", mkstream=True)
            except redis.ResponseError as e:
                if transient(e):
                    raise
                if "BUSYGROUP" not in str(e):       # e.g. WRONGTYPE: a key of that name that is no stream
                    if name not in self._ignored:
                        self._ignored.add(name)
                        log.warning("not reading %s: %s", name, e)
                    continue
            self.names.add(name)

    def discover(self, hosts: Callable[[], Iterable[str]], *, force: bool = False) -> None:
        """Streams of the hosts the store knows and those SCAN finds; a group on each (new ones only, unless
        ``force``: after NOGROUP every group is made again)."""
        now = self.clock()
        if not force and self._scanned_at is not None and now - self._scanned_at < DISCOVER_EVERY_S:
            return
        found = {*COMMAND_STREAMS, EVENTS_STREAM} | {EVENTS_STREAM_PREFIX + h for h in hosts() if HOST_RE.fullmatch(h)}
        for key in self.redis.scan_iter(match=EVENTS_STREAM_PREFIX + "*", count=1000, _type="stream"):
            name = key.decode(errors="replace") if isinstance(key, bytes) else str(key)
            host = host_of(name)
            if host is not None and HOST_RE.fullmatch(host) and isinstance(key, bytes) and key == name.encode():
                found.add(name)
            elif name not in self._ignored:
                self._ignored.add(name)
                log.warning("ignoring stream %r: not an agent's events stream (lab:events:<host name>)", name)
        if force:
            self.names = set()
        self.ensure(found - self.names)
        self._scanned_at = now

    def read(self, start: str, block_ms: int | None) -> list[tuple[str, list[Entry]]]:
        if not self.names:
            return []
        got: Any = self.redis.xreadgroup(EVENTS_GROUP, CONSUMER, dict.fromkeys(sorted(self.names), start),
                                         count=BATCH, block=block_ms)
        out = []
        for stream, entries in got or []:
            name = stream.decode() if isinstance(stream, bytes) else str(stream)
            out.append((name, [(i.decode() if isinstance(i, bytes) else str(i), f or {}) for i, f in entries]))
        return out

    def done(self, stream: str, ids: list[str]) -> None:
        """Acknowledged and deleted: an entry applied (or dead-lettered) is never kept."""
        self.done_many({stream: ids})

    def done_many(self, ids: dict[str, list[str]]) -> None:
        """:meth:`done` for several streams in one round trip (a pass over 200 hosts' streams)."""
        pipe = self.redis.pipeline(transaction=False)
        for stream, some in ids.items():
            if some:
                pipe.xack(stream, EVENTS_GROUP, *some)
                pipe.xdel(stream, *some)
        pipe.execute()


def raw_client(client: redis.Redis) -> redis.Redis:
    """The same connection settings, without decoding: an entry that is not UTF-8 must reach the dead-letter
    stream, not break the read of every entry with it."""
    pool = client.connection_pool
    kwargs = {**pool.connection_kwargs, "decode_responses": False}
    return redis.Redis(connection_pool=redis.ConnectionPool(connection_class=pool.connection_class, **kwargs))


class Intake:
    """Reads and applies the controller's streams (see the module doc)."""

    def __init__(self, ctl: Applier) -> None:
        self.ctl = ctl
        self._streams: Streams | None = None
        self._replay = False                     # a pass failed transiently: read the pending entries again
        self._logged: dict[str, float] = {}
        self.dead_lettered = 0

    @property
    def streams(self) -> Streams:
        if self._streams is None:
            self._streams = Streams(raw_client(self.ctl.redis))
        return self._streams

    def known_hosts(self) -> list[str]:
        with self.ctl.sessions() as s:
            return list(s.scalars(select(Host.name)))

    def setup(self) -> None:
        self.streams.discover(self.known_hosts, force=True)
        self.drain(pending=True)

    def drain(self, *, pending: bool, block_ms: int | None = None) -> None:
        self.streams.discover(self.known_hosts)
        if self._replay and not pending:
            self.drain(pending=True)
        start = "0" if pending else ">"
        while True:
            try:
                batches = self.streams.read(start, None if pending else block_ms)
            except redis.ResponseError as e:
                if not str(e).startswith(("NOGROUP", "WRONGTYPE", "UNBLOCKED")):
                    raise
                log.warning("a stream or its consumer group is gone (redis restarted empty?): %s; making them "
                            "again", str(e)[:200])
                self.streams.discover(self.known_hosts, force=True)
                return
            got = sum(len(entries) for _stream, entries in batches)
            self._replay = True
            self.events([(stream, entries) for stream, entries in batches
                         if stream not in COMMAND_STREAMS and entries])
            for stream, entries in batches:
                if stream in COMMAND_STREAMS:
                    for entry in entries:
                        self.command(stream, entry)
            self._replay = False
            if not got or not pending:
                return

    # --- events ----------------------------------------------------------------------------------------

    def decode(self, stream: str, fields: dict[bytes, bytes]) -> Any:
        """An event fit to apply (or an OtherVersion register); ProtocolError for anything refused."""
        raw = _data(fields)
        source = host_of(stream)
        try:
            ev = decode_event(raw)
        except ProtocolError as e:
            other = other_version_register(raw) if e.got_version is not None else None
            if other is not None and (source is None or other.host == source):
                return other
            raise
        if source is None:
            raise ProtocolError(f"event on the legacy stream {EVENTS_STREAM}: protocol {PROTOCOL_VERSION} agents "
                                f"append to {EVENTS_STREAM_PREFIX}<host>")
        if ev.host != source:
            raise ProtocolError(f"event of host {ev.host!r} on the stream of host {source!r} (an agent reports "
                                "only for itself)")
        return ev

    def events(self, batches: list[tuple[str, list[Entry]]]) -> None:
        """Every host's events of one read in one transaction (heartbeats of 200 hosts cost one commit); should it
        fail, each event is applied alone, so a failure is that event's only. Refused entries are dead-lettered;
        all are acknowledged and deleted once applied (nothing, on a transient fault)."""
        good: list[tuple[str, Entry, Any]] = []
        for stream, entries in batches:
            for entry in entries:
                try:
                    ev = self.decode(stream, entry[1])
                except Exception as e:
                    if transient(e):
                        raise
                    self.dead_letter(stream, entry, e)
                    continue
                good.append((stream, entry, ev))
        try:
            with self.ctl.sessions.begin() as s:
                for stream, _entry, ev in good:
                    self.ctl._apply_event(s, ev, host_of(stream))
        except Exception as e:
            if transient(e):
                raise
            if len(good) > 1:
                log.info("a batch of %d events failed (%s); applying them one by one", len(good), e)
            for stream, entry, ev in good:
                try:
                    self.ctl.handle_event(ev, host_of(stream))
                except Exception as e1:
                    if transient(e1):
                        raise
                    self.dead_letter(stream, entry, e1)
                    continue
                self._applied([(stream, entry, ev)])
            return
        self._applied(good)

    def _applied(self, applied: list[tuple[str, Entry, Any]]) -> None:
        ids: dict[str, list[str]] = {}
        for stream, entry, ev in applied:
            if isinstance(ev, OtherVersion):       # recorded on the host; the entry itself is not applied
                self.dead_letter(stream, entry, ProtocolError(incompatible_reason(ev)), ack=False)
            ids.setdefault(stream, []).append(entry[0])
        self.streams.done_many(ids)

    # --- commands --------------------------------------------------------------------------------------

    def command(self, stream: str, entry: Entry) -> None:
        try:
            self.ctl.handle_command(_data(entry[1]), stream)
        except Exception as e:
            if transient(e):
                raise
            self.dead_letter(stream, entry, e)
            return
        self.streams.done(stream, [entry[0]])

    # --- the dead-letter stream ----------------------------------------------------------------------------

    def dead_letter(self, stream: str, entry: Entry, e: BaseException, *, ack: bool = True) -> None:
        entry_id, fields = entry
        reason = str(e) if isinstance(e, ProtocolError) else f"{type(e).__name__}: {e}"
        raw = fields.get(b"data", b"")
        body: dict[Any, Any] = {
            "reason": reason[:DEADLETTER_RAW_BYTES], "stream": stream, "id": entry_id,
            "at": f"{time.time():.3f}", "size": str(len(raw)),
            "fields": ",".join(sorted(k.decode(errors="replace")[:64] for k in list(fields)[:16])),
            "data": raw[:DEADLETTER_RAW_BYTES].decode("utf-8", "backslashreplace"),
        }
        self.streams.redis.xadd(DEADLETTER_STREAM, body, maxlen=DEADLETTER_MAXLEN, approximate=True)
        self.dead_lettered += 1
        key = f"{stream} {reason[:48]}"
        now = time.monotonic()
        level = logging.DEBUG if now - self._logged.get(key, -LOG_EVERY_S) < LOG_EVERY_S else logging.WARNING
        if level == logging.WARNING:
            self._logged[key] = now
            if len(self._logged) > 1000:
                self._logged.clear()
        log.log(level, "refused entry %s of %s (sent to %s): %s", entry_id, stream, DEADLETTER_STREAM, reason,
                extra={"host": host_of(stream) or "-"})
        if ack:
            self.streams.done(stream, [entry_id])


def _data(fields: dict[bytes, bytes]) -> bytes:
    raw = fields.get(b"data")
    if raw is None:
        raise ProtocolError(f"entry without a data field (fields: {sorted(k[:32] for k in fields)[:8]})")
    return raw


__all__ = ["COMMAND_STREAMS", "CONSUMER", "Intake", "Register", "Streams", "transient", "valid_reply_to",
           "wrong_version"]
