"""The lab's hosts as ``labctl hosts`` prints them (state, heartbeat, clock skew, platform, DUTs, why one is not
used), for labctl and for the web service, which draws the same for ``labctl --api hosts``."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text
from sqlalchemy.orm import Session

from orchestrator.queries import heartbeat_timeout, host_up, list_hosts

SKEW_WARN_S = 1.0       # a host clock this far from the controller's is shown with a warning


def clock_skew(skew_s: float | None) -> tuple[str, bool]:
    """The ``clock`` cell of a host (agent clock minus controller clock at its registration) and whether
    it deserves a warning (at least SKEW_WARN_S off)."""
    if skew_s is None:
        return "-", False
    if abs(skew_s) >= SKEW_WARN_S:
        return f"{skew_s:+.1f}s (!)", True
    return f"{skew_s:+.2f}s", False


def print_hosts(out: Console, s: Session, now: float) -> None:
    """Registered hosts, their state and declared DUTs, and a warning per host whose clock is off."""
    table = Table("host", "state", "last heartbeat", "clock", "CPU", "mem GiB", "OS", "fio", "DUTs",
                  "quarantine / why not used")
    warnings = []
    limit = heartbeat_timeout(s)          # the controller's own: a host is down when it says so
    for h in list_hosts(s):
        f = h.facts
        duts = ", ".join(f"{d.name}={d.path}" + (" [QUARANTINED]" if d.quarantined_at else "")
                         for d in h.devices if d.declared)
        state = "up" if host_up(h, now, limit) else "DOWN"
        why = [f"incompatible: {h.incompatible}"] if h.incompatible else []
        why += [f"host: {h.quarantine_reason}"] if h.quarantined_at else []
        why += [f"{d.path}: {d.quarantine_reason}" for d in h.devices if d.quarantined_at]
        why += [f"{key}: failed x{v['fails']}: {str(v.get('detail') or '')[:200]}"        # checks failing now
                for key, v in sorted((h.health or {}).items()) if isinstance(v, dict) and v.get("fails")]
        clock, skewed = clock_skew(h.clock_skew_s)
        if skewed:
            warnings.append(f"warning: the clock of host {h.name} is {abs(h.clock_skew_s or 0):.1f}s "
                            f"{'ahead of' if (h.clock_skew_s or 0) > 0 else 'behind'} the controller's "
                            "(at its registration): its timestamps are off; deadlines use each side's own "
                            "clock, so its steps are not affected. Synchronise it (NTP).")
        table.add_row(h.name, state + (" INCOMPATIBLE" if h.incompatible else "")
                      + (" QUARANTINED" if h.quarantined_at else ""),
                      f"{now - (h.last_seen or 0):.0f}s ago", clock, f"{f.get('cpu_model')} ({f.get('cpu_cores')}c)",
                      f"{(f.get('memory_bytes') or 0) / 2**30:.1f}", str(f.get("os")),
                      str(f.get("fio_version")), duts, "\n".join(why) or "-")
    out.print(table)
    for line in warnings:
        out.print(Text(line, style="yellow"))
