"""The console's import pages: upload a history, follow it, see where each intent's class came from on
the turn page, and propose an entry for a name not in the map (the editor opens pre-filled; saving it is
an audited new version). List pages cost a fixed number of queries."""

from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from journals.models import Turn
from recovery.imports.models import EffectMap, EffectMapVersion, HistoryImport, ImportedRun
from recovery.imports.services import effect_map_attach, effect_map_create, history_upload_receive
from recovery.tasks import convert_history
from tests.imports.charge_history import RUN, history_bytes
from trail.models import OperatorAction

pytestmark = pytest.mark.django_db


def _post_upload(client, data: bytes, **fields: str):
    form = {"file": SimpleUploadedFile("charge.json", data), "source": "temporal", **fields}
    return client.post(reverse("console:import_upload"), form)


def test_an_operator_uploads_through_the_console_and_follows_the_import(
    op_pages, monkeypatch, django_capture_on_commit_callbacks
):
    published: list[str] = []
    monkeypatch.setattr(convert_history, "apply_async", lambda args=None, **_: published.append(args[0]))
    with django_capture_on_commit_callbacks(execute=True):
        response = _post_upload(op_pages, history_bytes())
    upload = HistoryImport.objects.get()
    assert response.status_code == 302 and response["Location"] == reverse("console:import", args=[upload.pk])
    page = op_pages.get(response["Location"]).content.decode()
    assert 'data-state="received"' in page and "hx-get" in page
    assert upload.source.sha256 in page and "temporal" in page and "charge.json" in page
    assert convert_history(published[0]) == "imported"
    status = op_pages.get(reverse("console:import_status", args=[upload.pk])).content.decode()
    assert 'data-state="imported"' in status and "hx-get" not in status  # polling stops once final
    assert RUN in status


def test_a_malformed_history_through_the_console_keeps_nothing(op_pages):
    response = _post_upload(op_pages, b"[1, 2, 3]")
    assert response.status_code == 302 and response["Location"] == reverse("console:imports")
    assert HistoryImport.objects.count() == 0
    page = op_pages.get(reverse("console:imports")).content.decode()
    assert "Nothing was kept" in page


def test_a_viewer_reads_but_cannot_upload_or_edit_maps(viewer_pages, operator):
    effect_map_create(name="orders", entries={}, actor=operator, reason="r")
    assert viewer_pages.get(reverse("console:imports")).status_code == 200
    assert viewer_pages.get(reverse("console:effect_map", args=["orders"])).status_code == 200
    assert _post_upload(viewer_pages, history_bytes()).status_code == 403
    save = viewer_pages.post(
        reverse("console:effect_map_save", args=["orders"]), {"entries": "A = safe", "default": "unsafe", "reason": "x"}
    )
    assert save.status_code == 403
    assert HistoryImport.objects.count() == 0 and EffectMapVersion.objects.count() == 1


def _imported_run(operator, capture) -> ImportedRun:
    """Uploaded, converted and assessed (the tasks run inline as a worker would)."""
    with capture(execute=True):
        upload, _ = history_upload_receive(
            file=SimpleUploadedFile("h.json", history_bytes()), source="temporal", actor=operator, effect_map="orders"
        )
    upload.refresh_from_db()
    assert upload.state == "imported"
    return ImportedRun.objects.get(history_import=upload)


def test_the_turn_page_says_which_entry_decided_each_class_and_proposes_an_entry(
    op_pages, operator, eager_tasks, django_capture_on_commit_callbacks
):
    effect_map_create(name="orders", entries={"SendReceipt": "idempotent"}, actor=operator, reason="r")
    row = _imported_run(operator, django_capture_on_commit_callbacks)
    turn = Turn.objects.get(run__run_id=RUN, turn_id="workflow")
    page = op_pages.get(reverse("console:turn", args=[turn.pk])).content.decode()
    assert "where each intent" in page
    assert "unsafe (not in the map)" in page  # ChargeCard and LookupOrder
    assert 'entry <span class="mono">SendReceipt</span>' in page
    # The run names its source: the system, the file, its sha256's start, the events and what was skipped.
    source = page[page.index('id="run-source"') :]
    source = source[: source.index("</p>")]
    assert "temporal" in source and "h.json" in source and row.history_import.source.sha256[:14] in source
    assert "14 events" in source and "WorkflowTaskStarted" in source
    assert 'name="name" value="ChargeCard"' in page
    # One click: the editor of the import's map opens with the name pre-filled; nothing is saved yet.
    response = op_pages.post(reverse("console:effect_map_propose"), {"imported_run": row.pk, "name": "ChargeCard"})
    assert response.status_code == 302
    assert response["Location"] == reverse("console:effect_map", args=["orders"]) + "?add=ChargeCard#edit-map"
    editor = op_pages.get(response["Location"]).content.decode()
    assert "ChargeCard = unsafe" in editor and "SendReceipt = idempotent" in editor
    assert EffectMapVersion.objects.count() == 1
    saved = op_pages.post(
        reverse("console:effect_map_save", args=["orders"]),
        {"entries": "SendReceipt = idempotent\nChargeCard = idempotent\n", "default": "unsafe", "reason": "keyed"},
    )
    assert saved.status_code == 302
    version = EffectMapVersion.objects.get(map__name="orders", number=2)
    assert version.entries == {"ChargeCard": "idempotent", "SendReceipt": "idempotent"}
    assert OperatorAction.objects.filter(kind="effect_map_update", reason="keyed", actor=operator).count() == 1


