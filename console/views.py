"""The console's pages. Thin: parse the request, call a selector or a service, render.

Reads need the viewer role, decisions the operator role (console.permissions, on journals.access), and
every read keeps to the runs of the reader's teams (``_scope``; one object through its door, journals.doors):
another team's run, turn or count is absent, and its page a 404, the answer of a missing one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.middleware.csrf import get_token
from django.shortcuts import render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.cache import cache_control
from django.views.decorators.http import require_http_methods

from journals import access
from journals.doors import run_for_read, turn_for_read
from journals.models import JournalRecord
from recovery.assignments import services as assignment
from recovery.imports.selectors import SourceWords, source_words

from . import integrations, selectors
from . import runs as runs_pages
from .context import page_number, role_context
from .forms import (
    COMMON_ZONES,
    ApproveForm,
    DecisionForm,
    RecordFilterForm,
    RunFilterForm,
    TimezoneForm,
    TurnFilterForm,
)
from .live import live_part, render_live
from .middleware import SESSION_KEY, zone_or_none
from .permissions import viewer_required
from .pictures import held_age, run_timeline
from .rows import queue_rows, record_items, turn_rows
from .saved_views import saved_views_context
from .turn_context import TURN_REGION, seen_on_page, turn_context
from .turn_detail import turn_page

RUN_REGION = "run-live"
OVERVIEW_REGION = "overview-live"

def _scope(request: HttpRequest) -> access.RunScope:
    """The runs the signed-in person sees and acts on (journals.access decides)."""
    return access.run_scope(user=request.user)


@viewer_required
def overview(request: HttpRequest) -> HttpResponse:
    """The overview; its live part (the tiles, charts, held age, held queue and latest actions) polls this view,
    which then reads only that part's figures: all of them in one answer, so that they cannot disagree."""
    ov = selectors.overview(scope=_scope(request))
    context: dict[str, object] = {
        "ov": ov,
        "age": held_age(scope=_scope(request)),
        "queue_html": queue_rows(ov.blocked_queue, admin=access.can_administer(request.user)),
        **role_context(request),
    }
    if not live_part(request, OVERVIEW_REGION):
        context |= {
            "heartbeats": integrations.heartbeats(),
            "findings": integrations.open_findings(limit=8, scope=_scope(request)),
            "nav": "overview",
        }
    return render_live(request, "console/overview.html", "console/_overview_live.html", OVERVIEW_REGION, context)


def _resolved(filters: dict[str, Any], request: HttpRequest) -> dict[str, Any]:
    """The filter as the selectors read it: ``assignee=me`` names the signed-in person."""
    if filters.get("assignee"):
        filters["assignee"] = assignment.assignee_filter(filters["assignee"], user=request.user)
    return filters


@viewer_required
def turns(request: HttpRequest) -> HttpResponse:
    form = TurnFilterForm(request.GET)
    filters = _resolved(form.cleaned(), request)
    page = selectors.turns_page(filters, page_number(request), filters.get("per_page") or 50, scope=_scope(request))
    has_filter = any(k in filters for k in TurnFilterForm.FILTER_FIELDS)
    role = role_context(request)
    rows_html = turn_rows(
        page.rows,
        full_path=request.get_full_path(),
        can_operate=bool(role["can_operate"]),
        csrf_token=get_token(request),
    )
    context = {
        "rows_html": rows_html,
        "form": form,
        "page": page,
        "filters": filters,
        "has_filter": has_filter,
        "nav": "inbox" if filters.get("assignee") == request.user.get_username() else "turns",
        "bulk_query": request.GET.urlencode(),
        **saved_views_context(request, "turns"),
        **role,
    }
    return render_live(request, "console/turns.html", "console/_turns_results.html", "turns-live", context)


@viewer_required
def inbox_count(request: HttpRequest) -> HttpResponse:
    """The top bar's count of held turns assigned to the signed-in person (loaded by htmx: the pages
    themselves keep their query counts)."""
    return HttpResponse(str(assignment.inbox_count(user=request.user)), content_type="text/plain; charset=utf-8")


@viewer_required
def blocked_queue(request: HttpRequest) -> HttpResponse:
    """The live part of the overview, polled by htmx every few seconds; opened by itself, a page of its own."""
    queue = list(selectors.blocked_queue(15, scope=_scope(request)))
    rows = queue_rows(queue, admin=access.can_administer(request.user))
    context = {"queue": queue, "queue_html": rows, "nav": "overview", **role_context(request)}
    return render_live(request, "console/blocked_queue.html", "console/_blocked_queue.html", "blocked-queue", context)


