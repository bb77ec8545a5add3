"""What the pages say: secrets never appear, times follow the operator's zone, filters stay in the URL."""

from __future__ import annotations

import pytest
from django.urls import reverse

from recovery.services import turn_approve
from tests.console.scenarios import SECRET

pytestmark = pytest.mark.django_db


def _every_page(pay, torn) -> list[str]:
    urls = [
        reverse("console:overview"),
        reverse("console:turns"),
        reverse("console:turns") + "?q=t-",
        reverse("console:runs"),
        reverse("console:blocked_queue"),
        reverse("console:findings") + "?state=all",
        reverse("console:packages"),
        reverse("console:bulk") + "?decision=blocked&action=block",
        reverse("console:bulk") + "?decision=blocked&action=approve",
    ]
    for scenario in (pay, torn):
        urls += [reverse("console:turn", args=[t.pk]) for t in scenario.turns.values()]
    return urls


def test_secrets_never_reach_a_page(op_pages, operator, pay, torn):
    # Put the secret where an operator's words could carry it too: the history shows before/after.
    turn_approve(turn=pay.turns["t-skip"], actor=operator, reason="reviewed")
    for url in _every_page(pay, torn):
        html = op_pages.get(url).content.decode()
        assert SECRET not in html, url
    charge = op_pages.get(reverse("console:turn", args=[pay.turns["t-charge"].pk])).content.decode()
    # The blocking record is shown, with its secret field replaced.
    assert "card_token" in charge and "[redacted]" in charge and "charge-card" in charge


def test_the_timeline_names_each_phase_and_the_blocking_record(op_pages, pay):
    html = op_pages.get(reverse("console:turn", args=[pay.turns["t-skip"].pk])).content.decode()
    for phase in ("plan", "envelope", "dispatch", "execute", "readback", "writeback", "spend"):
        assert f'data-phase="{phase}"' in html
    assert "The engine blocks it: phase out of order" in html
    assert "A phase was committed out of order" in html
    assert "journal line" in html and "branch 0" in html and "phase_committed" in html
    resume = op_pages.get(reverse("console:turn", args=[pay.turns["t-resume"].pk])).content.decode()
    assert "resume here" in resume and "Resume from <strong>execute</strong>" in resume


def test_the_indeterminate_effect_points_at_its_dispatch(op_pages, pay):
    html = op_pages.get(reverse("console:turn", args=[pay.turns["t-charge"].pk])).content.decode()
    assert "The engine blocks it: unknown whether an effect happened" in html and "held: effect unconfirmed" in html
    assert "intent_dispatched" in html
    assert "Did intent <code>charge-card</code> happen?" in html


def test_the_fork_tree_keeps_discarded_branches_visible(op_pages, pay):
    html = op_pages.get(reverse("console:turn", args=[pay.turns["t-lost"].pk])).content.decode()
    assert 'class="gone"' in html  # the discarded suffix is drawn, greyed
    assert "discarded" in html and "branch 1" in html
    assert "Planned only on a discarded branch" in html


def test_times_follow_the_operator_zone(op_pages, pay):
    assert "UTC" in op_pages.get(reverse("console:overview")).content.decode()
    response = op_pages.post(reverse("console:preferences"), {"zone": "Asia/Tokyo"})
    assert response.status_code == 302
    html = op_pages.get(reverse("console:turn", args=[pay.turns["t-skip"].pk])).content.decode()
    assert "JST" in html and "Asia/Tokyo" in html
    # The record's own `at` (2026-01-01T00:00:xxZ) is shown in the zone too.
    assert "2026-01-01 09:00:" in html


def test_an_unknown_zone_is_refused(op_pages):
    response = op_pages.post(reverse("console:preferences"), {"zone": "Mars/Olympus"})
    assert response.status_code == 200
    assert "Not a time zone name" in response.content.decode()


def test_filters_live_in_the_url_and_narrow_the_list(op_pages, pay, torn):
    html = op_pages.get(reverse("console:turns") + "?decision=blocked&reason=lsn_gap").content.decode()
    assert "t-a" in html and "t-skip" not in html
    assert "<strong>1</strong> turn match" in html
    html = op_pages.get(reverse("console:turns") + "?run=pay-run-1&status=completed").content.decode()
    assert "t-complete" in html and "t-resume" not in html
    html = op_pages.get(reverse("console:turns") + "?q=charge").content.decode()
    assert "t-charge" in html and "t-skip" not in html
    # Sorting links keep the filter.
    assert "decision=blocked" in op_pages.get(reverse("console:turns") + "?decision=blocked").content.decode()
    # A bad value is ignored, not an error.
    assert op_pages.get(reverse("console:turns") + "?decision=nonsense&age=zzz&page=x").status_code == 200


def test_pagination(op_pages, db):
    from tests.console.scenarios import many_runs

    many_runs(1, 30)
    first = op_pages.get(reverse("console:turns") + "?per_page=25").content.decode()
    assert "Page 1 of 2" in first and 'rel="next"' in first
    second = op_pages.get(reverse("console:turns") + "?per_page=25&page=2").content.decode()
    assert "showing 26–30" in second and 'rel="prev"' in second


def test_the_overview_counts_and_charts(op_pages, pay, torn):
    html = op_pages.get(reverse("console:overview")).content.decode()
    assert '<svg class="bars"' in html and "<title" in html
    assert "phase out of order" in html and "unknown whether an effect happened" in html  # reasons in words
    # One poll re-reads the figures and the queue together: the overview's own address, its live part.
    live = html.split('id="overview-live"')[1]
    assert live.startswith(' data-live hx-get="/" hx-trigger="every 10s"')
    assert 'data-tile="waiting"' in live and 'id="blocked-queue"' in live and '<svg class="bars"' in live
    assert 'hx-get="/queue/blocked/"' not in html
    assert "t-skip" in html  # in the blocked queue


@pytest.mark.parametrize("runs_by_key", [1_000, 1])
def test_a_search_matches_a_turn_a_lineage_or_a_run_id_in_any_case(op_pages, db, monkeypatch, runs_by_key):
    from recovery import state
    from tests.console.scenarios import many_runs

    # The runs a search matches are named by key up to SEARCH_RUNS, and matched in the turns' query past it:
    # the same turns either way.
    monkeypatch.setattr(state, "SEARCH_RUNS", runs_by_key)
    many_runs(3, 2, prefix="Findme")
    many_runs(2, 1, prefix="other")

    def shown(q: str) -> str:
        return op_pages.get(reverse("console:turns") + f"?q={q}").content.decode()

    html = shown("findme-000")  # three run ids, in another case
    assert "<strong>6</strong> turns match" in html and "Findme-0002" in html and "other-0000" not in html
    html = shown("JOB-1-")  # the lineages job-1-0 and job-1-1 in Findme-0001, job-1-0 in other-0001
    assert "<strong>3</strong> turns match" in html and "other-0001" in html and "Findme-0000" not in html
    assert "<strong>1</strong> turn matches" in shown("turn-2-1")
    assert "No turn matches these filters." in shown("nowhere")
