"""The reference set of a suite (orchestrator/reference.py): one device whose latest run shares no cell with the run
compared is left out with its reason, never failing the whole set (issue 30 left it failing)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from labcontract.errors import CompareError
from orchestrator.reference import as_json, reference_set, table_lines
from tests.unit.test_compare import add_run, c4k, figures, make_store


@pytest.fixture
def db(tmp_path: Path) -> Iterator[sessionmaker[Session]]:
    yield make_store(tmp_path / "store.sqlite")


def test_a_device_sharing_no_cell_is_left_out_with_its_reason(db: sessionmaker[Session]) -> None:
    with db() as s:
        add_run(s, "run", [(c4k(r), figures(1000.0)) for r in (100, 0)], suite="q", devices=("/dev/a",), at=5)
        add_run(s, "ref1", [(c4k(r), figures(800.0)) for r in (100, 0)], suite="q", devices=("/dev/b",), at=4)
        add_run(s, "ref2", [(c4k(r), figures(1200.0)) for r in (100, 0)], suite="q", devices=("/dev/c",), at=3)
        # an older version of the suite on a third drive: other cells, nothing to set against the run
        add_run(s, "old", [(c4k(r, profile="8k"), figures(500.0)) for r in (100, 0)], suite="q",
                devices=("/dev/d",), at=2)
        ref = reference_set(s, "run", "q")
    assert [d.run_id for d in ref.devices] == ["ref1", "ref2"]
    assert [(x.device.run_id, x.device.device) for x in ref.left_out] == [("old", "/dev/d")]
    assert "no cell in common between run" in ref.left_out[0].reason
    iops = [f for f in ref.figures if f.metric == "iops"]
    assert len(iops) == 2 and all((f.n, f.min, f.max, f.rank_pct) == (2, 800.0, 1200.0, 50.0) for f in iops)
    doc = json.loads(as_json(ref))
    assert doc["left_out"][0]["device"]["run_id"] == "old" and doc["left_out"][0]["reason"]
    assert any(line.startswith("  left out: this lab: h1:/dev/d (run old): no cell in common")
               for line in table_lines(ref))


def test_no_comparable_device_names_why(db: sessionmaker[Session]) -> None:
    with db() as s:
        add_run(s, "run", [(c4k(100), figures(1000.0))], suite="q", devices=("/dev/a",), at=5)
        add_run(s, "old", [(c4k(100, profile="8k"), figures(500.0))], suite="q", devices=("/dev/d",), at=2)
        with pytest.raises(CompareError, match=r"other than run run's that compares with it \(old: no cell in "):
            reference_set(s, "run", "q")
        with pytest.raises(CompareError, match=r"no device was measured with suite 'other'"):
            reference_set(s, "run", "other")