@viewer_required
def runs(request: HttpRequest) -> HttpResponse:
    form = RunFilterForm(request.GET)
    filters = form.cleaned()
    runs = selectors.runs_filtered(filters, scope=_scope(request))
    page = selectors.page_of(runs, page_number(request), filters.get("per_page") or 50)
    selectors.decorate_runs(page.rows)
    context = {"form": form, "page": page, "nav": "runs", **saved_views_context(request, "runs")}
    context |= role_context(request)
    return render_live(request, "console/runs.html", "console/_runs_results.html", "runs-live", context)


@viewer_required
def run_detail(request: HttpRequest, pk: int) -> HttpResponse:
    run = run_for_read(actor=request.user, pk=pk)
    page = runs_pages.run_page(run, page_number(request))
    timeline = run_timeline(run, total=page.turn_total)
    shown = {r.turn.turn_id for r in page.grid.rows} | {b.turn.turn_id for b in timeline.bars}
    words = source_words(run_id=run.run_id, turns=sorted(shown))
    if words is not None:  # an imported run: its turns in its source's words
        page.grid.names = {t: w.name for t, w in words.turns.items() if w.name}
        timeline.name(page.grid.names)
    context = {"p": page, "run": run, "words": words, "timeline": timeline, "nav": "runs", **role_context(request)}
    # Its status, counts, fork tree, timeline, grid and record count re-read together: one poll, one picture.
    return render_live(request, "console/run_detail.html", "console/_run_live.html", RUN_REGION, context)


@viewer_required
def run_records(request: HttpRequest, pk: int) -> HttpResponse:
    run = run_for_read(actor=request.user, pk=pk)
    form = RecordFilterForm(request.GET)
    history = runs_pages.history(run, form.cleaned(), page_number(request))
    context = {"h": history, "run": run, "form": form, "page": history.page, "nav": "runs", **role_context(request)}
    context["records_html"] = record_items(history.rows, history.turn_pks)
    return render(request, "console/run_records.html", context)


@viewer_required
def run_record(request: HttpRequest, pk: int, branch: int, lsn: int) -> HttpResponse:
    run = run_for_read(actor=request.user, pk=pk)
    try:
        page = runs_pages.record_page(run, branch, lsn)
    except JournalRecord.DoesNotExist:
        raise Http404("No record at this branch and lsn.") from None
    return render(request, "console/run_record.html", {"p": page, "run": run, "nav": "runs", **role_context(request)})


@viewer_required
def turn_detail(request: HttpRequest, pk: int) -> HttpResponse:
    # The door checks the reader's scope before the page is built: another team's turn is a missing one.
    page = turn_page(turn_for_read(actor=request.user, pk=pk, timeline=True))
    polled = live_part(request, TURN_REGION)
    context = turn_context(request, page, seen=seen_on_page(request) if polled else None)
    if not polled:  # the poll never replaces the forms: a reason half written stays
        words = context["words"]
        context |= {
            "approve_form": ApproveForm(
                indeterminate=page.indeterminate,
                names=words.intent_labels() if isinstance(words, SourceWords) else None,
            ),
            "block_form": DecisionForm(),
            "nav": "turns",
            "back": _safe_back(request),
        }
    return render_live(request, "console/turn_detail.html", "console/_turn_live.html", TURN_REGION, context)


def _safe_back(request: HttpRequest) -> str:
    back = request.GET.get("back", "")
    if back and url_has_allowed_host_and_scheme(back, allowed_hosts={request.get_host()}) and back.startswith("/"):
        return back
    return reverse("console:turns")


@viewer_required
@require_http_methods(["GET", "POST"])
def preferences(request: HttpRequest) -> HttpResponse:
    current = request.session.get(SESSION_KEY, "")
    if request.method == "POST":
        form = TimezoneForm(request.POST)
        if form.is_valid() and zone_or_none(form.cleaned_data["zone"]) is not None:
            request.session[SESSION_KEY] = form.cleaned_data["zone"]
            return HttpResponseRedirect(reverse("console:preferences") + "?saved=1")
    else:
        form = TimezoneForm(initial={"zone": current or None})
    return render(
        request,
        "console/preferences.html",
        {
            "form": form,
            "common_zones": COMMON_ZONES,
            "current": current,
            "saved": request.GET.get("saved") == "1",
            "nav": "prefs",
            **role_context(request),
        },
    )


_FAVICON = Path(__file__).resolve().parent.parent / "static" / "console" / "favicon.ico"


@cache_control(max_age=86400, public=True)
def favicon(request: HttpRequest) -> HttpResponse:
    """/favicon.ico, where browsers ask for it (the pages also link the file under static/)."""
    return HttpResponse(_FAVICON.read_bytes(), content_type="image/x-icon")
