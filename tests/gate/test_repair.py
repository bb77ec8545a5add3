"""Audited journal repair (docs/repair.md): a run blocked by chain_broken is repaired by a previewed repair,
its assessment names it, the stored bytes never change, and an export of the run carries both."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import tarfile

import pytest

from journals.models import JournalRecord, Run, Turn
from journals.services import records_ingest
from recovery.findings.models import Finding
from recovery.models import Assessment
from recovery.repair.models import JournalRepair
from recovery.services import assessment_refresh
from tests.journal_builder import JournalBuilder
from trail.models import OperatorAction

pytestmark = pytest.mark.django_db

RUN = "run-repair"


def _broken() -> tuple[JournalBuilder, JournalBuilder]:
    """(the broken journal as stored, the corrected one the runtime re-sends). t1 completes before the break;
    t2's commit of `envelope` names a wrong prev (so the record after it chains from other bytes too)."""
    good = JournalBuilder(RUN)
    good.full_turn("t1")
    good.plan("t2")
    good.commit("t2", "plan")
    good.commit("t2", "envelope")
    good.commit("t2", "dispatch")
    broken = JournalBuilder(RUN)
    broken.lines = list(good.lines)
    bad = json.loads(good.lines[-2])
    bad["prev"] = "0" * 64
    broken.lines[-2] = json.dumps(bad, sort_keys=True, separators=(",", ":")).encode()
    return broken, good


@pytest.fixture
def run() -> Run:
    broken, _ = _broken()
    records_ingest(run_id=RUN, body=broken.body(), content_type="application/x-ndjson", token=None)
    stored = Run.objects.get(run_id=RUN)
    assert assessment_refresh(run=stored).blocked_reason == "chain_broken"
    return stored


def _bytes(run: Run) -> list[tuple[int, str, bytes]]:
    return [(s, d, bytes(line)) for s, d, line in JournalRecord.objects.filter(run=run).order_by("seq")
            .values_list("seq", "digest", "line")]


def _break_seq(run: Run) -> int:
    return len(_broken()[0].lines) - 1  # the record with the wrong prev


def test_accept_prefix_previewed_then_applied_names_the_repair_and_keeps_the_bytes(run, operator_client, operator):
    original = _bytes(run)
    through = _break_seq(run) - 1
    url = f"/api/v1/runs/{RUN}/repairs"
    trail_before = OperatorAction.objects.count()

    preview = operator_client.post(f"{url}/preview", {"kind": "accept_prefix", "through_seq": through,
                                                     "reason": "t2 was cut by a bad disk"}, format="json")
    assert preview.status_code == 200, preview.content
    body = preview.json()
    assert body["assessment"]["blocked_reason"] is None
    assert body["quarantined_turns"] == ["t2"]
    decided = {t["turn"]: (t["decision"], t["reason"]) for t in body["assessment"]["turns"]}
    assert decided == {"t1": ("complete", None), "t2": ("blocked", "repair_quarantined")}
    # A preview stores nothing.
    assert JournalRepair.objects.count() == 0 and OperatorAction.objects.count() == trail_before
    assert Assessment.objects.filter(run=run).count() == 1

    applied = operator_client.post(url, {"kind": "accept_prefix", "through_seq": through, "preview": body["preview"],
                                         "reason": "t2 was cut by a bad disk"}, format="json")
    assert applied.status_code == 201, applied.content
    answer = applied.json()
    text = "assessed after repair #1 by olivia-operator: t2 was cut by a bad disk"
    assert answer["assessment"]["repair"]["text"] == text
    assert answer["assessment"]["blocked_reason"] is None
    turns = {t.turn_id: (t.decision, t.reason) for t in Turn.objects.filter(run=run)}
    assert turns == {"t1": ("complete", None), "t2": ("blocked", "repair_quarantined")}
    # One trail row, of the repair, naming it.
    rows = list(OperatorAction.objects.filter(seq__gt=trail_before))
    assert [r.kind for r in rows] == ["journal_repair"]
    assert rows[0].after["number"] == 1 and rows[0].actor == operator
    # The gate never lets the quarantined turn proceed, not even on an approval; t1 is done.
    assert operator_client.get(f"/api/v1/runs/{RUN}/turns/t2/decision").json()["state"] == "hold"
    assert operator_client.get(f"/api/v1/runs/{RUN}/turns/t1/decision").json()["state"] == "done"
    from kernel.errors import ServiceError
    from recovery.services import turn_approve

    with contextlib.suppress(ServiceError):  # refusing the approval outright is as good: the turn stays held
        turn_approve(turn=Turn.objects.get(run=run, turn_id="t2"), actor=operator, reason="let it go")
    assert operator_client.get(f"/api/v1/runs/{RUN}/turns/t2/decision").json()["state"] == "hold"
    # The stored records are byte-identical.
    assert _bytes(run) == original
    # The same apply again is stale (the repair in force moved): nothing more is written.
    again = operator_client.post(url, {"kind": "accept_prefix", "through_seq": through, "preview": body["preview"],
                                       "reason": "again"}, format="json")
    assert again.status_code == 409 and again.json()["error"] == "preview_stale"
    assert JournalRepair.objects.count() == 1


