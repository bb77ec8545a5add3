"""Temporal's history, row by row of imports.md's table, and what the engine then decides for each case."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recovery.imports.importers import ImportRefused, history_import
from tests.imports.helpers import (
    PAYLOAD,
    History,
    assert_no_payload,
    decisions,
    effects,
    imported,
    intents,
    records,
    run_assess,
    run_import,
    turn,
)


def journal_of(h: History, effect_map: dict[str, str] | None = None, **data_kw: object) -> bytes:
    result = imported("temporal", h.data(**data_kw), effect_map)  # type: ignore[arg-type]
    (run,) = result.runs
    assert_no_payload(run.journal)
    return run.journal


def completed(h: History) -> None:
    h.workflow_task()
    h.add("WorkflowExecutionCompleted", result=PAYLOAD, workflowTaskCompletedEventId="4")


# -- the records of one execution ------------------------------------------------------------------------


def test_an_execution_is_one_turn_planned_and_started_from_event_1_and_closed_by_its_end() -> None:
    h = History()
    h.workflow_task()
    s = h.activity("1")
    h.add("ActivityTaskStarted", scheduledEventId=s, attempt=1)
    h.add("ActivityTaskCompleted", scheduledEventId=s, result=PAYLOAD)
    completed(h)
    recs = records(journal_of(h))
    assert [r["kind"] for r in recs] == [
        "turn_planned",
        "phase_committed",
        "intent_dispatched",
        "effect_observed",
        "phase_committed",
        "turn_terminal",
    ]
    assert recs[0]["lineage"] == "temporal:OrderWorkflow" and recs[0]["phases"] == ["start", "close"]
    assert [r["lsn"] for r in recs] == list(range(6)) and {r["branch"] for r in recs} == {0}
    assert all(r["v"] == 2 and r["run"] == "temporal-run-abc" and r["turn"] == "workflow" for r in recs)
    assert [r["source_event"] for r in recs] == [1, 1, 5, 7, 11, 11]
    assert recs[0]["at"] == "2026-03-01T10:00:01.123456789Z"
    assert "prev" not in recs[0] and all("prev" in r for r in recs[1:])
    assert recs[2]["intent"] == "activity:1" and recs[2]["activity_type"] == "ChargeCard"
    assert (
        recs[2]["args_digest"]
        == hashlib.sha256(
            json.dumps(PAYLOAD, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
        ).hexdigest()
    )
    t = turn(journal_of(h))
    assert (t["decision"], intents(t)) == ("complete", {"activity:1": ("unsafe", "settled")})


def test_a_scheduled_activity_never_closed_blocks_when_unsafe_and_is_reissued_when_idempotent() -> None:
    h = History()
    h.workflow_task()
    h.activity("1")
    t = turn(journal_of(h))
    assert (t["decision"], t["reason"]) == ("blocked", "effect_indeterminate")
    t = turn(journal_of(h, {"ChargeCard": "idempotent"}))
    assert (t["decision"], t["resume_from"], intents(t)) == (
        "resume",
        "close",
        {"activity:1": ("idempotent", "reissue")},
    )
    rec = records(journal_of(h, {"ChargeCard": "idempotent"}))[2]
    assert rec["idempotency_key"] == "temporal-run-abc/1"
    t = turn(journal_of(h, {"*": "safe"}))
    assert (t["decision"], intents(t)) == ("resume", {"activity:1": ("safe", "replay")})


@pytest.mark.parametrize(
    ("closing", "started", "outcome"),
    [
        ("ActivityTaskCompleted", True, "succeeded"),
        ("ActivityTaskFailed", True, "failed"),
        ("ActivityTaskTimedOut", True, "unknown"),
        ("ActivityTaskTimedOut", False, "unknown"),
        ("ActivityTaskCanceled", False, "failed"),  # it never ran
        ("ActivityTaskCanceled", True, "unknown"),  # it was running when cancelled
    ],
)
def test_an_activity_is_read_back_by_its_scheduled_event(closing: str, started: bool, outcome: str) -> None:
    h = History()
    h.workflow_task()
    s = h.activity("7")
    h.add("ActivityTaskCancelRequested", scheduledEventId=s)
    if started:
        h.add("ActivityTaskStarted", scheduledEventId=str(s), attempt=2)
    h.add(closing, scheduledEventId=str(s), startedEventId="0")
    recs = records(journal_of(h))
    assert recs[-1]["kind"] == "effect_observed" and recs[-1]["outcome"] == outcome
    t = turn(journal_of(h))
    if outcome == "unknown":
        assert (t["decision"], t["reason"]) == ("blocked", "effect_indeterminate")
        t = turn(journal_of(h, {"ChargeCard": "idempotent"}))
        assert (t["decision"], t["resume_from"], intents(t)["activity:7"]) == (
            "resume",
            "close",
            ("idempotent", "reissue"),
        )
    else:
        assert (t["decision"], t["resume_from"], intents(t)["activity:7"]) == ("resume", "close", ("unsafe", "settled"))


@pytest.mark.parametrize("marker", ["LocalActivity", "core_local_activity"])
@pytest.mark.parametrize("failed", [False, True])
def test_a_local_activity_marker_is_dispatched_and_read_back_at_once(marker: str, failed: bool) -> None:
    h = History()
    h.workflow_task()
    attrs: dict[str, object] = {"markerName": marker, "details": {"data": PAYLOAD}, "workflowTaskCompletedEventId": "4"}
    if failed:
        attrs["failure"] = {"message": SECRET_MESSAGE, "applicationFailureInfo": {"type": "Boom"}}
    eid = h.add("MarkerRecorded", **attrs)
    recs = records(journal_of(h))
    assert [(r["kind"], r.get("intent"), r.get("outcome")) for r in recs[2:]] == [
        ("intent_dispatched", f"local:{eid}", None),
        ("effect_observed", f"local:{eid}", "failed" if failed else "succeeded"),
    ]
    idem = records(journal_of(h, {"*": "idempotent"}))[2]
    assert idem["idempotency_key"] == f"temporal-run-abc/local/{eid}"
    assert SECRET_MESSAGE.encode() not in journal_of(h)


SECRET_MESSAGE = "stack trace with a customer's address"


def test_a_local_activity_takes_its_class_from_the_activity_type_its_marker_names() -> None:
    import base64

    def payload(value: object) -> dict[str, object]:
        encoded = base64.b64encode(json.dumps(value).encode()).decode()
        return {"payloads": [{"metadata": {"encoding": "anNvbi9wbGFpbg=="}, "data": encoded}]}

    h = History()
    java = h.add("MarkerRecorded", markerName="LocalActivity", details={"type": payload("SendEmail"), "input": PAYLOAD})
    core = h.add(
        "MarkerRecorded",
        markerName="core_local_activity",
        details={"data": payload({"activity_type": "Lookup", "seq": 1})},
    )
    plain = h.add("MarkerRecorded", markerName="LocalActivity", details={"data": PAYLOAD})
    result = imported("temporal", h.data(), {"SendEmail": "idempotent", "Lookup": "safe"})
    recs = {r["intent"]: r for r in records(result.runs[0].journal) if r["kind"] == "intent_dispatched"}
    assert (
        recs[f"local:{java}"]["effect_class"] == "idempotent" and recs[f"local:{java}"]["activity_type"] == "SendEmail"
    )
    assert recs[f"local:{core}"]["effect_class"] == "safe"
    assert recs[f"local:{plain}"]["effect_class"] == "unsafe"
    assert result.runs[0].decided_by == {
        f"local:{java}": "SendEmail",
        f"local:{core}": "Lookup",
        f"local:{plain}": None,
    }


def test_other_markers_journal_nothing_and_are_counted() -> None:
    h = History()
    for name in ("Version", "SideEffect", "MutableSideEffect"):
        h.add("MarkerRecorded", markerName=name, details={"data": PAYLOAD})
    result = imported("temporal", h.data())
    assert result.skipped == {"MarkerRecorded": 3} and result.runs[0].records == 2


@pytest.mark.parametrize(
    ("closing", "outcome"),
    [
        ("ChildWorkflowExecutionCompleted", "succeeded"),
        ("StartChildWorkflowExecutionFailed", "failed"),
        ("ChildWorkflowExecutionFailed", "failed"),
        ("ChildWorkflowExecutionCanceled", "failed"),
        ("ChildWorkflowExecutionTimedOut", "failed"),
        ("ChildWorkflowExecutionTerminated", "failed"),
        (None, None),
    ],
)
def test_a_child_workflow_is_idempotent_on_its_workflow_id(closing: str | None, outcome: str | None) -> None:
    h = History()
    i = h.add(
        "StartChildWorkflowExecutionInitiated", workflowId="child-42", workflowType={"name": "Ship"}, input=PAYLOAD
    )
    h.add("ChildWorkflowExecutionStarted", initiatedEventId=i, workflowExecution={"workflowId": "child-42"})
    if closing:
        h.add(closing, initiatedEventId=str(i))
    recs = records(journal_of(h))
    assert (recs[2]["intent"], recs[2]["effect_class"], recs[2]["idempotency_key"]) == (
        "child:child-42",
        "idempotent",
        "child-42",
    )
    t = turn(journal_of(h))
    if outcome:
        assert recs[-1]["outcome"] == outcome and intents(t)["child:child-42"] == ("idempotent", "settled")
    else:
        assert (t["decision"], intents(t)["child:child-42"]) == ("resume", ("idempotent", "reissue"))


@pytest.mark.parametrize(
    ("initiated", "closing", "prefix", "outcome"),
    [
        ("SignalExternalWorkflowExecutionInitiated", "ExternalWorkflowExecutionSignaled", "signal", "succeeded"),
        ("SignalExternalWorkflowExecutionInitiated", "SignalExternalWorkflowExecutionFailed", "signal", "failed"),
        (
            "RequestCancelExternalWorkflowExecutionInitiated",
            "ExternalWorkflowExecutionCancelRequested",
            "cancel",
            "succeeded",
        ),
        (
            "RequestCancelExternalWorkflowExecutionInitiated",
            "RequestCancelExternalWorkflowExecutionFailed",
            "cancel",
            "failed",
        ),
    ],
)
def test_signals_and_cancels_of_other_workflows(initiated: str, closing: str, prefix: str, outcome: str) -> None:
    h = History()
    i = h.add(initiated, workflowExecution={"workflowId": "other"}, signalName="go", input=PAYLOAD)
    h.add(closing, initiatedEventId=i)
    recs = records(journal_of(h))
    assert (recs[2]["intent"], recs[2]["effect_class"], recs[2]["idempotency_key"]) == (
        f"{prefix}:{i}",
        "idempotent",
        f"temporal-run-abc/{prefix}/{i}",
    )
    assert recs[3]["outcome"] == outcome


@pytest.mark.parametrize(
    ("closing", "started", "outcome"),
    [
        ("NexusOperationCompleted", True, "succeeded"),
        ("NexusOperationFailed", True, "failed"),
        ("NexusOperationTimedOut", False, "unknown"),
        ("NexusOperationCanceled", False, "failed"),
        ("NexusOperationCanceled", True, "unknown"),
    ],
)
def test_nexus_operations_take_their_class_from_the_operation(closing: str, started: bool, outcome: str) -> None:
    h = History()
    s = h.add("NexusOperationScheduled", endpoint="ep", service="billing", operation="charge", input=PAYLOAD)
    if started:
        h.add("NexusOperationStarted", scheduledEventId=s, operationToken="tok")
    h.add("NexusOperationCancelRequested", scheduledEventId=s)
    h.add(closing, scheduledEventId=s)
    recs = records(journal_of(h, {"charge": "idempotent"}))
    assert (recs[2]["intent"], recs[2]["effect_class"], recs[2]["idempotency_key"]) == (
        f"nexus:{s}",
        "idempotent",
        f"temporal-run-abc/nexus/{s}",
    )
    assert recs[3]["outcome"] == outcome
    assert records(journal_of(h))[2]["effect_class"] == "unsafe"


@pytest.mark.parametrize(
    ("closing", "status"),
    [
        ("WorkflowExecutionCompleted", "completed"),
        ("WorkflowExecutionContinuedAsNew", "completed"),
        ("WorkflowExecutionFailed", "failed"),
        ("WorkflowExecutionTimedOut", "failed"),
        ("WorkflowExecutionCanceled", "cancelled"),
        ("WorkflowExecutionTerminated", "cancelled"),
    ],
)
def test_the_execution_s_end_closes_the_turn(closing: str, status: str) -> None:
    h = History()
    h.workflow_task()
    h.add(closing, reason="because", details=PAYLOAD)
    recs = records(journal_of(h))
    assert [(r["kind"], r.get("phase"), r.get("status")) for r in recs[-2:]] == [
        ("phase_committed", "close", None),
        ("turn_terminal", None, status),
    ]
    assert turn(journal_of(h))["decision"] == "complete"


def test_an_unsafe_activity_left_open_blocks_even_after_the_execution_completed() -> None:
    h = History()
    h.activity("abandoned")
    completed(h)
    t = turn(journal_of(h))
    assert (t["decision"], t["reason"]) == ("blocked", "effect_indeterminate")


INTERNAL = [
    "WorkflowTaskScheduled",
    "WorkflowTaskStarted",
    "WorkflowTaskCompleted",
    "WorkflowTaskFailed",
    "WorkflowTaskTimedOut",
    "TimerStarted",
    "TimerFired",
    "TimerCanceled",
    "WorkflowExecutionSignaled",
    "WorkflowExecutionCancelRequested",
    "WorkflowExecutionUpdateAccepted",
    "WorkflowExecutionUpdateCompleted",
    "WorkflowExecutionUpdateAdmitted",
    "WorkflowExecutionUpdateRejected",
    "WorkflowExecutionOptionsUpdated",
    "UpsertWorkflowSearchAttributes",
    "WorkflowPropertiesModified",
    "ActivityTaskStarted",
    "ActivityTaskCancelRequested",
    "ChildWorkflowExecutionStarted",
    "NexusOperationStarted",
    "NexusOperationCancelRequested",
]


def test_the_cancel_request_s_own_outcome_events_are_read_as_the_spec_spells_its_prefix() -> None:
    # docs/imports.md skips `NexusOperationCancelRequested*`; Temporal's NexusOperationCancelRequestCompleted and
    # ...Failed do not start with it, so they are types not in the table (and block until someone looks).
    h = History()
    h.add("NexusOperationCancelRequestCompleted", scheduledEventId=1)
    h.add("NexusOperationCancelRequestFailed", scheduledEventId=1)
    kinds = [r["kind"] for r in records(journal_of(h))][2:]
    assert kinds == ["temporal.NexusOperationCancelRequestCompleted", "temporal.NexusOperationCancelRequestFailed"]


@pytest.mark.parametrize("spelling", ["pascal", "screaming"])
def test_workflow_internal_events_journal_nothing_and_are_counted_by_type(spelling: str) -> None:
    h = History()
    for name in INTERNAL:
        h.add(name, scheduledEventId=1, initiatedEventId=1, input=PAYLOAD)
    result = imported("temporal", h.data(spelling=spelling))
    assert result.runs[0].records == 2
    assert result.skipped == dict.fromkeys(sorted(INTERNAL), 1)
    assert result.events == len(INTERNAL) + 1


def test_a_reset_journals_nothing_in_the_reset_run_s_history() -> None:
    h = History()
    h.workflow_task()
    h.add("WorkflowTaskFailed", cause="WORKFLOW_TASK_FAILED_CAUSE_RESET_WORKFLOW", baseRunId="r0", newRunId="r1")
    assert imported("temporal", h.data()).runs[0].records == 2


@pytest.mark.parametrize("spelling", ["pascal", "screaming"])
def test_an_event_type_not_in_the_table_is_a_kind_the_engine_does_not_know(spelling: str) -> None:
    h = History()
    h.add("WorkflowExecutionPaused", identity="ops")
    h.add("WorkflowExecutionStarted", workflowType={"name": "again"})
    journal = journal_of(h, spelling=spelling)
    kinds = [r["kind"] for r in records(journal)][2:]
    expected = "EVENT_TYPE_WORKFLOW_EXECUTION_PAUSED" if spelling == "screaming" else "WorkflowExecutionPaused"
    assert kinds[0] == "temporal." + expected and kinds[1].startswith("temporal.")
    answer = decisions(journal)
    assert [v["code"] for v in answer["violations"]][:1] == ["kind_unknown"]
    assert (answer["turns"][0]["decision"], answer["turns"][0]["reason"]) == ("blocked", "kind_unknown")


# -- spellings, ids, order ------------------------------------------------------------------------------


def _mixed() -> History:
    h = History()
    h.workflow_task()
    a = h.activity("1")
    b = h.activity("2", "SendEmail")
    h.add("ActivityTaskStarted", scheduledEventId=a)
    h.add("ActivityTaskCompleted", scheduledEventId=a)
    h.add("ActivityTaskTimedOut", scheduledEventId=b)
    h.add("TimerStarted", timerId="t", startToFireTimeout="5s")
    return h


def test_both_spellings_integer_and_string_ids_and_the_history_wrapper_give_the_same_journal() -> None:
    h = _mixed()
    first = journal_of(h)
    for kw in (
        {"spelling": "screaming"},
        {"ids": "str"},
        {"wrap": True},
        {"spelling": "screaming", "ids": "str", "wrap": True},
    ):
        assert journal_of(h, **kw) == first


def test_events_out_of_order_are_taken_in_event_id_order() -> None:
    h = _mixed()
    n = len(h.events)
    assert journal_of(h, order=list(reversed(range(n)))) == journal_of(h)
    assert journal_of(h, order=[0, 3, 1, 2, *range(4, n)]) == journal_of(h)


@pytest.mark.parametrize(
    ("mutate", "why"),
    [
        (lambda evs: evs.pop(3), "skip"),
        (lambda evs: evs.append(dict(evs[-1])), "repeat"),
        (lambda evs: evs.pop(0), "no start"),
        (lambda evs: evs[1].update(eventId=1.0), "float id"),
        (lambda evs: evs[1].update(eventId="2a"), "not decimal"),
        (lambda evs: evs[1].pop("eventType"), "no type"),
        (lambda evs: evs[0].update(eventType="WorkflowTaskScheduled"), "event 1"),
        (lambda evs: evs[4]["activityTaskScheduledEventAttributes"].pop("activityId"), "no activity id"),
        (lambda evs: evs[7]["activityTaskCompletedEventAttributes"].update(scheduledEventId=99), "no such activity"),
        (lambda evs: evs[1].update(eventTime="yesterday"), "bad time"),
    ],
)
def test_what_is_not_exactly_a_history_is_refused(mutate: object, why: str) -> None:
    h = _mixed()
    mutate(h.events)  # type: ignore[operator]
    with pytest.raises(ImportRefused) as err:
        imported("temporal", h.data())
    assert err.value.code == "history_invalid"


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"not json",
        b"[]",
        b'{"events": {}}',
        b'{"events": []}',
        b'{"events": [1]}',
        b'{"history": {}}',
        b'{"events": [{"eventId": 1}',
        b'{"events": [], "x": ',
        b'{"note": "\\"events\\": [", "events": []}',
    ],
)
def test_what_is_not_a_history_at_all_is_refused(data: bytes) -> None:
    with pytest.raises(ImportRefused) as err:
        imported("temporal", data)
    assert err.value.code == "history_invalid"


def test_braces_inside_strings_do_not_cut_an_event() -> None:
    h = History()
    h.add("ActivityTaskScheduled", activityId='}, {"eventId": 9}]', activityType={"name": "a}b"}, input={"x": "]},{"})
    recs = records(journal_of(h))
    assert recs[2]["intent"] == 'activity:}, {"eventId": 9}]'


def test_floats_in_attributes_never_reach_the_journal_and_the_engine_reads_it_cleanly() -> None:
    h = History()
    h.add(
        "ActivityTaskScheduled",
        activityId="f",
        activityType={"name": "ChargeCard"},
        input={"amount": 12.5, "rate": 1e-05},
        retryPolicy={"backoffCoefficient": 1.5},
        heartbeatTimeout=0.5,
    )
    journal = journal_of(h)
    assert b"12.5" not in journal and b"1.5" not in journal
    assert decisions(journal)["violations"] == []
    digest = records(journal)[2]["args_digest"]
    canonical = json.dumps({"amount": 12.5, "rate": 1e-05}, sort_keys=True, separators=(",", ":")).encode()
    assert digest == hashlib.sha256(canonical).hexdigest()


def test_payloads_are_never_copied_only_digested() -> None:
    h = _mixed()
    h.add("WorkflowExecutionFailed", failure={"message": SECRET_MESSAGE, "encodedAttributes": PAYLOAD})
    journal = journal_of(h)
    assert SECRET_MESSAGE.encode() not in journal and b"payloads" not in journal and b"taskQueue" not in journal


# -- the run's name -------------------------------------------------------------------------------------


def test_the_run_is_named_by_the_flag_else_the_started_event_s_run_ids_else_the_file_s_sha256() -> None:
    assert imported("temporal", History(run_id="orig").data()).runs[0].run == "temporal-orig"
    first = History(run_id=None, firstExecutionRunId="first")
    assert imported("temporal", first.data()).runs[0].run == "temporal-first"
    both = History(run_id="orig", firstExecutionRunId="first")
    assert imported("temporal", both.data()).runs[0].run == "temporal-orig"
    bare = History(run_id=None, originalExecutionRunId="")
    data = bare.data()
    assert imported("temporal", data).runs[0].run == "temporal-" + hashlib.sha256(data).hexdigest()[:16]
    assert imported("temporal", data, run="mine").runs[0].run == "mine"
    assert imported("temporal", data).sha256 == hashlib.sha256(data).hexdigest()


def test_an_event_without_a_time_has_no_at() -> None:
    h = History()
    del h.events[0]["eventTime"]
    assert "at" not in records(journal_of(h))[0]


def test_progress_is_reported_to_the_end() -> None:
    h = History()
    for n in range(3000):
        h.add("TimerStarted", timerId=str(n))
    seen: list[tuple[int, int]] = []
    data = h.data()
    history_import(source="temporal", data=data, effects=effects({}), progress=lambda d, t: seen.append((d, t)))
    assert len(seen) >= 3 and seen[-1] == (len(data), len(data)) and seen == sorted(seen)


# -- rules ----------------------------------------------------------------------------------------------

OUTCOMES = ["ActivityTaskCompleted", "ActivityTaskFailed", "ActivityTaskTimedOut", "ActivityTaskCanceled", None]


@st.composite
def histories(draw: st.DrawFn) -> History:
    h = History()
    for n in range(draw(st.integers(0, 8))):
        h.workflow_task() if draw(st.booleans()) else None
        s = h.activity(str(n), draw(st.sampled_from(["ChargeCard", "SendEmail", "Lookup"])))
        if draw(st.booleans()):
            h.add("ActivityTaskStarted", scheduledEventId=s)
        closing = draw(st.sampled_from(OUTCOMES))
        if closing:
            h.add(closing, scheduledEventId=s)
        if draw(st.integers(0, 5)) == 0:
            h.add("StartChildWorkflowExecutionInitiated", workflowId=f"c{n}", workflowType={"name": "C"})
    end = draw(
        st.sampled_from([None, "WorkflowExecutionCompleted", "WorkflowExecutionFailed", "WorkflowExecutionTerminated"])
    )
    if end:
        h.add(end)
    return h


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    histories(),
    st.randoms(use_true_random=False),
    st.sampled_from(["pascal", "screaming"]),
    st.sampled_from(["int", "str"]),
)
def test_any_order_spelling_and_id_form_of_the_same_events_gives_the_same_journal(
    h: History, rnd, spelling, ids
) -> None:
    order = list(range(len(h.events)))
    rnd.shuffle(order)
    assert journal_of(h, order=order, spelling=spelling, ids=ids) == journal_of(h)


@settings(max_examples=60, deadline=None)
@given(
    histories(),
    st.dictionaries(
        st.sampled_from(["ChargeCard", "SendEmail", "Lookup", "*"]), st.sampled_from(["safe", "idempotent", "unsafe"])
    ),
)
def test_every_imported_journal_chains_and_assesses_with_no_violation(h: History, effect_map: dict[str, str]) -> None:
    journal = journal_of(h, effect_map)
    assert journal_of(h, effect_map) == journal  # the same bytes twice
    answer = decisions(journal)
    assert answer["violations"] == [] and len(answer["turns"]) == 1
    t = answer["turns"][0]
    unsafe_open = any(c == "unsafe" and r == "indeterminate" for c, r in intents(t).values())
    assert (t["decision"] == "blocked") == unsafe_open


# -- the command ----------------------------------------------------------------------------------------


def test_the_command_writes_the_journal_and_assess_journal_reads_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    h = History()
    h.activity("1")
    src = tmp_path / "history.json"
    src.write_bytes(h.data(spelling="screaming"))
    (tmp_path / "map.json").write_text(json.dumps({"ChargeCard": "idempotent"}))
    out = tmp_path / "run.jsonl"
    code, stdout, err = run_import(
        capsys, str(src), "--from", "temporal", "--out", str(out), "--effects", str(tmp_path / "map.json"), "--json"
    )
    assert (code, err) == (0, "")
    assert json.loads(stdout) == {
        "from": "temporal",
        "runs": [{"run": "temporal-run-abc", "records": 3, "out": str(out)}],
        "skipped": {},
    }
    assert out.read_bytes() == imported("temporal", src.read_bytes(), {"ChargeCard": "idempotent"}).runs[0].journal
    answer = run_assess(capsys, out)
    assert (answer["turns"][0]["decision"], answer["turns"][0]["resume_from"]) == ("resume", "close")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["history.json", "map.json", "run.jsonl"]


@pytest.mark.parametrize(
    ("content", "effects_text"),
    [
        (b'{"events": [{"eventId": 2}]}', None),
        (b"\x00\x01 binary", None),
        (None, '{"ChargeCard": "maybe"}'),
        (None, '["safe"]'),
        (None, "not json"),
    ],
)
def test_bad_input_or_a_bad_effect_map_exits_2_with_one_line_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes | None, effects_text: str | None
) -> None:
    src = tmp_path / "history.json"
    src.write_bytes(content if content is not None else History().data())
    out = tmp_path / "run.jsonl"
    args = [str(src), "--from", "temporal", "--out", str(out), "--json"]
    if effects_text is not None:
        (tmp_path / "map.json").write_text(effects_text)
        args += ["--effects", str(tmp_path / "map.json")]
    code, stdout, err = run_import(capsys, *args)
    assert (code, stdout, err.count("\n")) == (2, "", 1) and err.startswith("import_history: ")
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".import-")]


def test_an_existing_journal_is_replaced_whole_or_not_at_all(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run.jsonl"
    out.write_bytes(b"old\n")
    src = tmp_path / "h.json"
    src.write_bytes(b"{}")
    assert run_import(capsys, str(src), "--from", "temporal", "--out", str(out))[0] == 2
    assert out.read_bytes() == b"old\n"
    src.write_bytes(History().data())
    assert run_import(capsys, str(src), "--from", "temporal", "--out", str(out))[0] == 0
    assert out.read_bytes() == imported("temporal", src.read_bytes()).runs[0].journal


@pytest.mark.parametrize(
    "args",
    [
        ["--from", "airflow", "--out", "X"],
        ["--out", "X"],
        ["--from", "temporal"],
        ["--from", "temporal", "--out", "/nonexistent-dir/x.jsonl"],
    ],
)
def test_wrong_arguments_exit_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str]
) -> None:
    src = tmp_path / "h.json"
    src.write_bytes(History().data())
    args = [str(tmp_path / "x.jsonl") if a == "X" else a for a in args]
    code, stdout, err = run_import(capsys, str(src), *args)
    assert (code, stdout, err.count("\n")) == (2, "", 1)


def test_the_commands_as_scripts_call_them(tmp_path: Path) -> None:
    """`manage.py import_history` and then `manage.py assess_journal`, each its own process."""
    import os
    import subprocess

    from tests.engine.helpers import PYTHON, REPO_ROOT

    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}

    def manage(*args: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run([PYTHON, "manage.py", *args], cwd=REPO_ROOT, env=env, capture_output=True, timeout=180)

    h = History()
    h.activity("1")
    src, out = tmp_path / "history.json", tmp_path / "run.jsonl"
    src.write_bytes(b'{"events": [{"eventId": "x"}]}')
    bad = manage("import_history", str(src), "--from", "temporal", "--out", str(out))
    assert (bad.returncode, bad.stdout, bad.stderr.count(b"\n")) == (2, b"", 1) and not out.exists()
    src.write_bytes(h.data())
    good = manage("import_history", str(src), "--from", "temporal", "--out", str(out), "--json")
    assert good.returncode == 0, good.stderr
    assessed = manage("assess_journal", str(out), "--json")
    answer = json.loads(assessed.stdout)
    assert (answer["turns"][0]["decision"], answer["turns"][0]["reason"]) == ("blocked", "effect_indeterminate")
