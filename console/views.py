"""The console's pages. Thin: parse the request, call a selector or a service, render.

Reads need the viewer role, decisions the operator role (console.permissions, on loopx_site.access).
"""

from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.middleware.csrf import get_token
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_http_methods

from journals.models import Run, Turn
from loopx_site import access
from recovery.selectors import RUN_LEVEL_CODES

from . import integrations, selectors
from .forms import ApproveForm, ReasonForm, RunFilterForm, TimezoneForm, TurnFilterForm
from .middleware import SESSION_KEY, zone_or_none
from .permissions import viewer_required
from .rows import queue_rows, turn_rows
from .turn_detail import turn_page


def _page_number(request: HttpRequest) -> int:
    try:
        return max(1, int(request.GET.get("page", "1")))
    except ValueError:
        return 1


def _role_context(request: HttpRequest) -> dict[str, object]:
    return {
        "can_operate": access.can_operate(request.user),
        "role": access.role_of(request.user),
        "run_level_codes": RUN_LEVEL_CODES,
    }


@viewer_required
def overview(request: HttpRequest) -> HttpResponse:
    ov = selectors.overview()
    context = {
        "ov": ov,
        "queue_html": queue_rows(ov.blocked_queue),
        "heartbeats": integrations.heartbeats(),
        "findings": integrations.open_findings(limit=8),
        "nav": "overview",
        **_role_context(request),
    }
    return render(request, "console/overview.html", context)


@viewer_required
def turns(request: HttpRequest) -> HttpResponse:
    form = TurnFilterForm(request.GET)
    filters = form.cleaned()
    page = selectors.page_of(selectors.turns_filtered(filters), _page_number(request), filters.get("per_page") or 50)
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
        "nav": "turns",
        "bulk_query": request.GET.urlencode(),
        **role,
    }
    return render(request, "console/turns.html", context)


@viewer_required
def blocked_queue(request: HttpRequest) -> HttpResponse:
    """The live part of the overview: polled by htmx every few seconds."""
    queue = list(selectors.blocked_queue(15))
    return render(
        request,
        "console/_blocked_queue.html",
        {"queue": queue, "queue_html": queue_rows(queue), **_role_context(request)},
    )


@viewer_required
def runs(request: HttpRequest) -> HttpResponse:
    form = RunFilterForm(request.GET)
    filters = form.cleaned()
    page = selectors.page_of(selectors.runs_filtered(filters), _page_number(request), filters.get("per_page") or 50)
    selectors.decorate_runs(page.rows)
    return render(request, "console/runs.html", {"form": form, "page": page, "nav": "runs", **_role_context(request)})


@viewer_required
def run_detail(request: HttpRequest, pk: int) -> HttpResponse:
    run = get_object_or_404(Run, pk=pk)
    return HttpResponseRedirect(reverse("console:turns") + "?" + f"run={_quote(run.run_id)}&sort=run")


def _quote(value: str) -> str:
    from urllib.parse import quote

    return quote(value, safe="")


@viewer_required
def turn_detail(request: HttpRequest, pk: int) -> HttpResponse:
    try:
        page = turn_page(pk)  # reads the turn itself, with its timeline: no separate lookup
    except Turn.DoesNotExist:
        raise Http404("No such turn.") from None
    context = {
        "p": page,
        "turn": page.turn,
        "approve_form": ApproveForm(indeterminate=page.indeterminate),
        "block_form": ReasonForm(),
        "nav": "turns",
        "back": _safe_back(request),
        **_role_context(request),
    }
    return render(request, "console/turn_detail.html", context)


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
            "current": current,
            "saved": request.GET.get("saved") == "1",
            "nav": "prefs",
            **_role_context(request),
        },
    )