def test_the_repair_probe_read_with_the_run_names_the_repair_in_force(run, operator_client):
    # The worker reads the run's row with the pk of its repair in force and reads the repair only when there
    # is one: the probe must name the latest repair, as the plain read does, after each of two repairs.
    from recovery.repair.models import repair_in_force
    from recovery.services import _run_probed, assessment_inputs

    url = f"/api/v1/runs/{RUN}/repairs"
    assert _run_probed(run.pk)[1].repair_pk is None
    for through in (_break_seq(run) - 1, _break_seq(run) - 2):
        ask = {"kind": "accept_prefix", "through_seq": through, "reason": "cut by a bad disk"}
        preview = operator_client.post(f"{url}/preview", ask, format="json").json()["preview"]
        assert operator_client.post(url, {**ask, "preview": preview}, format="json").status_code == 201
        probed_run, probes = _run_probed(run.pk)
        in_force = repair_in_force(run)
        assert in_force is not None and probes.repair_pk == in_force.pk and not probes.kept_any
        probed, plain = assessment_inputs(run=probed_run, probes=probes), assessment_inputs(run=probed_run)
        assert probed.repair == plain.repair == in_force and probed.identity == plain.identity
    assert JournalRepair.objects.filter(run=run).count() == 2 and in_force.number == 2


def test_a_prefix_that_includes_the_break_is_refused(run, operator_client):
    answer = operator_client.post(f"/api/v1/runs/{RUN}/repairs/preview",
                                  {"kind": "accept_prefix", "through_seq": _break_seq(run)}, format="json")
    assert answer.status_code == 409 and answer.json()["error"] == "repair_not_verified"


def test_supersede_by_the_corrected_journal_decides_every_turn_and_export_carries_both(run, operator_client, tmp_path):
    _, good = _broken()
    original = _bytes(run)
    url = f"/api/v1/runs/{RUN}/repairs"
    req = {"kind": "supersede", "journal": good.body().decode(), "reason": "runtime re-sent t2's records"}
    preview = operator_client.post(f"{url}/preview", req, format="json").json()
    applied = operator_client.post(url, {**req, "preview": preview["preview"]}, format="json")
    assert applied.status_code == 201, applied.content
    repair = applied.json()["repair"]
    assert repair["replacement_sha256"] == hashlib.sha256(good.body()).hexdigest()
    assert {t.turn_id: t.decision for t in Turn.objects.filter(run=run)} == {"t1": "complete", "t2": "resume"}
    assert _bytes(run) == original

    export = operator_client.get(f"/api/v1/runs/{RUN}/export")
    assert export.status_code == 200
    with tarfile.open(fileobj=io.BytesIO(export.content), mode="r:gz") as tf:
        members = {m.name: tf.extractfile(m).read() for m in tf.getmembers() if m.isfile()}
    # The journal is the evidence as it arrived; the repair and both journals ride beside it.
    assert members["journal.jsonl"] == b"".join(line + b"\n" for _, _, line in original)
    assert members["state/loopx/repairs/0001/superseded.jsonl"] == members["journal.jsonl"]
    assert members["state/loopx/repairs/0001/replacement.jsonl"] == good.body()
    described = json.loads(members["state/loopx/repairs/0001/repair.json"])
    assert described["kind"] == "supersede" and described["number"] == 1
    manifest = json.loads(members["manifest.json"])
    assert {m["path"] for m in manifest["members"]} == set(members) - {"manifest.json"}
    # The export is audited too.
    assert OperatorAction.objects.order_by("-seq").first().kind == "run_export"


def test_a_healthy_run_is_not_repaired(operator_client):
    good = JournalBuilder("run-fine")
    good.full_turn("t1")
    records_ingest(run_id="run-fine", body=good.body(), content_type="application/x-ndjson", token=None)
    assessment_refresh(run=Run.objects.get(run_id="run-fine"))
    answer = operator_client.post("/api/v1/runs/run-fine/repairs/preview", {"kind": "accept_prefix", "through_seq": 1},
                                  format="json")
    assert answer.status_code == 409 and answer.json()["error"] == "run_not_broken"


def test_viewers_and_runtime_tokens_cannot_repair(run, viewer_client, runtime):
    for client in (viewer_client, runtime.client):
        answer = client.post(f"/api/v1/runs/{RUN}/repairs/preview", {"kind": "accept_prefix", "through_seq": 1},
                             format="json")
        assert answer.status_code == 403


def test_the_chain_audit_leaves_a_repaired_break_alone(run, operator_client):
    from datetime import timedelta

    from audits.checks import audit_chain_verification

    report = audit_chain_verification(record_budget=1000, full_passes=0, full_pass_every=timedelta(0), limit=10)
    assert Finding.objects.filter(kind="chain_broken", state="open").count() >= 1, report.as_dict()
    through = _break_seq(run) - 1
    url = f"/api/v1/runs/{RUN}/repairs"
    req = {"kind": "accept_prefix", "through_seq": through, "reason": "cut"}
    preview = operator_client.post(f"{url}/preview", req, format="json").json()
    applied = operator_client.post(url, {**req, "preview": preview["preview"]}, format="json").json()
    assert Finding.objects.filter(kind="chain_broken", state="open").count() == 0
    from audits.models import ChainCursor

    ChainCursor.objects.filter(run=run).update(verified_seq=0, prefix_digest=hashlib.sha256(b"").hexdigest(), state={})
    again = audit_chain_verification(record_budget=1000, full_passes=0, full_pass_every=timedelta(0), limit=10)
    assert again.counts["chain_broken_repaired"] >= 1
    assert Finding.objects.filter(kind="chain_broken", state="open").count() == 0
    assert applied["assessment"]["repair"]["number"] == 1


def test_the_held_turn_links_an_operator_to_the_repair_and_shows_a_viewer_no_link(run, operator_client, viewer_client):
    turn = Turn.objects.get(run=run, turn_id="t2")
    repair_url = f"/runs/{run.pk}/repair/"
    page = operator_client.get(f"/turns/{turn.pk}/").content.decode()
    assert f'href="{repair_url}"' in page
    assert "repair the journal</a> (its records after the fault)" in page
    viewer_page = viewer_client.get(f"/turns/{turn.pk}/").content.decode()
    assert "every turn of the run is blocked until the journal is repaired" in viewer_page
    assert repair_url not in viewer_page
