"""Times that mean what they say and holds that say what they need, as the pages show them: the last change
of a turn and a run includes people's acts, a held turn names its whole remedy, a turn's open findings are
on its page, and a repaired run's pages name the repair and what it set aside."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from console.selectors import runs_filtered, turns_filtered
from journals.access import EVERY_RUN
from journals.models import Run, Turn
from journals.remedies import REASON_REMEDIES
from recovery.assignments.services import turn_assign
from recovery.findings.services import finding_open_or_touch
from recovery.recovery_audits.services import recovery_audit_action_report, recovery_audit_open
from recovery.repair.models import REPAIR_QUARANTINED
from recovery.repair.services import journal_repair_apply, journal_repair_preview
from recovery.services import turn_approve, turn_block, turn_claim
from tests.console.scenarios import Scenario, payments_run, torn_run

pytestmark = pytest.mark.django_db


def _age(*runs: Run) -> None:
    """Every run and turn last changed an hour ago: what comes after is the latest change."""
    past = timezone.now() - timedelta(hours=1)
    Run.objects.filter(pk__in=[r.pk for r in runs]).update(changed_at=past, updated_at=past)
    Turn.objects.filter(run__in=runs).update(updated_at=past)


def _first_run(sort: str = "-updated") -> str:
    return runs_filtered({"sort": sort}, scope=EVERY_RUN).values_list("run_id", flat=True)[0]


def _first_turn() -> str:
    return turns_filtered({"sort": "-updated"}, scope=EVERY_RUN).values_list("turn_id", flat=True)[0]


def test_latest_change_first_includes_decisions_assignments_and_repairs(operator, django_capture_on_commit_callbacks):
    pay, other = payments_run("pay-a"), payments_run("pay-b")
    torn = torn_run()
    _age(pay.run, other.run, torn.run)
    with django_capture_on_commit_callbacks(execute=True):
        turn_block(turn=pay.turns["t-resume"], actor=operator, reason="wait for the vendor")
    assert (_first_run(), _first_turn()) == ("pay-a", "t-resume")
    with django_capture_on_commit_callbacks(execute=True):
        turn_assign(turn=other.turns["t-skip"], actor=operator, assignee=operator)
    assert _first_run() == "pay-b" and _first_turn() == "t-skip"
    with django_capture_on_commit_callbacks(execute=True):
        turn_approve(turn=pay.turns["t-skip"], actor=operator, reason="reviewed the order")
    assert (_first_run(), _first_turn()) == ("pay-a", "t-skip")
    _repair(torn, operator)
    assert _first_run() == torn.run.run_id
    assert _first_run("updated") != torn.run.run_id  # and oldest change first puts it last


def test_a_held_turn_names_its_whole_remedy_on_its_page_the_queue_and_the_api(op_pages, operator_client, pay):
    charge = pay.turns["t-charge"]
    html = op_pages.get(reverse("console:turn", args=[charge.pk])).content.decode()
    remedy = html.split('id="remedy"')[1].split("</div>")[0]
    assert re.findall(r"<li>(.*?)</li>", remedy) == [
        "record what happened to intent charge-card (evidence: happened or not happened)",
        "approve the turn",
    ]
    queue = op_pages.get(reverse("console:overview")).content.decode()
    assert "record what happened to intent charge-card (evidence: happened or not happened), then approve the turn" in (
        queue
    )
    answer = operator_client.get(f"/api/v1/runs/{pay.run.run_id}/turns/t-charge").json()
    assert answer["state"]["remedy"][-1] == "approve the turn"
    resuming = operator_client.get(f"/api/v1/runs/{pay.run.run_id}/turns/t-resume").json()
    assert resuming["state"]["remedy"] == []


def test_a_recovery_that_did_otherwise_shows_as_a_hold_on_the_turn_page_and_the_queue(op_pages, pay):
    turn = pay.turns["t-resume"]
    claim = turn_claim(turn=turn, worker_id="worker-3")
    audit = recovery_audit_open(turn=turn, fencing_token=claim.fencing_token)
    recovery_audit_action_report(audit=audit, fencing_token=claim.fencing_token, kind="intent", target="refund-all")
    html = op_pages.get(reverse("console:turn", args=[turn.pk])).content.decode()
    box = html.split('id="held-box"')[1].split("</div>")[0]
    assert "A recovery did otherwise than the gate planned" in box and 'href="#audits-h"' in box
    assert "look at what the recovery did otherwise than planned (its recovery audit)" in html
    assert "recovery_diverged" in html  # the gate's reason, in words with its code
    queue = op_pages.get(reverse("console:overview")).content.decode()
    assert (
        "look at what the recovery did otherwise than planned (its recovery audit), then approve the turn or " in queue
    )


def test_a_turns_open_findings_are_on_its_page_and_counted_by_the_findings_list(op_pages, pay):
    charge = pay.turns["t-charge"]
    finding_open_or_touch(kind="lost_turn", run=pay.run, turn=charge, evidence={"idle_seconds": 3600})
    html = op_pages.get(reverse("console:turn", args=[charge.pk])).content.decode()
    part = html.split('id="turn-findings"')[1].split("</section>")[0]
    assert 'Open findings <span class="count">1</span>' in part and "turn gone quiet" in part
    assert f"?turn={charge.pk}" in part
    listed = op_pages.get(reverse("console:findings") + f"?turn={charge.pk}").content.decode()
    assert listed.count('id="finding-') == 1
    other = op_pages.get(reverse("console:findings") + f"?turn={pay.turns['t-skip'].pk}").content.decode()
    assert 'id="finding-' not in other
    quiet = op_pages.get(reverse("console:turn", args=[pay.turns["t-skip"].pk])).content.decode()
    assert 'id="turn-findings"' not in quiet


def _repair(torn: Scenario, operator) -> None:
    """Accept the records before the gap: the record after it (t-a's) is set aside."""
    run = Run.objects.get(pk=torn.run.pk)
    args = {"kind": "accept_prefix", "through_seq": run.last_seq - 1, "reason": "the disk lost a record"}
    preview = journal_repair_preview(run=run, actor=operator, **args)
    journal_repair_apply(run=run, actor=operator, preview=preview.digest, **args)


def test_a_repaired_runs_pages_name_the_repair_and_what_it_set_aside(op_pages, viewer_pages, operator, operator_client):
    torn = torn_run()
    _repair(torn, operator)
    run_html = op_pages.get(reverse("console:run", args=[torn.run.pk])).content.decode()
    assert "The journal is sound after repair #1" in run_html
    box = run_html.split('id="repaired-by"')[1].split("</div>")[0]
    assert f'href="{reverse("console:run_repair", args=[torn.run.pk])}#repair-1"' in box
    assert operator.username in box and "the disk lost a record" in box
    assert "set aside the 1 record after it" in box
    assert f'href="{reverse("console:turn", args=[torn.turns["t-a"].pk])}"' in box  # the turn it set aside
    # A viewer reads the same, without the link to the operators' repair page.
    seen = viewer_pages.get(reverse("console:run", args=[torn.run.pk])).content.decode()
    assert "repair #1" in seen and "#repair-1" not in seen
    turn_html = op_pages.get(reverse("console:turn", args=[torn.turns["t-a"].pk])).content.decode()
    words = turn_html.split('id="state-words">')[1].split("</p>")[0]
    assert words.startswith("Set aside by repair #1") and "until the journal is repaired" not in words
    assert 'id="repaired-by"' in turn_html
    answer = operator_client.get(f"/api/v1/runs/{torn.run.run_id}/turns/t-a").json()
    assert answer["state"]["reason"] == REPAIR_QUARANTINED
    assert answer["state"]["remedy"] == list(REASON_REMEDIES[REPAIR_QUARANTINED])
