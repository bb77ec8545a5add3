"""Imports of other runtimes' histories as a service, and the effect maps that classify them.

The one writer of recovery/imports/models.py. The conversion itself is the pure importer
(recovery/imports/importers: history bytes + effect map in, journal bytes out); this module keeps the bytes, runs
the conversion in the ``convert_history`` task and stores each journal through the store's ingest service
(``records_ingest``, through the package import's batching), so the run is assessed like any other.

Upload (``history_upload_receive``): the file is read once at the door. The converter is pure and writes
nothing, so a file that is not a history is refused there (400, the importer's code) with nothing stored,
the run it names is known, and a conflict with what the store holds is refused (409 ``import_conflict``)
before anything is kept. The same bytes again (same sha256, same ``run``) find the import they made (200),
whatever map is named. Otherwise the source, the import (``received``) and its runs are stored in one
transaction, and ``convert_history`` is published once they are committed.

Conversion (``history_process``): ``received``/``converting`` -> ``converting`` -> ``imported`` or
``failed``, each step a compare-and-set on the state, so a redelivered task finds its work done. Progress
(source events read) is written into the row as the converter reports it. All runs of an import are
ingested in one transaction with the state change: a refusal of ingest stores nothing of the import.

Re-assessment: an import is a pure function of (source sha256, map version, run id). When a map gets a new
version, every import whose newest generation used an older version of that map is imported again with
the new one. The records already stored are evidence and are never rewritten, so the new import is a new
*generation* stored as new runs: ``<run>~g<n>``, beside the old ones, which stay as they are (marked
superseded). A source holding several runs (a LangGraph database) is not re-imported this way: its new
generation fails typed (``reimport_unsupported``) and says to upload it again under a new run prefix.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import re
import uuid
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, QuerySet
from django.utils import timezone

from journals.access import RunScope, run_scope
from journals.actors import Actor
from journals.models import EFFECT_CLASSES, ID_MAX, ApiToken, EffectClass, Run
from journals.services import IngestError
from kernel.errors import ServiceError
from recovery.imports.importers import ClassMap, ImportRefused, ImportResult, effect_map_parse, history_import
from recovery.imports.models import (
    ANY_KEY,
    BY_DEFAULT,
    BY_ENTRY,
    BY_RULE,
    CONVERTING,
    FAILED,
    IMPORT_FINAL_STATES,
    IMPORT_SYSTEMS,
    IMPORTED,
    RECEIVED,
    EffectMap,
    EffectMapAttachment,
    EffectMapVersion,
    HistoryImport,
    HistorySource,
    ImportedIntent,
    ImportedRun,
    ImportedTurn,
)
from recovery.packages.services import ThrottledProgress, actor_principal, journal_ingest
from recovery.publish import task_publish
from trail.services import operator_action_record, reason_clean

logger = logging.getLogger(__name__)

IMPORT_CONFLICT = "import_conflict"
PROGRESS_INTERVAL = 0.5  # seconds between progress writes, as for package verification
_MAP_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
_RESERVED_NAMES = ("new", "propose")  # the console's own paths beside a map's (console/urls.py)


class ImportServiceError(ServiceError):
    """An upload, import or map change refused; nothing of it was kept."""


# --- Effect maps --------------------------------------------------------------------------------------


def _clean_map(entries: Mapping[str, Any], default: str) -> tuple[dict[str, str], str]:
    """The entries and default as the converter reads them, or a typed refusal: the converter's own parse
    (``effect_map_parse``) is the one rule for what a map may hold."""
    if not isinstance(entries, Mapping):
        raise ImportServiceError(400, "effect_map_invalid", "the entries must map names to effect classes")
    if ANY_KEY in entries:
        raise ImportServiceError(400, "effect_map_invalid", 'the default is its own field, not an entry "*"')
    for name in entries:
        if not isinstance(name, str) or not name.strip() or len(name) > ID_MAX:
            raise ImportServiceError(400, "effect_map_invalid", f"an entry's name must have 1 to {ID_MAX} characters")
    try:
        parsed = effect_map_parse({**entries, ANY_KEY: default})
    except ImportRefused as err:
        raise ImportServiceError(400, err.code, err.message) from None
    return {str(k): str(v) for k, v in sorted(parsed.entries.items()) if k != ANY_KEY}, parsed.default


def _picture(version: EffectMapVersion | None) -> dict[str, Any]:
    if version is None:
        return {}
    return {"map": version.map.name, "version": version.number, "entries": version.entries, "default": version.default}


def effect_map_create(
    *, name: str, entries: Mapping[str, Any], default: str = EffectClass.UNSAFE, actor: Actor, reason: str
) -> EffectMapVersion:
    """A new named map and its version 1, audited (``effect_map_create``). 409 ``effect_map_exists``."""

    if not _MAP_NAME.match(name or "") or name in _RESERVED_NAMES:
        raise ImportServiceError(
            400,
            "effect_map_name_invalid",
            "a map's name is 1 to 100 letters, digits, '.', '_' or '-' (not 'new' or 'propose')",
        )
    reason = reason_clean(reason=reason)
    clean, default = _clean_map(entries, default)
    try:
        with transaction.atomic():
            effect_map = EffectMap.objects.create(name=name, latest=1)
            version = EffectMapVersion.objects.create(
                map=effect_map, number=1, entries=clean, default=default, **_actor_fields(actor), reason=reason
            )
            operator_action_record(
                actor=actor, kind="effect_map_create", reason=reason, before={}, after=_picture(version)
            )
    except IntegrityError:
        raise ImportServiceError(409, "effect_map_exists", "a map of this name exists: edit it instead") from None
    return version


def _actor_fields(actor: Actor) -> dict[str, Any]:
    person, _token, name = actor_principal(actor)
    return {"actor": person if getattr(person, "pk", None) else None, "actor_name": name}


def effect_map_update(
    *, effect_map: EffectMap, entries: Mapping[str, Any], default: str, actor: Actor, reason: str
) -> EffectMapVersion:
    """Save a new version of the map (the old ones stay as they were), audited with the versions before and
    after (``effect_map_update``), and once committed re-assess every import that used an older version
    and that the changer may see (``reimport_history`` per import). A map is shared by every team: another
    team's imports keep the version they were made with until someone who sees them saves the map again
    (docs/access.md). 400 ``effect_map_unchanged`` when nothing differs."""

    reason = reason_clean(reason=reason)
    clean, default = _clean_map(entries, default)
    with transaction.atomic():
        locked = EffectMap.objects.select_for_update().get(pk=effect_map.pk)
        previous = EffectMapVersion.objects.filter(map=locked, number=locked.latest).select_related("map").first()
        if previous is not None and previous.entries == clean and previous.default == default:
            raise ImportServiceError(400, "effect_map_unchanged", "the map already says exactly this")
        number = locked.latest + 1
        version = EffectMapVersion.objects.create(
            map=locked, number=number, entries=clean, default=default, **_actor_fields(actor), reason=reason
        )
        EffectMap.objects.filter(pk=locked.pk).update(latest=number, updated_at=timezone.now())
        operator_action_record(
            actor=actor, kind="effect_map_update", reason=reason, before=_picture(previous), after=_picture(version)
        )
        stale = list(
            imports_visible(scope=actor_scope(actor))
            .filter(map_version__map=locked, map_version__number__lt=number, superseded_by__isnull=True)
            .values_list("pk", flat=True)
        )
        version_pk = version.pk
        transaction.on_commit(lambda: reassessment_enqueue(import_ids=stale, map_version_id=version_pk))
    effect_map.refresh_from_db()
    return version


def effect_map_attach(
    *, effect_map: EffectMap, system: str, key: str, actor: Actor, reason: str
) -> EffectMapAttachment:
    """Attach the map to a source: uploads of ``system`` naming ``key`` (``*``: any key) use it unless they
    name a map themselves. Audited (``effect_map_attach``) with the map attached before. Imports already
    made keep their map; only a new version of a map re-imports (nothing is re-classified by surprise)."""

    reason = reason_clean(reason=reason)
    if system not in IMPORT_SYSTEMS:
        raise ImportServiceError(400, "source_invalid", f"the source is one of {', '.join(IMPORT_SYSTEMS)}")
    key = (key or "").strip()
    if not key or len(key) > ID_MAX:
        raise ImportServiceError(400, "source_key_invalid", f"the key has 1 to {ID_MAX} characters ('*' for any)")
    with transaction.atomic():
        existing = EffectMapAttachment.objects.select_for_update().filter(system=system, key=key).first()
        before = {"system": system, "key": key, "map": existing.map.name} if existing else {}
        _person, _token, name = actor_principal(actor)
        attachment, _ = EffectMapAttachment.objects.update_or_create(
            system=system, key=key, defaults={"map": effect_map, "actor_name": name, "attached_at": timezone.now()}
        )
        operator_action_record(
            actor=actor,
            kind="effect_map_attach",
            reason=reason,
            before=before,
            after={"system": system, "key": key, "map": effect_map.name},
        )
    return attachment


def effect_map_for(*, system: str, key: str = "", name: str | None = None) -> EffectMapVersion | None:
    """The newest version of the map an upload uses: the one it names, else the one attached to its source's
    key, else the one attached to the whole system (``*``), else None (every name ``unsafe``)."""
    if name:
        effect_map = EffectMap.objects.filter(name=name).first()
        if effect_map is None:
            raise ImportServiceError(400, "effect_map_unknown", "no effect map has this name")
    else:
        keys = [k for k in (key, ANY_KEY) if k]
        attached = {
            a.key: a.map for a in EffectMapAttachment.objects.filter(system=system, key__in=keys).select_related("map")
        }
        effect_map = next((attached[k] for k in keys if k in attached), None)
        if effect_map is None:
            return None
    return EffectMapVersion.objects.filter(map=effect_map, number=effect_map.latest).select_related("map").first()


def converter_map(version: EffectMapVersion | None) -> ClassMap:
    return effect_map_parse(version.as_json() if version is not None else {})


# --- Upload -------------------------------------------------------------------------------------------


def _read_all(file: Any, limit: int) -> bytes:
    """The upload's bytes (a Django UploadedFile, a stream, or bytes), refused past ``limit`` without reading
    further."""
    too_large = ImportServiceError(
        413, "history_too_large", f"the file is larger than a history may be ({limit} bytes)"
    )
    declared = getattr(file, "size", None)
    if isinstance(declared, int) and declared > limit:
        raise too_large
    if isinstance(file, bytes | bytearray | memoryview):
        if len(file) > limit:
            raise too_large
        return bytes(file)
    parts: list[bytes] = []
    size = 0
    pieces = file.chunks(1024 * 1024) if hasattr(file, "chunks") else iter(lambda: file.read(1024 * 1024), b"")
    for piece in pieces:
        size += len(piece)
        if size > limit:
            raise too_large
        parts.append(piece)
    return b"".join(parts)


def generation_run(run_base: str, generation: int) -> str:
    """The run id a generation is stored under: the history's own run first, then ``<run>~g<n>``."""
    return run_base if generation <= 1 else f"{run_base}~g{generation}"


