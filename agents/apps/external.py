"""An external workload (kind ``external``): the command the agent's configuration declares, run as an argv list
(never a shell) with the fixed arguments::

    <command...> --dut PATH [--dut PATH ...] --params PARAMS_JSON_FILE --result RESULT_FILE --workdir DIR

in its own process group (killed as a whole after the declared timeout or on cancel). It writes its result JSON
to RESULT_FILE; the result is read (at most ``APP_RESULT_MAX_BYTES``) and validated as :class:`AppResult`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable

from pydantic import ValidationError

from agents.apps import AppContext, ExternalSpec, proc
from agents.apps.fs import in_use
from agents.apps.proc import TOOL_OUT_MAX, bound_file, start_ticks, tail
from labcontract.apps import APP_RESULT_MAX_BYTES, AppResult
from labcontract.errors import AppStepError

KILL_GRACE_S = 10.0
POLL_S = 0.2


def _killpg(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


ENV_KEPT = ("PATH", "LANG", "LC_ALL", "TZ", "HOME", "TMPDIR")


def command_env() -> dict[str, str]:
    """What the external command gets of the agent's environment: the basics, never the broker's URL or any
    other credential the agent was started with."""
    env = {k: os.environ[k] for k in ENV_KEPT if k in os.environ}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")
    return env


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the whole group, SIGKILL it after a grace period."""
    _killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(KILL_GRACE_S)
    _killpg(proc.pid, signal.SIGKILL)   # the leader may be gone while its children linger
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(KILL_GRACE_S)


def validation_reason(e: ValidationError) -> str:
    errs = e.errors()
    parts = [f"{'.'.join(str(x) for x in err['loc']) or '(root)'}: {err['msg']}" for err in errs[:5]]
    more = f" (+{len(errs) - 5} more)" if len(errs) > 5 else ""
    return "; ".join(parts) + more


def read_result(path: os.PathLike[str] | str) -> AppResult:
    try:
        data = proc.read_bounded(path, APP_RESULT_MAX_BYTES)
    except OSError as e:
        raise AppStepError(f"the external workload wrote no result ({e.strerror}: {path})") from None
    except proc.Oversized:
        raise AppStepError(f"the external workload's result exceeds {APP_RESULT_MAX_BYTES} bytes") from None
    try:
        return AppResult.model_validate_json(data)
    except ValidationError as e:
        raise AppStepError(f"the external workload's result is not valid: {validation_reason(e)}") from None


def run(ctx: AppContext, ext: ExternalSpec, on_group: Callable[[int, int], None],
        on_group_gone: Callable[[int], None]) -> AppResult:
    """Run the declared command; ``on_group(pid, start_ticks)`` records its process group before we wait on it."""
    spec = ctx.spec
    if ext.destructive:
        for d in spec.duts:
            if (why := in_use(d)) is not None:
                raise AppStepError(why)
    params = spec.app.external.params if spec.app.external is not None else {}
    params_file = ctx.cwd / "params.json"
    params_file.write_text(json.dumps(params))
    result_file = ctx.cwd / "external-result.json"
    result_file.unlink(missing_ok=True)
    workdir = ctx.cwd / "work"
    workdir.mkdir(exist_ok=True)
    argv = list(ext.command)
    for d in spec.duts:
        argv += ["--dut", d.path]
    argv += ["--params", str(params_file), "--result", str(result_file), "--workdir", str(workdir)]
    ctx.log.info("external workload %s: %s (timeout %d s)", ext.name, argv, ext.timeout_s)
    t0 = time.monotonic()
    with ctx.tool_out.open("ab") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=workdir,
                                start_new_session=True, env=command_env())
    on_group(proc.pid, start_ticks(proc.pid) or -1)
    try:
        end = t0 + ext.timeout_s
        while proc.poll() is None:
            if time.monotonic() >= end:
                _stop(proc)
                raise AppStepError(f"external workload {ext.name} ran past its timeout of {ext.timeout_s} s: killed")
            if ctx.stop.is_set():
                break
            time.sleep(POLL_S)
    finally:
        if proc.poll() is None or ctx.stop.is_set():
            _stop(proc)
        else:
            _killpg(proc.pid, signal.SIGKILL)   # no leftovers of a finished command
        on_group_gone(proc.pid)
        bound_file(ctx.tool_out, TOOL_OUT_MAX)
    if proc.returncode != 0:
        raise AppStepError(f"external workload {ext.name} failed (exit {proc.returncode}): {tail(ctx.tool_out, 4)}")
    res = read_result(result_file)
    if res.seconds == 0.0:
        res = res.model_copy(update={"seconds": round(time.monotonic() - t0, 3)})
    return res
