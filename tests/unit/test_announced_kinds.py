"""Agents announce their step kinds and versions (issue 25): in their host facts (optional: an older agent sends
none and is not judged; an older controller ignores them, so the protocol version is unchanged). The scheduler holds
a run whose host's agent lacks a kind the run still needs, or runs it at an older version than this controller's
kind needs, and says why in the queue (labctl queue and the web's queue view call the same decision); a mixed lab
runs what each host can."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select

from agents import kinds as agent_kinds
from labcontract.facts import DeclaredDut, HostFacts, StepKindFact
from labcontract.fioextra import EXTENDED
from labcontract.protocol import Register, Submit
from orchestrator import kinds
from orchestrator.kinds import fio as fio_kind
from orchestrator.runs.scheduling import decide
from orchestrator.store.models import Host, Run

SUITE = """\
suite: purged
phases: {purge: true}
profiles:
  - {name: a, rw: randread, bs: 4k, iodepth: 4, runtime: 1}
"""


def register(ctl: Any, host: str, announced: tuple[tuple[str, int], ...]) -> None:
    facts = HostFacts(hostname=host, step_kinds=tuple(StepKindFact(action=a, version=v) for a, v in announced))
    ctl.handle_event(Register(host=host, agent_version="0.1.0", facts=facts,
                              duts=(DeclaredDut(name="dut0", path=f"/dev/loop{len(host)}", kind="block",
                                                size_bytes=1 << 30),)))


def submit(ctl: Any, host: str, run_id: str) -> None:
    reply = ctl.submit(Submit(run_id=run_id, suite_source="s.yaml", suite_text=SUITE, host=host, devices=("dut0",),
                              reply_to="-"))
    assert reply.ok, reply.errors


def waits(db: Any, clock: Any) -> dict[str, str]:
    with db() as s:
        runs = list(s.scalars(select(Run)))
        hosts = {h.name: h for h in s.scalars(select(Host))}
        return decide(runs, hosts, clock.t, lambda h: True, needs=kinds.agent_kinds()).waits


def test_the_agent_announces_what_its_platform_runs() -> None:
    linux = {k.action: k.version for k in agent_kinds.announced("linux")}
    assert linux == {"app": 1, "fio": 3, "net": 2, "purge": 1}     # fio 2: the extended options; 3: rate_iops R,W
    assert {k.action for k in agent_kinds.announced("windows")} == {"fio"}     # purge, net, app use Linux tools
    # every kind this controller's steps need, at a version this agent runs (fio: 1 for a plain workload, 2 with the
    # extended options: scheduling.run_needs)
    assert all(linux[k] >= v for k, v in kinds.agent_kinds().values())


def test_a_host_lacking_a_kind_holds_the_run_and_says_why_and_the_others_run(env: Any) -> None:
    ctl, disp, clock, db = env
    register(ctl, "old", (("fio", 1),))                           # an agent without the purge kind
    register(ctl, "full", (("fio", 1), ("purge", 1)))
    submit(ctl, "old", "r-old")
    submit(ctl, "full", "r-full")
    submit(ctl, "h1", "r-h1")                                     # h1 announced nothing: not judged
    ctl.schedule()
    assert {m.host for m in disp.starts()} == {"full", "h1"}
    why = waits(db, clock)
    assert why["r-old"] == "host old's agent runs no purge steps (it announced: fio 1)"
    assert "r-full" not in why
    register(ctl, "old", (("fio", 1), ("purge", 1)))              # upgraded: the run goes
    ctl.schedule()
    assert "old" in {m.host for m in disp.starts()}
    with db() as s:
        assert s.get(Host, "old").step_kinds == {"fio": 1, "purge": 1}
        assert s.get(Host, "h1").step_kinds is None


def test_an_older_version_of_a_kind_holds_the_run_before_it_starts(env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Judged on every step the run still has, so a run never starts and then stalls half-way on a host."""
    ctl, disp, clock, db = env
    monkeypatch.setattr(fio_kind.KIND, "agent_kind", ("fio", 2))  # this controller's fio steps need version 2
    register(ctl, "v1", (("fio", 1), ("purge", 1)))
    submit(ctl, "v1", "r1")
    ctl.schedule()
    assert disp.starts() == []                                    # not even its purge
    assert waits(db, clock) == {"r1": "host v1's agent runs fio steps at version 1; this controller's measure "
                                      "steps need version 2 or later: upgrade the agent"}
    register(ctl, "v1", (("fio", 2), ("purge", 1)))
    ctl.schedule()
    assert [m.action for m in disp.starts()] == ["purge"]


