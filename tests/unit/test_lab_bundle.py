"""A lab export is untrusted input (labctl import): read_bundle validates the document whole (every problem at
once, with its key path), never follows a path out of the export (symbolic links, archive members other than
regular files, ``..``), bounds sizes, and labctl checks each artifact against its sha256 before anything is sent.
The round trip (export, import through a real controller, idempotence) is tests/integration/test_lab_share.py."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest

from labcontract.errors import ExportBundleError
from labcontract.rundoc import RunDoc
from orchestrator.export.bundle import read_bundle
from orchestrator.labctl.imports import artifact_problems

DATA = b'{"fio version": "fio-3.36"}'
SHA = hashlib.sha256(DATA).hexdigest()


def run_doc(rid: str = "r20261129-abcdef", **over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "id": rid, "suite_name": "quick", "suite_source": "quick.yaml", "suite_text": "suite: quick\n",
        "suite_sha256": "a" * 64, "host": "h1", "device": "/dev/nvme0n1", "state": "SUCCEEDED",
        "submitted_at": 1.7e9,
        "steps": [{"id": f"{rid}-s000", "seq": 0, "kind": "measure", "name": "4k", "cell": {"profile": "4k"},
                   "job_text": "[4k]\n", "state": "SUCCEEDED",
                   "attempts": [{"id": f"{rid}-s000-a1", "number": 1, "host": "h1", "device": "/dev/nvme0n1",
                                 "state": "SUCCEEDED", "timeout_s": 60,
                                 "result": {"runtime_ms": 1000, "iops": 1000.0, "metrics": {"iops": 1000.0},
                                            "provenance": {"host": "h1"}, "created_at": 1.7e9},
                                 "artifacts": [{"name": "fio.json", "sha256": SHA, "size": len(DATA)}]}]}]}
    doc.update(over)
    return doc


def manifest(runs: list[dict[str, Any]], **over: Any) -> dict[str, Any]:
    return {"format": "storagelab-lab-export", "format_version": 1, "lab": "site-b", "runs": runs, **over}


def write_dir(root: Path, doc: dict[str, Any], artifacts: dict[str, bytes] | None = None) -> Path:
    (root / "artifacts").mkdir(parents=True)
    (root / "lab-export.json").write_text(json.dumps(doc))
    for sha, data in (artifacts if artifacts is not None else {SHA: DATA}).items():
        (root / "artifacts" / sha).write_bytes(data)
    return root


def test_a_good_export_reads(tmp_path: Path) -> None:
    b = read_bundle(write_dir(tmp_path / "x", manifest([run_doc()])))
    assert b.lab == "site-b" and [r.id for r in b.runs] == ["r20261129-abcdef"]
    data, reasons = artifact_problems(b.runs[0], b.read_artifact)
    assert data == {SHA: DATA} and reasons == []


def test_every_problem_is_listed_at_once_with_its_key(tmp_path: Path) -> None:
    bad_step = {**run_doc()["steps"][0], "id": "r-other-s000", "state": "RUNNING", "cell": {"x": [[[]]] * 2},
                "kind": "sideways"}
    runs = [run_doc(state="RUNNING"), run_doc("r2", steps=[bad_step], submitted_at=1e300),
            run_doc("../../etc", device="x" * 600)]
    with pytest.raises(ExportBundleError) as e:
        read_bundle(write_dir(tmp_path / "x", manifest(runs, format_version=2, extra="no")))
    text = str(e.value)
    for expected in ("runs[0].state", "runs[1].steps[0].state", "runs[1].steps[0].kind", "runs[1].submitted_at",
                     "runs[2].id", "runs[2].device", "format_version", "extra"):
        assert expected in text, (expected, text)
    assert "lab-export.json" in text


@pytest.mark.parametrize("hostile, why", [
    ({"cell": {"x": float("inf")}}, "not finite"),
    ({"id": "r20261129-zzzzzz-s000", "attempts": []}, "does not belong to run"),
    ({"id": "r20261129-abcdef-s000x"}, "does not belong to step"),
])
def test_hostile_step_values(tmp_path: Path, hostile: dict[str, Any], why: str) -> None:
    step = {**run_doc()["steps"][0], **hostile}
    text = json.dumps(manifest([run_doc(steps=[step])])).replace("Infinity", "1e999")
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "lab-export.json").write_text(text)
    with pytest.raises(ExportBundleError) as e:
        read_bundle(tmp_path / "x")
    assert why in str(e.value)


def test_deep_json_is_refused_before_it_recurses(tmp_path: Path) -> None:
    deep: Any = 1
    for _ in range(40):
        deep = {"a": deep}
    step = {**run_doc()["steps"][0], "cell": deep}
    with pytest.raises(ExportBundleError, match="nested deeper"):
        read_bundle(write_dir(tmp_path / "x", manifest([run_doc(steps=[step])])))


def test_a_manifest_link_out_of_the_export_is_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps(manifest([run_doc()])))
    root = tmp_path / "x"
    root.mkdir()
    (root / "lab-export.json").symlink_to(outside)
    with pytest.raises(ExportBundleError, match="not followed"):
        read_bundle(root)


def test_an_artifact_link_out_of_the_export_is_not_read(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(DATA)
    root = write_dir(tmp_path / "x", manifest([run_doc()]), artifacts={})
    (root / "artifacts" / SHA).symlink_to(secret)
    b = read_bundle(root)
    _data, reasons = artifact_problems(b.runs[0], b.read_artifact)
    assert reasons and "not in the export" in reasons[0]


def test_a_changed_artifact_refuses_its_run_with_the_reason(tmp_path: Path) -> None:
    b = read_bundle(write_dir(tmp_path / "x", manifest([run_doc()]), artifacts={SHA: DATA + b" "}))
    _data, reasons = artifact_problems(b.runs[0], b.read_artifact)
    assert len(reasons) == 1 and "sha256" in reasons[0] and "changed or damaged" in reasons[0]


def _tar(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    with tarfile.open(path, "w:gz") as t:
        for info, data in members:
            t.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def _file(name: str, data: bytes) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


def test_an_archive_reads_and_hostile_members_are_all_listed(tmp_path: Path) -> None:
    text = json.dumps(manifest([run_doc()])).encode()
    good = _tar(tmp_path / "good.tar.gz", [_file("lab-export.json", text), _file(f"artifacts/{SHA}", DATA)])
    b = read_bundle(good)
    assert b.read_artifact(SHA) == DATA and b.runs[0].id == "r20261129-abcdef"
    link = tarfile.TarInfo(f"artifacts/{'b' * 64}")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    bad = _tar(tmp_path / "bad.tar.gz", [_file("lab-export.json", text), _file("../../escape", b"x"),
                                          (link, None), _file("/abs/path", b"x")])
    with pytest.raises(ExportBundleError) as e:
        read_bundle(bad)
    text_e = str(e.value)
    assert "3 problems" in text_e and "../../escape" in text_e and "/abs/path" in text_e
    (tmp_path / "junk.tar.gz").write_bytes(b"not gzip")
    with pytest.raises(ExportBundleError, match="not a readable"):
        read_bundle(tmp_path / "junk.tar.gz")


def test_the_run_model_bounds_what_a_run_names() -> None:
    doc = RunDoc.model_validate(run_doc())
    assert doc.artifacts() == {SHA: len(DATA)}
