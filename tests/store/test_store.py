"""The store's invariants: append-only evidence (model guards and the PostgreSQL trigger), uniqueness
and enum checks in the database, roles, tokens, and byte-for-byte export."""

from __future__ import annotations

import io

import pytest
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.db import DatabaseError, IntegrityError, connection, transaction
from django.utils import timezone

from journals.models import ApiToken, Intent, JournalRecord, Run, Turn
from journals.selectors import api_token_find, journal_bytes
from journals.services import records_ingest
from kernel.appendonly import AppendOnlyError
from recovery.models import GateDecision, OperatorEvidence
from recovery.recovery_audits.models import RecoveryAudit, RecoveryAuditAction, RecoveryAuditClosure, RecoveryDivergence
from tests.journal_builder import JournalBuilder
from trail.models import OperatorAction
from trail.services import operator_action_record

pytestmark = pytest.mark.django_db


def _ingest(builder: JournalBuilder, body: bytes | None = None) -> Run:
    result = records_ingest(
        run_id=builder.run,
        body=builder.body() if body is None else body,
        content_type="application/x-ndjson",
        token=None,
    )
    return result.run


def _record() -> JournalRecord:
    b = JournalBuilder()
    b.plan("t1")
    run = _ingest(b)
    return JournalRecord.objects.get(run=run)


def test_record_refuses_update_and_delete_through_every_orm_path():
    record = _record()
    record.kind = "fork"
    with pytest.raises(AppendOnlyError):
        record.save()
    with pytest.raises(AppendOnlyError):
        record.delete()
    with pytest.raises(AppendOnlyError):
        JournalRecord.objects.filter(pk=record.pk).update(kind="fork")
    with pytest.raises(AppendOnlyError):
        JournalRecord.objects.filter(pk=record.pk).delete()
    with pytest.raises(AppendOnlyError):
        JournalRecord.objects.bulk_update([record], ["kind"])
    assert JournalRecord.objects.get(pk=record.pk).kind == "turn_planned"


def test_operator_action_refuses_update_and_delete(operator):
    action = operator_action_record(actor=operator, kind="turn_block", reason="why", before={}, after={})
    action.reason = "rewritten"
    with pytest.raises(AppendOnlyError):
        action.save()
    with pytest.raises(AppendOnlyError):
        action.delete()
    with pytest.raises(AppendOnlyError):
        OperatorAction.objects.all().update(reason="rewritten")
    assert OperatorAction.objects.get(pk=action.pk).reason == "why"


APPEND_ONLY_TABLES = [
    JournalRecord,
    OperatorAction,
    RecoveryAudit,
    RecoveryAuditAction,
    RecoveryDivergence,
    RecoveryAuditClosure,
    OperatorEvidence,
    GateDecision,
]


@pytest.mark.parametrize("model", APPEND_ONLY_TABLES, ids=lambda m: m.__name__)
def test_append_only_models_are_guarded(model):
    assert isinstance(model.objects.all(), type(JournalRecord.objects.all()))
    with pytest.raises(AppendOnlyError):
        model.objects.all().update(id=1)
    with pytest.raises(AppendOnlyError):
        model.objects.all().delete()


@pytest.mark.postgres
@pytest.mark.parametrize("model", APPEND_ONLY_TABLES, ids=lambda m: m.__name__)
def test_postgres_trigger_refuses_raw_update_and_delete(model):
    table = model._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_trigger WHERE tgname = %s AND NOT tgisinternal", [f"{table}_append_only"]
        )
        assert cursor.fetchone()[0] == 1
    record = _record()
    for sql in (
        "UPDATE journals_journalrecord SET kind = 'fork' WHERE id = %s",
        "DELETE FROM journals_journalrecord WHERE id = %s",
    ):
        with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(sql, [record.pk])
    assert JournalRecord.objects.get(pk=record.pk).kind == "turn_planned"


