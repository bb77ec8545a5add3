"""DBOS system databases made by running real DBOS workflows (tests/imports/dbos_app.py, SQLite) in their
own processes, killed with SIGKILL inside a step, imported as docs/imports.md's DBOS table says."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from recovery.imports.importers import ImportRefused, effect_map_parse
from recovery.imports.importers.dbos import convert_rows, read_sqlite
from tests.imports.helpers import decisions, imported, intents, records, run_import

ROOT = Path(__file__).resolve().parents[2]
SECRET = "card-4242-4242-secret"
EFFECTS = {"lookup_customer": "safe", "reserve_stock": "idempotent", "charge_card": "unsafe"}


def _run_app(db: Path | str, workflow: str, mode: str, tries: Path | None = None) -> int:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DBOS")}
    tries_dir = tries if tries is not None else Path(str(db)).parent
    proc = subprocess.run(
        [sys.executable, "-m", "tests.imports.dbos_app", str(db), str(tries_dir), workflow, mode],
        cwd=ROOT,
        env=env,
        capture_output=True,
        timeout=120,
        check=False,
    )
    return proc.returncode


@pytest.fixture(scope="module")
def dbs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Three system databases: one workflow completed; one killed inside its unsafe step; one killed
    there, then run again to its end (a retry after a crash); and one whose step raised (ERROR)."""
    base = tmp_path_factory.mktemp("dbos")
    out = {}
    for name, modes in {
        "completed": ["complete"],
        "crashed": ["crash"],
        "retried": ["crash", "complete"],
        "failed": ["error"],
    }.items():
        db = base / f"{name}.sqlite"
        codes = [_run_app(db, "order-1", mode) for mode in modes]
        assert codes[0] == (-9 if modes[0] == "crash" else 0), (name, codes)
        assert all(code == 0 for code in codes[1:]), (name, codes)
        out[name] = db
    return out


def _import(db: Path, effects: dict[str, str] | None = None) -> dict[str, Any]:
    result = imported("dbos", db.read_bytes(), EFFECTS if effects is None else effects)
    runs = {run.run: run for run in result.runs}
    for run in result.runs:
        assert SECRET.encode() not in run.journal
    return {"result": result, "runs": runs}


def _turn(journal: bytes) -> dict[str, Any]:
    answer = decisions(journal)
    assert answer["violations"] == [], answer["violations"]
    (t,) = answer["turns"]
    return t


def _status(db: Path, workflow: str) -> tuple[str, int]:
    with sqlite3.connect(db) as conn:
        row = conn.execute(
            "SELECT status, recovery_attempts FROM workflow_status WHERE workflow_uuid = ?", (workflow,)
        ).fetchone()
    return row[0], row[1]


def test_a_completed_workflow_and_its_children_are_complete_runs(dbs: dict[str, Path]) -> None:
    got = _import(dbs["completed"])
    runs = got["runs"]
    assert sorted(runs) == ["dbos-order-1", "dbos-order-1-3", "dbos-order-1-5"]
    t = _turn(runs["dbos-order-1"].journal)
    assert (t["decision"], t["lineage"]) == ("complete", "dbos:order")
    assert intents(t) == {
        "step:1": ("safe", "settled"),
        "step:2": ("idempotent", "settled"),
        "child:order-1-3": ("idempotent", "settled"),
        "child:order-1-5": ("idempotent", "settled"),
        "step:8": ("unsafe", "settled"),
    }
    recs = records(runs["dbos-order-1"].journal)
    assert [r["kind"] for r in recs][:2] == ["turn_planned", "phase_committed"]
    assert [(r["kind"], r.get("status")) for r in recs[-2:]] == [
        ("phase_committed", None),
        ("turn_terminal", "completed"),
    ]
    steps = {r["intent"]: r for r in recs if r["kind"] == "intent_dispatched"}
    assert steps["step:8"]["step"] == "charge_card" and steps["step:2"]["idempotency_key"] == "dbos-order-1/step/2"
    assert steps["child:order-1-3"]["idempotency_key"] == "order-1-3"
    assert got["result"].skipped == {"DBOS.getResult": 2, "DBOS.sleep": 1}
    assert runs["dbos-order-1"].decided_by == {
        "step:1": "lookup_customer",
        "step:2": "reserve_stock",
        "step:8": "charge_card",
    }
    for child in ("dbos-order-1-3", "dbos-order-1-5"):
        t = _turn(runs[child].journal)
        assert (t["decision"], t["lineage"], intents(t)) == ("complete", "dbos:pack", {"step:1": ("safe", "settled")})


