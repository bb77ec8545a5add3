"""The console's pictures (console/pictures.py), each an inline SVG with a title and a text alternative: a
run's timeline (turns as bars over record order, coloured by effective state, a tick per dispatch and a dot
per readback, bounded to the held and latest turns), the overview's held age (the oldest held turn's wait,
hour by hour) and a repair's preview (the records kept and set aside, a bar per branch)."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from console.pictures import TIMELINE_TURNS, held_age
from engine.writer import JournalWriter
from journals.access import RunScope
from journals.models import JournalRecord, Run, TurnEffective
from journals.services import records_ingest
from recovery.services import assessment_refresh
from tests.console.conftest import page_client
from tests.console.scenarios import ingest

pytestmark = pytest.mark.django_db


def _rows(html: str) -> dict[str, str]:
    """Each timeline row's markup, by its turn."""
    svg = html[html.index('<svg class="runtl"') : html.index("</svg>", html.index('<svg class="runtl"'))]
    return dict(re.findall(r'<g class="tl-row" data-turn="([^"]+)"[^>]*>(.*?)</g>', svg, re.S))


def test_the_run_timeline_draws_each_turn_in_its_state_with_its_dispatches_and_readbacks(op_pages, pay) -> None:
    html = op_pages.get(reverse("console:run", args=[pay.run.pk])).content.decode()
    assert 'role="img"' in html and '<title id="runtl-t">' in html and "The timeline as a table" in html
    rows = _rows(html)
    states = dict(TurnEffective.objects.filter(run=pay.run).values_list("turn__turn_id", "state"))
    assert set(rows) == set(states) and len(rows) == 6
    for turn, markup in rows.items():
        # Coloured by the effective state, the one every page reads.
        assert f'class="tl-bar bar-{states[turn]}"' in markup, turn
        records = JournalRecord.objects.filter(run=pay.run, turn=turn)
        assert markup.count('class="tl-dispatch"') == records.filter(kind="intent_dispatched").count(), turn
        assert markup.count('class="tl-readback"') == records.filter(kind="effect_observed").count(), turn
    assert states["t-charge"] == "held_effect" and rows["t-charge"].count('class="tl-dispatch"') == 2
    assert 'class="tl-bar bar-complete"' in rows["t-complete"]
    assert 'class="tl-bar bar-discarded"' in rows["t-lost"]
    # Bars sit in record order: the charge's bar starts after the completed turn's.
    x = {t: float(re.search(r'<rect class="tl-bar[^"]*" x="([\d.]+)"', m).group(1)) for t, m in rows.items()}
    assert x["t-complete"] < x["t-resume"] < x["t-charge"] < x["t-skip"]
    assert "Showing" not in html[html.index('id="run-timeline-note"') :].split("</p>")[0]


def test_a_long_run_s_timeline_shows_its_held_turns_and_its_latest(op_pages) -> None:
    w = JournalWriter("long-run")
    w.plan("t-held", lineage="job")
    w.commit("t-held", "plan")
    w.dispatch("t-held", "charge", "unsafe")  # no readback: held
    for n in range(30):
        w.complete_turn(f"t-{n:02d}", lineage="job")
    run = ingest(w)
    html = op_pages.get(reverse("console:run", args=[run.pk])).content.decode()
    rows = _rows(html)
    assert len(rows) == TIMELINE_TURNS
    assert "t-held" in rows and "t-29" in rows and "t-00" not in rows
    assert re.search(r'data-turn="t-held" data-state="held_effect"', html)
    note = html[html.index('id="run-timeline-note"') :].split("</p>")[0]
    assert f"Showing {TIMELINE_TURNS} of 31 turns: the held ones and the latest." in note


