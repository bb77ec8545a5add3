"""Step Functions' GetExecutionHistory, mapped as docs/imports.md says, and the engine's decisions on it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recovery.imports.importers import ImportRefused
from tests.imports.helpers import SECRET, decisions, imported, intents, records, run_assess, run_import, turn

LAMBDA = "arn:aws:lambda:eu-west-1:123456789012:function:charge"


class Execution:
    """A GetExecutionHistory answer, event by event, each naming the event before it."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.add("ExecutionStarted", None, input=json.dumps({"card": SECRET}), roleArn="arn:aws:iam::1:role/r")

    def add(self, kind: str, prev: int | None, details_key: str | None = None, **details: Any) -> int:
        eid = len(self.events) + 1
        event: dict[str, Any] = {"id": eid, "type": kind, "timestamp": f"2026-03-01T10:00:{eid:02d}.125000+00:00"}
        if prev is not None:
            event["previousEventId"] = prev
        if details:
            event[details_key or kind[:1].lower() + kind[1:] + "EventDetails"] = details
        self.events.append(event)
        return eid

    def enter(self, name: str, prev: int, kind: str = "Task") -> int:
        return self.add(
            f"{kind}StateEntered", prev, "stateEnteredEventDetails", name=name, input=json.dumps({"s": SECRET})
        )

    def exit(self, name: str, prev: int, kind: str = "Task") -> int:
        return self.add(f"{kind}StateExited", prev, "stateExitedEventDetails", name=name, output="{}")

    def task(self, prev: int, resource: str = "invoke", resource_type: str = "lambda") -> int:
        return self.add(
            "TaskScheduled",
            prev,
            resource=resource,
            resourceType=resource_type,
            region="eu-west-1",
            parameters=json.dumps({"FunctionName": LAMBDA, "Payload": {"card": SECRET}}),
        )

    def data(self, reverse: bool = False) -> bytes:
        return json.dumps({"events": list(reversed(self.events)) if reverse else self.events}).encode()


def journal_of(x: Execution, effects: dict[str, str] | None = None) -> bytes:
    (run,) = imported("stepfunctions", x.data(), effects).runs
    assert SECRET.encode() not in run.journal
    return run.journal


def test_a_task_state_that_succeeded_is_one_complete_turn() -> None:
    x = Execution()
    e = x.enter("Charge", 1)
    s = x.task(e)
    st = x.add("TaskStarted", s, resourceType="lambda", resource="invoke")
    ok = x.add("TaskSucceeded", st, resourceType="lambda", resource="invoke", output=json.dumps({"r": SECRET}))
    out = x.exit("Charge", ok)
    x.add("ExecutionSucceeded", out, output="{}")
    journal = journal_of(x)
    recs = records(journal)
    assert [r["kind"] for r in recs] == [
        "turn_planned",
        "phase_committed",
        "intent_dispatched",
        "effect_observed",
        "phase_committed",
        "turn_terminal",
    ]
    assert (recs[0]["turn"], recs[0]["lineage"], recs[0]["phases"]) == (
        "state:2",
        "stepfunctions:Charge",
        ["enter", "exit"],
    )
    assert recs[2]["intent"] == "task:3" and recs[2]["resource"] == "invoke" and "args_digest" in recs[2]
    assert [r["source_event"] for r in recs] == [2, 2, 3, 5, 6, 6]
    assert recs[0]["at"] == "2026-03-01T10:00:02.125000+00:00"
    t = turn(journal)
    assert (t["decision"], intents(t)) == ("complete", {"task:3": ("unsafe", "settled")})