def test_a_workflow_killed_inside_its_unsafe_step_is_held(dbs: dict[str, Path]) -> None:
    assert _status(dbs["crashed"], "order-1") == ("PENDING", 1)
    runs = _import(dbs["crashed"])["runs"]
    t = _turn(runs["dbos-order-1"].journal)
    assert (t["decision"], t["reason"]) == ("blocked", "effect_indeterminate")
    assert intents(t)["step:8"] == ("unsafe", "indeterminate")
    last = records(runs["dbos-order-1"].journal)[-1]
    assert (last["kind"], last["intent"], last["source_event"]) == ("intent_dispatched", "step:8", "order-1/8")
    assert "step" not in last  # nothing in the database names the step the crash cut off
    assert "step:8" not in runs["dbos-order-1"].decided_by
    # The children had ended before the crash.
    assert {_turn(runs[c].journal)["decision"] for c in ("dbos-order-1-3", "dbos-order-1-5")} == {"complete"}


def test_the_step_a_crash_cut_off_takes_the_most_dangerous_class_the_map_allows(dbs: dict[str, Path]) -> None:
    db = dbs["crashed"]
    t = _turn(_import(db, {"charge_card": "idempotent", "*": "safe"})["runs"]["dbos-order-1"].journal)
    assert (t["decision"], t["resume_from"], intents(t)["step:8"]) == ("resume", "close", ("idempotent", "reissue"))
    t = _turn(_import(db, {"*": "safe"})["runs"]["dbos-order-1"].journal)
    assert intents(t)["step:8"][0] == "safe" and t["decision"] == "resume"
    t = _turn(_import(db, {"charge_card": "safe", "*": "unsafe"})["runs"]["dbos-order-1"].journal)
    assert (t["decision"], intents(t)["step:8"]) == ("blocked", ("unsafe", "indeterminate"))


def test_a_workflow_run_again_after_the_crash_completes(dbs: dict[str, Path]) -> None:
    assert _status(dbs["retried"], "order-1") == ("SUCCESS", 2)
    runs = _import(dbs["retried"])["runs"]
    t = _turn(runs["dbos-order-1"].journal)
    assert t["decision"] == "complete" and intents(t)["step:8"] == ("unsafe", "settled")
    assert records(runs["dbos-order-1"].journal)[0]["recovery_attempts"] == 2
    assert records(runs["dbos-order-1"].journal) != records(_import(dbs["completed"])["runs"]["dbos-order-1"].journal)


def test_a_workflow_whose_step_raised_failed(dbs: dict[str, Path]) -> None:
    assert _status(dbs["failed"], "order-1")[0] == "ERROR"
    recs = records(_import(dbs["failed"])["runs"]["dbos-order-1"].journal)
    observed = {r["intent"]: r["outcome"] for r in recs if r["kind"] == "effect_observed"}
    assert observed["step:8"] == "failed" and observed["step:2"] == "succeeded"
    assert recs[-1]["status"] == "failed"
    assert _turn(_import(dbs["failed"])["runs"]["dbos-order-1"].journal)["decision"] == "complete"


