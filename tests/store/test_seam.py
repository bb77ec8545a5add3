"""The journal store's seam (journals/store.py): both stores keep the protocol, neither imports the other,
and on PostgreSQL the same batches and reads give the same answers through either.

The ORM store (journals/orm.py) runs on any database; the PostgreSQL store (journals/postgres.py) only on
PostgreSQL, so the comparison of answers needs DATABASE_URL set to a PostgreSQL database.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import Any

import pytest
from django.db import connection, transaction

from journals.access import EVERY_RUN, RunScope
from journals.intake import IngestError, split_batch
from journals.models import Branch, Checkpoint, JournalRecord, Run, Turn
from journals.orm import OrmStore
from journals.postgres import PostgresStore
from journals.store import JournalStore, journal_store
from tests.journal_builder import JournalBuilder
from trail.tokens import api_token_create, api_token_revoke

JOURNALS = Path(__file__).resolve().parents[2] / "journals"
PROTOCOL_METHODS = ("records_ingest", "api_token_find", "turn_page_rows", "turn_detail")


def both_stores() -> list[Any]:
    orm = OrmStore()
    return [orm, PostgresStore(general=orm.records_ingest)]


def test_both_stores_keep_the_protocol_signature_for_signature():
    for store in both_stores():
        assert isinstance(store, JournalStore)
        for name in PROTOCOL_METHODS:
            ours = inspect.signature(getattr(store, name))
            wanted = inspect.signature(getattr(JournalStore, name))
            wanted = wanted.replace(parameters=list(wanted.parameters.values())[1:])  # without self
            assert [(p.name, p.kind, p.default) for p in ours.parameters.values()] == [
                (p.name, p.kind, p.default) for p in wanted.parameters.values()
            ], (type(store).__name__, name)


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports, at any depth of its code (``from a import b``: both a and a.b)."""
    modules: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            modules.add(node.module)
            modules.update(f"{node.module}.{alias.name}" for alias in node.names)
    return modules


def test_neither_store_imports_the_other_nor_the_seam_above_it():
    orm, postgres = imported_modules(JOURNALS / "orm.py"), imported_modules(JOURNALS / "postgres.py")
    above = {"journals.store", "journals.services", "journals.selectors", "journals.views"}
    assert not orm & {"journals.postgres", "psycopg", *above}
    assert not postgres & {"journals.orm", *above}
    # What they share comes from journals.intake, by public names only.
    for path in (JOURNALS / "orm.py", JOURNALS / "postgres.py"):
        shared = {
            m.removeprefix("journals.intake.") for m in imported_modules(path) if m.startswith("journals.intake.")
        }
        assert shared and not [name for name in shared if name.startswith("_")]


def test_the_store_is_chosen_once_by_the_connections_vendor():
    store = journal_store()
    assert journal_store() is store
    expected = PostgresStore if connection.vendor == "postgresql" else OrmStore
    assert type(store) is expected


# --- The same batches and reads through both stores (PostgreSQL) -------------------------------------------


def journal() -> JournalBuilder:
    """Turns on branch 0, a checkpoint, a fork and turns on the new branch."""
    b = JournalBuilder("seam-1")
    for n in range(6):
        b.full_turn(f"t{n}")
        b.dispatch(f"t{n}", "fetch")
    b.record("checkpoint", covers_lsn=len(b.lines) - 1, state_digest="ab" * 32)
    b.fork(from_lsn=20)
    for n in range(6, 9):
        b.plan(f"t{n}", lineage="second")
        b.commit(f"t{n}", "plan")
    return b


def batches() -> list[tuple[str, list[bytes], dict[str, int], dict[int, int]]]:
    """(run, lines, fencing, expect): the common batch, a redelivery with new records, a conflict, a gap and
    its filling, refusals under LoopX-Expect and LoopX-Fencing, a malformed line, a second run."""
    lines = journal().lines
    other = JournalBuilder("other-2")
    other.full_turn("o1")
    changed = lines[20][:-1] + b',"zz":1}'  # lsn 20 again, other bytes (still canonical)
    return [
        ("seam-1", lines[:30], {}, {}),
        ("seam-1", lines[25:45], {}, {}),
        ("seam-1", [changed], {}, {}),
        ("seam-1", lines[50:55], {}, {}),
        ("seam-1", lines[45:50], {}, {0: 44}),
        ("seam-1", lines[55:62], {}, {0: 3}),
        ("seam-1", lines[62:], {"t7": 2}, {}),
        ("seam-1", [lines[55], b'{"run": "seam-1", "branch": 1,'], {}, {}),
        ("seam-1", lines[55:], {}, {}),
        ("other-2", other.lines, {}, {}),
    ]


