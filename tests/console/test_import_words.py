"""Imported runs in their own words: the import keeps each source's names and ids (the run's, each turn's and
each intent's, never in the journal), ``source_words`` reads them, and the run and turn pages say the source
and its import (linked), the turn's name and each intent's name from the history, with the ids one click
away. Temporal, LangGraph and Step Functions, each from the fixtures its importer's tests use."""

from __future__ import annotations

import json
import re
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from journals.models import Turn
from recovery.imports.models import HistoryImport, ImportedIntent, ImportedRun, ImportedTurn
from recovery.imports.selectors import source_words
from recovery.imports.services import history_upload_receive
from tests.console.conftest import page_client
from tests.imports.charge_history import RUN, RUN_ID, history_bytes
from tests.imports.test_langgraph import cfg, database
from tests.imports.test_stepfunctions import Execution

pytestmark = pytest.mark.django_db

SUBMIT = "arn:aws:states:::lambda:invoke"


def _upload(operator, capture, name: str, data: bytes, source: str) -> HistoryImport:
    with capture(execute=True):
        upload, _ = history_upload_receive(file=SimpleUploadedFile(name, data), source=source, actor=operator)
    upload.refresh_from_db()
    assert upload.state == "imported", upload.result
    return upload


def temporal_import(operator, capture) -> ImportedRun:
    # The started event of a newer server names the workflow id too.
    raw = json.loads(history_bytes())
    raw["events"][0]["workflowExecutionStartedEventAttributes"]["workflowId"] = "order-1842"
    upload = _upload(operator, capture, "charge.json", json.dumps(raw).encode(), "temporal")
    return ImportedRun.objects.get(history_import=upload)


def test_a_temporal_import_keeps_the_workflow_s_names_and_ids(
    operator, eager_tasks, django_capture_on_commit_callbacks
):
    row = temporal_import(operator, django_capture_on_commit_callbacks)
    assert row.origin == {
        "workflow_type": "ChargeOrder",
        "workflow_id": "order-1842",
        "run_id": RUN_ID,
        "task_queue": "orders",
    }
    turn = ImportedTurn.objects.get(imported_run=row)
    assert (turn.turn, turn.name, turn.original) == ("workflow", "ChargeOrder", {"planned": 1, "last": 14})
    intents = {i.intent: (i.name, i.original) for i in ImportedIntent.objects.filter(imported_run=row)}
    assert intents == {
        "activity:1": ("ChargeCard", {"dispatched": 5, "observed": 7}),
        "activity:2": ("SendReceipt", {"dispatched": 8, "observed": 10}),
        "activity:3": ("LookupOrder", {"dispatched": 13, "observed": 14}),
    }
    words = source_words(run_id=RUN, turn=Turn.objects.get(run__run_id=RUN))
    assert words is not None and words.system_words == "Temporal history"
    assert words.intent_label("activity:1") == "ChargeCard (activity:1)"
    assert [(n.label, n.value) for n in words.origin][:2] == [("workflow id", "order-1842"), ("run id", RUN_ID)]
    assert [(n.label, n.value) for n in words.intents["activity:1"].ids] == [
        ("dispatched at event", "5"),
        ("read back at event", "7"),
    ]


def test_the_run_and_turn_pages_speak_the_history_s_words(
    operator, eager_tasks, django_capture_on_commit_callbacks
) -> None:
    row = temporal_import(operator, django_capture_on_commit_callbacks)
    pages = page_client(operator)
    turn = Turn.objects.get(run__run_id=RUN, turn_id="workflow")
    import_url = reverse("console:import", args=[row.history_import.pk])
    short = str(row.history_import.pk)[:8]

    run_page = pages.get(reverse("console:run", args=[turn.run.pk])).content.decode()
    source = run_page[run_page.index('id="source-words"') :].split("</dd>")[0]
    assert "Temporal history" in source and f'<a href="{import_url}">import {short}</a>' in source
    assert "journal ingest" not in source
    assert "order-1842" in source and RUN_ID in source  # the ids, inside the disclosure
    assert '<span class="small muted turn-name">ChargeOrder</span>' in run_page
    # The timeline labels the turn's bar by its name too.
    row = run_page[run_page.index('<g class="tl-row" data-turn="workflow"') :].split("</g>")[0]
    assert '<text class="lane-label" x="4" y="39">ChargeOrder</text>' in row

    page = pages.get(reverse("console:turn", args=[turn.pk])).content.decode()
    assert '<span id="turn-name">ChargeOrder</span>' in page
    assert f'<a href="{import_url}">import {short}</a>' in page
    assert "this turn planned at event 1" in page.replace("</li>", "").replace('<span class="mono wrapid">', "")
    assert "ChargeCard (activity:1)" in page
    # The timed-out charge is held: the question of the approval names the activity.
    legend = re.search(r"<legend>Did intent <code>([^<]*)</code> happen\?</legend>", page)
    assert legend is not None and legend.group(1) == "ChargeCard (activity:1)"
    # An approval refused for want of that finding asks again in the same words.
    refused = pages.post(reverse("console:approve", args=[turn.pk]), {"reason": "looked at the bank"})
    assert refused.status_code == 400
    assert "<legend>Did intent <code>ChargeCard (activity:1)</code> happen?</legend>" in refused.content.decode()


