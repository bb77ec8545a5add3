"""Findings of the scheduled audits: list (viewer), acknowledge and resolve with a reason (operator).

Transitions go through the tasks side's services (recovery.findings.services), which keep who/when/why.
"""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.views.decorators.http import require_POST

from journals import access
from journals.models import Turn
from kernel.errors import ServiceError
from recovery.findings import services as finding_services
from recovery.findings.doors import finding_for_write
from recovery.findings.models import FINDING_KINDS, FINDING_STATES, UNRESOLVED, Finding
from recovery.findings.selectors import turn_findings_q

from . import selectors
from .context import role_context
from .forms import ReasonForm
from .live import render_live
from .permissions import operator_required, viewer_required


def _number(text: str) -> int | None:
    return int(text) if text.isdigit() and len(text) <= 18 else None


def _list_url(request: HttpRequest) -> str:
    back = request.POST.get("next", "")
    return back if back.startswith("/findings/") else reverse("console:findings")


@viewer_required
def findings(request: HttpRequest) -> HttpResponse:
    state = request.GET.get("state", "unresolved")
    kind = request.GET.get("kind", "")
    # Findings of the runs the person sees: another team's is absent (and a 404 through its door when named).
    qs = (
        Finding.objects.filter(access.runs_visible(user=request.user, field="run__run_id"))
        .select_related("run", "turn", "acknowledged_by")
        .order_by("-last_seen", "-id")
    )
    if state == "unresolved":
        qs = qs.filter(state__in=UNRESOLVED)
    elif state in FINDING_STATES:
        qs = qs.filter(state=state)
    if kind in FINDING_KINDS:
        qs = qs.filter(kind=kind)
    # One turn's findings (its page links here): the same findings its page counts.
    turn = _number(request.GET.get("turn", ""))
    if turn is not None:
        run_pk = Turn.objects.filter(pk=turn).values_list("run_id", flat=True).first()
        qs = qs.filter(turn_findings_q(turn_pk=turn, run_pk=run_pk)) if run_pk is not None else qs.none()
    # One finding (a package's kept line links here): its row with the resolve form, whatever its state.
    only_pk = _number(request.GET.get("id", ""))
    if only_pk is not None:
        qs = qs.filter(pk=only_pk)
    try:
        number = max(1, int(request.GET.get("page", "1")))
    except ValueError:
        number = 1
    page = selectors.page_of(qs, number, 50)
    return render_live(
        request,
        "console/findings.html",
        "console/_findings_results.html",
        "findings-live",
        {
            "page": page,
            "state": state,
            "kind": kind,
            "only": only_pk,
            "states": ["unresolved", *FINDING_STATES, "all"],
            "kinds": FINDING_KINDS,
            "reason_form": ReasonForm(),
            "nav": "findings",
            **role_context(request),
        },
    )


@operator_required
@require_POST
def acknowledge(request: HttpRequest, pk: int) -> HttpResponse:
    finding = finding_for_write(actor=request.user, pk=pk)
    form = ReasonForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Acknowledging needs a reason of a few words.")
        return HttpResponseRedirect(_list_url(request))
    try:
        finding_services.finding_acknowledge(finding=finding, actor=request.user, reason=form.cleaned_data["reason"])
    except ServiceError as err:
        messages.error(request, err.detail)
    else:
        messages.success(request, f"Acknowledged finding {finding.pk} ({finding.kind.replace('_', ' ')}).")
    return HttpResponseRedirect(_list_url(request))


@operator_required
@require_POST
def resolve(request: HttpRequest, pk: int) -> HttpResponse:
    finding = finding_for_write(actor=request.user, pk=pk)
    form = ReasonForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Resolving needs a reason of a few words.")
        return HttpResponseRedirect(_list_url(request))
    try:
        finding_services.finding_resolve(finding=finding, actor=request.user, reason=form.cleaned_data["reason"])
    except ServiceError as err:
        messages.error(request, err.detail)
    else:
        messages.success(request, f"Resolved finding {finding.pk} ({finding.kind.replace('_', ' ')}).")
    return HttpResponseRedirect(_list_url(request))
