"""PostgreSQL's streamed ingest path (journals/postgres.py, ``_ingest_streamed``) against the general path.

The streamed path takes the common batch (every line canonical and well-formed, every record new, no
branch gap) and parses it chunk by chunk while the server writes the rows; anything else ends its stream
at that chunk, rolls back what was written and hands the batch to the general path. Each scenario below
is played twice on the same database (rolled back in between): once as ingest runs, once with the
streamed path switched off. The answers and everything stored must be the same, and the spy says which
path took each batch and how far the stream got before it gave the batch back.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from django.db import transaction

from journals import postgres
from journals.models import Branch, Checkpoint, JournalRecord, Run, Turn
from tests.journal_builder import JournalBuilder

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]
URL = "/api/v1/runs/run-1/records"
CHUNK = postgres._COPY_CHUNK_ROWS


def chunks(lines: int) -> int:
    """How many chunks of COPY rows the streamed path builds for a batch of ``lines`` new records."""
    return -(-lines // CHUNK)


def journal(turns: int) -> JournalBuilder:
    """``turns`` full turns (9 records each with the default plan), a checkpoint every 20 turns."""
    b = JournalBuilder()
    for n in range(turns):
        b.full_turn(f"t{n:04d}")
        b.dispatch(f"t{n:04d}", "fetch")
        if n % 20 == 19:
            last = len(b.lines) - 1
            b.record("checkpoint", covers_lsn=last, state_digest="ab" * 32)
    return b


def snapshot() -> dict[str, Any]:
    run = Run.objects.filter(run_id="run-1").first()
    if run is None:
        return {"run": None}
    return {
        "run": (run.record_count, run.last_seq, run.prefix_digest),
        "records": list(
            JournalRecord.objects.filter(run=run)
            .order_by("seq")
            .values_list("seq", "branch", "lsn", "kind", "v", "turn", "digest", "line")
        ),
        "branches": list(
            Branch.objects.filter(run=run)
            .order_by("number")
            .values_list("number", "last_lsn", "committed_lsn", "record_count", "live")
        ),
        "turns": list(
            Turn.objects.filter(run=run)
            .order_by("turn_id")
            .values_list("turn_id", "lineage", "branch", "plan", "first_seq", "status")
        ),
        "checkpoints": list(
            Checkpoint.objects.filter(run=run).order_by("record__seq").values_list("record__seq", "covers_lsn")
        ),
    }


class Spy:
    """Wraps ``_ingest_streamed``: what became of each batch, and how many chunks of rows it built."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, enabled: bool) -> None:
        self.outcomes: list[tuple[str, int]] = []
        self.built = 0
        real_stream, real_build = postgres._ingest_streamed, postgres._CopyRows.build

        def build(rows: Any, *args: Any) -> bytes:
            self.built += 1
            return real_build(rows, *args)

        def streamed(run_id: str, lines: list[bytes], *conditions: Any) -> Any:
            if not enabled:
                raise postgres._NotStreamable
            self.built = 0
            try:
                result = real_stream(run_id, lines, *conditions)
            except postgres._NotStreamable:
                self.outcomes.append(("general", self.built))
                raise
            self.outcomes.append(("streamed", self.built))
            return result

        monkeypatch.setattr(postgres, "_ingest_streamed", streamed)
        monkeypatch.setattr(postgres._CopyRows, "build", build)


def play(client: Any, monkeypatch: pytest.MonkeyPatch, batches: list[bytes], *, streamed: bool) -> tuple[Any, ...]:
    """Post the batches in order; returns (answers, snapshot, outcomes), then rolls everything back."""
    with monkeypatch.context() as patch:
        spy = Spy(patch, enabled=streamed)
        with transaction.atomic():
            answers = []
            for body in batches:
                answer = client.post(URL, body, content_type="application/x-ndjson")
                answers.append((answer.status_code, answer.json()))
            stored = snapshot()
            transaction.set_rollback(True)
    return answers, stored, spy.outcomes


def same_both_ways(runtime: Any, monkeypatch: pytest.MonkeyPatch, batches: list[bytes]) -> tuple[Any, list]:
    streamed = play(runtime.client, monkeypatch, batches, streamed=True)
    general = play(runtime.client, monkeypatch, batches, streamed=False)
    assert streamed[0] == general[0]  # the answers, status codes included
    assert streamed[1] == general[1]  # everything stored
    return streamed[0], streamed[2]


