"""An assessment stores what its batch changed: the output entries, picture rows, turn rows and phases
that differ from those before it, and nothing else, whether the engine continued a kept fold or folded
the whole prefix again. Read back, the output is the engine's whole answer all the same."""

from __future__ import annotations

import json
from typing import Any

import pytest

from engine import assess as engine_assess
from engine import forget_warm_folds
from engine.secrets import redact
from journals.models import Phase, Run, Turn
from journals.projection import turns_project
from journals.storable import storable
from recovery import services as recovery_services
from recovery.background import assessment_run
from recovery.models import Assessment, FoldSnapshot, OutputEntry
from recovery.output import output_entry
from tests.journal_builder import JournalBuilder
from tests.tasks.conftest import ingest

pytestmark = pytest.mark.django_db


def _whole(lines: list[bytes]) -> Any:
    """The engine's whole answer for the lines, as the API shows it."""
    return json.loads(json.dumps(storable(redact(engine_assess(lines).to_dict()))))


def _journal(run: str) -> JournalBuilder:
    """Turns that end, one left to resume, one with an unsafe effect, a fork that discards a planned turn,
    and turns after the fork."""
    b = JournalBuilder(run)
    for n in range(6):
        b.full_turn(f"a{n}")
    b.plan("r0")
    b.commit("r0", "plan", "envelope")
    b.dispatch("r0", "pay", effect_class="unsafe")
    b.plan("gone")  # planned only on the suffix the fork discards
    b.commit("gone", "plan")
    b.fork(from_lsn=len(b.lines) - 4, reason="operator rewind")
    b.commit("r0", "dispatch")
    for n in range(4):
        b.full_turn(f"b{n}")
    b.plan("r1")
    b.commit("r1", "plan")
    return b


def test_the_assessment_endpoint_answers_the_engines_whole_output_after_every_batch(
    published, runtime, viewer_client, monkeypatch
):
    listing: list[bool] = []
    real = recovery_services.assess_kept

    def spy(*args: Any, **kwargs: Any) -> Any:
        done = real(*args, **kwargs)
        listing.append(bool(kwargs.get("changed_only")) and done is not None and done.changed is not None)
        return done

    monkeypatch.setattr(recovery_services, "assess_kept", spy)
    b = _journal("run-grow")
    for end in range(5, len(b.lines) + 5, 5):
        lines = b.lines[:end]
        answer = runtime.client.post(
            "/api/v1/runs/run-grow/records", b.body(b.lines[end - 5 : end]), content_type="application/x-ndjson"
        )
        assert answer.status_code == 200, answer.content
        assert assessment_run(run_id="run-grow") == "stored"
        newest = Assessment.objects.filter(run__run_id="run-grow").latest()
        got = viewer_client.get(f"/api/v1/runs/run-grow/assessments/{newest.pk}").json()
        assert got["output"] == _whole(lines)
        assert newest.turn_entries == newest.turn_count == len(got["output"]["turns"])
    # Most batches were decided for their listed turns alone, and stored as such.
    assert sum(listing) > len(listing) // 2
    run = Run.objects.get(run_id="run-grow")
    assessments = Assessment.objects.filter(run=run).count()
    entries = OutputEntry.objects.filter(run=run).count()
    turns = len(_whole(b.lines)["turns"])
    # Entries grow with change, not with turns times batches: far fewer than a whole output each time.
    assert turns < entries < assessments * turns // 2


def _turn_state(run: Run) -> dict[str, tuple[Any, ...]]:
    """Each turn's stored signature and its Phase rows (their ids too: a rewrite deletes and recreates them)."""
    phases: dict[int, list[tuple[Any, ...]]] = {}
    for row in Phase.objects.filter(turn__run=run).order_by("turn_id", "position"):
        phases.setdefault(row.turn_id, []).append((row.pk, row.name, row.committed, row.record_id, row.committed_at))
    return {t.turn_id: (t.assessed_digest, t.updated_at, phases.get(t.pk, [])) for t in Turn.objects.filter(run=run)}


def test_a_full_fold_writes_only_what_differs(published):
    b = _journal("run-full")
    cut = next(i for i, line in enumerate(b.lines) if b'"kind":"fork"' in line)  # the batch starts at the fork
    ingest("run-full", b.lines[:cut])
    assert assessment_run(run_id="run-full") == "stored"
    run = Run.objects.get(run_id="run-full")
    before = _turn_state(run)
    old = engine_assess(b.lines[:cut])
    # No usable snapshot and no kept fold: the next assessment folds the whole prefix again.
    forget_warm_folds()
    FoldSnapshot.objects.filter(run=run).delete()
    ingest("run-full", b.lines[cut:])
    assert assessment_run(run_id="run-full") == "stored"
    run = Run.objects.get(pk=run.pk)
    newest = Assessment.objects.filter(run=run).latest()
    assert newest.from_snapshot is None  # the whole prefix was folded
    new = engine_assess(b.lines)

    # Output entries: exactly the positions whose entry differs.
    was = [output_entry(td) for td in old.turns]
    now = [output_entry(td) for td in new.turns]
    differing = [i for i, entry in enumerate(now) if i >= len(was) or was[i] != entry]
    assert 0 < len(differing) < len(now)
    written = OutputEntry.objects.filter(assessment=newest).order_by("ordinal")
    assert list(written.values_list("ordinal", flat=True)) == differing

    # Picture rows: only the turns whose picture differs.
    def picture(td: Any) -> tuple[Any, ...]:
        return td.decision, td.reason, td.resume_from, td.completed_phases, td.reason_line, td.terminal

    pictures = {td.turn: picture(td) for td in old.turns}
    moved = {td.turn for td in new.turns if pictures.get(td.turn) != picture(td)}
    assert set(newest.turn_rows.values_list("turn__turn_id", flat=True)) == moved

    # Turn and Phase rows: the turns that ended before the fork point keep theirs, untouched.
    after = _turn_state(run)
    for n in range(6):
        assert after[f"a{n}"] == before[f"a{n}"]
    assert after["r0"] != before["r0"]  # its dispatch committed on the new branch

    # And what was kept is what a rewrite of every turn gives.
    kept = {turn: rows for turn, (_, _, rows) in after.items()}
    # A digest no picture has: every turn is rewritten (an empty one would say it has no rows yet).
    Turn.objects.filter(run=run).update(assessed_digest="stale")
    turns_project(run=run, result=new, last_seq=run.last_seq)
    rewritten = {turn: rows for turn, (_, _, rows) in _turn_state(run).items()}
    assert {t: [r[1:] for r in rows] for t, rows in rewritten.items()} == {
        t: [r[1:] for r in rows] for t, rows in kept.items()
    }