def test_the_command_writes_each_workflow_s_run_and_twice_gives_the_same_bytes(
    dbs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    effects = tmp_path / "effects.json"
    effects.write_text(json.dumps(EFFECTS))
    outputs = []
    for n in (1, 2):
        out = tmp_path / f"out{n}"
        out.mkdir()
        code, stdout, err = run_import(
            capsys, str(dbs["crashed"]), "--from", "dbos", "--out", str(out), "--effects", str(effects), "--json"
        )
        assert (code, err) == (0, "")
        summary = json.loads(stdout)
        assert [r["run"] for r in summary["runs"]] == ["dbos-order-1", "dbos-order-1-3", "dbos-order-1-5"]
        assert summary["skipped"] == {"DBOS.getResult": 2, "DBOS.sleep": 1}
        outputs.append({p.name: p.read_bytes() for p in sorted(out.iterdir())})
    assert outputs[0] == outputs[1] and len(outputs[0]) == 3
    code, _out, err = run_import(capsys, str(dbs["crashed"]), "--from", "dbos", "--out", str(tmp_path / "x.jsonl"))
    assert code == 2 and "not a folder" in err
    code, _out, err = run_import(
        capsys, "postgresql://user:pw@127.0.0.1:1/none", "--from", "temporal", "--out", str(tmp_path / "x.jsonl")
    )
    assert code == 2 and "only --from dbos" in err and "pw" not in err


def test_an_unreachable_database_url_is_a_usage_error_that_names_no_password(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_import(
        capsys, "postgresql://loopx:hunter2@127.0.0.1:1/dbos", "--from", "dbos", "--out", str(tmp_path)
    )
    assert (code, out) == (2, "") and "hunter2" not in err and "cannot read the database" in err


def test_the_same_rows_in_another_order_give_the_same_journals(dbs: dict[str, Path]) -> None:
    workflows, operations = read_sqlite(dbs["retried"].read_bytes())
    effects = effect_map_parse(EFFECTS)
    a, _, _ = convert_rows(workflows, operations, effects=effects, prefix=None, progress=None)
    b, _, _ = convert_rows(
        list(reversed(workflows)), list(reversed(operations)), effects=effects, prefix=None, progress=None
    )
    assert [j.data() for j in a] == [j.data() for j in b]


def test_what_is_not_a_dbos_system_database_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE checkpoints (thread_id TEXT)")
    for data in (b"not a database", other.read_bytes()):
        with pytest.raises(ImportRefused) as err:
            imported("dbos", data)
        assert err.value.code == "history_invalid"


def test_an_operation_of_no_workflow_and_an_unknown_status_fail_closed(dbs: dict[str, Path], tmp_path: Path) -> None:
    db = tmp_path / "edited.sqlite"
    db.write_bytes(dbs["completed"].read_bytes())
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE workflow_status SET status = 'PAUSED' WHERE workflow_uuid = 'order-1-5'")
    runs = _import(db)["runs"]
    answer = decisions(runs["dbos-order-1-5"].journal)
    assert [v["code"] for v in answer["violations"]] == ["kind_unknown"]
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA foreign_keys = OFF")
        conn.execute("DELETE FROM workflow_status WHERE workflow_uuid = 'order-1-3'")
    with pytest.raises(ImportRefused):
        imported("dbos", db.read_bytes())


@pytest.mark.postgres
def test_a_postgresql_system_database_is_read_from_its_url(
    dbs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same workflow, killed inside its unsafe step, on a DBOS PostgreSQL system database (a database
    of its own beside the test database, made by DBOS and dropped after): the URL's import gives the same
    records as the SQLite file's, but for the times."""
    import psycopg
    from psycopg import sql

    base = os.environ["DATABASE_URL"]
    name = base.rsplit("/", 1)[1].split("?", 1)[0] + "_dbos_import"
    url = base.rsplit("/", 1)[0] + "/" + name
    admin = base.rsplit("/", 1)[0] + "/postgres"

    def drop() -> None:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))

    drop()
    try:
        assert _run_app(url, "order-1", "crash", tries=tmp_path) == -9
        out = tmp_path / "out"
        out.mkdir()
        code, stdout, err = run_import(capsys, url, "--from", "dbos", "--out", str(out), "--json")
        assert (code, err) == (0, "")
        assert [r["run"] for r in json.loads(stdout)["runs"]] == ["dbos-order-1", "dbos-order-1-3", "dbos-order-1-5"]
        journal = (out / "dbos-order-1.jsonl").read_bytes()
        assert SECRET.encode() not in journal
        t = _turn(journal)
        assert (t["decision"], intents(t)["step:8"]) == ("blocked", ("unsafe", "indeterminate"))

        def timeless(data: bytes) -> list[dict[str, Any]]:
            return [{k: v for k, v in r.items() if k not in ("at", "prev")} for r in records(data)]

        from_file = _import(dbs["crashed"], {})["runs"]["dbos-order-1"].journal
        assert timeless(journal) == timeless(from_file)
    finally:
        drop()


def test_a_cancelled_workflow_s_next_operation_is_unknown(dbs: dict[str, Path], tmp_path: Path) -> None:
    """DBOS marks a workflow CANCELLED without a row for the step a cancellation may have stopped: the
    crashed database with its workflow's status set to CANCELLED, as a cancellation leaves it."""
    db = tmp_path / "cancelled.sqlite"
    db.write_bytes(dbs["crashed"].read_bytes())
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE workflow_status SET status = 'CANCELLED' WHERE workflow_uuid = 'order-1'")
    recs = records(_import(db)["runs"]["dbos-order-1"].journal)
    assert [(r["kind"], r.get("outcome"), r.get("status")) for r in recs[-2:]] == [
        ("effect_observed", "unknown", None),
        ("turn_terminal", None, "cancelled"),
    ]
    t = _turn(_import(db)["runs"]["dbos-order-1"].journal)
    assert (t["decision"], t["reason"], intents(t)["step:8"]) == (
        "blocked",
        "effect_indeterminate",
        ("unsafe", "indeterminate"),
    )


@pytest.mark.django_db
def test_a_dbos_database_uploaded_like_any_history_is_imported_and_its_crashed_step_held(
    dbs: dict[str, Path], operator: Any, eager_tasks: Any, django_capture_on_commit_callbacks: Any
) -> None:
    from django.core.files.uploadedfile import SimpleUploadedFile

    from journals.models import TurnEffective
    from recovery.imports.models import HistoryImport, ImportedRun
    from recovery.imports.services import effect_map_create, history_upload_receive

    effect_map_create(name="orders", entries=EFFECTS, actor=operator, reason="the shop's steps")
    with django_capture_on_commit_callbacks(execute=True):
        upload, _ = history_upload_receive(
            file=SimpleUploadedFile("dbos.sqlite", dbs["crashed"].read_bytes()),
            source="dbos",
            actor=operator,
            effect_map="orders",
        )
    upload = HistoryImport.objects.get(pk=upload.pk)
    assert upload.state == "imported"
    assert set(ImportedRun.objects.filter(history_import=upload).values_list("run_ident", flat=True)) >= {
        "dbos-order-1"
    }
    held = TurnEffective.objects.get(turn__run__run_id="dbos-order-1", turn__turn_id="workflow")
    assert held.gate == "hold"
