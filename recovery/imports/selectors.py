"""Reads of imports for pages and the API: which map entry decided each intent's class, and an imported
run's source words (``source_words``: the runtime, the import, the source's own names and ids), which every
page of an imported run reads."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from journals.models import Intent, Turn
from recovery.imports.models import BY_DEFAULT, BY_ENTRY, ImportedIntent, ImportedRun, ImportedTurn


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
    original: Mapping[str, Any] = field(default_factory=dict)  # the source ids (ImportedIntent.original)

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
                original=row.original if isinstance(row.original, dict) else {},
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


# The runtime's history in words, and what names its records (each record's ``source_event``).
SYSTEM_WORDS = {
    "temporal": "Temporal history",
    "langgraph": "LangGraph checkpoints",
    "stepfunctions": "Step Functions history",
    "dbos": "DBOS system database",
}
SOURCE_EVENT_WORDS = {"temporal": "event", "stepfunctions": "event", "langgraph": "checkpoint", "dbos": "workflow"}
# The run's own ids as an importer keeps them (ConvertedRun.origin), in the order a page lists them.
ORIGIN_WORDS = {
    "workflow_id": "workflow id",
    "run_id": "run id",
    "workflow_type": "workflow type",
    "task_queue": "task queue",
    "thread_id": "thread id",
    "checkpoint_ns": "checkpoint namespace",
    "state_machine_version_arn": "state machine version ARN",
    "state_machine_alias_arn": "state machine alias ARN",
    "workflow_uuid": "workflow id",
    "workflow_name": "workflow name",
}


@dataclass(frozen=True)
class NamedId:
    label: str
    value: str


@dataclass(frozen=True)
class TurnWords:
    turn: str
    name: str  # "" when the history names nothing of it
    ids: list[NamedId]


@dataclass(frozen=True)
class IntentWords:
    intent: str
    name: str | None
    ids: list[NamedId]

    @property
    def label(self) -> str:
        """``ChargeCard (activity:1)``: the source's name, then the journal's id."""
        return f"{self.name} ({self.intent})" if self.name else self.intent


@dataclass
class SourceWords:
    """An imported run in its source's words: the runtime and the import that stored it, the run's own ids in
    the source, and, for the turns and intents asked about, their names and source ids."""

    imported: ImportedRun
    turns: dict[str, TurnWords]
    intents: dict[str, IntentWords]
    class_sources: list[IntentClassSource]

    @property
    def system(self) -> str:
        return str(self.imported.history_import.source.system)

    @property
    def system_words(self) -> str:
        return SYSTEM_WORDS.get(self.system, self.system)

    @property
    def import_short(self) -> str:
        """The import's id as people say it: the first eight hex digits of its UUID."""
        return str(self.imported.history_import.pk)[:8]

    @property
    def origin(self) -> list[NamedId]:
        found = self.imported.origin if isinstance(self.imported.origin, dict) else {}
        return [NamedId(words, str(found[key])) for key, words in ORIGIN_WORDS.items() if found.get(key)]

    def turn_name(self, turn: str) -> str:
        words = self.turns.get(turn)
        return words.name if words is not None else ""

    def intent_label(self, intent: str) -> str:
        words = self.intents.get(intent)
        return words.label if words is not None else intent

    def intent_labels(self) -> dict[str, str]:
        return {intent: words.label for intent, words in self.intents.items()}


def _ids(system: str, original: Any, keys: tuple[tuple[str, str], ...]) -> list[NamedId]:
    """The source ids of ``original`` (``{"planned": 1, "last": 15}``) in words: "planned at event 1"."""
    noun = SOURCE_EVENT_WORDS.get(system, "source event")
    found = original if isinstance(original, dict) else {}
    return [NamedId(f"{words} {noun}", str(found[key])) for key, words in keys if found.get(key) is not None]


_TURN_IDS = (("planned", "planned at"), ("last", "last record at"))
_INTENT_IDS = (("dispatched", "dispatched at"), ("observed", "read back at"))


def source_words(*, run_id: str, turns: Collection[str] | None = None, turn: Turn | None = None) -> SourceWords | None:
    """The source words of a run: None (one query) for a run that was not imported. For an imported run,
    the names and source ids of ``turns`` (one more query; none asked, none read), and for ``turn`` its own
    name and its intents' names, ids and what decided each class (two more)."""
    imported = imported_run_of(run_id=run_id)
    if imported is None:
        return None
    system = str(imported.history_import.source.system)
    wanted = [turn.turn_id] if turn is not None else list(turns or ())
    turn_words: dict[str, TurnWords] = {}
    if wanted:
        for row in ImportedTurn.objects.filter(imported_run=imported, turn__in=wanted):
            turn_words[row.turn] = TurnWords(row.turn, row.name, _ids(system, row.original, _TURN_IDS))
    class_sources: list[IntentClassSource] = []
    if turn is not None:
        rows = ImportedIntent.objects.filter(
            imported_run=imported, intent__in=Intent.objects.filter(turn=turn).values("intent_id")
        ).order_by("intent")
        class_sources = _sources(rows, imported)
    intents = {s.intent: IntentWords(s.intent, s.name, _ids(system, s.original, _INTENT_IDS)) for s in class_sources}
    return SourceWords(imported=imported, turns=turn_words, intents=intents, class_sources=class_sources)


@dataclass(frozen=True)
class TurnImportNote:
    """What the turn page shows of an imported run: where it came from, and what decided each class."""

    imported: ImportedRun
    class_sources: list[IntentClassSource]


def turn_import_note(*, turn: Turn, words: SourceWords | None = None) -> TurnImportNote | None:
    """The turn page's note (templates/console/_intent_class_source.html), from the turn's source words
    (``source_words(turn=...)``, read here unless the page already did): None for a run that was not
    imported."""
    if words is None:
        words = source_words(run_id=turn.run.run_id, turn=turn)
    if words is None:
        return None
    return TurnImportNote(imported=words.imported, class_sources=words.class_sources)