def history_upload_receive(
    *,
    file: Any,
    source: str,
    actor: Actor,
    run: str | None = None,
    effect_map: str | None = None,
    source_key: str = "",
) -> tuple[HistoryImport, bool]:
    """Keep an uploaded history and queue its conversion; returns (the import, whether it is new). The same
    bytes for the same ``run`` return the import they made, new False, changing nothing. Raises
    ImportServiceError with nothing stored: 400 (the importer's code, or the source, map or run refused),
    409 ``import_conflict`` (a run of that id exists from other bytes), 413 (too large)."""
    if source not in IMPORT_SYSTEMS:
        raise ImportServiceError(400, "source_invalid", f"the source is one of {', '.join(IMPORT_SYSTEMS)}")
    run = (run or "").strip()
    if len(run) > ID_MAX:
        raise ImportServiceError(400, "identifier_too_long", f"the run id must have at most {ID_MAX} characters")
    source_key = (source_key or "").strip()[:ID_MAX]
    person, token, name = actor_principal(actor)
    scope = actor_scope(actor)
    if run:
        _refuse_outside(scope, token, run)
    data = _read_all(file, int(settings.LOOPX_IMPORT_MAX_BYTES))
    sha = hashlib.sha256(data).hexdigest()
    found = _existing(sha, run, scope)
    if found is not None:
        return found, False
    version = effect_map_for(system=source, key=source_key, name=effect_map)
    try:
        result = history_import(source=source, data=data, effects=converter_map(version), run=run or None)
    except ImportRefused as err:
        raise ImportServiceError(400, err.code, err.message) from None
    for imported in result.runs:
        _refuse_outside(scope, token, imported.run)
    try:
        with transaction.atomic():
            history, _ = HistorySource.objects.get_or_create(
                sha256=sha,
                defaults={
                    "system": source,
                    "original_name": str(getattr(file, "name", "") or "")[:200],
                    "size": len(data),
                    "event_count": result.events,
                    "skipped": dict(result.skipped),
                    "data": data,
                },
            )
            if history.system != source:
                raise ImportServiceError(409, IMPORT_CONFLICT, f"this file was imported as a {history.system} history")
            for imported in result.runs:
                _refuse_conflict(imported.run, sha)
            upload = HistoryImport.objects.create(
                source=history,
                map_version=version,
                source_key=source_key,
                requested_run=run,
                progress_total=max(result.events, 0),
                uploader=person,
                token=token,
                uploader_name=name,
            )
            for imported in result.runs:
                ImportedRun.objects.create(history_import=upload, run_base=imported.run, run_ident=imported.run)
            upload_id = upload.pk

            operator_action_record(
                actor=actor,
                kind="history_upload",
                reason=f"{source} history uploaded ({len(data)} bytes)",
                after={"import": str(upload_id), "sha256": sha, "runs": [r.run for r in result.runs]},
            )
            transaction.on_commit(lambda: conversion_enqueue(import_id=upload_id))
    except IntegrityError:
        # A twin upload committed first: the same bytes find it; other bytes for its run are a conflict.
        found = _existing(sha, run, scope)
        if found is not None:
            return found, False
        raise ImportServiceError(409, IMPORT_CONFLICT, "another upload stored this run first") from None
    return upload, True


