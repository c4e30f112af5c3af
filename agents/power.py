"""The host's power from its BMC (Redfish), read once a second while a storage step's process runs.

Declared per host in the agent's configuration, never in a message: ``labctl agent --bmc FILE``, a YAML file::

    url: https://bmc-node1.lab:443     # the BMC's Redfish service (https, or http on a lab network)
    user: storagelab                   # a read-only BMC account
    password_file: /etc/storagelab/bmc-password
    ca_file: /etc/storagelab/bmc-ca.pem   # optional: the CA that signed the BMC's certificate
    verify_tls: true                   # the default; false only for a BMC with a self-signed certificate
    chassis: 1U                        # optional: the chassis Id (default: the first chassis that reports power)
    timeout_s: 2                       # one request's limit
    interval_s: 1

The password is read from its file when the agent starts, sent only to the BMC (HTTP Basic), and never logged.

What is read: the chassis' ``Power`` resource, ``PowerControl[0].PowerConsumedWatts`` (the chassis' input power
on every BMC seen), else its ``EnvironmentMetrics`` ``PowerWatts.Reading`` (the newer model). Everything the BMC
sends is untrusted: a response is read up to :data:`MAX_RESPONSE_BYTES`, must be a JSON object, a link it gives
must be a path of the same service (``/redfish/v1/...``; the client never follows it elsewhere), and a reading
must be a finite number of watts from 0 to ``labcontract.power.MAX_WATTS``. The sampler runs in a thread of its
own: a BMC that fails, is slow or never answers costs that thread its readings, never the step its time; the
step's ``host-power.json`` then says "not measured" and why.
"""

from __future__ import annotations

import base64
import json
import logging
import math
import re
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from labcontract.errors import ConfigError
from labcontract.power import MAX_WATTS, BmcFields, HostPower, Reading, not_measured, summarise

log = logging.getLogger(__name__)

MAX_RESPONSE_BYTES = 1 << 20
MAX_CONFIG_BYTES = 64 << 10
MAX_PASSWORD_BYTES = 4096
_ODATA_PATH = re.compile(r"^/redfish/v1/[A-Za-z0-9._~%!$&'()*+,;=:@/-]{1,400}\Z")
OPTION = "--bmc"


class BmcError(Exception):
    """A BMC request failed or answered something this module refuses (the reason a step's power is missing)."""


class BmcConfig(BmcFields):
    """One host's BMC, as its agent's configuration declares it (the inventory's form: labcontract.power)."""

    password_file: Path
    ca_file: Path | None = None


