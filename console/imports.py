"""Imports of other runtimes' histories in the console, and the effect maps that classify them.

The upload is read once at the door and then converted and stored by the ``convert_history`` task
(recovery/imports/services.py); the import's page polls a small partial every second (htmx) until it is
final, as a package upload's page does. Maps are edited by operators with a reason: every save is a new
version, audited, and re-imports the runs that used the map as a new generation.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from urllib.parse import urlencode

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from journals import access
from journals.models import EFFECT_CLASSES
from recovery.imports.doors import history_import_for_read, history_import_for_write, imported_run_for_read
from recovery.imports.models import (
    ANY_KEY,
    IMPORT_FINAL_STATES,
    IMPORT_SYSTEMS,
    EffectMap,
    EffectMapAttachment,
    EffectMapVersion,
    HistoryImport,
)
from recovery.imports.services import (
    ImportServiceError,
    effect_map_attach,
    effect_map_create,
    effect_map_update,
    history_requeue,
    history_upload_receive,
    imports_visible,
)

from .context import role_context
from .permissions import operator_required, viewer_required

RECENT = 20
STALLED_AFTER = timedelta(seconds=60)
_CLASS_CHOICES = [(c, c) for c in EFFECT_CLASSES]
_SYSTEM_CHOICES = [(s, s) for s in IMPORT_SYSTEMS]


class ImportForm(forms.Form):
    file = forms.FileField(label="History file")
    source = forms.ChoiceField(label="Runtime", choices=_SYSTEM_CHOICES)
    run = forms.CharField(label="Run id (optional)", required=False, max_length=200)
    effect_map = forms.CharField(label="Effect map (optional: else the one attached)", required=False, max_length=100)
    key = forms.CharField(label="Source key (namespace, task queue or graph; optional)", required=False, max_length=200)


def entries_text(entries: dict[str, str]) -> str:
    return "".join(f"{name} = {cls}\n" for name, cls in sorted(entries.items()))


class EntriesField(forms.CharField):
    """The map's entries as lines ``name = class`` (the last ``=`` splits: a name may hold one)."""

    widget = forms.Textarea(attrs={"rows": 12, "class": "mono", "spellcheck": "false"})

    def to_python(self, value: object) -> dict[str, str]:  # type: ignore[override]
        text = super().to_python(value) or ""
        out: dict[str, str] = {}
        for number, raw in enumerate(str(text).splitlines(), start=1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            name, sep, cls = line.rpartition("=")
            if not sep or not name.strip():
                raise forms.ValidationError(f"line {number}: write it as `name = safe|idempotent|unsafe`")
            out[name.strip()] = cls.strip()
        return out


class MapForm(forms.Form):
    entries = EntriesField(label="Entries (one `name = class` a line)", required=False)
    default = forms.ChoiceField(label="Default for names not in the map", choices=_CLASS_CHOICES, initial="unsafe")
    reason = forms.CharField(label="Why (audited)", widget=forms.Textarea(attrs={"rows": 2}))


class NewMapForm(MapForm):
    name = forms.CharField(label="Name", max_length=100)
    field_order = ["name", "entries", "default", "reason"]


class AttachForm(forms.Form):
    system = forms.ChoiceField(label="Runtime", choices=_SYSTEM_CHOICES)
    key = forms.CharField(label="Key (namespace, task queue, graph; * for any)", max_length=200, initial=ANY_KEY)
    reason = forms.CharField(label="Why (audited)", max_length=2000)


# --- Imports ------------------------------------------------------------------------------------------


@viewer_required
def imports(request: HttpRequest) -> HttpResponse:
    recent = list(imports_visible(scope=access.run_scope(user=request.user)).order_by("-created_at")[:RECENT])
    return render(
        request,
        "console/imports.html",
        {"nav": "imports", "form": ImportForm(), "recent": recent, **role_context(request)},
    )


@operator_required
@require_POST
def import_upload(request: HttpRequest) -> HttpResponse:
    form = ImportForm(request.POST, request.FILES)
    if not form.is_valid():
        messages.error(request, "Choose a history file and its runtime.")
        return HttpResponseRedirect(reverse("console:imports"))
    data = form.cleaned_data
    try:
        upload, created = history_upload_receive(
            file=data["file"],
            source=data["source"],
            actor=request.user,
            run=data["run"] or None,
            effect_map=data["effect_map"] or None,
            source_key=data["key"],
        )
    except ImportServiceError as err:
        messages.error(request, f"Nothing was kept: {err.detail} ({err.code.replace('_', ' ')}).")
        return HttpResponseRedirect(reverse("console:imports"))
    if not created:
        messages.info(request, "This file was imported already: here is its import. Nothing changed.")
    return HttpResponseRedirect(reverse("console:import", args=[upload.pk]))


def _status_context(upload: HistoryImport) -> dict[str, object]:
    unfinished = upload.state not in IMPORT_FINAL_STATES
    newer = HistoryImport.objects.filter(supersedes=upload).first()
    return {
        "imp": upload,
        "runs": list(upload.runs.all()),
        "polling": unfinished,
        "stalled": unfinished and timezone.now() - upload.updated_at > STALLED_AFTER,
        "superseded_by": newer,
    }


@viewer_required
def import_detail(request: HttpRequest, pk: uuid.UUID) -> HttpResponse:
    upload = history_import_for_read(actor=request.user, pk=pk)
    return render(
        request, "console/import_detail.html", {"nav": "imports", **_status_context(upload), **role_context(request)}
    )


@viewer_required
def import_status(request: HttpRequest, pk: uuid.UUID) -> HttpResponse:
    """The partial the import's page polls while it converts."""
    upload = history_import_for_read(actor=request.user, pk=pk)
    return render(request, "console/_import_status.html", {**_status_context(upload), **role_context(request)})


@operator_required
@require_POST
def import_requeue(request: HttpRequest, pk: uuid.UUID) -> HttpResponse:
    """Publish the conversion again (a broker outage lost it). Safe: each step is a compare-and-set."""
    upload = history_import_for_write(actor=request.user, pk=pk)
    try:
        published = history_requeue(upload=upload, actor=request.user)
    except ImportServiceError as err:
        messages.error(request, f"{err.detail[:1].upper()}{err.detail[1:]}.")
    else:
        if published:
            messages.success(request, "Queued again.")
        else:
            messages.error(request, "The task queue is unreachable; try again shortly.")
    return HttpResponseRedirect(reverse("console:import", args=[upload.pk]))


# --- Effect maps --------------------------------------------------------------------------------------


@viewer_required
def effect_maps(request: HttpRequest) -> HttpResponse:
    maps = list(EffectMap.objects.order_by("name"))
    attachments = list(EffectMapAttachment.objects.select_related("map").order_by("system", "key"))
    initial = {"entries": request.GET.get("add", "") and f"{request.GET['add']} = unsafe\n"}
    form = NewMapForm(initial=initial)
    return render(
        request,
        "console/effect_maps.html",
        {"nav": "imports", "maps": maps, "attachments": attachments, "form": form, **role_context(request)},
    )


@operator_required
@require_POST
def effect_map_new(request: HttpRequest) -> HttpResponse:
    form = NewMapForm(request.POST)
    if not form.is_valid():
        messages.error(request, _form_errors(form))
        return HttpResponseRedirect(reverse("console:effect_maps"))
    data = form.cleaned_data
    try:
        version = effect_map_create(
            name=data["name"],
            entries=data["entries"],
            default=data["default"],
            actor=request.user,
            reason=data["reason"],
        )
    except ImportServiceError as err:
        messages.error(request, f"The map was not saved: {err.detail}.")
        return HttpResponseRedirect(reverse("console:effect_maps"))
    messages.success(request, f"Map {version.map.name} saved as version 1.")
    return HttpResponseRedirect(reverse("console:effect_map", args=[version.map.name]))


def _form_errors(form: forms.Form) -> str:
    # An ErrorList yields its messages as text; the stubs say it may yield ValidationErrors.
    return "; ".join(
        f"{form.fields[k].label if k in form.fields else k}: {' '.join(v)}"  # type: ignore[arg-type]
        for k, v in form.errors.items()
    )


@viewer_required
def effect_map_detail(request: HttpRequest, name: str) -> HttpResponse:
    effect_map = get_object_or_404(EffectMap, name=name)
    versions = list(EffectMapVersion.objects.filter(map=effect_map).order_by("-number")[:50])
    latest = versions[0] if versions else None
    entries = dict(latest.entries) if latest is not None else {}
    proposed = request.GET.get("add", "").strip()
    if proposed and proposed not in entries:
        entries[proposed] = "unsafe"  # pre-filled for the operator to choose; saved only with a reason
    form = MapForm(initial={"entries": entries_text(entries), "default": latest.default if latest else "unsafe"})
    # A map is shared by every team; its uses are not: each reader sees only the imports of their runs.
    in_use = (
        imports_visible(scope=access.run_scope(user=request.user))
        .filter(map_version__map=effect_map, superseded_by__isnull=True)
        .order_by("-created_at")[:RECENT]
    )
    return render(
        request,
        "console/effect_map_detail.html",
        {
            "nav": "imports",
            "effect_map": effect_map,
            "versions": versions,
            "latest": latest,
            "form": form,
            "proposed": proposed,
            "attach_form": AttachForm(),
            "attachments": list(effect_map.attachments.order_by("system", "key")),
            "in_use": list(in_use),
            **role_context(request),
        },
    )


@operator_required
@require_POST
def effect_map_save(request: HttpRequest, name: str) -> HttpResponse:
    effect_map = get_object_or_404(EffectMap, name=name)
    form = MapForm(request.POST)
    back = reverse("console:effect_map", args=[effect_map.name])
    if not form.is_valid():
        messages.error(request, _form_errors(form))
        return HttpResponseRedirect(back)
    data = form.cleaned_data
    try:
        version = effect_map_update(
            effect_map=effect_map,
            entries=data["entries"],
            default=data["default"],
            actor=request.user,
            reason=data["reason"],
        )
    except ImportServiceError as err:
        messages.error(request, f"The map was not saved: {err.detail}.")
        return HttpResponseRedirect(back)
    messages.success(
        request, f"Saved as version {version.number}. The imports of your runs that used an older version are imported "
        "again with it."
    )
    return HttpResponseRedirect(back)


@operator_required
@require_POST
def effect_map_attach_view(request: HttpRequest, name: str) -> HttpResponse:
    effect_map = get_object_or_404(EffectMap, name=name)
    form = AttachForm(request.POST)
    back = reverse("console:effect_map", args=[effect_map.name])
    if not form.is_valid():
        messages.error(request, _form_errors(form))
        return HttpResponseRedirect(back)
    data = form.cleaned_data
    try:
        effect_map_attach(
            effect_map=effect_map, system=data["system"], key=data["key"], actor=request.user, reason=data["reason"]
        )
    except ImportServiceError as err:
        messages.error(request, f"Not attached: {err.detail}.")
        return HttpResponseRedirect(back)
    messages.success(request, f"Attached to {data['system']} {data['key']}.")
    return HttpResponseRedirect(back)


@operator_required
@require_POST
def effect_map_propose(request: HttpRequest) -> HttpResponse:
    """The turn page's one-click proposal for a name not in the map: open the editor of the map the import
    used (or the new-map form when it used none) with the name pre-filled. Nothing is saved here. An
    imported run of another team answers 404, as a missing one does."""
    pk = request.POST.get("imported_run") or ""
    row = imported_run_for_read(actor=request.user, pk=int(pk) if pk.isdigit() and len(pk) <= 18 else 0)
    name = (request.POST.get("name") or "").strip()[:200]
    version = row.history_import.map_version
    query = "?" + urlencode({"add": name}) if name else ""
    if version is None:
        return HttpResponseRedirect(reverse("console:effect_maps") + query + "#new-map")
    return HttpResponseRedirect(reverse("console:effect_map", args=[version.map.name]) + query + "#edit-map")
