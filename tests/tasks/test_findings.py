"""Findings: one unresolved row per fact (service and database), redacted evidence, operator transitions
recorded as OperatorActions, and resolutions that are never undone."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction

from journals.models import Turn
from kernel.errors import ServiceError
from ops.demo import workload_lines
from recovery.findings.models import Finding
from recovery.findings.services import (
    FindingError,
    finding_acknowledge,
    finding_clear,
    finding_open_or_touch,
    finding_resolve,
)
from tests.tasks.conftest import ingest
from trail.models import OperatorAction

pytestmark = pytest.mark.django_db


@pytest.fixture
def run():
    return ingest("run-f", workload_lines("run-f", turns=2))


def test_the_same_fact_is_opened_once_and_touched_after(run):
    turn = Turn.objects.get(run=run, turn_id="t0")
    first, opened = finding_open_or_touch(kind="lost_turn", run=run, turn=turn, evidence={"idle_seconds": 10})
    again, reopened = finding_open_or_touch(kind="lost_turn", run=run, turn=turn, evidence={"idle_seconds": 70})
    assert opened and not reopened and again.pk == first.pk
    again.refresh_from_db()
    assert again.seen_count == 2 and again.last_seen >= again.first_seen
    assert again.evidence == {"idle_seconds": 70}  # the latest sighting
    # Another turn, another fact key or another kind is another fact.
    other = Turn.objects.get(run=run, turn_id="t1")
    assert finding_open_or_touch(kind="lost_turn", run=run, turn=other)[1]
    assert finding_open_or_touch(kind="chain_broken", run=run, fact_key="prev:0:3")[1]
    assert finding_open_or_touch(kind="chain_broken", run=run, fact_key="prev:0:4")[1]
    assert Finding.objects.count() == 4


def test_the_database_refuses_a_second_unresolved_row_for_one_fact(run):
    finding_open_or_touch(kind="chain_broken", run=run, fact_key="prev:0:3")
    with pytest.raises(IntegrityError), transaction.atomic():
        Finding.objects.create(kind="chain_broken", run=run, fact_key="prev:0:3")
    # A run-level fact (no turn) collides too: the key uses the subject "", never a NULL.
    finding_open_or_touch(kind="blocked_turn_unclaimed", run=run, fact_key="chain_broken")
    with pytest.raises(IntegrityError), transaction.atomic():
        Finding.objects.create(kind="blocked_turn_unclaimed", run=run, fact_key="chain_broken", state="acknowledged")


def test_the_database_refuses_an_unknown_kind_or_state(run):
    with pytest.raises(IntegrityError), transaction.atomic():
        Finding.objects.create(kind="made_up", run=run)
    with pytest.raises(IntegrityError), transaction.atomic():
        Finding.objects.create(kind="lost_turn", run=run, state="closed")
    with pytest.raises(IntegrityError), transaction.atomic():
        Finding.objects.create(kind="lost_turn", run=run, state="resolved")  # resolved needs resolved_at


def test_evidence_is_redacted(run):
    finding, _ = finding_open_or_touch(
        kind="storage_corruption",
        run=run,
        fact_key="record:3",
        evidence={"seq": 3, "args": {"api_key": "sk-live-123", "nested": [{"password": "hunter2"}]}, "token": "x"},
    )
    finding.refresh_from_db()
    assert finding.evidence == {
        "seq": 3,
        "args": {"api_key": "[redacted]", "nested": [{"password": "[redacted]"}]},
        "token": "[redacted]",
    }
    assert finding.blocks_run


def test_acknowledge_and_resolve_are_operator_actions(run, operator):
    finding, _ = finding_open_or_touch(kind="chain_broken", run=run, fact_key="prev:0:3")
    finding_acknowledge(finding=finding, actor=operator, reason="looking at the runtime's disk")
    finding.refresh_from_db()
    assert finding.state == "acknowledged" and finding.acknowledged_by == operator
    # Seen again while acknowledged: touched, not reopened, still acknowledged.
    finding_open_or_touch(kind="chain_broken", run=run, fact_key="prev:0:3")
    finding.refresh_from_db()
    assert finding.state == "acknowledged" and finding.seen_count == 2
    finding_resolve(finding=finding, actor=operator, reason="journal restored from the package")
    finding.refresh_from_db()
    assert finding.state == "resolved" and finding.resolved_by == operator and finding.resolved_at is not None
    assert finding.resolution_reason == "journal restored from the package"
    actions = list(OperatorAction.objects.filter(run=run).order_by("id").values_list("kind", "actor_name", "reason"))
    assert actions == [
        ("finding_acknowledge", operator.username, "looking at the runtime's disk"),
        ("finding_resolve", operator.username, "journal restored from the package"),
    ]
    before_after = OperatorAction.objects.filter(run=run).order_by("id").values_list("before", "after")
    transitions = [(b["state"], a["state"]) for b, a in before_after]
    assert transitions == [("open", "acknowledged"), ("acknowledged", "resolved")]


def test_transitions_need_a_reason_and_the_right_state(run, operator):
    finding, _ = finding_open_or_touch(kind="lost_turn", run=run)
    with pytest.raises(ServiceError) as missing:  # the trail checks every act's reason
        finding_acknowledge(finding=finding, actor=operator, reason="  ")
    assert missing.value.code == "reason_required"
    finding_resolve(finding=finding, actor=operator, reason="runtime restarted the turn")
    with pytest.raises(FindingError) as again:
        finding_resolve(finding=finding, actor=operator, reason="twice")
    assert again.value.code == "finding_resolved"
    with pytest.raises(FindingError) as ack:
        finding_acknowledge(finding=finding, actor=operator, reason="late")
    assert ack.value.code == "finding_not_open"
    assert OperatorAction.objects.filter(kind="finding_resolve").count() == 1


def test_a_resolved_fact_seen_again_is_a_new_finding(run, operator):
    finding, _ = finding_open_or_touch(kind="chain_broken", run=run, fact_key="prev:0:3")
    finding_resolve(finding=finding, actor=operator, reason="accepted: the runtime's writer had a bug, fixed")
    again, opened = finding_open_or_touch(kind="chain_broken", run=run, fact_key="prev:0:3")
    assert opened and again.pk != finding.pk
    finding.refresh_from_db()
    assert finding.state == "resolved"  # the resolution stands as it was


def test_audits_never_clear_integrity_findings(run):
    integrity, _ = finding_open_or_touch(kind="storage_corruption", run=run, fact_key="prefix")
    with pytest.raises(ValueError):
        finding_clear(finding=integrity, audit="chain_verification", reason="looks fine now")
    lost, _ = finding_open_or_touch(kind="lost_turn", run=run)
    cleared = finding_clear(finding=lost, audit="stale_turns", reason="the turn wrote again")
    assert (cleared.state, cleared.resolved_by, cleared.resolved_by_name) == ("resolved", None, "audit:stale_turns")
    assert not OperatorAction.objects.exists()  # not a person's act