def test_a_turn_that_was_not_imported_shows_nothing_of_it(op_pages, pay):
    turn = Turn.objects.filter(run=pay.run).first()
    page = op_pages.get(reverse("console:turn", args=[turn.pk])).content.decode()
    assert "where each intent" not in page and 'id="run-source"' not in page


def test_an_operator_creates_and_attaches_a_map_in_the_console(op_pages, operator):
    response = op_pages.post(
        reverse("console:effect_map_new"),
        {
            "name": "orders",
            "entries": "ChargeCard = unsafe\n# a comment\nLookupOrder=safe",
            "default": "unsafe",
            "reason": "r",
        },
    )
    assert response.status_code == 302
    assert EffectMapVersion.objects.get(map__name="orders").entries == {"ChargeCard": "unsafe", "LookupOrder": "safe"}
    response = op_pages.post(
        reverse("console:effect_map_attach", args=["orders"]),
        {"system": "temporal", "key": "orders", "reason": "queue"},
    )
    assert response.status_code == 302
    assert EffectMap.objects.get(name="orders").attachments.get().key == "orders"
    bad = op_pages.post(reverse("console:effect_map_new"), {"name": "x", "entries": "no equals sign", "reason": "r"})
    assert bad.status_code == 302 and EffectMap.objects.count() == 1


def _fill(n: int, operator) -> None:
    for i in range(n):
        effect_map = effect_map_create(name=f"m{n}-{i}", entries={"A": "safe"}, actor=operator, reason="r").map
        effect_map_attach(effect_map=effect_map, system="temporal", key=f"q{n}-{i}", actor=operator, reason="r")
        history_upload_receive(
            file=SimpleUploadedFile(f"h{i}.json", history_bytes(run_id=f"run-{n}-{i}")),
            source="temporal",
            actor=operator,
            effect_map=effect_map.name,
        )


# Session, user and role (3), then the page's rows: imports with their source and map (1); maps (1) and
# attachments with their map (1).
@pytest.mark.parametrize(("url", "queries"), [("console:imports", 4), ("console:effect_maps", 5)])
def test_list_pages_cost_the_same_queries_for_3_rows_or_12(op_pages, operator, no_broker, url, queries):
    for n in (3, 12):
        _fill(n, operator)
        with CaptureQueriesContext(connection) as ctx:
            response = op_pages.get(reverse(url))
        assert response.status_code == 200
        assert len(ctx.captured_queries) == queries, [q["sql"] for q in ctx.captured_queries]


def test_the_turn_pages_note_costs_one_query_for_other_runs_and_three_for_an_import(
    operator, pay, eager_tasks, django_capture_on_commit_callbacks, django_assert_num_queries
):
    from recovery.imports.selectors import turn_import_note

    other = Turn.objects.select_related("run").filter(run=pay.run).first()
    with django_assert_num_queries(1):
        assert turn_import_note(turn=other) is None
    effect_map_create(name="orders", entries={"SendReceipt": "idempotent"}, actor=operator, reason="r")
    _imported_run(operator, django_capture_on_commit_callbacks)
    turn = Turn.objects.select_related("run").get(run__run_id=RUN, turn_id="workflow")
    # The imported run with its import, source and map; the turn's own words; its intents' classes.
    with django_assert_num_queries(3):
        note = turn_import_note(turn=turn)
        assert note is not None and [s.label for s in note.class_sources] == [
            "unsafe (not in the map)",
            "idempotent (map entry SendReceipt)",
            "unsafe (not in the map)",
        ]
        assert note.imported.history_import.source.system == "temporal"
