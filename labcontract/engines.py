"""Which fio engine a host runs for the engine a suite declares, by the host's OS family (``HostFacts.os_family``).

One suite runs on the Linux and the Windows install of the same hardware (the reviews run every profile on
both): Linux runs the declared engine as is; Windows runs Linux's asynchronous engines (libaio, io_uring,
posixaio) as ``windowsaio`` (overlapped I/O) and the synchronous ones as they are. ``windowsaio`` on Linux and
``pvsync2`` on Windows have no counterpart and are refused: by the controller at submit when the host's OS is
known, else by the agent before fio starts. The agent's platforms (:mod:`agents.platform`) and the controller's
submission check (:mod:`orchestrator.controller.commands`) both ask here.
"""

from __future__ import annotations

from labcontract.errors import FioError

LINUX_IOENGINES = frozenset({"libaio", "io_uring", "psync", "sync", "pvsync2", "posixaio"})
WINDOWS_IOENGINES = frozenset({"windowsaio", "sync", "psync"})
# a suite's declared engine -> the one a Windows host runs
ENGINE_FOR_DECLARED_ON_WINDOWS = {"libaio": "windowsaio", "io_uring": "windowsaio", "posixaio": "windowsaio",
                                  "windowsaio": "windowsaio", "sync": "sync", "psync": "psync"}
NO_WINDOWS_ENGINE = {"pvsync2": "pvsync2 (preadv2/pwritev2 with per-I/O flags) is a Linux engine with no Windows "
                                "counterpart; declare psync or sync for a suite that runs on Windows"}
OS_NAMES = {"linux": "Linux", "windows": "Windows"}


def engine_problem(os_family: str, declared: str) -> str | None:
    """Why a host of ``os_family`` cannot run a suite's ``declared`` engine (None: it can)."""
    shown = declared[:40]
    if os_family == "linux":
        if declared in LINUX_IOENGINES:
            return None
        whose = "Windows' engine" if declared == "windowsaio" else "not an engine of Linux fio"
        return f"{shown} is {whose}"
    if os_family == "windows":
        if ENGINE_FOR_DECLARED_ON_WINDOWS.get(declared) in WINDOWS_IOENGINES:
            return None
        return NO_WINDOWS_ENGINE.get(declared, f"{shown} is not an engine fio has on Windows")
    return f"no fio engines known for OS family {os_family[:20]!r} (linux, windows)"


def engine_for(os_family: str, declared: str) -> str:
    """The engine a host of ``os_family`` runs for ``declared``; FioError with the reason when it has none."""
    why = engine_problem(os_family, declared)
    if why is not None:
        engines = ", ".join(sorted(LINUX_IOENGINES if os_family == "linux" else WINDOWS_IOENGINES))
        raise FioError(f"ioengine {declared[:40]!r}: {why}; this agent runs on "
                       f"{OS_NAMES.get(os_family, os_family)} ({engines})")
    return ENGINE_FOR_DECLARED_ON_WINDOWS[declared] if os_family == "windows" else declared
