"""The gate's GET is a read: with records the worker has not assessed yet it answers for the whole committed
prefix, folded in memory and marked `pending`, and writes no row anywhere."""

from __future__ import annotations

from typing import Any

import pytest
from django.apps import apps

from journals.models import Run, TurnEffective
from recovery.models import Assessment
from recovery.services import assessment_refresh
from tests.journal_builder import JournalBuilder

pytestmark = pytest.mark.django_db
T = "/api/v1/runs/run-1/turns/{}/decision"


def _ingest(client: Any, b: JournalBuilder, lines: list[bytes]) -> None:
    answer = client.post("/api/v1/runs/run-1/records", b.body(lines), content_type="application/x-ndjson")
    assert answer.status_code == 200, answer.content


def _gate(client: Any, turn: str, query: str = "") -> dict[str, Any]:
    answer = client.get(T.format(turn) + query)
    assert answer.status_code == 200, answer.content
    return answer.json()


def _store() -> dict[str, Any]:
    """Every model's row count, and the stored states as they stand."""
    counts: dict[str, Any] = {m._meta.label: m._default_manager.count() for m in apps.get_models()}
    counts["states"] = sorted(TurnEffective.objects.values_list("turn_id", "state", "reason", "updated_at"))
    counts["run"] = list(Run.objects.values_list("assessed_seq", "live_branch", "blocked_reason"))
    return counts


def _answer(gate: dict[str, Any]) -> tuple[Any, ...]:
    return gate["state"], gate["decision"], gate["reason"], gate["resume_from"], gate["engine"], gate["planned"]


@pytest.fixture
def journal(runtime: Any) -> JournalBuilder:
    b = JournalBuilder()
    b.plan("mid", phases=["plan", "envelope", "send"])
    b.commit("mid", "plan")
    b.plan("pay", phases=["plan", "charge"])
    b.commit("pay", "plan")
    _ingest(runtime.client, b, b.lines)
    assessment_refresh(run=Run.objects.get(run_id="run-1"))  # the worker's task, up to here
    return b


def test_a_get_over_an_unassessed_tail_writes_nothing_and_answers_for_the_whole_prefix(runtime, journal):
    assert _gate(runtime.client, "mid")["pending"] is False
    b = journal
    start = len(b.lines)
    b.commit("mid", "envelope", "send")
    b.terminal("mid")
    b.dispatch("pay", "card", effect_class="unsafe")  # no readback: unknown, so the turn holds
    b.plan("late")
    _ingest(runtime.client, b, b.lines[start:])
    run = Run.objects.get(run_id="run-1")
    assert run.assessed_seq is not None and run.assessed_seq < run.last_seq  # the tail is not assessed
    before = _store()
    mid, pay, late = (_gate(runtime.client, t) for t in ("mid", "pay", "late"))
    mismatch = _gate(runtime.client, "mid", "?expect=0:0")
    assert _store() == before  # not one row written, not one state touched
    assert mid["pending"] and mid["assessment"]["id"] is None
    assert mid["state"] == "done" and mid["decision"] == "complete"  # the stored assessment said resume
    assert pay["state"] == "hold" and pay["effective"]["state"] == "held_effect"
    assert late["state"] == "proceed" and late["resume_from"] is not None
    assert mismatch["state"] == "hold" and mismatch["reason"] == "offset_mismatch"
    # The worker stores the same answers: the GET said what the store now says.
    stored = assessment_refresh(run=run)
    for turn, answer in (("mid", mid), ("pay", pay), ("late", late)):
        now = _gate(runtime.client, turn)
        assert now["pending"] is False and now["assessment"]["id"] == stored.pk
        assert _answer(now) == _answer(answer)
        assert now["effective"]["state"] == answer["effective"]["state"]
    assert Assessment.objects.filter(run=run).count() == 2