def answer(store: Any, run_id: str, lines: list[bytes], fencing: dict[str, int], expect: dict[int, int]) -> Any:
    try:
        result = store.records_ingest(run_id=run_id, lines=lines, fencing=fencing, expect=expect)
    except IngestError as exc:
        return ("refused", exc.status, exc.code, exc.detail, exc.line, exc.extra)
    run = result.run
    return (
        (run.run_id, run.record_count, run.last_seq, run.prefix_digest),
        (result.stored, result.duplicates, result.first_seq, result.last_seq),
        [(b.number, b.last_lsn, b.committed_lsn, b.record_count) for b in result.branches],
        result.violations,
    )


def stored() -> dict[str, Any]:
    """Everything ingest wrote, without row ids or the times of this play."""
    return {
        "runs": list(Run.objects.order_by("run_id").values_list("run_id", "record_count", "last_seq", "prefix_digest")),
        "records": list(
            JournalRecord.objects.order_by("run__run_id", "seq").values_list(
                "run__run_id", "seq", "branch", "lsn", "kind", "v", "turn", "digest", "line"
            )
        ),
        "branches": list(
            Branch.objects.order_by("run__run_id", "number").values_list(
                "run__run_id", "number", "last_lsn", "committed_lsn", "record_count", "live"
            )
        ),
        "turns": list(
            Turn.objects.order_by("run__run_id", "turn_id").values_list(
                "run__run_id", "turn_id", "lineage", "branch", "plan", "first_seq", "status", "fencing_counter"
            )
        ),
        "checkpoints": list(
            Checkpoint.objects.order_by("record__seq").values_list("record__seq", "branch", "lsn", "covers_lsn")
        ),
    }


def reads(store: Any, raw_tokens: list[str]) -> list[Any]:
    """The three hot reads as the API asks them: tokens, pages in both orders and past a position, details."""
    out: list[Any] = []
    for raw in raw_tokens:
        token = store.api_token_find(raw=raw)
        out.append(None if token is None else {f.attname: getattr(token, f.attname) for f in token._meta.fields})
    for scope, run_id, exact in (
        (EVERY_RUN, None, {}),
        (EVERY_RUN, "seam-1", {}),
        (EVERY_RUN, "seam-1", {"status": "open"}),
        (RunScope.of(["other"]), None, {}),
        (RunScope.of(["other"]), "seam-1", {}),
        (EVERY_RUN, "nope", {}),
    ):
        rows = store.turn_page_rows(scope=scope, run_id=run_id, exact=exact)
        newest = list(rows.order_by("-updated_at", "-id")[0:50])
        out.append(newest)
        out.append(list(rows.order_by("updated_at", "id")[1:4]))
        if newest:
            position = str(newest[len(newest) // 2]["updated_at"])
            out.append(list(rows.order_by("-updated_at", "-id").filter(updated_at__lt=position)[0:5]))
            out.append(list(rows.order_by("updated_at", "id").filter(updated_at__gt=position)[0:5]))
    for run_id, turn_id in (("seam-1", "t0"), ("seam-1", "t7"), ("other-2", "o1"), ("seam-1", "missing")):
        detail = store.turn_detail(run_id=run_id, turn_id=turn_id)
        out.append(None if detail is None else dict(detail))
    return out


@pytest.mark.postgres
@pytest.mark.django_db
def test_both_stores_give_the_same_answers_for_the_same_batches_and_reads(runtime):
    gone, revoked = api_token_create(name="gone")
    api_token_revoke(token=gone)
    raw_tokens = [runtime.raw, revoked, "lxr_unknown", ""]
    plays = []
    for store in both_stores():
        with transaction.atomic():
            answers = [answer(store, run, lines, fencing, expect) for run, lines, fencing, expect in batches()]
            # Every read, through both stores, of what this store wrote.
            seen = [reads(reader, raw_tokens) for reader in both_stores()]
            assert seen[0] == seen[1]
            plays.append((answers, stored()))
            transaction.set_rollback(True)
    assert plays[0] == plays[1]
    answers = plays[0][0]
    assert [a[0] for a in answers if a[0] == "refused"] == ["refused"] * 4
    assert [a[2] for a in answers if a[0] == "refused"] == ["lsn_conflict", "offset_mismatch", "fenced", "not_json"]
    assert answers[1][1][1] == 5  # the redelivered records are duplicates
    assert answers[3][3] and not answers[4][3]  # the gap brings a fault, its filling none
    assert plays[0][1]["checkpoints"] and len(plays[0][1]["runs"]) == 2


@pytest.mark.django_db
def test_the_orm_store_ingests_and_reads_what_it_wrote_on_any_database(runtime):
    """The same batches through the ORM store on the database the suite runs on: the answers as above."""
    store = OrmStore()
    answers = [answer(store, run, lines, fencing, expect) for run, lines, fencing, expect in batches()]
    assert [a[2] for a in answers if a[0] == "refused"] == ["lsn_conflict", "offset_mismatch", "fenced", "not_json"]
    everything = reads(store, [runtime.raw])
    assert everything[0]["name"] == runtime.token.name
    assert len(everything[1]) == 10  # every turn of both runs, newest first
    assert split_batch(b"".join(line + b"\n" for line in journal().lines), "application/x-ndjson") == journal().lines