def actor_scope(actor: Actor) -> RunScope:
    """The runs whoever acts may write: a token's prefix, a person's teams' prefixes (journals.access)."""
    person, token, _name = actor_principal(actor)
    return run_scope(user=person, token=token)


def _refuse_outside(scope: RunScope, token: ApiToken | None, run_id: str) -> None:
    """Nothing is imported under a run outside the uploader's scope, whether that run exists or not, so the
    answer never says which: a token is told its prefix does not cover it (403 ``run_forbidden``, as for
    ingest), a person that there is no such run (404, the very answer of a missing run)."""
    if scope.allows(run_id):
        return
    if token is not None:
        raise ImportServiceError(403, "run_forbidden", "this token may not write to this run")
    raise ImportServiceError(404, "not_found", "No such run.")


def _existing(sha: str, run: str, scope: RunScope) -> HistoryImport | None:
    """The newest generation of the import these bytes made for this run request, if the uploader may see
    it: another team's import of the same bytes is not handed out."""
    return (
        imports_visible(scope=scope)
        .filter(source__sha256=sha, requested_run=run, superseded_by__isnull=True)
        .order_by("-generation", "-created_at")
        .first()
    )


def _refuse_conflict(run_id: str, sha: str) -> None:
    other = ImportedRun.objects.filter(run_base=run_id).exclude(history_import__source__sha256=sha).exists()
    if other or (
        Run.objects.filter(run_id=run_id).exists() and not ImportedRun.objects.filter(run_ident=run_id).exists()
    ):
        raise ImportServiceError(
            409,
            IMPORT_CONFLICT,
            "the run exists and was not imported from this file",
            run=run_id,
        )


