"""A step's fingerprint: what the agent was told to run, as a short hash (schema 0014, ``steps.fingerprint``).

A history series (orchestrator.stats.history) is one figure of one cell of one suite on one device. The suite's
*name* does not say what its cells ran: a nightly edited under the same name (libaio at QD16 turned into psync at
QD1) dropped 72% and was judged as one series, then as "no regressions". The fingerprint hashes the step's kind
and its job text: the rendered fio job file (engine, depth, block size, runtime, and every override a submission
applied) or an application step's start message, without the device's path (the device's model and firmware are
the series' identity already; a drive renamed from nvme0n1 to nvme1n1 is the same drive) and without the options
that only say how fio reports (percentiles, group reporting). The OP mode is in the
cell key. A changed fingerprint starts a new series. Written when a step is inserted (a column default), and by
migration 0014 for the steps stored before it.
"""

from __future__ import annotations

import hashlib

FINGERPRINT_HEX = 12
# options that say where the I/O goes or how fio reports it, not what the I/O is: a lab release that reports one
# more percentile must not start every series again
NOT_WORKLOAD = frozenset({"filename", "percentile_list", "lat_percentiles", "clat_percentiles", "group_reporting"})


def fingerprint(kind: str, job_text: str) -> str:
    """The first 12 hex digits of the SHA-256 of the step's kind and its job text without the lines of
    :data:`NOT_WORKLOAD` options; "" for a step without a job text (purge, network groups): such steps share one
    series."""
    if not job_text:
        return ""
    lines = (line.strip() for line in job_text.splitlines())
    kept = "\n".join(line for line in lines if line and line.split("=", 1)[0].strip() not in NOT_WORKLOAD)
    return hashlib.sha256(f"{kind}\n{kept}".encode()).hexdigest()[:FINGERPRINT_HEX]
