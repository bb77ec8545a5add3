"""The trail (the operator trail, filtered and paged, with its streamed export) and the journal repair
page of a run (preview, then apply what was previewed). Thin: the rules are in trail/export.py and
recovery/repair/services.py."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from journals import access
from journals.doors import run_for_write
from kernel.errors import ServiceError
from kernel.via import VIA
from recovery.repair.models import REPAIR_KINDS
from recovery.repair.services import journal_repair_apply, journal_repair_preview, repairs_list
from trail.export import TrailQueryError, trail_export, trail_filters, trail_rows
from trail.models import OPERATOR_ACTION_KINDS

from . import selectors
from .context import page_number, role_context
from .permissions import operator_required, viewer_required
from .pictures import repair_picture

CONTENT_TYPES = {"jsonl": "application/jsonl", "csv": "text/csv; charset=utf-8"}


@viewer_required
def trail_page(request: HttpRequest) -> HttpResponse:
    try:
        filters = trail_filters(request.GET)
        error = None
    except TrailQueryError as err:
        filters, error = {}, err.detail
    scope = access.run_scope(user=request.user)
    rows = trail_rows(filters, scope=scope).order_by("-seq")
    page = selectors.page_of(rows, page_number(request), 50, count_qs=trail_rows(filters, scope=scope))
    return render(
        request,
        "console/trail.html",
        {"page": page, "filters": filters, "error": error, "kinds": OPERATOR_ACTION_KINDS, "vias": VIA,
         "nav": "trail", **role_context(request)},
        status=400 if error else 200,
    )


@operator_required
def trail_page_export(request: HttpRequest) -> HttpResponseBase:
    fmt = request.GET.get("format", "jsonl")
    try:
        stream = trail_export(actor=request.user, params=request.GET, fmt=fmt)
    except TrailQueryError as err:
        return HttpResponse(err.detail, status=err.status, content_type="text/plain; charset=utf-8")
    response = StreamingHttpResponse(stream, content_type=CONTENT_TYPES[fmt])
    response["Content-Disposition"] = f'attachment; filename="loopx-trail.{fmt}"'
    response["Cache-Control"] = "no-store"
    return response


class RepairForm(forms.Form):
    kind = forms.ChoiceField(choices=[(k, k.replace("_", " ")) for k in REPAIR_KINDS], widget=forms.RadioSelect)
    through_seq = forms.IntegerField(required=False, min_value=1, label="Accept the records through seq")
    journal = forms.FileField(required=False, label="Corrected journal (JSONL) the runtime re-sent")
    reason = forms.CharField(max_length=4000, widget=forms.Textarea(attrs={"rows": 2}))
    preview = forms.CharField(required=False, widget=forms.HiddenInput)

    def arguments(self) -> dict[str, object]:
        data = self.cleaned_data
        upload = data.get("journal")
        journal = upload.read() if upload is not None else None
        return {"kind": data["kind"], "through_seq": data.get("through_seq") if data["kind"] == "accept_prefix"
                else None, "journal": journal if data["kind"] == "supersede" else None}


@operator_required
@require_http_methods(["GET", "POST"])
def run_repair(request: HttpRequest, pk: int) -> HttpResponse:
    """GET: the run's repairs and the form. POST without ``apply``: the preview (stores nothing). POST with
    ``apply`` and the preview's digest: the repair, then back to this page."""
    run = run_for_write(actor=request.user, pk=pk)
    form = RepairForm(request.POST or None, request.FILES or None)
    preview = None
    error = None
    status = 200
    if request.method == "POST" and form.is_valid():
        args = form.arguments()
        try:
            if "apply" in request.POST:
                repair, _ = journal_repair_apply(run=run, actor=request.user, reason=form.cleaned_data["reason"],
                                                 preview=form.cleaned_data.get("preview"), **args)
                messages.success(request, f"Repair #{repair.number} applied; the run was assessed again.")
                return HttpResponseRedirect(reverse("console:run_repair", args=[run.pk]))
            preview = journal_repair_preview(run=run, actor=request.user, reason=form.cleaned_data["reason"],
                                             **args).as_dict()
        except ServiceError as err:
            error, status = err.detail, err.status
    elif request.method == "POST":
        status = 400
    return render(
        request,
        "console/run_repair.html",
        {"run": run, "form": form, "preview": preview, "error": error, "repairs": repairs_list(run=run),
         "picture": repair_picture(run=run, repair=preview["repair"]) if preview else None,
         "nav": "runs", **role_context(request)},
        status=status,
    )