def history_requeue(*, upload: HistoryImport, actor: Actor) -> bool:
    """A person publishes an unfinished import's conversion again (a broker outage lost it), recorded on the
    trail; True when the broker took it. Refused (409) for a finished import."""

    if upload.state in IMPORT_FINAL_STATES:
        raise ImportServiceError(409, "import_finished", "this import is finished; there is nothing to queue")
    with transaction.atomic():
        operator_action_record(
            actor=actor,
            kind="history_requeue",
            reason="history conversion queued again",
            after={"import": str(upload.pk)},
        )
    return conversion_enqueue(import_id=upload.pk)


def conversion_enqueue(*, import_id: uuid.UUID | str) -> bool:
    """Publish ``convert_history``. Never raises: the import stays ``received`` and publishing again (the
    console's "queue again") is safe."""
    try:
        task_publish("recovery.tasks.convert_history", str(import_id))
    except Exception:  # any broker failure: the row already holds the truth
        logger.warning("could not publish convert_history for import %s", import_id, exc_info=True)
        return False
    return True


# --- Convert and ingest -------------------------------------------------------------------------------


def _store_progress(pk: uuid.UUID, done: int, total: int) -> None:
    """One progress write, outside any transaction so that the polling page sees it at once."""
    HistoryImport.objects.filter(pk=pk, state=CONVERTING).update(
        progress_done=done, progress_total=total, updated_at=timezone.now()
    )