@pytest.mark.postgres
def test_postgres_trigger_protects_the_audit_trail(operator):
    action = operator_action_record(actor=operator, kind="turn_block", reason="why")
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("UPDATE trail_operatoraction SET reason = 'x' WHERE id = %s", [action.pk])
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("DELETE FROM trail_operatoraction WHERE id = %s", [action.pk])


def test_unique_branch_lsn_per_run():
    record = _record()
    with pytest.raises(IntegrityError), transaction.atomic():
        JournalRecord.objects.create(
            run=record.run, seq=99, branch=record.branch, lsn=record.lsn, digest="0" * 64, line=b"{}"
        )


@pytest.mark.parametrize(
    ("model", "field", "value"),
    [
        (Turn, "decision", "maybe"),
        (Turn, "status", "paused"),
        (Intent, "effect_class", "risky"),
        (Intent, "resolution", "guess"),
        (Intent, "outcome", "perhaps"),
    ],
)
def test_enum_check_constraints(model, field, value):
    b = JournalBuilder()
    b.plan("t1")
    b.dispatch("t1", "i1")
    run = _ingest(b)
    turn = Turn.objects.get(run=run)
    target = (
        turn
        if model is Turn
        else Intent.objects.create(turn=turn, intent_id="i1", effect_class="safe", resolution="replay")
    )
    with pytest.raises(IntegrityError), transaction.atomic():
        model.objects.filter(pk=target.pk).update(**{field: value})


def test_check_constraints_on_append_only_enums(operator):
    with pytest.raises(IntegrityError), transaction.atomic():
        OperatorAction.objects.create(actor=operator, actor_name="x", kind="rewrite_history", reason="r",
                                      seq=10**9, prev_digest="0" * 64, digest="0" * 64)


def test_roles_exist_with_graded_permissions():
    perms = {g.name: set(g.permissions.values_list("codename", flat=True)) for g in Group.objects.all()}
    assert {"viewer", "operator", "admin"} <= set(perms)
    assert "view_turn" in perms["viewer"] and "add_gatedecision" not in perms["viewer"]
    assert "view_apitoken" not in perms["viewer"]
    assert {"view_turn", "add_gatedecision", "add_operatorevidence"} <= perms["operator"]
    assert perms["operator"] < perms["admin"]
    assert "add_apitoken" in perms["admin"]


