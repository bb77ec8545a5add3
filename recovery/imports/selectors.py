"""Reads of imports for pages and the API: which map entry decided each intent's class."""

from __future__ import annotations

from dataclasses import dataclass

from journals.models import Intent, Turn
from recovery.imports.models import BY_DEFAULT, BY_ENTRY, ImportedIntent, ImportedRun


@dataclass(frozen=True)
class IntentClassSource:
    intent: str
    effect_class: str
    decided: str  # "entry", "default" or "rule" (recovery/imports/models.py DECIDED_BY)
    map_key: str | None
    name: str | None
    effect_map: str | None
    effect_map_version: int | None
    imported_run: int  # ImportedRun's pk: a proposal names it

    @property
    def unmapped(self) -> bool:
        """The name is not in the map: its class is the default (``unsafe`` unless the map says otherwise)."""
        return self.decided == BY_DEFAULT

    @property
    def label(self) -> str:
        if self.decided == BY_ENTRY:
            return f"{self.effect_class} (map entry {self.map_key})"
        if self.decided == BY_DEFAULT:
            return f"{self.effect_class} (not in the map)"
        return f"{self.effect_class} (the source's own rule)"


def _sources(rows: object, imported: ImportedRun | None = None) -> list[IntentClassSource]:
    out: list[IntentClassSource] = []
    for row in rows:  # type: ignore[attr-defined]
        version = (imported or row.imported_run).history_import.map_version
        out.append(
            IntentClassSource(
                intent=row.intent,
                effect_class=row.effect_class,
                decided=row.decided,
                map_key=row.map_key,
                name=row.name,
                effect_map=version.map.name if version is not None else None,
                effect_map_version=version.number if version is not None else None,
                imported_run=row.imported_run_id,
            )
        )
    return out


def intent_class_sources(*, run_id: str, turn: Turn | None = None) -> list[IntentClassSource]:
    """The imported intents of a run (of one turn when given), each with what decided its class, in intent
    order. One query; empty for a run that was not imported."""
    rows = ImportedIntent.objects.filter(imported_run__run_ident=run_id).select_related(
        "imported_run__history_import__map_version__map"
    )
    if turn is not None:
        rows = rows.filter(intent__in=Intent.objects.filter(turn=turn).values("intent_id"))
    return _sources(rows.order_by("intent"))


def imported_run_of(*, run_id: str) -> ImportedRun | None:
    """The imported run stored under this id, with its import, source (never its bytes) and map; None for a
    run that was not imported. One query."""
    return (
        ImportedRun.objects.filter(run_ident=run_id)
        .select_related("history_import__source", "history_import__map_version__map")
        .defer("history_import__source__data")
        .first()
    )


@dataclass(frozen=True)
class TurnImportNote:
    """What the turn page shows of an imported run: where it came from, and what decided each class."""

    imported: ImportedRun
    class_sources: list[IntentClassSource]


def turn_import_note(*, turn: Turn) -> TurnImportNote | None:
    """The turn page's note (templates/console/_intent_class_source.html): one query for a run that was not
    imported (None), two for one that was."""
    imported = imported_run_of(run_id=turn.run.run_id)
    if imported is None:
        return None
    rows = ImportedIntent.objects.filter(
        imported_run=imported, intent__in=Intent.objects.filter(turn=turn).values("intent_id")
    ).order_by("intent")
    return TurnImportNote(imported=imported, class_sources=_sources(rows, imported))