def _fail(upload: HistoryImport, error: str, detail: str, line: int | None = None) -> None:
    now = timezone.now()
    HistoryImport.objects.filter(pk=upload.pk, state__in=(RECEIVED, CONVERTING)).update(
        state=FAILED, result={"error": error, "detail": detail, "line": line}, finished_at=now, updated_at=now
    )


def history_process(*, import_id: str, progress_interval: float = PROGRESS_INTERVAL) -> str:
    """The body of ``convert_history``: convert the stored history with the import's map version and
    ingest its journals. Returns the import's state (``missing`` for no such import)."""
    try:
        pk = uuid.UUID(str(import_id))
    except ValueError:
        return "missing"
    now = timezone.now()
    started = HistoryImport.objects.filter(pk=pk, state__in=(RECEIVED, CONVERTING)).update(
        state=CONVERTING, progress_done=0, updated_at=now
    )
    upload = HistoryImport.objects.filter(pk=pk).select_related("source", "map_version__map", "token").first()
    if upload is None:
        return "missing"
    if not started:
        return upload.state
    runs = list(upload.runs.order_by("run_base"))
    if upload.generation > 1 and len(runs) != 1:
        _fail(upload, "reimport_unsupported", "a source of several runs is imported again by a new upload")
        return _state(pk)
    run = runs[0].run_ident if upload.generation > 1 else (upload.requested_run or None)
    try:
        result = history_import(
            source=upload.source.system,
            data=bytes(upload.source.data),
            effects=converter_map(upload.map_version),
            run=run,
            progress=ThrottledProgress(lambda done, total: _store_progress(pk, done, total), progress_interval),
        )
    except ImportRefused as err:  # the door took these bytes: they cannot be refused now unless they changed
        _fail(upload, err.code, err.message)
        return _state(pk)
    by_ident = {r.run_ident: r for r in runs}
    if sorted(r.run for r in result.runs) != sorted(by_ident):
        _fail(upload, "import_changed", "the history converts to other runs than it did when it was received")
        return _state(pk)
    token = upload.token if upload.token is not None and upload.token.active else None
    if upload.token is not None and token is None:
        _fail(upload, "token_revoked", "the uploading token has been revoked")
        return _state(pk)
    try:
        _ingest(upload, result, by_ident, token)
    except IngestError as err:
        # The transaction rolled back: no record of this import is stored.
        _fail(upload, err.code, err.detail, err.line)
    return _state(pk)


def history_abandon(*, import_id: str, error: str, detail: str) -> str:
    """The task ran out of time or failed unexpectedly (its transaction rolled back): a typed failure, so
    that the import does not say "converting" for ever. Returns the import's state."""
    try:
        pk = uuid.UUID(str(import_id))
    except ValueError:
        return "missing"
    upload = HistoryImport.objects.filter(pk=pk).first()
    if upload is None:
        return "missing"
    _fail(upload, error, detail)
    return _state(pk)


def _state(pk: uuid.UUID) -> str:
    return str(HistoryImport.objects.filter(pk=pk).values_list("state", flat=True).first() or "missing")


def _ingest(
    upload: HistoryImport, result: ImportResult, by_ident: dict[str, ImportedRun], token: ApiToken | None
) -> None:
    with transaction.atomic():
        # The row lock orders twin tasks: the second waits here, then finds the work done.
        if not HistoryImport.objects.select_for_update().filter(pk=upload.pk, state=CONVERTING).exists():
            return
        totals = {"records": 0, "stored": 0, "duplicates": 0, "batches": 0}
        for converted in result.runs:
            counts, corrupt = journal_ingest(converted.run, io.BytesIO(converted.journal), token)
            if corrupt:  # an importer writes whole records only: anything else is its bug, refused
                raise IngestError(400, "import_invalid", "the converted journal holds a line that is not a record")
            for k in totals:
                totals[k] += counts[k]
            row = by_ident[converted.run]
            ImportedRun.objects.filter(pk=row.pk).update(records=converted.records, origin=dict(converted.origin))
            _record_words(row, converted.journal, converted.decided_by)
        now = timezone.now()
        HistoryImport.objects.filter(pk=upload.pk, state=CONVERTING).update(
            state=IMPORTED,
            result=totals,
            progress_done=F("progress_total"),
            finished_at=now,
            updated_at=now,
        )