@pytest.mark.parametrize(
    ("family", "closing", "outcome"),
    [
        ("Task", "TaskFailed", "failed"),
        ("Task", "TaskStartFailed", "failed"),
        ("Task", "TaskSubmitFailed", "failed"),
        ("Task", "TaskTimedOut", "unknown"),
        ("LambdaFunction", "LambdaFunctionSucceeded", "succeeded"),
        ("LambdaFunction", "LambdaFunctionFailed", "failed"),
        ("LambdaFunction", "LambdaFunctionScheduleFailed", "failed"),
        ("LambdaFunction", "LambdaFunctionStartFailed", "failed"),
        ("LambdaFunction", "LambdaFunctionTimedOut", "unknown"),
        ("Activity", "ActivitySucceeded", "succeeded"),
        ("Activity", "ActivityFailed", "failed"),
        ("Activity", "ActivityScheduleFailed", "failed"),
        ("Activity", "ActivityTimedOut", "unknown"),
    ],
)
def test_each_task_family_is_read_back_and_a_time_out_is_unknown(family: str, closing: str, outcome: str) -> None:
    x = Execution()
    e = x.enter("Work", 1)
    s = x.add(f"{family}Scheduled", e, resource=LAMBDA, input=json.dumps({"k": SECRET}))
    end = x.add(closing, s, error="States.Timeout", cause=SECRET)
    x.add("ExecutionFailed", end, error="e", cause=SECRET)
    recs = records(journal_of(x))
    assert recs[3]["outcome"] == outcome
    t = turn(journal_of(x))
    if outcome == "unknown":
        assert (t["decision"], t["reason"]) == ("blocked", "effect_indeterminate")
        t = turn(journal_of(x, {LAMBDA: "idempotent"}))
        assert (t["decision"], intents(t)[f"task:{s}"]) == ("complete", ("idempotent", "reissue"))
    else:
        assert t["decision"] == "complete"  # the execution failed: the state's turn is over


def test_the_class_comes_from_the_resource_then_its_type_then_the_state_s_name() -> None:
    x = Execution()
    e = x.enter("Charge", 1)
    x.task(e, resource="arn:aws:states:::lambda:invoke", resource_type="lambda")
    assert (
        records(journal_of(x, {"arn:aws:states:::lambda:invoke": "safe", "lambda": "idempotent"}))[2]["effect_class"]
        == "safe"
    )
    assert records(journal_of(x, {"lambda": "idempotent", "Charge": "safe"}))[2]["effect_class"] == "idempotent"
    assert records(journal_of(x, {"Charge": "safe"}))[2]["effect_class"] == "safe"
    result = imported("stepfunctions", x.data(), {"*": "safe"})
    assert result.runs[0].decided_by == {"task:3": "*"}
    assert imported("stepfunctions", x.data(), {}).runs[0].decided_by == {"task:3": None}
    idem = records(journal_of(x, {"lambda": "idempotent"}))[2]
    assert idem["idempotency_key"].endswith("/task/3")


def test_a_task_still_open_in_a_running_execution_has_no_readback() -> None:
    x = Execution()
    e = x.enter("Charge", 1)
    s = x.task(e)
    x.add("TaskStarted", s)
    t = turn(journal_of(x))
    assert (t["decision"], t["reason"]) == ("blocked", "effect_indeterminate")
    t = turn(journal_of(x, {"invoke": "idempotent"}))
    assert (t["decision"], t["resume_from"], intents(t)["task:3"]) == ("resume", "exit", ("idempotent", "reissue"))


def test_a_task_still_open_when_the_execution_ended_is_unknown() -> None:
    x = Execution()
    e = x.enter("Charge", 1)
    s = x.task(e)
    x.add("ExecutionAborted", s)
    recs = records(journal_of(x))
    assert [(r["kind"], r.get("outcome"), r.get("status")) for r in recs[3:]] == [
        ("effect_observed", "unknown", None),
        ("turn_terminal", None, "cancelled"),
    ]
    assert turn(journal_of(x))["reason"] == "effect_indeterminate"


