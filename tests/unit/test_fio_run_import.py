"""The run document ``labctl import-fio`` builds from fio output made outside the lab (orchestrator.fiorun), from the
real fio outputs of examples/fio-output (a local run, and fio --client driving two fio --server processes): one step
per job with the lab's figures (merged-histogram percentiles, each server's apart), the file as the artifact, the
provenance, the same document for the same files; and every hostile file refused with its name and reason."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import TypeAdapter, ValidationError

from labcontract.errors import FioImportError
from labcontract.fioresult import bin_percentiles, parse_fio_groups, parse_fio_output
from labcontract.protocol import ARTIFACT_MAX_BYTES
from labcontract.rundoc import JsonObj, RunDoc
from orchestrator.fiorun import Target, build_run, parse_fio_file, read_fio_file, workload_of
from orchestrator.rundocs import canonical

ROOT = Path(__file__).resolve().parents[2]
LOCAL = ROOT / "examples" / "fio-output" / "local-4k.json"
CLIENT = ROOT / "examples" / "fio-output" / "client-2servers-4k.json"
TARGET = Target(host="bench-07", device="nvme0n1", note="vendor run")


def report(path: Path) -> dict[str, Any]:
    raw = path.read_bytes()
    doc: dict[str, Any] = json.loads(raw[raw.index(b"{"):])
    return doc


def merged(hist: dict[str, Any]) -> dict[int, int]:
    out: dict[int, int] = {}
    for d in ("read", "write"):
        for v, c in hist[d]:
            out[v] = out.get(v, 0) + c
    return out


def test_a_local_run_is_one_step_per_job_with_the_lab_figures() -> None:
    raw = LOCAL.read_bytes()
    doc = build_run([read_fio_file(LOCAL)], TARGET)
    assert doc.live is False            # fio's own output: the lab took no per-second snapshots
    groups = parse_fio_groups(raw)
    assert [st.name for st in doc.steps] == list(groups) == ["4k-randread", "4k-randwrite"]
    sha = hashlib.sha256(raw).hexdigest()
    for st in doc.steps:
        (at,) = st.attempts
        res = at.result
        assert res is not None and st.kind == "measure" and st.state == at.state == "SUCCEEDED"
        assert res.metrics == groups[st.name].model_dump(mode="json")
        assert res.iops == groups[st.name].combined.iops and res.per_device is None
        assert res.lat_p99_ns == groups[st.name].combined.percentiles_ns["p99"]
        assert res.lat_hist is not None and bin_percentiles(merged(res.lat_hist)) == \
            groups[st.name].combined.percentiles_ns
        assert [(a.name, a.sha256, a.size) for a in at.artifacts] == [("fio.json", sha, len(raw))]
        assert st.cell == {"op_mode": "stock", "profile": st.name}
        assert (at.host, at.device) == ("bench-07", "nvme0n1")
        src = res.provenance["imported_from"]
        assert (src["file"], src["sha256"], src["fio_version"], src["client"]) == ("local-4k.json", sha, "fio-3.33",
                                                                                   False)
        assert src["global_options"]["ioengine"] == "libaio" and src["job_options"]["iodepth"] == "8"
        assert res.created_at == report(LOCAL)["timestamp"]
        assert st.job_text.startswith("[global]\nsize=64m\n") and f"[{st.name}]\nrw=" in st.job_text
    assert doc.steps[0].workload == {"name": "4k-randread", "rw": "randread", "bs": 4096, "iodepth": 8,
                                     "numjobs": 2, "runtime": 2}
    assert doc.id.startswith("fio-") and doc.suite_name == "local-4k" and doc.submitted_by == "labctl import-fio"
    assert doc.reason == "imported from fio output: vendor run" and doc.state == "SUCCEEDED"
    assert doc.ended_at == report(LOCAL)["timestamp"] and doc.started_at is not None
    assert 4 <= report(LOCAL)["timestamp"] - doc.started_at <= 6          # two groups of 2 s, one after the other


def test_client_output_merges_the_servers_as_analyze_fio_does() -> None:
    raw = CLIENT.read_bytes()
    doc = build_run([read_fio_file(CLIENT)], TARGET)
    groups = parse_fio_groups(raw)
    rep = report(CLIENT)
    servers = sorted({f"{e['hostname']}:{e['port']}" for e in rep["client_stats"] if e["jobname"] != "All clients"})
    assert [st.name for st in doc.steps] == ["4k-randread", "4k-randwrite"]
    for st in doc.steps:
        res = st.attempts[0].result
        assert res is not None and res.per_device is not None and sorted(res.per_device) == servers
        for s in servers:
            assert res.per_device[s] == groups[f"{st.name}@{s}"].model_dump(mode="json")
        # the job's entries alone, read as analyze fio reads a file: the step's figures
        alone = {**rep, "client_stats": [e for e in rep["client_stats"] if e["jobname"] == st.name]}
        assert res.metrics == parse_fio_output(json.dumps(alone)).model_dump(mode="json")
        assert res.lat_hist is not None and sorted(res.lat_hist["per_device"]) == servers
        assert bin_percentiles(merged(res.lat_hist)) == res.metrics["combined"]["percentiles_ns"]
        assert res.provenance["imported_from"]["servers"] == servers
    whole = parse_fio_output(raw)
    iops = [r.iops or 0.0 for st in doc.steps if (r := st.attempts[0].result) is not None]
    assert sum(iops) == pytest.approx(whole.combined.iops)
    # fio --client prints no "job options" past the first group: the step says so and claims no workload
    second = doc.steps[1]
    assert second.workload == {"name": "4k-randwrite", "runtime": 2}            # the global options' only
    assert "[4k-randwrite]\n# fio printed no options of this job" in second.job_text
    assert second.attempts[0].result is not None
    assert second.attempts[0].result.provenance["imported_from"]["job_options"] is None


def test_the_same_files_give_the_same_document_and_a_job_twice_is_a_repeat() -> None:
    one = build_run([read_fio_file(CLIENT)], TARGET)
    again = build_run([parse_fio_file(CLIENT.read_bytes(), str(CLIENT))], TARGET)
    assert canonical(one) == canonical(again)
    assert RunDoc.model_validate_json(one.model_dump_json()) == one          # as the controller reads it
    both = build_run([read_fio_file(LOCAL), read_fio_file(CLIENT)], TARGET)
    assert both.id != one.id and both.id != build_run([read_fio_file(LOCAL)], TARGET).id
    assert [st.name for st in both.steps] == ["4k-randread.rep1", "4k-randwrite.rep1", "4k-randread.rep2",
                                              "4k-randwrite.rep2"]
    assert [st.cell.get("repeat") for st in both.steps] == [1, 1, 2, 2]
    assert len({a.sha256 for st in both.steps for a in st.attempts[0].artifacts}) == 2
    assert both.started_at == min(read_fio_file(p).started for p in (LOCAL, CLIENT))


def test_job_clones_printed_apart_are_one_step(tmp_path: Path) -> None:
    rep = report(LOCAL)
    job = rep["jobs"][0]
    rep["jobs"] = [job, job]                       # numjobs=2 without group_reporting: two entries of one name
    f = parse_fio_file(json.dumps(rep).encode(), "clones.json")
    (st,) = build_run([f], TARGET).steps
    res = st.attempts[0].result
    assert res is not None and res.metrics["read"]["ios"] == 2 * job["read"]["total_ios"]


def test_workload_of_fio_options() -> None:
    assert workload_of("j", {"rw": "randrw"}, {"rwmixwrite": "30", "bs": "8k", "iodepth": "16"}) == {
        "name": "j", "rw": "randrw", "bs": 8192, "iodepth": 16, "numjobs": 1, "rwmixread": 70}
    assert workload_of("j", {}, {"bs": "4k,64k", "rw": "randread:8", "runtime": "1m"}) == {
        "name": "j", "rw": "randread", "iodepth": 1, "numjobs": 1}       # a size list and "1m" are no plain number
    assert workload_of("j", {"bs": "4k"}, None) == {"name": "j", "bs": 4096}    # options unknown: no default


def hostile() -> dict[str, bytes]:
    text = LOCAL.read_text()
    rep = report(LOCAL)
    job = rep["jobs"][0]

    def with_job(**read: Any) -> bytes:
        return json.dumps({**rep, "jobs": [{**job, "read": {**job["read"], **read}}]}).encode()
    return {
        "empty.json": b"",
        "truncated.json": text[: len(text) // 3].encode(),
        "deep.json": b'{"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        "bigint.json": text.replace(f'"total_ios" : {job["read"]["total_ios"]}', '"total_ios" : ' + "9" * 5000,
                                    1).encode(),
        "huge.json": text.replace(f'"total_ios" : {job["read"]["total_ios"]}', '"total_ios" : 1' + "0" * 25,
                                  1).encode(),
        "inf.json": with_job(iops=float("inf")),
        "nan.json": with_job(bw_bytes=float("nan")),
        "negative.json": with_job(iops=-5.0),
        "types.json": with_job(io_bytes="4096"),
        "nojobs.json": json.dumps({"fio version": "fio-3.33", "timestamp": 1, "jobs": []}).encode(),
        "notfio.json": b'{"hello": 1}',
        "notime.json": json.dumps({k: v for k, v in rep.items() if k != "timestamp"}).encode(),
        "version.json": json.dumps({**rep, "fio version": "fio-" + "x" * 100}).encode(),
        "jobname.json": json.dumps({**rep, "jobs": [{**job, "jobname": "a\nb"}]}).encode(),
        "options.json": json.dumps({**rep, "jobs": [{**job, "job options": {"bs": ["4k"]}}]}).encode(),
    }


REASONS = {
    "empty.json": "empty output", "truncated.json": "invalid JSON at line", "deep.json": "unreadable JSON",
    "bigint.json": "unreadable JSON", "huge.json": "an integer beyond ±2^64", "inf.json": "expected a number, got inf",
    "nan.json": "expected a number, got nan", "negative.json": "greater than or equal to 0",
    "types.json": "io_bytes: expected an integer, got '4096'", "nojobs.json": "fio reported no jobs",
    "notfio.json": "missing 'fio version'", "notime.json": "'timestamp': expected fio's epoch seconds",
    "version.json": "not a fio version", "jobname.json": "a job name of at most 128 printable characters",
    "options.json": "'job options'.bs: expected a string",
}


@pytest.mark.parametrize("name", sorted(REASONS))
def test_a_hostile_file_is_refused_with_its_name_and_reason(name: str) -> None:
    with pytest.raises(FioImportError) as e:
        f = parse_fio_file(hostile()[name], name)
        build_run([f], TARGET)            # the figures judged as the controller judges them
    assert len(e.value.problems) == 1, e.value.problems
    (p,) = e.value.problems
    assert p.location.startswith(name) and REASONS[name] in str(p), str(p)


def test_every_problem_at_once(tmp_path: Path) -> None:
    big = tmp_path / "big.json"
    with big.open("wb") as f:
        f.truncate(ARTIFACT_MAX_BYTES + 1)
    with pytest.raises(FioImportError, match="larger than 128 MiB") as e:
        read_fio_file(big)
    assert str(e.value.problems[0]).startswith(str(big))
    with pytest.raises(FioImportError, match="not a regular file"):
        read_fio_file(tmp_path)
    with pytest.raises(FioImportError, match="no such file"):
        read_fio_file(tmp_path / "absent.json")
    same = read_fio_file(LOCAL)
    with pytest.raises(FioImportError) as e:
        build_run([same, parse_fio_file(LOCAL.read_bytes(), "copy.json")], TARGET)
    assert [str(p) for p in e.value.problems] == [f"copy.json: the same content as {LOCAL} (a file given twice)"]
    assert "2 problems in the fio output, nothing imported" in str(FioImportError(e.value.problems * 2))


def test_the_store_documents_refuse_integers_past_64_bits() -> None:
    check: TypeAdapter[dict[str, Any]] = TypeAdapter(JsonObj)
    assert check.validate_python({"n": (1 << 64), "m": -(1 << 64)})
    with pytest.raises(ValidationError, match="an integer beyond"):
        check.validate_python({"n": [1 << 64 | 1]})


def test_plain_json_output_keeps_fio_percentiles_of_a_single_entry() -> None:
    """``--output-format=json`` (no bins): a job of one entry keeps fio's own percentiles, no histogram."""
    rep = report(LOCAL)
    for job in rep["jobs"]:
        for d in ("read", "write"):
            for lat in ("lat_ns", "clat_ns"):
                job[d][lat].pop("bins", None)
    f = parse_fio_file(json.dumps(rep).encode(), "plain.json")
    first = build_run([f], TARGET).steps[0].attempts[0].result
    assert first is not None and first.lat_hist is None
    fio_p99 = rep["jobs"][0]["read"]["lat_ns"]["percentile"]["99.000000"]
    assert first.lat_p99_ns == fio_p99
