"""Properties (Hypothesis): determinism, valid journals decide exactly as an independent model says,
every single-line mutation of a valid v2 journal is caught as a run-level violation, and rebuilding from a
checkpoint equals folding from lsn 0."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from engine import assess, canonical_bytes, fold_state, rebuild_state
from tests.engine.helpers import contract_digest, first_run_level, obj, to_json, write_journal
from tests.engine.model import JournalModel
from tests.engine.strategies import json_values, valid_journals

PROPERTY = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(valid_journals())
def test_a_valid_journal_has_no_violations_and_decides_as_the_model_says(model: JournalModel) -> None:
    result = assess(model.w.lines, evidence=model.evidence)
    assert result.to_dict() == model.expected()
    assert all(c["verified"] for c in result.checkpoints)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_journals(max_steps=25))
def test_assessment_is_deterministic_whatever_the_source_and_never_touches_the_file(model: JournalModel) -> None:
    lines = model.w.lines
    with tempfile.TemporaryDirectory() as tmp:
        path = write_journal(Path(tmp) / "j.jsonl", lines)
        before = (path.read_bytes(), os.stat(path).st_mtime_ns)
        outputs = {
            to_json(assess(path, evidence=model.evidence)),
            to_json(assess(str(path), evidence=model.evidence)),
            to_json(assess(path, evidence=model.evidence)),
            to_json(assess(list(lines), evidence=model.evidence)),
            to_json(assess(lambda: (line for line in lines), evidence=model.evidence)),
        }
        assert len(outputs) == 1
        assert (path.read_bytes(), os.stat(path).st_mtime_ns) == before


# -- mutations --------------------------------------------------------------------------------------------


def _edit(record: dict[str, Any], data: st.DataObject) -> dict[str, Any]:
    """One field changed, removed or added; the record must end up different."""
    edited = dict(record)
    key = data.draw(st.sampled_from([*sorted(record), "+"]), label="field")
    if key == "+":
        edited[data.draw(st.text(min_size=1, max_size=4), label="new field")] = data.draw(json_values(5))
    elif data.draw(st.booleans(), label="remove"):
        del edited[key]
    else:
        value = record[key]
        if type(value) is bool:
            edited[key] = not value
        elif type(value) is int:
            edited[key] = value + data.draw(st.integers(-3, 3).filter(bool), label="delta")
        elif type(value) is str:
            edited[key] = data.draw(st.text(max_size=8).filter(lambda s: s != value), label="text")
        else:
            edited[key] = data.draw(json_values(5), label="value")
    return edited


@PROPERTY
@given(valid_journals(versions=(2,), evidence=False), st.data())
def test_every_single_line_mutation_of_a_valid_v2_journal_is_a_run_level_violation(
    model: JournalModel, data: st.DataObject
) -> None:
    lines = list(model.w.lines)
    records = [obj(line) for line in lines]
    last_of_branch: dict[int, int] = {}
    for i, record in enumerate(records):
        last_of_branch[record["branch"]] = i
    has_records = set(last_of_branch)
    # A record whose change the chain must reveal: one that another record of its branch follows, or a fork
    # whose new branch has records (they chain to it). A branch's last record is not covered: changing it
    # leaves a shorter, clean per-branch prefix, which is what a reader legitimately sees after a crash.
    followed = [
        i
        for i, record in enumerate(records)
        if i != last_of_branch[record["branch"]] or (record["kind"] == "fork" and record["new_branch"] in has_records)
    ]
    kinds = ["truncate", "duplicate"]
    if followed:
        kinds += ["drop", "edit"]
    by_branch: dict[int, list[int]] = {}
    for i, record in enumerate(records):
        by_branch.setdefault(record["branch"], []).append(i)
    swappable = [b for b, idx in by_branch.items() if len(idx) >= 2]
    if swappable:
        kinds.append("swap")
    kind = data.draw(st.sampled_from(kinds), label="mutation")
    if kind == "truncate":
        i = data.draw(st.integers(0, len(lines) - 1), label="line")
        lines[i] = lines[i][: data.draw(st.integers(0, len(lines[i]) - 1), label="cut")]
    elif kind == "duplicate":
        i = data.draw(st.integers(0, len(lines) - 1), label="line")
        lines.insert(data.draw(st.integers(0, len(lines)), label="at"), lines[i])
    elif kind == "drop":
        del lines[data.draw(st.sampled_from(followed), label="line")]
    elif kind == "edit":
        i = data.draw(st.sampled_from(followed), label="line")
        edited = _edit(records[i], data)
        lines[i] = canonical_bytes(edited)
        if lines[i] == model.w.lines[i]:
            return  # the edit happened to restore the record (e.g. a removed then re-added key)
    else:
        branch = data.draw(st.sampled_from(swappable), label="branch")
        i, j = data.draw(
            st.lists(st.sampled_from(by_branch[branch]), min_size=2, max_size=2, unique=True), label="pair"
        )
        lines[i], lines[j] = lines[j], lines[i]

    result = assess(lines, evidence=model.evidence)
    reason = first_run_level(result)
    assert reason is not None, (kind, [v.to_dict() for v in result.violations])
    for t in result.turns:
        assert (t.decision.value, t.reason) == ("blocked", reason)


# -- checkpoints ------------------------------------------------------------------------------------------


@PROPERTY
@given(valid_journals(), st.data())
def test_rebuilding_from_any_point_equals_folding_from_lsn_0(model: JournalModel, data: st.DataObject) -> None:
    lines = model.w.lines
    records = [obj(line) for line in lines]
    branch = data.draw(st.sampled_from(sorted(model.timelines)), label="branch")
    own = [line for line, record in zip(lines, records, strict=True) if record["branch"] == branch]
    last = len(own) - 1
    k = data.draw(st.integers(-1, last), label="point")
    whole = fold_state(lines, branch, last)
    assert rebuild_state(fold_state(lines, branch, k), own[k + 1 :]) == whole
    # Every checkpoint's digest is the contract's digest of the fold it covers (computed here with the
    # contract's own formula, not the engine's incremental one), and from every checkpoint that carries
    # its state, v1-era ones included, rebuilding gives the same fold.
    for record in records:
        if record["kind"] == "checkpoint":
            covered = fold_state(lines, record["branch"], record["covers_lsn"])
            assert record["state_digest"] == contract_digest(covered)
    for record in records:
        if record["kind"] == "checkpoint" and record["branch"] == branch and "state" in record:
            above = own[record["covers_lsn"] + 1 :]
            assert rebuild_state(record["state"], above) == whole


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_journals(versions=(1,), forks=False, stale=False, upgrades=False), st.data())
def test_rebuilding_across_a_v1_to_v2_upgrade(model: JournalModel, data: st.DataObject) -> None:
    model.checkpoint(True)  # over v1 records
    covers = model.w.next_lsn[0] - 2
    model.upgrade()
    for name in model.open_turns():
        if model.timelines[0].turns[name].done < len(model.timelines[0].turns[name].phases):
            model.commit_next(name)  # v2 records above the v1-era checkpoint
    model.plan(model.fresh("v2-turn"), "l", data.draw(st.none() | st.just(["a", "b"])))
    lines = model.w.lines
    checkpoint = obj(lines[covers + 1])
    assert checkpoint["kind"] == "checkpoint" and checkpoint["v"] == 1
    whole = fold_state(lines, 0, len(lines) - 1)
    assert whole["schema"] == 2
    assert rebuild_state(checkpoint["state"], lines[covers + 1 :]) == whole
    result = assess(lines, evidence=model.evidence)
    assert result.to_dict() == model.expected()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(ids=list(range(700)), every=[100, 1, 300], data=None)  # growing ids: resumes deep in the fold
@example(ids=list(range(700, 0, -1)), every=[90, 250], data=None)  # shrinking ids: every new turn comes first
@given(
    st.lists(st.integers(0, 10**6), min_size=1, max_size=700, unique=True),
    st.lists(st.integers(1, 120), min_size=1, max_size=8),
    st.data(),
)
def test_checkpoint_digests_resumed_from_a_cache_equal_the_contract_digest(
    ids: list[int], every: list[int], data: st.DataObject | None
) -> None:
    """The engine hashes a checkpoint's fold incrementally (resuming where the sorted turns first differ
    from the last checkpoint's); whatever the order of the turn ids (growing or not), the changes between
    checkpoints and the hash states it keeps every 256 turns, the digest must be the contract's."""
    from engine.writer import JournalWriter

    w = JournalWriter("run-digests")
    marks = iter(every * 100)
    next_checkpoint = next(marks)
    open_turns: list[str] = []
    for n, i in enumerate(ids):
        padded = data.draw(st.booleans(), label="padded") if data is not None else True
        name = f"t{i:07d}" if padded else f"t{i}"
        w.plan(name, "l", ["a", "b"])
        open_turns.append(name)
        if data is None or data.draw(st.booleans(), label="commit a phase of an earlier turn"):
            pick = data.draw(st.integers(0, len(open_turns) - 1), label="which") if data is not None else n // 2
            done = open_turns.pop(min(pick, len(open_turns) - 1))
            w.commit(done, "a")
        if n + 1 == next_checkpoint:
            w.checkpoint()
            next_checkpoint += next(marks)
    w.checkpoint()
    lines = w.lines
    result = assess(lines)
    assert result.violations == ()
    assert all(c["verified"] for c in result.checkpoints)
    for line in lines:
        record = obj(line)
        if record["kind"] == "checkpoint":
            assert record["state_digest"] == contract_digest(fold_state(lines, 0, record["covers_lsn"]))
