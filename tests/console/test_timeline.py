"""The turn page's planned-versus-actual timeline tells what happened: the record that broke the phase order
shown where it happened, commits on a discarded branch shown as such, dispatches and readbacks on the axis."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from engine.writer import JournalWriter
from journals.models import JournalRecord
from tests.console.scenarios import SECRET, ingest

pytestmark = pytest.mark.django_db


def _step(html: str, phase: str) -> str:
    found = re.search(rf'<li [^>]*data-phase="{phase}"[^>]*>(.*?)</li>', html, re.S)
    assert found, phase
    return found.group(0)


def test_the_violating_commit_shows_where_it_happened(op_pages):
    w = JournalWriter("tl-skip")
    w.plan("t", lineage="job")
    w.commit("t", "plan")
    w.commit("t", "dispatch")  # skips envelope: phase_prefix_violation, committed at lsn 2
    run = ingest(w)
    turn = run.turns.get(turn_id="t")
    html = op_pages.get(reverse("console:turn", args=[turn.pk])).content.decode()
    dispatch = _step(html, "dispatch")
    assert 'data-state="violation"' in dispatch and "committed out of order" in dispatch
    assert reverse("console:record", args=[run.pk, 0, 2]) in dispatch and "phase_prefix_violation" in dispatch
    assert 'data-state="blocked"' in _step(html, "envelope")
    assert 'data-state="committed"' in _step(html, "plan")


def test_discarded_commits_dispatches_and_readbacks_are_on_the_axis(op_pages):
    w = JournalWriter("tl-fork")
    w.plan("t", lineage="job")
    w.commit("t", "plan")
    keep = w.next_lsn[w.branch] - 1
    w.commit("t", "envelope")  # discarded by the fork below
    w.fork(keep, reason="operator rewind")
    w.commit("t", "envelope")
    w.dispatch("t", "pay", "unsafe", password=SECRET)
    w.observe("t", "pay", "succeeded")
    w.dispatch("t", "mail", "idempotent", key="k-1")
    run = ingest(w)
    turn = run.turns.get(turn_id="t")
    html = op_pages.get(reverse("console:turn", args=[turn.pk])).content.decode()
    envelope = _step(html, "envelope")
    assert 'data-state="committed"' in envelope
    assert reverse("console:record", args=[run.pk, 0, 2]) in envelope and "(discarded)" in envelope
    assert reverse("console:record", args=[run.pk, 1, 0]) in envelope
    events = html.split('id="turn-events"')[1].split("</details>")[0]
    assert "sent pay (unsafe)" in events and "readback of pay: succeeded" in events
    assert "<strong>settled</strong>" in events and "<strong>reissue</strong>" in events
    assert events.count("<tr class=") == JournalRecord.objects.filter(run=run, turn="t").count()
    assert "+1.0 s" in events  # the writer's clock ticks a second a record
    assert SECRET not in html