def test_parallel_branches_interleave_and_an_aborted_branch_s_task_is_unknown() -> None:
    x = Execution()
    p = x.enter("Fan", 1, "Parallel")
    ps = x.add("ParallelStateStarted", p)
    a = x.enter("A", ps)
    b = x.enter("B", ps)
    ta = x.task(a, resource="charge")
    tb = x.task(b, resource="email")
    fa = x.add("TaskFailed", ta, error="boom")  # branch A fails ...
    ab = x.add("TaskStateAborted", tb)  # ... so branch B is cancelled round its open task
    pf = x.add("ParallelStateFailed", fa)
    x.add("ExecutionFailed", pf, error="boom")
    journal = journal_of(x, {"email": "unsafe", "charge": "unsafe"})
    answer = decisions(journal)
    assert answer["violations"] == []
    by_turn = {t["turn"]: t for t in answer["turns"]}
    assert intents(by_turn[f"state:{a}"]) == {f"task:{ta}": ("unsafe", "settled")}
    assert (by_turn[f"state:{b}"]["decision"], by_turn[f"state:{b}"]["reason"]) == ("blocked", "effect_indeterminate")
    observed = {r["intent"]: r["outcome"] for r in records(journal) if r["kind"] == "effect_observed"}
    assert observed == {f"task:{ta}": "failed", f"task:{tb}": "unknown"}
    aborted = [r for r in records(journal) if r["kind"] == "turn_terminal" and r["turn"] == f"state:{b}"]
    assert aborted[0]["status"] == "cancelled" and aborted[0]["source_event"] == ab
    assert by_turn[f"state:{p}"]["decision"] == "complete"  # closed by the execution's end (failed)


def test_a_parallel_state_s_exit_pairs_with_its_own_entry_across_its_branches() -> None:
    x = Execution()
    p = x.enter("Fan", 1, "Parallel")
    ps = x.add("ParallelStateStarted", p)
    a = x.enter("A", ps, "Pass")
    ea = x.exit("A", a, "Pass")
    b = x.enter("B", ps, "Pass")
    eb = x.exit("B", b, "Pass")
    done = x.add("ParallelStateSucceeded", eb)
    out = x.exit("Fan", done, "Parallel")
    x.add("ExecutionSucceeded", out)
    answer = decisions(journal_of(x))
    assert answer["violations"] == [] and {t["decision"] for t in answer["turns"]} == {"complete"}
    assert ea < eb and len(answer["turns"]) == 3


def test_epoch_timestamps_any_order_and_skipped_events() -> None:
    x = Execution()
    e = x.enter("Charge", 1)
    s = x.task(e)
    x.add("TaskStarted", s)
    for event in x.events:
        event["timestamp"] = 1772359200.125 + event["id"]
    result = imported("stepfunctions", x.data(reverse=True))
    recs = records(result.runs[0].journal)
    assert recs[0]["at"] == "2026-03-01T10:00:02.125Z"
    assert result.skipped == {"ExecutionStarted": 1, "TaskStarted": 1} and result.events == 4
    assert result.runs[0].journal == imported("stepfunctions", x.data(reverse=True)).runs[0].journal


def test_an_event_type_not_in_the_mapping_and_anything_after_the_end_block() -> None:
    x = Execution()
    e = x.enter("Charge", 1)
    x.add("TaskStateResumed", e)  # not a type AWS writes
    answer = decisions(journal_of(x))
    assert [v["code"] for v in answer["violations"]] == ["kind_unknown"]
    x = Execution()
    e = x.enter("Charge", 1)
    out = x.exit("Charge", e)
    end = x.add("ExecutionSucceeded", out)
    x.add("ExecutionRedriven", end, redriveCount=1)  # a succeeded execution is never redriven
    recs = records(journal_of(x))
    assert recs[-1]["kind"] == "stepfunctions.ExecutionRedriven"
    assert decisions(journal_of(x))["violations"][0]["code"] == "kind_unknown"


