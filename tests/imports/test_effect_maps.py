"""Effect maps as data: each save a new immutable version, audited (who, why, before/after); a new
version re-imports, once committed, every import that used an older one, as a new run generation beside
the old runs (stored records are never rewritten)."""

from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from hypothesis import given
from hypothesis import strategies as st

from console.imports import EntriesField, entries_text
from journals.models import EFFECT_CLASSES, JournalRecord, Run, Turn
from kernel.appendonly import AppendOnlyError
from kernel.errors import ServiceError
from recovery.imports.models import EffectMap, EffectMapVersion, HistoryImport, ImportedIntent
from recovery.imports.services import (
    ImportServiceError,
    converter_map,
    effect_map_attach,
    effect_map_create,
    effect_map_for,
    effect_map_update,
    history_reimport,
    history_upload_receive,
)
from recovery.tasks import convert_history, reimport_history
from tests.imports.charge_history import RUN, history_bytes
from trail.models import OperatorAction

pytestmark = pytest.mark.django_db


def test_each_save_is_a_new_immutable_version_audited_with_who_why_before_and_after(operator):
    v1 = effect_map_create(name="orders", entries={"ChargeCard": "unsafe"}, actor=operator, reason="first cut")
    v2 = effect_map_update(
        effect_map=v1.map, entries={"ChargeCard": "idempotent"}, default="safe", actor=operator, reason="keys now"
    )
    assert (v1.number, v2.number) == (1, 2)
    assert EffectMap.objects.get(name="orders").latest == 2
    assert EffectMapVersion.objects.get(pk=v1.pk).entries == {"ChargeCard": "unsafe"}  # v1 as it was
    with pytest.raises(AppendOnlyError):
        v1.save()
    with pytest.raises(AppendOnlyError):
        EffectMapVersion.objects.filter(pk=v1.pk).update(default="safe")
    create, update = OperatorAction.objects.order_by("id")
    assert (create.kind, create.actor, create.reason) == ("effect_map_create", operator, "first cut")
    assert create.before == {} and create.after["version"] == 1
    assert (update.kind, update.reason) == ("effect_map_update", "keys now")
    assert update.before == {"map": "orders", "version": 1, "entries": {"ChargeCard": "unsafe"}, "default": "unsafe"}
    assert update.after == {"map": "orders", "version": 2, "entries": {"ChargeCard": "idempotent"}, "default": "safe"}
    assert v2.actor_name == operator.username


@pytest.mark.parametrize(
    ("entries", "default", "code"),
    [
        ({"ChargeCard": "maybe"}, "unsafe", "effect_map_invalid"),
        ({"ChargeCard": "safe"}, "sometimes", "effect_map_invalid"),
        ({"*": "safe"}, "unsafe", "effect_map_invalid"),
        ({"": "safe"}, "unsafe", "effect_map_invalid"),
    ],
)
def test_a_map_that_is_not_one_is_refused_and_nothing_is_kept(operator, entries, default, code):
    with pytest.raises(ImportServiceError) as err:
        effect_map_create(name="bad", entries=entries, default=default, actor=operator, reason="try")
    assert err.value.code == code
    assert EffectMap.objects.count() == 0 and OperatorAction.objects.count() == 0


def test_a_change_needs_a_reason_and_a_change(operator):
    v1 = effect_map_create(name="orders", entries={"A": "safe"}, actor=operator, reason="r")
    with pytest.raises(ServiceError) as err:  # the trail checks every act's reason
        effect_map_update(effect_map=v1.map, entries={"A": "unsafe"}, default="unsafe", actor=operator, reason=" ")
    assert err.value.code == "reason_required"
    with pytest.raises(ImportServiceError) as err:
        effect_map_update(effect_map=v1.map, entries={"A": "safe"}, default="unsafe", actor=operator, reason="same")
    assert err.value.code == "effect_map_unchanged"
    with pytest.raises(ImportServiceError) as err:
        effect_map_create(name="orders", entries={}, actor=operator, reason="again")
    assert err.value.code == "effect_map_exists"
    assert EffectMapVersion.objects.count() == 1 and OperatorAction.objects.count() == 1


def test_an_attachment_picks_the_map_by_source_key_then_by_system(operator):
    queue = effect_map_create(name="orders", entries={"A": "safe"}, actor=operator, reason="r").map
    fallback = effect_map_create(name="all-temporal", entries={}, actor=operator, reason="r").map
    effect_map_attach(effect_map=queue, system="temporal", key="orders", actor=operator, reason="the orders queue")
    effect_map_attach(effect_map=fallback, system="temporal", key="*", actor=operator, reason="everything else")
    assert effect_map_for(system="temporal", key="orders").map == queue
    assert effect_map_for(system="temporal", key="billing").map == fallback
    assert effect_map_for(system="stepfunctions", key="orders") is None
    effect_map_attach(effect_map=fallback, system="temporal", key="orders", actor=operator, reason="merged")
    last = OperatorAction.objects.filter(kind="effect_map_attach").order_by("-id").first()
    assert last.before == {"system": "temporal", "key": "orders", "map": "orders"}
    assert last.after == {"system": "temporal", "key": "orders", "map": "all-temporal"}
    assert effect_map_for(system="temporal", key="orders").map == fallback