def test_export_reproduces_the_journal_byte_for_byte():
    b = JournalBuilder("run-x")
    b.plan("t1", note="caf\u00e9 \u2603")
    b.commit("t1", "plan", "envelope")
    b.fork(from_lsn=1)
    b.commit("t1", "envelope")
    lines = list(b.lines)
    # A non-canonical writer (spaces, key order, escapes): its bytes are kept as received.
    lines.insert(2, b'{ "v": 2, "run": "run-x", "branch": 0, "lsn": 99, "kind": "note", "text": "\\u00e9" }')
    body = b"".join(line + b"\n" for line in lines)
    run = _ingest(b, body=body[: len(body) // 2].rsplit(b"\n", 1)[0] + b"\n")
    run = _ingest(b, body=body)  # redelivery of the first half plus the rest
    assert journal_bytes(run=run) == body
    assert list(JournalRecord.objects.filter(run=run).order_by("seq").values_list("seq", flat=True)) == list(
        range(1, len(lines) + 1)
    )


def test_create_api_token_prints_the_token_once_and_stores_its_hash():
    out, err = io.StringIO(), io.StringIO()
    call_command("create_api_token", "runtime-7", "--run-prefix", "prod-", stdout=out, stderr=err)
    raw = out.getvalue().strip()
    assert out.getvalue().count("\n") == 1 and raw.startswith("lxr_")
    token = ApiToken.objects.get(name="runtime-7")
    assert token.run_prefix == "prod-" and token.token_hash == ApiToken.hash(raw) and raw not in token.token_hash
    assert api_token_find(raw=raw) == token
    assert raw not in err.getvalue()
    action = OperatorAction.objects.get(kind="api_token_create")
    assert (action.actor, action.actor_name, action.after["run_prefix"]) == (None, "manage.py", "prod-")


def test_tokens_are_created_in_the_admin_shown_once_and_audited(admin_user, client):
    client.force_login(admin_user)
    answer = client.post("/admin/journals/apitoken/add/", {"name": "runtime-9", "run_prefix": "prod-"})
    assert answer.status_code == 200 and "no-store" in answer["Cache-Control"]
    raw = answer.context["raw"]
    assert raw.startswith("lxr_") and raw.encode() in answer.content
    token = ApiToken.objects.get(name="runtime-9")
    assert api_token_find(raw=raw) == token and token.run_prefix == "prod-"
    listing = client.get("/admin/journals/apitoken/")
    assert listing.status_code == 200 and raw.encode() not in listing.content
    assert token.token_hash.encode() not in client.get(f"/admin/journals/apitoken/{token.pk}/change/").content
    revoked = client.post(
        "/admin/journals/apitoken/", {"action": "revoke", "_selected_action": [token.pk]}, follow=True
    )
    assert revoked.status_code == 200 and api_token_find(raw=raw) is None
    actions = list(OperatorAction.objects.filter(kind__startswith="api_token").order_by("id"))
    assert [(a.kind, a.actor, a.after["name"]) for a in actions] == [
        ("api_token_create", admin_user, "runtime-9"),
        ("api_token_revoke", admin_user, "runtime-9"),
    ]
    assert all(raw not in str(a.before) + str(a.after) for a in actions)


def test_tokens_are_not_for_viewers_or_operators_in_the_admin(operator):
    from django.test import Client

    operator.is_staff = True
    operator.save()
    client = Client()
    client.force_login(operator)
    assert client.get("/admin/journals/apitoken/add/").status_code == 403
    assert client.post("/admin/journals/apitoken/add/", {"name": "sneaky"}).status_code == 403
    assert not ApiToken.objects.filter(name="sneaky").exists()


def test_one_assessment_per_prefix_evidence_and_engine():
    from recovery.models import Assessment
    from recovery.services import assessment_refresh

    b = JournalBuilder()
    b.plan("t1")
    run = _ingest(b)
    first = assessment_refresh(run=run)
    assert assessment_refresh(run=run) == first
    with pytest.raises(IntegrityError), transaction.atomic():
        Assessment.objects.create(
            run=run,
            prefix_records=first.prefix_records,
            prefix_last_seq=first.prefix_last_seq,
            prefix_digest=first.prefix_digest,
            prefix_key=first.prefix_key,
            evidence_digest=first.evidence_digest,
            engine_version=first.engine_version,
            projection_version=first.projection_version,
            output={},
        )
    b.commit("t1", "plan")
    run = _ingest(b, body=b.body(b.lines[-1:]))
    second = assessment_refresh(run=run)
    assert second != first and second.prefix_records == 2 and second.prefix_key != first.prefix_key


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("already_raised", [False, True])
def test_a_batch_holds_the_pending_flag_row_until_it_commits(already_raised):
    """recovery/background.py's step 1: the batch's flag upsert locks the row whether or not it raised the
    flag, so the task's lowering UPDATE waits for the batch (nothing committed before it is missed)."""
    import psycopg

    from journals.models import PendingAssessment
    from tests.store import pg_session

    def batch(lsn: int) -> bytes:
        return b'{"branch":0,"kind":"turn_planned","lsn":%d,"run":"run-lock","turn":"t%d","v":2}\n' % (lsn, lsn)

    records_ingest(run_id="run-lock", body=batch(0), content_type="application/x-ndjson", token=None)
    if not already_raised:
        PendingAssessment.objects.filter(run__run_id="run-lock").update(pending=False)
    other = pg_session()
    try:
        other.execute("SET lock_timeout = '200ms'")
        with transaction.atomic():
            records_ingest(run_id="run-lock", body=batch(1), content_type="application/x-ndjson", token=None)
            with pytest.raises(psycopg.errors.LockNotAvailable):
                other.execute(
                    "UPDATE journals_pendingassessment SET pending = false"
                    " WHERE run_id = (SELECT id FROM journals_run WHERE run_id = 'run-lock')"
                )
        # Committed: the row is free, and the flag is raised.
        other.execute("SELECT 1 FROM journals_pendingassessment FOR UPDATE NOWAIT")
    finally:
        other.close()
    assert PendingAssessment.objects.get(run__run_id="run-lock").pending


def test_every_column_of_a_batch_is_stored_as_received():
    """Ingest writes rows itself (PostgreSQL: COPY's text format built by journals/services.py): each
    column read back is what the line says, including NULL kind, v and turn, non-ASCII text, 64-bit lsns,
    negative and extreme v, and a non-canonical line among canonical ones (kept byte for byte)."""
    from datetime import timedelta

    from django.utils import timezone

    from engine.canonical import canonical_bytes, digest, parse_line

    run_id = "run-cols-\u00e9"
    objs = [
        {"v": 2, "run": run_id, "branch": 0, "lsn": 0, "kind": "turn_planned", "turn": "t\u00e9-\u2603"},
        {"v": -(2**31 - 1), "run": run_id, "branch": 2**31 - 1, "lsn": 2**63 - 1, "kind": "k" * 65},
        {"v": "2", "run": run_id, "branch": 3, "lsn": 7, "kind": 5, "turn": 12},
        {"v": 2**31 - 1, "run": run_id, "branch": 0, "lsn": 1, "kind": "caf\u00e9", "turn": "t" * 200},
    ]
    lines = [canonical_bytes(obj) for obj in objs]
    # Not canonical (spaces, key order): stored as received, digested as the engine digests its value.
    lines.insert(2, b'{ "run": "run-cols-\\u00e9", "v": 2, "branch": 0, "lsn": 2, "kind": "note" }')
    before = timezone.now()
    run = records_ingest(
        run_id=run_id, body=b"".join(line + b"\n" for line in lines), content_type="application/x-ndjson", token=None
    ).run
    after = timezone.now()
    rows = list(
        JournalRecord.objects.filter(run=run)
        .order_by("seq")
        .values_list("run_id", "seq", "branch", "lsn", "kind", "v", "turn", "digest", "line", "received_at")
    )
    expected = [
        (0, 0, "turn_planned", 2, "t\u00e9-\u2603"),
        (2**31 - 1, 2**63 - 1, None, -(2**31 - 1), None),
        (0, 2, "note", 2, None),
        (3, 7, None, None, None),
        (0, 1, "caf\u00e9", 2**31 - 1, "t" * 200),
    ]
    assert [row[0] for row in rows] == [run.pk] * 5
    assert [row[1] for row in rows] == [1, 2, 3, 4, 5]
    assert [row[2:7] for row in rows] == expected
    assert [bytes(row[8]) for row in rows] == lines
    assert [row[7] for row in rows] == [digest(parse_line(line).obj) for line in lines]
    assert len({row[9] for row in rows}) == 1
    assert before - timedelta(seconds=1) <= rows[0][9] <= after + timedelta(seconds=1)
    assert rows[0][9].utcoffset() is not None


def test_the_token_lookup_gives_the_orms_token():
    """On PostgreSQL the token's lookup is one written statement (PostgresStore.api_token_find): the instance is
    the ORM's, every field alike (datetimes with their zone), saved state included; a revoked or unknown
    token is None at once."""
    from trail.tokens import api_token_create, api_token_revoke

    token, raw = api_token_create(name="runtime-cmp", run_prefix="pre-")
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=timezone.now())
    found, orm = api_token_find(raw=raw), ApiToken.objects.get(pk=token.pk)
    assert found is not None and not found._state.adding and found._state.db == orm._state.db
    for field in ApiToken._meta.concrete_fields:
        ours, theirs = getattr(found, field.attname), getattr(orm, field.attname)
        assert (ours, type(ours)) == (theirs, type(theirs))
        assert getattr(ours, "tzinfo", None) == getattr(theirs, "tzinfo", None)
    assert api_token_find(raw=raw + "x") is None and api_token_find(raw="") is None
    api_token_revoke(token=orm, actor_name="test")
    assert api_token_find(raw=raw) is None