@pytest.mark.parametrize("announced", [
    [{"action": "fio; rm -rf /", "version": 1}],                  # not a kind's name
    [{"action": "FIO", "version": 1}],
    [{"action": "x" * 33, "version": 1}],                         # over 32 characters
    [{"action": "fio", "version": 0}],                            # versions start at 1
    [{"action": "fio", "version": 10 ** 7}],
    [{"action": "fio", "version": "1"}],                          # a string is not a version
    [{"action": "fio", "version": True}],
    [{"action": f"k{i}", "version": 1} for i in range(65)],       # more than 64 kinds
    [{"action": "fio"}],                                          # no version
])
def test_a_hostile_announcement_is_refused_with_the_facts(announced: list[dict[str, object]]) -> None:
    """What an agent announces is untrusted: a bad kind refuses its facts (the Register is set aside by the
    controller's intake with the reason), never a row the scheduler would read."""
    from pydantic import ValidationError

    with pytest.raises(ValidationError) as e:
        HostFacts.model_validate({"hostname": "h", "step_kinds": announced})
    assert "step_kinds" in str(e.value)


EXTENDED_SUITE = """\
suite: zipf
profiles:
  - {name: a, rw: randread, bs: 4k, iodepth: 4, runtime: 1, random_distribution: "zipf:1.2"}
"""


def test_a_suite_with_extended_fio_options_is_never_sent_to_an_older_fio_kind(env: Any) -> None:
    """Issue 28: the extended options need fio kind 2. A host whose agent announced fio 1 is refused such a suite at
    submit with the reason; one that is downgraded after the submission holds the run; a plain suite still runs on
    fio 1, and its start message carries none of the new keys (an older agent reads it as before)."""
    ctl, disp, clock, db = env
    register(ctl, "v1", (("fio", 1), ("purge", 1)))
    reply = ctl.submit(Submit(run_id="r-ext", suite_source="s.yaml", suite_text=EXTENDED_SUITE, host="v1",
                              devices=("dut0",), reply_to="-"))
    assert not reply.ok
    assert any("random_distribution: host v1's agent runs fio steps at version 1; these options need version 2 or "
               "later: upgrade the agent" in e for e in reply.errors), reply.errors
    register(ctl, "v2", (("fio", 2), ("purge", 1)))
    reply = ctl.submit(Submit(run_id="r-ext", suite_source="s.yaml", suite_text=EXTENDED_SUITE, host="v2",
                              devices=("dut0",), reply_to="-"))
    assert reply.ok, reply.errors
    register(ctl, "v2", (("fio", 1), ("purge", 1)))              # the agent went back to an older version
    plain_suite = SUITE.replace("phases: {purge: true}\n", "")
    reply = ctl.submit(Submit(run_id="r-plain", suite_source="s.yaml", suite_text=plain_suite, host="v1",
                              devices=("dut0",), reply_to="-"))
    assert reply.ok, reply.errors
    ctl.schedule()
    (plain,) = disp.starts()
    assert (plain.host, plain.action) == ("v1", "fio")            # the plain suite runs on fio 1
    assert not set(plain.model_dump(mode="json")["workload"]) & set(EXTENDED)      # none of the new keys
    assert waits(db, clock)["r-ext"] == ("host v2's agent runs fio steps at version 1; this controller's measure "
                                         "steps need version 2 or later: upgrade the agent")
    register(ctl, "v2", (("fio", 2), ("purge", 1)))
    ctl.schedule()
    (ext,) = [m for m in disp.starts() if m.host == "v2"]
    assert ext.model_dump(mode="json")["workload"]["random_distribution"] == "zipf:1.2"