def test_the_held_age_is_the_oldest_held_turn_s_wait_hour_by_hour(op_pages, pay) -> None:
    now = timezone.now()
    held = TurnEffective.objects.filter(run=pay.run, gate="hold").order_by("turn_id")
    assert held.count() == 2
    first, second = held
    TurnEffective.objects.filter(pk=first.pk).update(since=now - timedelta(hours=5, minutes=30))
    TurnEffective.objects.filter(pk=second.pk).update(since=now - timedelta(hours=2))
    age = held_age(scope=RunScope.of(["pay-"]), now=now)
    assert len(age.points) == 25 and age.held_now == 2 and not age.capped
    by_hours_ago = {24 - k: p for k, p in enumerate(age.points)}
    assert by_hours_ago[0].age == timedelta(hours=5, minutes=30) and by_hours_ago[0].held == 2
    assert by_hours_ago[3].age == timedelta(hours=2, minutes=30) and by_hours_ago[3].held == 1
    assert by_hours_ago[6].age is None and by_hours_ago[6].held == 0
    assert age.now.age_words == "5 h 30 min"
    # The line is drawn only where a turn was held, and rises with the wait.
    assert len(age.line.split()) == 6 and by_hours_ago[0].y < by_hours_ago[5].y
    # Another team's held turns are not in its picture.
    assert held_age(scope=RunScope.of(["other-"]), now=now).held_now == 0

    html = op_pages.get(reverse("console:overview")).content.decode()
    svg = html[html.index('<svg class="heldage"') : html.index("</svg>", html.index('<svg class="heldage"'))]
    assert 'role="img"' in svg and "2 held" in svg and '<polyline class="age-line"' in svg
    assert "The held age as a table" in html and 'id="held-age-note"' in html


def test_the_held_age_past_its_cap_reads_the_oldest_held_turns(pay, monkeypatch) -> None:
    from console import pictures

    now = timezone.now()
    first, second = TurnEffective.objects.filter(run=pay.run, gate="hold").order_by("turn_id")
    TurnEffective.objects.filter(pk=first.pk).update(since=now - timedelta(hours=5, minutes=30))
    TurnEffective.objects.filter(pk=second.pk).update(since=now - timedelta(hours=2))
    monkeypatch.setattr(pictures, "HELD_AGE_CAP", 1)
    age = held_age(scope=RunScope.of(["pay-"]), now=now)
    # The oldest one is read; there are more than that: "at least" one held, since 5 h 30 min.
    assert age.capped and age.held_now == 1 and age.now.age == timedelta(hours=5, minutes=30)
    by_hours_ago = {24 - k: p for k, p in enumerate(age.points)}
    assert by_hours_ago[0].held == 1 and by_hours_ago[4].held == 1 and by_hours_ago[6].held == 0


def broken_run() -> Run:
    """A run over two branches (a rewind) whose second-to-last record names a wrong ``prev``: blocked by
    ``chain_broken``, a run-level fault a repair accepts a prefix of."""
    w = JournalWriter("broken-run")
    w.complete_turn("t1", lineage="job")
    keep = w.next_lsn[w.branch] - 1
    w.plan("t-lost", lineage="job")
    w.fork(keep, reason="rewind")
    w.plan("t2", lineage="job")
    w.commit("t2", "plan")
    w.commit("t2", "envelope")
    lines = w.data().splitlines()
    bad = json.loads(lines[-2])
    bad["prev"] = "0" * 64
    lines[-2] = json.dumps(bad, sort_keys=True, separators=(",", ":")).encode()
    body = b"\n".join(lines) + b"\n"
    records_ingest(run_id="broken-run", body=body, content_type="application/x-ndjson", token=None)
    run = Run.objects.get(run_id="broken-run")
    assert assessment_refresh(run=run).blocked_reason == "chain_broken"
    return run


def test_the_repair_preview_draws_the_records_kept_and_set_aside(operator) -> None:
    run = broken_run()
    through = run.last_seq - 2  # the record before the one with the wrong prev
    pages = page_client(operator)
    html = pages.post(
        reverse("console:run_repair", args=[run.pk]), {"kind": "accept_prefix", "through_seq": through, "reason": "cut"}
    ).content.decode()
    assert 'id="repair-preview"' in html and '<svg class="repairpic"' in html and 'role="img"' in html
    rows = re.findall(r'<g class="repair-row" data-row="([^"]+)" data-kept="(\d+)" data-aside="(\d+)"', html)
    records = JournalRecord.objects.filter(run=run)
    expected = [
        (
            f"branch {b}",
            str(records.filter(branch=b, seq__lte=through).count()),
            str(records.filter(branch=b, seq__gt=through).count()),
        )
        for b in (0, 1)
    ]
    assert rows == expected and expected[1][2] == "2"  # the two records from the wrong prev on, on branch 1
    assert 'class="kept"' in html and 'class="aside"' in html