# The fields in which an importer's intent_dispatched names what the map was asked about (Temporal's
# activity type or Nexus operation, a LangGraph node, a Step Functions resource, a DBOS step), in the
# order it asks; then the names of what a source's own rule classified (a child workflow's type).
_NAME_FIELDS = ("activity_type", "operation", "node", "resource", "resource_type", "step")
_RULE_NAME_FIELDS = ("workflow_type", "workflow_name")
# A turn's lineage names it for these sources ("temporal:<workflow type>", "stepfunctions:<state name>",
# "dbos:<workflow name>"); a LangGraph turn is named by the nodes that ran in it (its lineage is the thread).
_NAMED_BY_LINEAGE = ("temporal:", "stepfunctions:", "dbos:")


def _short(value: object) -> str | None:
    return value[:ID_MAX] if isinstance(value, str) and value else None


def _source_id(record: Mapping[str, Any]) -> Any:
    """A record's ``source_event`` as kept beside it: an id or a short string, never anything larger."""
    value = record.get("source_event")
    if isinstance(value, bool) or not isinstance(value, int | str):
        return None
    return value if isinstance(value, int) else value[:ID_MAX]


class _Words:
    """What one pass over a converted journal gathers of its source's own words: each intent's class, what
    decided it, its name and source ids; each turn's name and source ids."""

    def __init__(self, decided_by: Mapping[str, str | None]) -> None:
        self.decided_by = decided_by
        self.intents: dict[str, dict[str, Any]] = {}
        self.turns: dict[str, dict[str, Any]] = {}

    def feed(self, record: Mapping[str, Any]) -> None:
        turn, kind = record.get("turn"), record.get("kind")
        if not isinstance(turn, str):
            return
        words = self.turns.setdefault(turn, {"name": None, "nodes": [], "source": None, "original": {}})
        source = _source_id(record)
        if kind == "turn_planned":
            lineage = record.get("lineage")
            if isinstance(lineage, str) and lineage.startswith(_NAMED_BY_LINEAGE):
                words["name"] = lineage.split(":", 1)[1]
            checkpoint_source, step = record.get("checkpoint_source"), record.get("step")
            if isinstance(checkpoint_source, str) and isinstance(step, int):
                words["source"] = f"{checkpoint_source} (step {step})"
            words["original"].setdefault("planned", source)
        words["original"]["last"] = source
        intent = record.get("intent")
        if not isinstance(intent, str):
            return
        if kind == "intent_dispatched":
            self._dispatched(intent, record, words, source)
        elif kind == "effect_observed" and intent in self.intents:
            self.intents[intent]["original"]["observed"] = source

    def _dispatched(self, intent: str, record: Mapping[str, Any], words: dict[str, Any], source: Any) -> None:
        node = record.get("node")
        if isinstance(node, str) and node and node not in words["nodes"]:
            words["nodes"].append(node)
        if intent in self.intents:
            return
        effect_class = record.get("effect_class")
        if effect_class not in EFFECT_CLASSES:
            effect_class = EffectClass.UNSAFE
        if intent not in self.decided_by:
            decided, key = BY_RULE, None
        else:
            key = self.decided_by[intent]
            decided, key = (BY_DEFAULT, None) if key in (None, ANY_KEY) else (BY_ENTRY, key)
        name = next((record[f] for f in _NAME_FIELDS if isinstance(record.get(f), str) and record[f]), None)
        if name is None and decided == BY_RULE:
            name = next((record[f] for f in _RULE_NAME_FIELDS if isinstance(record.get(f), str) and record[f]), None)
        self.intents[intent] = {
            "decided": decided,
            "key": _short(key),
            "name": _short(name),
            "effect_class": effect_class,
            "original": {"dispatched": source},
        }

    def turn_name(self, words: Mapping[str, Any]) -> str:
        if words["name"]:
            return str(words["name"])[:ID_MAX]
        if words["nodes"]:
            return ", ".join(words["nodes"])[:ID_MAX]
        return str(words["source"] or "")[:ID_MAX]


