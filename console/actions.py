"""The operator's decisions: approve, block, and both in bulk over a filter. POST only, operator only.

Every decision goes through the store's services (recovery.services.turn_approve / turn_block), which
record who, when, what, why and the gate's state before and after as an OperatorAction.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_http_methods, require_POST

from journals import access
from journals.doors import turn_for_write
from journals.models import Intent, Resolution, Turn
from journals.selectors import turn_with_timeline
from kernel.errors import ServiceError
from recovery import services
from recovery.assignments import services as assignment
from recovery.imports.selectors import SourceWords
from recovery.state import StateChanged, state_of

from . import selectors
from .context import role_context
from .forms import BULK_ACTIONS, ApproveForm, BulkForm, DecisionForm, TurnFilterForm
from .live import render_live
from .permissions import operator_required
from .turn_context import TURN_REGION, turn_context
from .turn_detail import turn_page


def _next_url(request: HttpRequest, turn: Turn) -> str:
    target = request.POST.get("next", "")
    if target.startswith("/") and url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
        return target
    return reverse("console:turn", args=[turn.pk]) + "#gate-state"


def _indeterminate(turn: Turn) -> list[str]:
    """The approve form's evidence fields: the turn's live intents with an unknown outcome."""
    return list(
        Intent.objects.filter(turn=turn, live=True, resolution=Resolution.INDETERMINATE)
        .order_by("position")
        .values_list("intent_id", flat=True)
    )


def _rerender(
    request: HttpRequest,
    turn: Turn,
    *,
    approve: ApproveForm | None = None,
    block: DecisionForm | None = None,
    status: int = 400,
    error: ServiceError | None = None,
) -> HttpResponse:
    """The turn page again, with the refusal and what the person typed. Its forms carry the version the
    person decided on, except after `state_changed`: the page now shows (and names) the state it moved to,
    and a decision sent from it is made on that one."""
    page = turn_page(turn_with_timeline(turn=turn))  # read again: the decision may have moved it
    posted = approve or block
    seen = posted.cleaned_data.get("state_version") if posted is not None else None
    if isinstance(error, StateChanged):
        seen = None  # the page shows the state it moved to: the forms carry that one
    context = turn_context(request, page, seen=seen or None)
    words = context["words"]
    names = words.intent_labels() if isinstance(words, SourceWords) else {}
    if approve is not None:
        approve.name_intents(names)
    context |= {
        "approve_form": approve or ApproveForm(indeterminate=page.indeterminate, names=names),
        "block_form": block or DecisionForm(),
        "nav": "turns",
        "back": reverse("console:turns"),
        "decision_error": error.detail if error is not None else None,
    }
    response = render_live(request, "console/turn_detail.html", "console/_turn_live.html", TURN_REGION, context)
    response.status_code = status
    return response


@operator_required
@require_POST
def approve(request: HttpRequest, pk: int) -> HttpResponse:
    turn = turn_for_write(actor=request.user, pk=pk)
    form = ApproveForm(request.POST, indeterminate=_indeterminate(turn))
    if not form.is_valid():
        return _rerender(request, turn, approve=form)
    try:
        services.turn_approve(
            turn=turn,
            actor=request.user,
            reason=form.cleaned_data["reason"],
            evidence=form.evidence() or None,
            seen=form.seen(),
        )
    except ServiceError as err:
        return _rerender(request, turn, approve=form, status=err.status, error=err)
    messages.success(request, f"Approved turn {turn.turn_id}.")
    return HttpResponseRedirect(_next_url(request, turn))


@operator_required
@require_POST
def block(request: HttpRequest, pk: int) -> HttpResponse:
    turn = turn_for_write(actor=request.user, pk=pk)
    form = DecisionForm(request.POST)
    if not form.is_valid():
        return _rerender(request, turn, block=form)
    try:
        services.turn_block(turn=turn, actor=request.user, reason=form.cleaned_data["reason"], seen=form.seen())
    except ServiceError as err:
        return _rerender(request, turn, block=form, status=err.status, error=err)
    messages.success(request, f"Blocked turn {turn.turn_id}.")
    return HttpResponseRedirect(_next_url(request, turn))


def _filter_params(data: object) -> dict[str, str]:
    """The filter part of a request (the names TurnFilterForm reads), to carry it through the confirm page."""
    names = (*TurnFilterForm.FILTER_FIELDS, "sort")
    return {n: data.get(n) for n in names if data.get(n)}  # type: ignore[attr-defined]


@operator_required
@require_http_methods(["GET", "POST"])
def bulk(request: HttpRequest) -> HttpResponse:
    data = request.POST if request.method == "POST" else request.GET
    filter_form = TurnFilterForm(data)
    filters = {k: v for k, v in filter_form.cleaned().items() if k in TurnFilterForm.FILTER_FIELDS}
    if filters.get("assignee"):
        filters["assignee"] = assignment.assignee_filter(filters["assignee"], user=request.user)
    action = data.get("action", "")
    if action not in dict(BULK_ACTIONS):
        messages.error(request, "Choose approve or block.")
        return HttpResponseRedirect(reverse("console:turns"))
    if not filters:
        # A bulk decision over every turn of every run is never what an operator means: ask for a filter.
        messages.error(request, "Filter the turns first: a bulk decision applies to a filter, never to everything.")
        return HttpResponseRedirect(reverse("console:turns"))
    scope = access.run_scope(user=request.user)
    candidates = selectors.bulk_candidates(filters, action, scope=scope)
    count, capped = selectors.capped_count(candidates, cap=selectors.BULK_MAX)
    matching, matching_capped = selectors.capped_count(selectors.turns_filtered(filters, scope=scope))
    form = BulkForm(data if request.method == "POST" else None, initial={"action": action, "expected": count})
    stale = False
    params = _filter_params(data)
    if request.method == "POST" and form.is_valid() and not capped:
        if form.cleaned_data["expected"] != count:
            stale = True  # the filter's turns changed since the operator read the number: ask again
        else:
            outcome = services.turns_bulk_decide(
                turns=candidates, action=action, actor=request.user, reason=form.cleaned_data["reason"]
            )
            verb = "Approved" if action == "approve" else "Blocked"
            context = {"outcome": outcome, "verb": verb, "action_label": dict(BULK_ACTIONS)[action], "params": params}
            context.update(role_context(request))
            return render(request, "console/bulk_result.html", context)
    preview = list(candidates[:10])
    context = {
        "form": form,
        "action": action,
        "action_label": dict(BULK_ACTIONS)[action],
        "count": count,
        "capped": capped,
        "bulk_max": selectors.BULK_MAX,
        "matching": matching,
        "matching_capped": matching_capped,
        "preview": [(t, state_of(getattr(t, "effective", None))) for t in preview],
        "left_alone": selectors.bulk_left_alone(candidates) if action == "approve" else [],
        "params": params,
        "filters": filters,
        "stale": stale,
        "nav": "turns",
    }
    context.update(role_context(request))
    return render(request, "console/bulk_confirm.html", context, status=409 if stale else 200)


@operator_required
@require_POST
def assign(request: HttpRequest, pk: int) -> HttpResponse:
    """ "Take it" (``assignee=me``) or "Assign to…" (a username): recovery.assignment.turn_assign decides."""
    turn = turn_for_write(actor=request.user, pk=pk)
    wanted = request.POST.get("assignee", "me")
    user_model = get_user_model()
    assignee = request.user if wanted == "me" else user_model.objects.filter(username=wanted).first()
    try:
        why = request.POST.get("reason")
        done = assignment.turn_assign(turn=turn, actor=request.user, assignee=assignee, reason=why)
    except ServiceError as err:
        return _rerender(request, turn, status=err.status, error=err)
    messages.success(request, f"Turn {turn.turn_id} is assigned to {done.assignee.get_username()}.")
    return HttpResponseRedirect(_next_url(request, turn))


@operator_required
@require_POST
def unassign(request: HttpRequest, pk: int) -> HttpResponse:
    turn = turn_for_write(actor=request.user, pk=pk)
    try:
        assignment.turn_unassign(turn=turn, actor=request.user, reason=request.POST.get("reason"))
    except ServiceError as err:
        return _rerender(request, turn, status=err.status, error=err)
    messages.success(request, f"Turn {turn.turn_id} has no reviewer now.")
    return HttpResponseRedirect(_next_url(request, turn))