@pytest.mark.parametrize(
    "data",
    [
        b"not json",
        b'{"events": {}}',
        b'{"events": [{"id": 2, "type": "ExecutionStarted"}]}',
        b'{"events": [{"id": 1, "type": "TaskStateEntered"}]}',
        b'{"events": [{"id": 1, "type": "ExecutionStarted"}, {"id": 1, "type": "ExecutionStarted"}]}',
        b'{"events": [{"id": "1", "type": "ExecutionStarted"}]}',
        b'{"events": [{"id": 1, "type": "ExecutionStarted"}], "nextToken": "more"}',
        b'{"events": [{"id": 1, "type": "ExecutionStarted"},'
        b' {"id": 2, "type": "TaskScheduled", "previousEventId": 1}]}',
        b'{"events": [{"id": 1, "type": "ExecutionStarted", "timestamp": true}]}',
    ],
)
def test_what_is_not_a_whole_execution_history_is_refused(data: bytes) -> None:
    with pytest.raises(ImportRefused) as err:
        imported("stepfunctions", data)
    assert err.value.code == "history_invalid"


def test_the_command_imports_a_step_functions_history(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    x = Execution()
    e = x.enter("Charge", 1)
    s = x.task(e)
    x.add("TaskTimedOut", s)
    src = tmp_path / "history.json"
    src.write_bytes(x.data())
    out = tmp_path / "sf.jsonl"
    code, stdout, err = run_import(
        capsys, str(src), "--from", "stepfunctions", "--out", str(out), "--run", "exec-1", "--json"
    )
    assert (code, err) == (0, "")
    assert json.loads(stdout) == {
        "from": "stepfunctions",
        "runs": [{"run": "exec-1", "records": 4, "out": str(out)}],
        "skipped": {"ExecutionStarted": 1},
    }
    assert run_assess(capsys, out)["turns"][0]["reason"] == "effect_indeterminate"


CLOSINGS = ["TaskSucceeded", "TaskFailed", "TaskTimedOut", "TaskStartFailed", None]


@st.composite
def executions(draw: st.DrawFn) -> Execution:
    x = Execution()
    prev = 1
    for n in range(draw(st.integers(0, 6))):
        name = f"S{n}"
        prev = x.enter(name, prev)
        for _ in range(draw(st.integers(0, 2))):  # a task and its retries
            prev = x.task(prev, resource=draw(st.sampled_from(["charge", "email"])))
            closing = draw(st.sampled_from(CLOSINGS))
            if closing is None:
                break
            prev = x.add(closing, prev)
        if draw(st.booleans()):
            prev = x.exit(name, prev)
        elif draw(st.booleans()):
            prev = x.add("TaskStateAborted", prev)
        else:
            break
    end = draw(
        st.sampled_from([None, "ExecutionSucceeded", "ExecutionFailed", "ExecutionAborted", "ExecutionTimedOut"])
    )
    if end:
        x.add(end, prev)
    return x


@settings(max_examples=80, deadline=None)
@given(
    executions(),
    st.dictionaries(st.sampled_from(["charge", "email", "*"]), st.sampled_from(["safe", "idempotent", "unsafe"])),
)
def test_every_imported_execution_chains_assesses_cleanly_and_is_the_same_in_any_order(
    x: Execution, effects: dict[str, str]
) -> None:
    journal = imported("stepfunctions", x.data(), effects, run="exec").runs[0].journal
    assert imported("stepfunctions", x.data(reverse=True), effects, run="exec").runs[0].journal == journal
    answer = decisions(journal)
    codes = [v["code"] for v in answer["violations"]]
    # Only an execution that succeeded round a state it never exited breaks a rule (the engine's
    # status_phase_mismatch: the importer never commits an exit that was not recorded).
    assert set(codes) <= {"status_phase_mismatch"}
    for t in answer["turns"]:
        unsafe_open = any(c == "unsafe" and r == "indeterminate" for c, r in intents(t).values())
        assert unsafe_open <= (t["decision"] == "blocked")