def load_bmc(path: Path) -> tuple[BmcConfig, str]:
    """The BMC declared in ``path`` and its password (ConfigError naming the file and every problem at once)."""
    source = str(path)
    try:
        size = path.stat().st_size
        if size > MAX_CONFIG_BYTES:
            raise ConfigError(OPTION, source, f"{size} bytes, over the {MAX_CONFIG_BYTES} bytes limit")
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise ConfigError(OPTION, source, f"cannot read: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(OPTION, source, "not a mapping of url, user, password_file, ...")
    problems: list[str] = []
    cfg: BmcConfig | None = None
    try:
        cfg = BmcConfig.model_validate(data)
    except ValidationError as e:
        problems += [f"{'.'.join(str(p) for p in err['loc']) or '(top)'}: {err['msg']}" for err in e.errors()]
    password = ""
    pw_file, ca_file = data.get("password_file"), data.get("ca_file")
    if isinstance(pw_file, str) and pw_file:       # the files are checked too when other keys are wrong: all at once
        try:
            with Path(pw_file).open("rb") as fh:        # never more than a password's bytes (/dev/zero)
                raw = fh.read(MAX_PASSWORD_BYTES + 1)
            if len(raw) > MAX_PASSWORD_BYTES:
                problems.append(f"password_file: {pw_file}: over {MAX_PASSWORD_BYTES} bytes")
            password = raw.decode("utf-8").rstrip("\r\n")
        except (OSError, UnicodeDecodeError) as e:
            problems.append(f"password_file: cannot read {pw_file}: {type(e).__name__}")
    if isinstance(ca_file, str) and ca_file and not Path(ca_file).is_file():
        problems.append(f"ca_file: {ca_file} is not a file")
    if cfg is not None and cfg.ca_file is not None and not cfg.url.startswith("https://"):
        problems.append("ca_file: needs an https:// url")
    if problems or cfg is None:
        raise ConfigError(OPTION, source, "; ".join(problems))
    return cfg, password


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    w = float(value)
    return w if math.isfinite(w) and 0.0 <= w <= MAX_WATTS else None


def power_control_watts(doc: dict[str, Any]) -> float | None:
    """``PowerControl[0].PowerConsumedWatts`` of a Power resource (the first entry that has a number)."""
    entries = doc.get("PowerControl")
    if not isinstance(entries, list):
        return None
    for entry in entries[:16]:
        if isinstance(entry, dict) and "PowerConsumedWatts" in entry:
            return _number(entry["PowerConsumedWatts"])
    return None


def environment_watts(doc: dict[str, Any]) -> float | None:
    """``PowerWatts.Reading`` of an EnvironmentMetrics resource."""
    pw = doc.get("PowerWatts")
    return _number(pw.get("Reading")) if isinstance(pw, dict) else None


READERS: dict[Reading, Callable[[dict[str, Any]], float | None]] = {
    "Power.PowerControl": power_control_watts,
    "EnvironmentMetrics.PowerWatts": environment_watts,
}
LINKS: dict[Reading, str] = {"Power.PowerControl": "Power", "EnvironmentMetrics.PowerWatts": "EnvironmentMetrics"}


def odata_path(value: Any) -> str:
    """A link the BMC gave (``{"@odata.id": "/redfish/v1/..."}``): a path of the same service, or BmcError."""
    link = value.get("@odata.id") if isinstance(value, dict) else None
    if not isinstance(link, str) or not _ODATA_PATH.fullmatch(link) or "/../" in link or link.endswith("/.."):
        raise BmcError(f"the BMC gave a link that is not a path of its service: {str(link)[:80]!r}")
    return link.rstrip("/")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Any,
                         newurl: str) -> None:
        raise urllib.error.HTTPError(req.full_url, code, f"redirect refused ({msg})", headers, fp)


class RedfishPower:
    """Reads the chassis' power from one BMC (thread-safe enough: one sampler at a time per step)."""

    def __init__(self, cfg: BmcConfig, password: str) -> None:
        self.cfg = cfg
        self._auth = "Basic " + base64.b64encode(f"{cfg.user}:{password}".encode()).decode()
        self._ssl: ssl.SSLContext | None = None
        if cfg.url.startswith("https://"):
            self._ssl = ssl.create_default_context(cafile=str(cfg.ca_file) if cfg.ca_file else None)
            if not cfg.verify_tls:
                self._ssl.check_hostname = False
                self._ssl.verify_mode = ssl.CERT_NONE
        # never a redirect: it would carry the credentials to wherever the BMC points
        handlers: list[urllib.request.BaseHandler] = [_NoRedirect()]
        if self._ssl is not None:
            handlers.append(urllib.request.HTTPSHandler(context=self._ssl))
        self._opener = urllib.request.build_opener(*handlers)
        self._found: tuple[str, Reading] | None = None      # the resource and property, once found
        self.endpoint = f"{cfg.url}" + (f" chassis {cfg.chassis}" if cfg.chassis else "")

    @property
    def name(self) -> str:
        return f"Redfish at {self.endpoint}"

    def get(self, path: str) -> dict[str, Any]:
        """GET a resource of the service: a JSON object of at most :data:`MAX_RESPONSE_BYTES` (BmcError else)."""
        req = urllib.request.Request(self.cfg.url + path, headers={
            "Authorization": self._auth, "Accept": "application/json", "OData-Version": "4.0"})
        try:
            with self._opener.open(req, timeout=self.cfg.timeout_s) as resp:
                raw = resp.read(MAX_RESPONSE_BYTES + 1)
        except urllib.error.HTTPError as e:
            raise BmcError(f"GET {path}: HTTP {e.code}") from None
        except (urllib.error.URLError, OSError, ValueError) as e:
            reason = e.reason if isinstance(e, urllib.error.URLError) else e
            raise BmcError(f"GET {path}: {str(reason)[:200] or type(reason).__name__}") from None
        if len(raw) > MAX_RESPONSE_BYTES:
            raise BmcError(f"GET {path}: the answer is over {MAX_RESPONSE_BYTES} bytes")
        try:
            doc = json.loads(raw)
        except ValueError:
            raise BmcError(f"GET {path}: the answer is not JSON") from None
        if not isinstance(doc, dict):
            raise BmcError(f"GET {path}: the answer is not a JSON object")
        return doc

    def discover(self) -> tuple[str, Reading]:
        """The resource that holds the chassis' power and the property read there."""
        if self._found is not None:
            return self._found
        if self.cfg.chassis:
            chassis = [f"/redfish/v1/Chassis/{self.cfg.chassis}"]
        else:
            members = self.get("/redfish/v1/Chassis").get("Members")
            if not isinstance(members, list) or not members:
                raise BmcError("the BMC lists no chassis")
            chassis = [odata_path(m) for m in members[:32]]
        for path in chassis:
            doc = self.get(path)
            for reading, link in LINKS.items():
                if link in doc:
                    target = odata_path(doc[link])
                    if READERS[reading](self.get(target)) is not None:
                        self._found = (target, reading)
                        return self._found
        raise BmcError(f"no chassis of the BMC reports power (Power.PowerControl or EnvironmentMetrics.PowerWatts) "
                       f"among {', '.join(p.rsplit('/', 1)[-1] for p in chassis)[:120]}")

    def read(self) -> tuple[float, Reading]:
        """The chassis' power now, in watts (BmcError when the BMC fails or answers no valid reading)."""
        path, reading = self.discover()
        watts = READERS[reading](self.get(path))
        if watts is None:
            raise BmcError(f"{path}: no reading of 0 to {MAX_WATTS:.0f} W ({reading})")
        return watts, reading


