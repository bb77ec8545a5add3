"""The console's pages. Thin: parse the request, call a selector or a service, render.

Reads need the viewer role, decisions the operator role (console.permissions, on journals.access), and
every read keeps to the runs of the reader's teams (``_scope``): another team's run, turn or count is
absent, and its page a 404, the answer of a missing one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.middleware.csrf import get_token
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.cache import cache_control
from django.views.decorators.http import require_http_methods

from journals import access
from journals.models import JournalRecord, Run, Turn
from recovery.assignments import services as assignment
from recovery.selectors import RUN_LEVEL_CODES
from recovery.state import DONE

from . import integrations, selectors
from . import runs as runs_pages
from .forms import COMMON_ZONES, ApproveForm, ReasonForm, RecordFilterForm, RunFilterForm, TimezoneForm, TurnFilterForm
from .live import live_part, render_live
from .middleware import SESSION_KEY, zone_or_none
from .permissions import viewer_required
from .rows import queue_rows, record_items, turn_rows
from .saved_views import saved_views_context
from .timeline import turn_timeline
from .turn_detail import turn_page

TURN_REGION = "turn-live"
FINISHED = "This turn is finished, so its state is not refreshed."


def _page_number(request: HttpRequest) -> int:
    try:
        return max(1, int(request.GET.get("page", "1")))
    except ValueError:
        return 1


def _scope(request: HttpRequest) -> access.RunScope:
    """The runs the signed-in person sees and acts on (journals.access decides)."""
    return access.run_scope(user=request.user)


def _role_context(request: HttpRequest) -> dict[str, object]:
    return {
        "can_operate": access.can_operate(request.user),
        "role": access.role_of(request.user),
        "run_level_codes": RUN_LEVEL_CODES,
    }


@viewer_required
def overview(request: HttpRequest) -> HttpResponse:
    ov = selectors.overview(scope=_scope(request))
    context = {
        "ov": ov,
        "queue_html": queue_rows(ov.blocked_queue),
        "heartbeats": integrations.heartbeats(),
        "findings": integrations.open_findings(limit=8, scope=_scope(request)),
        "nav": "overview",
        **_role_context(request),
    }
    return render(request, "console/overview.html", context)


def _resolved(filters: dict[str, Any], request: HttpRequest) -> dict[str, Any]:
    """The filter as the selectors read it: ``assignee=me`` names the signed-in person."""
    if filters.get("assignee"):
        filters["assignee"] = assignment.assignee_filter(filters["assignee"], user=request.user)
    return filters


@viewer_required
def turns(request: HttpRequest) -> HttpResponse:
    form = TurnFilterForm(request.GET)
    filters = _resolved(form.cleaned(), request)
    page = selectors.turns_page(filters, _page_number(request), filters.get("per_page") or 50, scope=_scope(request))
    has_filter = any(k in filters for k in TurnFilterForm.FILTER_FIELDS)
    role = _role_context(request)
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
    context = {"queue": queue, "queue_html": queue_rows(queue), "nav": "overview", **_role_context(request)}
    return render_live(request, "console/blocked_queue.html", "console/_blocked_queue.html", "blocked-queue", context)


@viewer_required
def runs(request: HttpRequest) -> HttpResponse:
    form = RunFilterForm(request.GET)
    filters = form.cleaned()
    runs = selectors.runs_filtered(filters, scope=_scope(request))
    page = selectors.page_of(runs, _page_number(request), filters.get("per_page") or 50)
    selectors.decorate_runs(page.rows)
    context = {"form": form, "page": page, "nav": "runs", **saved_views_context(request, "runs")}
    context |= _role_context(request)
    return render_live(request, "console/runs.html", "console/_runs_results.html", "runs-live", context)


@viewer_required
def run_detail(request: HttpRequest, pk: int) -> HttpResponse:
    run = get_object_or_404(Run.objects.filter(_scope(request).q("run_id")), pk=pk)
    page = runs_pages.run_page(run, _page_number(request))
    return render(request, "console/run_detail.html", {"p": page, "run": run, "nav": "runs", **_role_context(request)})


@viewer_required
def run_records(request: HttpRequest, pk: int) -> HttpResponse:
    run = get_object_or_404(Run.objects.filter(_scope(request).q("run_id")), pk=pk)
    form = RecordFilterForm(request.GET)
    history = runs_pages.history(run, form.cleaned(), _page_number(request))
    context = {"h": history, "run": run, "form": form, "page": history.page, "nav": "runs", **_role_context(request)}
    context["records_html"] = record_items(history.rows, history.turn_pks)
    return render(request, "console/run_records.html", context)


@viewer_required
def run_record(request: HttpRequest, pk: int, branch: int, lsn: int) -> HttpResponse:
    run = get_object_or_404(Run.objects.filter(_scope(request).q("run_id")), pk=pk)
    try:
        page = runs_pages.record_page(run, branch, lsn)
    except JournalRecord.DoesNotExist:
        raise Http404("No record at this branch and lsn.") from None
    return render(request, "console/run_record.html", {"p": page, "run": run, "nav": "runs", **_role_context(request)})


@viewer_required
def turn_detail(request: HttpRequest, pk: int) -> HttpResponse:
    try:
        page = turn_page(pk)  # reads the turn itself, with its timeline: no separate lookup
    except Turn.DoesNotExist:
        raise Http404("No such turn.") from None
    if not _scope(request).allows(page.turn.run.run_id):
        raise Http404("No such turn.")  # another team's turn answers as a missing one
    context: dict[str, object] = {
        "p": page,
        "turn": page.turn,
        # A finished turn's state is not polled: nothing a person or the gate does moves it on.
        "live_off": FINISHED if page.state and page.state.gate == DONE else "",
        **_review_context(request, page.turn),
        **_role_context(request),
    }
    if not live_part(request, TURN_REGION):  # the live part is the state card alone
        context |= {
            "timeline": turn_timeline(page),
            "approve_form": ApproveForm(indeterminate=page.indeterminate),
            "block_form": ReasonForm(),
            "nav": "turns",
            "back": _safe_back(request),
        }
    return render_live(request, "console/turn_detail.html", "console/_turn_state.html", TURN_REGION, context)


def _review_context(request: HttpRequest, turn: Turn) -> dict[str, object]:
    """Who reviews the turn, and whom an operator may hand it to (the "Assign to…" list)."""
    review = assignment.assignment_of(turn_pk=turn.pk)
    people = assignment.assignable_users(run_id=turn.run.run_id) if access.can_operate(request.user) else []
    return {"review": review, "assignable": people}


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
            **_role_context(request),
        },
    )


_FAVICON = Path(__file__).resolve().parent.parent / "static" / "console" / "favicon.ico"


@cache_control(max_age=86400, public=True)
def favicon(request: HttpRequest) -> HttpResponse:
    """/favicon.ico, where browsers ask for it (the pages also link the file under static/)."""
    return HttpResponse(_FAVICON.read_bytes(), content_type="image/x-icon")