def test_postgres_plain_batches_stream_and_store_what_the_general_path_stores(runtime, monkeypatch):
    b = journal(80)  # 80 x 9 records and 4 checkpoints: 724 lines, four chunks
    b.fork(from_lsn=100)  # a new branch in the last batch
    b.full_turn("after-fork")
    batches = [b.body(b.lines[:250]), b.body(b.lines[250:])]
    answers, outcomes = same_both_ways(runtime, monkeypatch, batches)
    assert [status for status, _ in answers] == [200, 200]
    assert answers[1][1]["stored"] == len(b.lines) - 250 and answers[1][1]["duplicates"] == 0
    assert [kind for kind, _ in outcomes] == ["streamed", "streamed"]
    assert outcomes[1][1] == chunks(len(b.lines) - 250)  # every chunk built, none twice
    # Each checkpoint row points at its own record, one of each batch's (seq = the line's place + 1).
    points = [n + 1 for n, line in enumerate(b.lines) if b'"kind":"checkpoint"' in line]
    assert len(points) == 4
    with transaction.atomic():
        for body in batches:
            runtime.client.post(URL, body, content_type="application/x-ndjson")
        rows = Checkpoint.objects.order_by("record__seq").values_list("record__seq", "record__kind", "covers_lsn")
        assert [(seq, kind) for seq, kind, _ in rows] == [(seq, "checkpoint") for seq in points]
        assert [covers for *_, covers in rows] == [seq - 2 for seq in points]  # covers the record before it
        transaction.set_rollback(True)


def test_postgres_a_stored_record_in_a_late_chunk_hands_the_batch_back(runtime, monkeypatch):
    b = journal(100)
    fresh = b.lines[300:]
    # Redelivery of one stored record, placed in the third chunk: rows were already sent by then.
    late = [*fresh[: 2 * CHUNK + 30], b.lines[120], *fresh[2 * CHUNK + 30 :]]
    assert len(fresh) > 2 * CHUNK + 30
    answers, outcomes = same_both_ways(runtime, monkeypatch, [b.body(b.lines[:300]), b.body(late)])
    assert answers[1] == (200, answers[1][1]) and answers[1][1]["duplicates"] == 1
    assert answers[1][1]["stored"] == len(fresh)
    assert outcomes == [("streamed", chunks(300)), ("general", 2)]  # two chunks sent, then rolled back


def test_postgres_a_repeat_within_the_batch_hands_it_back(runtime, monkeypatch):
    b = journal(60)
    repeated = [*b.lines[: 2 * CHUNK + 30], b.lines[7], *b.lines[2 * CHUNK + 30 :]]
    answers, outcomes = same_both_ways(runtime, monkeypatch, [b.body(repeated)])
    assert answers[0][0] == 200
    assert (answers[0][1]["stored"], answers[0][1]["duplicates"]) == (len(b.lines), 1)
    assert outcomes == [("general", 2)]


def test_postgres_a_conflict_in_a_late_chunk_stores_nothing_of_the_batch(runtime, monkeypatch):
    b = journal(60)
    changed = json.loads(b.lines[10])
    changed["note"] = "rewritten"
    other = json.dumps(changed, sort_keys=True, separators=(",", ":")).encode()
    batch = [*b.lines[: 2 * CHUNK + 30], other, *b.lines[2 * CHUNK + 30 :]]
    answers, outcomes = same_both_ways(runtime, monkeypatch, [b.body(batch)])
    status, data = answers[0]
    assert status == 409 and (data["error"], data["lsn"], data["line"]) == ("lsn_conflict", 10, 2 * CHUNK + 31)
    assert outcomes == [("general", 2)]


@pytest.mark.parametrize(
    "damage, code",
    [
        (lambda line: line[:-1], "not_json"),  # torn
        (lambda line: line.replace(b'"run":"run-1"', b'"run":"run-2"'), "run_mismatch"),
        (lambda line: line.replace(b'"lsn":', b'"lsn":-'), "envelope_invalid"),
    ],
)
def test_postgres_a_refused_line_in_a_late_chunk_gets_the_general_answer_and_stores_nothing(
    runtime, monkeypatch, damage: Callable[[bytes], bytes], code: str
):
    b = journal(60)
    at = 2 * CHUNK + 30
    batch = [*b.lines[:at], damage(b.lines[at]), *b.lines[at + 1 :]]
    answers, outcomes = same_both_ways(runtime, monkeypatch, [b.body(batch)])
    status, data = answers[0]
    assert status == 400 and (data["error"], data["line"]) == (code, at + 1)
    assert outcomes == [("general", 2)]
    assert snapshot() == {"run": None}  # not even the run, which the streamed path had created