class PowerSampler:
    """Reads the power every ``interval_s`` in a thread of its own, from :meth:`start` until ``done()`` is true or
    :meth:`stop`; :meth:`result` never waits for a request under way."""

    def __init__(self, source: RedfishPower, done: Callable[[], bool] = lambda: False) -> None:
        self.source = source
        self.done = done
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._samples: list[tuple[float, float]] = []     # (wall time, watts)
        self._failures = 0
        self._error: str | None = None
        self._reading: Reading | None = None
        self.started_at = time.time()
        self._thread = threading.Thread(target=self._run, name="bmc-power", daemon=True)

    def start(self) -> PowerSampler:
        self.started_at = time.time()
        self._thread.start()
        return self

    def _run(self) -> None:
        interval = self.source.cfg.interval_s
        next_at = time.monotonic()
        while not self._stop.is_set() and not self.done():
            at = time.time()
            try:
                watts, reading = self.source.read()
                with self._lock:
                    self._samples.append((at, watts))
                    self._reading = reading
            except BmcError as e:
                with self._lock:
                    self._failures += 1
                    self._error = str(e)
            except Exception as e:             # a BMC's oddity never ends the agent: counted as a failure
                with self._lock:
                    self._failures += 1
                    self._error = f"unexpected answer: {type(e).__name__}"
            next_at += interval
            now = time.monotonic()
            if next_at < now:                  # a slow answer: the next reading on the next whole interval
                next_at = now + interval - ((now - next_at) % interval)
            self._stop.wait(next_at - now)

    def stop(self) -> None:
        self._stop.set()

    def readings(self) -> int:
        """How many readings succeeded so far."""
        with self._lock:
            return len(self._samples)

    def result(self, ended_at: float | None = None) -> HostPower:
        """The step's power: the readings taken from the start to ``ended_at`` (default: now); stops the sampler."""
        self.stop()
        end = ended_at if ended_at is not None else time.time()
        with self._lock:
            watts = [w for at, w in self._samples if at <= end + 0.5]
            failures, error, reading = self._failures, self._error, self._reading
        if self._thread.is_alive() and not watts and error is None:
            error = f"the BMC did not answer within {self.source.cfg.timeout_s:g} s"
        return summarise(self.source.endpoint, reading, self.source.cfg.interval_s, self.started_at,
                         max(end, self.started_at), watts, failures, error)


def restarted(source: RedfishPower) -> HostPower:
    return not_measured(source.endpoint, "the agent restarted during the step: its readings were lost")