def _record_words(row: ImportedRun, journal: bytes, decided_by: Mapping[str, str | None]) -> None:
    """One ImportedIntent per dispatched intent of the journal (its class as journaled, what decided it, its
    name and source ids) and one ImportedTurn per turn (its name in the source's words, its source ids). An
    intent the converter classified without the map (a source's own rule) is absent from ``decided_by``."""
    if row.intents.exists() or row.turns.exists():  # a redelivery cannot get here once this committed
        return
    words = _Words(decided_by)
    for line in journal.splitlines():
        record = json.loads(line)
        if isinstance(record, dict):
            words.feed(record)
    ImportedIntent.objects.bulk_create(
        ImportedIntent(
            imported_run=row,
            intent=intent[:ID_MAX],
            decided=w["decided"],
            map_key=w["key"],
            name=w["name"],
            effect_class=w["effect_class"],
            original=w["original"],
        )
        for intent, w in words.intents.items()
    )
    ImportedTurn.objects.bulk_create(
        ImportedTurn(imported_run=row, turn=turn[:ID_MAX], name=words.turn_name(w), original=w["original"])
        for turn, w in words.turns.items()
    )


# --- Re-assessment ------------------------------------------------------------------------------------


def reassessment_enqueue(*, import_ids: list[Any], map_version_id: int) -> int:
    """Publish ``reimport_history`` for each import (after a map's new version committed). Returns how many
    were published; a lost publish leaves the import on its old version, which the map's page shows."""
    published = 0
    for pk in import_ids:
        try:
            task_publish("recovery.tasks.reimport_history", str(pk), int(map_version_id))
            published += 1
        except Exception:
            logger.warning("could not publish reimport_history for import %s", pk, exc_info=True)
    return published


def history_reimport(*, import_id: str, map_version_id: int) -> HistoryImport | None:
    """Import the same source bytes again with a newer map version, as the next generation (new runs beside
    the old ones: stored records are never rewritten). Safe twice: the generation made for this version is
    found, not made again; a version older than the one in force changes nothing. Returns the generation in
    force afterwards (None for no such import or version)."""
    version = EffectMapVersion.objects.filter(pk=map_version_id).select_related("map").first()
    try:
        pk = uuid.UUID(str(import_id))
    except ValueError:
        return None
    if version is None:
        return None
    with transaction.atomic():
        current = HistoryImport.objects.select_for_update().filter(pk=pk).first()
        if current is None:
            return None
        # Walk to the generation in force (an earlier re-import may have superseded this one).
        while True:
            newer = HistoryImport.objects.filter(supersedes=current).first()
            if newer is None:
                break
            current = HistoryImport.objects.select_for_update().get(pk=newer.pk)
        in_force = current.map_version
        if in_force is None or in_force.map_id != version.map_id or in_force.number >= version.number:
            return current
        runs = list(current.runs.order_by("run_base"))
        generation = current.generation + 1
        made = HistoryImport.objects.create(
            source=current.source,
            map_version=version,
            source_key=current.source_key,
            requested_run=current.requested_run,
            generation=generation,
            supersedes=current,
            progress_total=current.source.event_count,
            uploader=None,
            token=current.token,
            uploader_name=f"effect map {version.map.name} v{version.number}"[:150],
        )
        for run in runs:
            ImportedRun.objects.create(
                history_import=made, run_base=run.run_base, run_ident=generation_run(run.run_base, generation)
            )
    history_process(import_id=str(made.pk))
    made.refresh_from_db()
    return made


def imports_visible(*, scope: RunScope) -> QuerySet[HistoryImport]:
    """The imports whose every run is in ``scope`` (journals.access): another team's import, or one that
    also wrote another team's run, answers as a missing one does."""
    imports = HistoryImport.objects.select_related("source", "map_version__map").defer("source__data")
    if scope.everything:
        return imports
    outside = ImportedRun.objects.exclude(scope.q("run_ident")).values("history_import_id")
    return imports.filter(scope.q("runs__run_ident")).exclude(pk__in=outside).distinct()