def test_a_run_its_runtime_journaled_keeps_its_words(op_pages, pay) -> None:
    page = op_pages.get(reverse("console:run", args=[pay.run.pk])).content.decode()
    assert 'id="source-words"' not in page and "journal ingest" in page
    assert source_words(run_id=pay.run.run_id) is None


def test_a_langgraph_import_names_each_checkpoint_s_turn_by_the_node_that_ran(
    tmp_path: Path, operator, eager_tasks, django_capture_on_commit_callbacks
) -> None:
    data = database(tmp_path, lambda saver, graph: graph().invoke({"x": 1, "note": ""}, cfg("th-7")))
    upload = _upload(operator, django_capture_on_commit_callbacks, "checkpoints.sqlite", data, "langgraph")
    row = ImportedRun.objects.get(history_import=upload)
    assert row.origin == {"thread_id": "th-7"}
    names = dict(ImportedTurn.objects.filter(imported_run=row).values_list("turn", "name"))
    # The input checkpoint, then one per node, in the graph's order (a, b, c), then the end.
    by_step = sorted(names.values())
    assert "input (step -1)" in by_step and {"a", "b", "c"} <= set(by_step)
    turns = {t: n for t, n in names.items() if n in ("a", "b", "c")}
    for turn, node in turns.items():
        assert turn.startswith("checkpoint:")
        checkpoint = turn.split(":", 1)[1]
        intent = ImportedIntent.objects.get(imported_run=row, name=node)
        assert str(intent.original["dispatched"]).split("/")[0] != checkpoint  # the task wrote against its parent
    words = source_words(run_id=row.run_ident, turns=list(turns))
    assert words is not None and words.system_words == "LangGraph checkpoints"
    assert {words.turn_name(t) for t in turns} == {"a", "b", "c"}
    assert ("thread id", "th-7") in [(n.label, n.value) for n in words.origin]


def test_a_step_functions_import_names_each_turn_by_its_state(
    operator, eager_tasks, django_capture_on_commit_callbacks
) -> None:
    x = Execution()
    entered = x.enter("ChargeCard", 1)
    scheduled = x.task(entered, resource=SUBMIT, resource_type="lambda")
    done = x.add("TaskSucceeded", scheduled, resourceType="lambda", resource=SUBMIT, output="{}")
    exited = x.exit("ChargeCard", done)
    x.add("ExecutionSucceeded", exited, output="{}")
    upload = _upload(operator, django_capture_on_commit_callbacks, "execution.json", x.data(), "stepfunctions")
    row = ImportedRun.objects.get(history_import=upload)
    turn = ImportedTurn.objects.get(imported_run=row)
    assert (turn.turn, turn.name, turn.original) == (
        f"state:{entered}",
        "ChargeCard",
        {"planned": entered, "last": exited},
    )
    intent = ImportedIntent.objects.get(imported_run=row)
    assert (intent.intent, intent.name, intent.original) == (
        f"task:{scheduled}",
        SUBMIT,
        {"dispatched": scheduled, "observed": done},
    )
    page = page_client(operator).get(reverse("console:turn", args=[Turn.objects.get(run__run_id=row.run_ident).pk]))
    html = page.content.decode()
    assert '<span id="turn-name">ChargeCard</span>' in html and "Step Functions history" in html
    assert f"{SUBMIT} (task:{scheduled})" in html


def _dbos_database(path: Path) -> bytes:
    """A DBOS system database with the two tables the importer reads: one workflow that charged a card."""
    with closing(sqlite3.connect(path)) as conn:
        conn.execute(
            "CREATE TABLE workflow_status (workflow_uuid TEXT PRIMARY KEY, name TEXT, status TEXT,"
            " created_at INTEGER, updated_at INTEGER, recovery_attempts INTEGER)"
        )
        conn.execute(
            "CREATE TABLE operation_outputs (workflow_uuid TEXT, function_id INTEGER, function_name TEXT,"
            " output TEXT, error TEXT, child_workflow_id TEXT, started_at_epoch_ms INTEGER,"
            " completed_at_epoch_ms INTEGER)"
        )
        conn.execute(
            "INSERT INTO workflow_status VALUES ('order-1', 'checkout', 'SUCCESS', 1764000000000, 1764000005000, 1)"
        )
        conn.execute(
            "INSERT INTO operation_outputs VALUES ('order-1', 1, 'charge_card', '\"ok\"', NULL, NULL,"
            " 1764000001000, 1764000002000)"
        )
        conn.commit()
    return path.read_bytes()


def test_a_dbos_import_names_the_workflow_and_its_steps(
    tmp_path: Path, operator, eager_tasks, django_capture_on_commit_callbacks
) -> None:
    data = _dbos_database(tmp_path / "dbos.sqlite")
    upload = _upload(operator, django_capture_on_commit_callbacks, "dbos.sqlite", data, "dbos")
    row = ImportedRun.objects.get(history_import=upload)
    assert row.origin == {"workflow_uuid": "order-1", "workflow_name": "checkout"}
    turn = ImportedTurn.objects.get(imported_run=row)
    assert (turn.turn, turn.name, turn.original) == ("workflow", "checkout", {"planned": "order-1", "last": "order-1"})
    intent = ImportedIntent.objects.get(imported_run=row)
    assert (intent.intent, intent.name, intent.original) == (
        "step:1",
        "charge_card",
        {"dispatched": "order-1/1", "observed": "order-1/1"},
    )
    words = source_words(run_id=row.run_ident)
    assert words is not None and words.system_words == "DBOS system database"
