"""Every exception the project raises on purpose.

    LabError                      base: carries a one-line reason (str(e)) and context
     ├── ConfigError              bad configuration value or file
     ├── InputError               user input rejected; holds every Problem found at once
     │    ├── SuiteError          a suite file that does not validate
     │    ├── SubmissionError     a submission naming an unknown host/device, ...
     │    ├── JobFileError        fio job files to import: over a bound, not fio's format, or nothing importable
     │    ├── InventoryError      an Ansible inventory (hosts, group_vars, host_vars) that does not validate
     │    ├── ExportBundleError   another lab's export (labctl import) that does not validate
     │    └── FioImportError      fio output made elsewhere (labctl import-fio): every problem of every file
     ├── ProtocolError            a message of the wrong shape or protocol version
     ├── DeviceRefused            an agent refuses a device it has not declared
     ├── StepError                a step could not be run as asked (a bad request, a tool that did not start)
 │    └── FioError            fio could not be run, or its output could not be read
     ├── StepOutputError          a step exited 0 but its output cannot be stored (the attempt ends as an error)
     ├── AppStepError             an application step (database, sysbench, pgbench, external) cannot go on
     ├── NetStepError             a network step cannot measure (wrong MTU, unknown target, a tool failed)
     ├── StoreError               the results store
     │    ├── InvalidTransition   a state-machine transition that is not allowed
     │    └── NotFound            an id (run, artifact, host, token) the store does not hold
     ├── AccessError              a web request without valid credentials (HTTP 401)
     │    └── Forbidden           valid credentials whose role is too small (HTTP 403)
     ├── CommandRefused           the controller answered a command with its refusal (its reasons)
     ├── Busy                     a bound on concurrent work is reached (reports drawn, live streams; HTTP 429)
     ├── ReportError              runs that cannot be reported, compared or exported as asked
     │    ├── CompareError        fewer than two runs, no cell in common, network with storage
     │    └── ExportError         an unknown format or table, an output that cannot be written
     └── ServiceError             a service (redis, controller) did not answer

Catch :class:`LabError` at the edges (CLI, daemons); everything in between raises the
most specific class and lets it travel. One refusal stays outside on purpose: ``labcontract.interlock.InterlockRefused``
(the interlock is standard library only, as Ansible's module_utils on a lab host loads the same file); the daemons
read its reasons (``refusal_reasons``) and refuse with :class:`DeviceRefused`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """One thing wrong with an input: where (a key path such as ``workloads[0].bs``) and what."""

    location: str
    message: str

    def __str__(self) -> str:
        return f"{self.location}: {self.message}" if self.location else self.message


class LabError(Exception):
    """Base of the hierarchy. ``str(err)`` is a one-line reason fit for a terminal."""


class ConfigError(LabError):
    def __init__(self, source: str, key: str, message: str) -> None:
        self.source, self.key, self.message = source, key, message
        super().__init__(f"{source}: {key}: {message}")


class InputError(LabError):
    """Rejected input. ``problems`` lists every problem found, not just the first."""

    what = "input"

    def __init__(self, source: str, problems: list[Problem]) -> None:
        self.source = source
        self.problems = list(problems)
        n = len(self.problems)
        head = f"{source}: {n} problem{'s' if n != 1 else ''} in {self.what}"
        super().__init__(head + "".join(f"\n  {source}: {p}" for p in self.problems))

    @property
    def summary(self) -> str:
        return str(self).splitlines()[0]


class SuiteError(InputError):
    what = "suite"


class SubmissionError(InputError):
    what = "submission"


class JobFileError(InputError):
    what = "job file"


class InventoryError(InputError):
    what = "inventory"


class ExportBundleError(InputError):
    what = "lab export"


class FioImportError(InputError):
    """fio output refused: every problem of every file (each :class:`Problem` located by its file)."""

    what = "fio output"

    def __init__(self, problems: list[Problem]) -> None:
        self.source = "fio output"
        self.problems = list(problems)
        n = len(self.problems)
        LabError.__init__(self, f"{n} problem{'s' if n != 1 else ''} in the fio output, nothing imported:"
                          + "".join(f"\n  {p}" for p in self.problems))


class ProtocolError(LabError):
    def __init__(self, message: str, *, got_version: object = None) -> None:
        self.got_version = got_version
        super().__init__(message)


class DeviceRefused(LabError):
    def __init__(self, host: str, device: str, reason: str) -> None:
        self.host, self.device, self.reason = host, device, reason
        super().__init__(f"host {host} refuses device {device}: {reason}")


class StepError(LabError):
    """A step could not be run as asked: the request itself is wrong (an action without a kind, a part missing,
    an attempt id that is not path-safe) or its tool did not start. The agent refuses or fails the attempt with
    ``str(e)``."""


class FioError(StepError):
    def __init__(self, message: str, *, path: str | None = None) -> None:
        self.path = path
        super().__init__(f"{path}: {message}" if path else message)


class StepOutputError(LabError):
    """A successful exit whose output cannot be stored: the attempt ends as an error with this reason."""


class AppStepError(LabError):
    """An application step cannot go on (a server that does not start, a tool that fails, a DUT not prepared):
    the message is the one-line reason the step ends with."""


class NetStepError(LabError):
    """A network step cannot measure (wrong MTU, unknown target, a tool failed); the message says which path."""


class StoreError(LabError):
    pass


class InvalidTransition(StoreError):
    def __init__(self, kind: str, ident: str, current: str, target: str) -> None:
        self.kind, self.ident, self.current, self.target = kind, ident, current, target
        super().__init__(f"{kind} {ident}: cannot go from {current} to {target}")


class NotFound(StoreError):
    """An id the store does not hold: ``what`` (run, artifact...) and the id, for a 404."""

    def __init__(self, what: str, ident: str) -> None:
        self.what, self.ident = what, ident
        super().__init__(f"no {what} {ident[:128]!r}")


class AccessError(LabError):
    """No valid credentials (a missing, unknown, revoked or expired token; no session)."""


class Forbidden(AccessError):
    """Valid credentials of too small a role for what was asked."""

    def __init__(self, who: str, role: str, needed: str) -> None:
        self.who, self.role, self.needed = who, role, needed
        super().__init__(f"{who} has role {role}; this needs {needed}")


class CommandRefused(LabError):
    """The controller refused a command; ``errors`` are its reasons, every one."""

    def __init__(self, what: str, errors: list[str]) -> None:
        self.what, self.errors = what, list(errors)
        super().__init__(f"the controller refused {what}: " + "; ".join(self.errors))


class Busy(LabError):
    """A bound on work done at once is reached (reports being drawn, commands waiting, live streams): try again."""


class ServiceError(LabError):
    pass


class ReportError(LabError):
    """Runs that cannot be reported, compared or exported as asked."""


class CompareError(ReportError):
    """Runs that cannot be compared: fewer than two, no cell in common, network with storage."""


class ExportError(ReportError):
    """An export that cannot be written as asked (format, table, output)."""