def test_postgres_a_later_torn_line_outranks_an_earlier_bad_envelope_as_in_the_general_path(runtime, monkeypatch):
    # The general path parses the whole batch before it checks envelopes; the streamed path must not
    # report the envelope error it meets first.
    b = journal(60)
    batch = list(b.lines)
    batch[2 * CHUNK + 5] = batch[2 * CHUNK + 5].replace(b'"run":"run-1"', b'"run":"run-2"')
    batch[2 * CHUNK + 40] = batch[2 * CHUNK + 40][:-1]
    answers, _ = same_both_ways(runtime, monkeypatch, [b.body(batch)])
    assert answers[0][0] == 400 and (answers[0][1]["error"], answers[0][1]["line"]) == ("not_json", 2 * CHUNK + 41)


def test_postgres_a_line_that_is_not_canonical_is_stored_as_evidence_by_the_general_path(runtime, monkeypatch):
    b = journal(60)
    at = 2 * CHUNK + 30
    spaced = json.dumps(json.loads(b.lines[at]), sort_keys=True).encode()  # ", " and ": ": not canonical
    batch = [*b.lines[:at], spaced, *b.lines[at + 1 :]]
    answers, outcomes = same_both_ways(runtime, monkeypatch, [b.body(batch)])
    assert answers[0][0] == 200 and answers[0][1]["stored"] == len(b.lines)
    # Proven once the rows are sent: all of them were, then rolled back.
    assert outcomes == [("general", chunks(len(b.lines)))]


def test_postgres_a_batch_on_a_branch_with_a_gap_goes_to_the_general_path(runtime, monkeypatch):
    b = journal(60)
    first = [*b.lines[:100], *b.lines[150:200]]  # lsns 100..149 missing: a gap on branch 0
    second = [*b.lines[100:150], *b.lines[200:]]
    answers, outcomes = same_both_ways(runtime, monkeypatch, [b.body(first), b.body(second)])
    assert answers[0][1]["branches"][0]["committed_lsn"] == 99
    assert answers[1][1]["branches"][0]["committed_lsn"] == len(b.lines) - 1
    assert outcomes == [("streamed", chunks(len(first))), ("general", 0)]  # refused before any row: nothing sent


def test_postgres_the_projection_statement_is_prepared_after_five_batches(runtime):
    from django.db import connection

    b = journal(12)
    for start in range(0, len(b.lines), 15):
        answer = runtime.client.post(URL, b.body(b.lines[start : start + 15]), content_type="application/x-ndjson")
        assert answer.status_code == 200
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        prepared = [row[0] for row in cursor.fetchall()]
    # Only the written statement on psycopg's server-side cursor; the ORM's queries bind client-side.
    assert len(prepared) == 1 and "WITH planned AS" in prepared[0]


def test_postgres_what_copy_text_escapes_reads_back_as_sent(runtime, monkeypatch):
    """COPY's text format: a backslash, tab, newline or carriage return in a value is escaped, \\N is NULL
    and \\. could end the data; ids that hold them, or that spell them, come back as they were sent."""
    nasty = ["tab\there", "nl\nhere", "cr\rhere", "back\\slash", "\\N", "\\.", "\\x41", "end\\", "\u00e9-\u2603", ""]
    b = JournalBuilder()
    for n, value in enumerate(nasty):
        b.record("turn_planned", turn=value, lineage="root")
        b.record(value or "k", turn=f"t{n}")
    spy = Spy(monkeypatch, enabled=True)
    answer = runtime.client.post(URL, b.body(), content_type="application/x-ndjson")
    assert answer.status_code == 200 and answer.json()["stored"] == len(b.lines)
    assert spy.outcomes == [("streamed", chunks(len(b.lines)))]
    rows = list(JournalRecord.objects.order_by("seq").values_list("kind", "turn", "line", "v", "lsn"))
    assert [row[1] for row in rows[::2]] == nasty
    assert [row[0] for row in rows[1::2]] == [value or "k" for value in nasty]
    assert [bytes(row[2]) for row in rows] == b.lines
    assert [(row[3], row[4]) for row in rows] == [(2, lsn) for lsn in range(len(b.lines))]
    assert sorted(Turn.objects.values_list("turn_id", flat=True)) == sorted(nasty)
