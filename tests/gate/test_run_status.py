"""A run's status (docs/state.md, "A run's status"): the rule itself, and the status the turn states' writer
stores on the run as journals arrive, people decide and findings hold, failing closed where nothing was
assessed."""

from __future__ import annotations

import itertools

import pytest

from engine.writer import JournalWriter
from journals.models import Run, RunStatus, Turn, run_status_q, run_status_shown
from journals.services import records_ingest
from recovery.findings.models import Finding
from recovery.findings.services import finding_open_or_touch, finding_resolve
from recovery.services import assessment_refresh, turn_approve, turn_block
from recovery.state import run_status_compute, run_status_decide
from tests.console.scenarios import ingest, payments_run

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(("fault", "held", "unfinished"), list(itertools.product([False, True], repeat=3)))
def test_the_rule_puts_the_journal_first_then_people_then_unfinished_work(fault, held, unfinished):
    status = run_status_compute(journal_fault=fault, held=held, unfinished=unfinished)
    if fault:
        assert status == RunStatus.BLOCKED
    elif held:
        assert status == RunStatus.NEEDS_ATTENTION
    elif unfinished:
        assert status == RunStatus.RUNNING
    else:
        assert status == RunStatus.DONE


def _send(writer: JournalWriter) -> Run:
    """Ingest everything the writer wrote (records already stored are duplicates), without assessing it."""
    result = records_ingest(run_id=writer.run, body=writer.data(), content_type="application/x-ndjson", token=None)
    return Run.objects.get(pk=result.run.pk)


def _status(run: Run) -> str:
    run = Run.objects.get(pk=run.pk)
    shown = run_status_shown(status=run.status, last_seq=run.last_seq, assessed_seq=run.assessed_seq)
    assert shown == run.status_shown
    # The list's filter finds the run under exactly the status it shows, and under no other.
    for status in RunStatus.values:
        assert Run.objects.filter(run_status_q(status), pk=run.pk).exists() == (status == shown), status
    return shown


def test_a_run_of_finished_turns_is_done_until_new_records_arrive(operator):
    w = JournalWriter("status-done")
    w.complete_turn("t-1")
    w.complete_turn("t-2")
    run = _send(w)
    assert _status(run) == RunStatus.RUNNING  # nothing assessed yet: never done
    assessment_refresh(run=run)
    assert Run.objects.get(pk=run.pk).status == RunStatus.DONE
    assert _status(run) == RunStatus.DONE
    # A new turn arrives: until it is assessed, the stored status is the old prefix's, and the run runs.
    w.plan("t-3")
    run = _send(w)
    assert Run.objects.get(pk=run.pk).status == RunStatus.DONE
    assert _status(run) == RunStatus.RUNNING
    assessment_refresh(run=run)
    assert _status(run) == RunStatus.RUNNING  # t-3 resumes
    w.commit("t-3", "plan")
    for phase in ("envelope", "dispatch", "execute", "readback", "writeback", "spend"):
        w.commit("t-3", phase)
    w.terminal("t-3")
    assessment_refresh(run=_send(w))
    assert _status(run) == RunStatus.DONE


def test_a_held_turn_needs_attention_until_a_person_lets_it_go(operator):
    pay = payments_run()
    # t-charge (an unconfirmed effect) and t-skip (a phase out of order) are held.
    assert _status(pay.run) == RunStatus.NEEDS_ATTENTION
    evidence = {"charge-card": "not_happened"}
    turn_approve(turn=pay.turns["t-charge"], actor=operator, reason="the bank has no charge", evidence=evidence)
    assert _status(pay.run) == RunStatus.NEEDS_ATTENTION  # t-skip still waits
    turn_approve(turn=pay.turns["t-skip"], actor=operator, reason="the skip was deliberate")
    assert _status(pay.run) == RunStatus.RUNNING  # nothing held; t-resume, t-after and the approved go on
    # An operator's own block holds its turn too: the run cannot end without a person.
    turn_block(turn=pay.turns["t-resume"], actor=operator, reason="hold for the vendor")
    assert _status(pay.run) == RunStatus.NEEDS_ATTENTION


def test_a_fault_of_the_journal_blocks_the_run_even_when_its_turns_ended(operator):
    w = JournalWriter("status-gap")
    w.complete_turn("t-1")
    run = ingest(w)
    assert _status(run) == RunStatus.DONE
    # A record past a gap of lsns: a run-level violation.
    w.next_lsn[w.branch] += 2
    w.plan("t-2")
    run = ingest(w)
    assert run.blocked_reason is not None
    assert _status(run) == RunStatus.BLOCKED


def test_an_integrity_finding_blocks_the_run_until_it_is_resolved(operator):
    w = JournalWriter("status-integrity")
    w.complete_turn("t-1")
    run = ingest(w)
    assert _status(run) == RunStatus.DONE
    finding_open_or_touch(kind="chain_broken", run=run, fact_key="line-3", evidence={"line": 3})
    assert _status(run) == RunStatus.BLOCKED
    finding = Finding.objects.get(run=run, kind="chain_broken")
    finding_resolve(finding=finding, actor=operator, reason="the records were checked")
    assert _status(run) == RunStatus.DONE


def test_a_turn_with_no_state_keeps_an_assessed_run_from_being_done(operator):
    """Fail closed: whatever left a turn without its state, nobody has looked at it."""
    w = JournalWriter("status-unassessed")
    w.complete_turn("t-1")
    run = ingest(w)
    assert run_status_decide(run=run) == RunStatus.DONE
    Turn.objects.create(run=run, turn_id="t-ghost", plan=["plan"])
    assert run_status_decide(run=run) == RunStatus.RUNNING


def test_a_run_with_no_turn_is_not_done(operator):
    run = Run.objects.create(run_id="status-empty")
    assert _status(run) == RunStatus.RUNNING
    run.assessed_seq = run.last_seq
    run.save(update_fields=["assessed_seq"])
    assert run_status_decide(run=run) == RunStatus.RUNNING