def _imported(operator, version_name: str = "orders") -> HistoryImport:
    upload, created = history_upload_receive(
        file=SimpleUploadedFile("h.json", history_bytes()), source="temporal", actor=operator, effect_map=version_name
    )
    assert created
    assert convert_history(str(upload.pk)) == "imported"
    return upload


def test_a_new_version_reimports_on_commit_as_a_new_generation_and_leaves_the_old_run_as_it_was(
    operator, monkeypatch, django_capture_on_commit_callbacks
):
    published: list[list[object]] = []
    monkeypatch.setattr(reimport_history, "apply_async", lambda args=None, **_: published.append(args))
    v1 = effect_map_create(name="orders", entries={"SendReceipt": "idempotent"}, actor=operator, reason="r")
    first = _imported(operator)
    old_lines = list(JournalRecord.objects.filter(run__run_id=RUN).order_by("seq").values_list("line", flat=True))
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        v2 = effect_map_update(
            effect_map=v1.map,
            entries={"SendReceipt": "idempotent", "ChargeCard": "idempotent"},
            default="unsafe",
            actor=operator,
            reason="the card API dedupes on our key",
        )
        assert published == []  # nothing is published before the new version is committed
    assert len(callbacks) == 1
    callbacks[0]()
    assert published == [(str(first.pk), v2.pk)]
    made = reimport_history(*published[0])
    assert made == "imported"
    second = HistoryImport.objects.get(supersedes=first)
    assert (second.generation, second.map_version, second.source_id) == (2, v2, first.source_id)
    assert [r.run_ident for r in second.runs.all()] == [f"{RUN}~g2"]
    # The old run's records are untouched; the new generation has the new class.
    assert list(JournalRecord.objects.filter(run__run_id=RUN).order_by("seq").values_list("line", flat=True)) == (
        old_lines
    )
    charge = ImportedIntent.objects.get(imported_run__run_ident=f"{RUN}~g2", intent="activity:1")
    assert (charge.decided, charge.map_key, charge.effect_class) == ("entry", "ChargeCard", "idempotent")
    old_charge = ImportedIntent.objects.get(imported_run__run_ident=RUN, intent="activity:1")
    assert (old_charge.decided, old_charge.effect_class) == ("default", "unsafe")
    assert Run.objects.filter(run_id=f"{RUN}~g2").exists()
    assert Turn.objects.filter(run__run_id=f"{RUN}~g2", turn_id="workflow").exists()
    # Delivered twice: the generation made for v2 is found, nothing more is stored.
    records = JournalRecord.objects.count()
    assert history_reimport(import_id=str(first.pk), map_version_id=v2.pk) == second
    assert HistoryImport.objects.count() == 2 and JournalRecord.objects.count() == records
    # An older version delivered late changes nothing.
    assert history_reimport(import_id=str(first.pk), map_version_id=v1.pk) == second
    assert HistoryImport.objects.count() == 2


def test_the_same_file_again_after_a_reimport_finds_the_generation_in_force(operator):
    v1 = effect_map_create(name="orders", entries={}, actor=operator, reason="r")
    first = _imported(operator)
    v2 = effect_map_update(
        effect_map=v1.map, entries={"LookupOrder": "safe"}, default="unsafe", actor=operator, reason="r"
    )
    second = history_reimport(import_id=str(first.pk), map_version_id=v2.pk)
    assert second is not None and second.generation == 2
    again, created = history_upload_receive(
        file=SimpleUploadedFile("h.json", history_bytes()), source="temporal", actor=operator
    )
    assert not created and again == second


_NAMES = st.text(alphabet=st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp")), min_size=1, max_size=40).filter(
    lambda n: n == n.strip() and not n.startswith("#") and n != "*"
)


@given(st.dictionaries(_NAMES, st.sampled_from(EFFECT_CLASSES), max_size=12), st.sampled_from(EFFECT_CLASSES))
def test_the_editor_text_and_a_saved_version_give_back_the_same_classes(entries, default):
    """The console's `name = class` lines read back as the entries they were written from, and a version's
    map classifies each name by its own entry and every other name by the default."""
    assert EntriesField(required=False).clean(entries_text(entries)) == entries
    effects = converter_map(EffectMapVersion(entries=entries, default=default))
    for name, cls in entries.items():
        assert effects.classify(name) == (cls, name)
    assert effects.classify("a name in no map \u2603")[0] == default


@pytest.mark.postgres
@pytest.mark.parametrize(
    "table",
    ["recovery_effectmapversion", "recovery_historysource", "recovery_importedintent", "recovery_importedturn"],
)
def test_postgresql_refuses_to_rewrite_a_map_version_a_history_or_an_intents_class_source(operator, table):
    from django.db import IntegrityError, connection, transaction

    effect_map_create(name="orders", entries={"SendReceipt": "idempotent"}, actor=operator, reason="r")
    _imported(operator)
    with pytest.raises(IntegrityError, match="append-only"), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"UPDATE {table} SET id = id")
    with pytest.raises(IntegrityError, match="append-only"), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {table}")


@pytest.mark.parametrize("name", ["new", "propose", "-leading-dash", "has space", "x" * 101])
def test_a_name_the_console_cannot_address_is_refused(operator, name):
    with pytest.raises(ImportServiceError) as err:
        effect_map_create(name=name, entries={}, actor=operator, reason="r")
    assert err.value.code == "effect_map_name_invalid" and EffectMap.objects.count() == 0
