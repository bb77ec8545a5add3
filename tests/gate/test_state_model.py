"""One truth for a turn: random sequences of what people, runtimes and audits do, and after every step every
surface (the gate, the API's turn detail and list, the console's turn page, lists, filters, counts and held
queue, the unclaimed-turn findings) reports the same effective state for every turn, and no turn with a
live indeterminate unsafe intent is ever `proceed` at the gate.

The actions go through the same services the pages, the API, the admin and the tasks call; the admin edit
goes through the Django admin itself and the bulk decision through the bulk API.
"""

from __future__ import annotations

import contextlib
import itertools
from collections import Counter
from datetime import timedelta

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client
from django.urls import reverse
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from rest_framework.test import APIClient

from audits.checks import audit_unclaimed_blocked_turns
from console.selectors import blocked_queue, decorate_runs
from console.turn_detail import turn_page
from engine.writer import JournalWriter
from journals.access import EVERY_RUN
from journals.models import Intent, Run, Turn, TurnEffective, run_status_q
from journals.selectors import turn_with_timeline
from journals.services import records_ingest
from kernel.errors import ServiceError
from recovery.findings.models import UNRESOLVED, Finding
from recovery.findings.services import finding_open_or_touch, finding_resolve
from recovery.services import (
    assessment_refresh,
    turn_approve,
    turn_block,
    turn_claim,
    turn_decision,
    turn_park,
    turn_release,
)
from recovery.state import STATE_GROUPS, WAITING, run_status_decide, state_counts, state_of, turns_matching

pytestmark = pytest.mark.django_db

_runs = itertools.count()
TURNS = ("t-charge", "t-refund", "t-skip", "t-sync", "t-done", "t-late")


def _script(run_id: str) -> list[list[bytes]]:
    """The run's journal in batches: what a runtime sends over time."""
    w = JournalWriter(run_id)
    w.complete_turn("t-done", "billing/done")
    w.plan("t-charge", "payments/charge")
    for phase in ("plan", "envelope", "dispatch"):
        w.commit("t-charge", phase)
    w.dispatch("t-charge", "charge-card", "unsafe", amount_cents=4200)  # no readback: indeterminate
    w.plan("t-refund", "payments/refund")
    for phase in ("plan", "envelope", "dispatch"):
        w.commit("t-refund", phase)
    w.dispatch("t-refund", "refund-card", "unsafe")
    w.observe("t-refund", "refund-card", "unknown")
    w.dispatch("t-refund", "refund-card", "unsafe")  # unsafe_redispatch, the intent still indeterminate
    w.plan("t-skip", "etl/skip")
    w.commit("t-skip", "plan")
    w.commit("t-skip", "execute")  # phase_prefix_violation: approvable
    w.plan("t-sync", "crm/sync")
    w.commit("t-sync", "plan")
    first = w.mark()
    w.commit("t-sync", "envelope")
    w.observe("t-charge", "charge-card", "succeeded")  # the charge's readback arrives late
    second = w.mark()
    w.plan("t-late", "crm/late")
    w.commit("t-late", "plan")
    w.dispatch("t-late", "send-mail", "unsafe")
    third = w.mark()
    lines = list(w)
    return [lines[:first], lines[first:second], lines[second:third], lines[third:]]


class OneTruth(RuleBasedStateMachine):
    @initialize()
    def setup(self) -> None:
        n = next(_runs)
        self.run_id = f"truth-{n}"
        self.batches = [b for b in _script(self.run_id) if b]
        self.sent = 0
        operators = Group.objects.get(name="operator")
        self.operator = User.objects.create_user(username=f"olga-{n}", password="pw")
        self.operator.groups.add(operators)
        from teams.services import team_ensure, team_members_add

        team_members_add(team=team_ensure(name="all-runs", prefixes=[""]), users=[self.operator])  # sees every run
        self.admin = User.objects.create_user(username=f"adam-{n}", password="pw", is_staff=True, is_superuser=True)
        self.api = APIClient()
        self.api.force_login(self.operator)
        self.admin_pages = Client()
        self.admin_pages.force_login(self.admin)
        self.claims: dict[str, int] = {}
        self._ingest()

    # --- what happens ----------------------------------------------------------------------------------

    def _ingest(self) -> None:
        body = b"".join(line + b"\n" for line in self.batches[self.sent])
        # The runtime that holds a turn's claim writes under its fencing token, as a real one must.
        records_ingest(
            run_id=self.run_id, body=body, content_type="application/x-ndjson", token=None, fencing=dict(self.claims)
        )
        self.sent += 1
        assessment_refresh(run=self.run)  # what the background task does after the batch commits

    @property
    def run(self) -> Run:
        return Run.objects.get(run_id=self.run_id)

    def _turn(self, name: str) -> Turn | None:
        return Turn.objects.filter(run__run_id=self.run_id, turn_id=name).select_related("run").first()

    @precondition(lambda self: self.sent < len(self.batches))
    @rule()
    def ingest(self) -> None:
        self._ingest()

    @rule(
        name=st.sampled_from(TURNS), with_evidence=st.booleans(), finding=st.sampled_from(["happened", "not_happened"])
    )
    def approve(self, name: str, with_evidence: bool, finding: str) -> None:
        turn = self._turn(name)
        if turn is None:
            return
        evidence = None
        if with_evidence:
            unknown = Intent.objects.filter(turn=turn, live=True, resolution="indeterminate")
            evidence = {i: finding for i in unknown.values_list("intent_id", flat=True)} or None
        with contextlib.suppress(ServiceError):
            turn_approve(turn=turn, actor=self.operator, reason="looked at it", evidence=evidence)

    @rule(name=st.sampled_from(TURNS))
    def block(self, name: str) -> None:
        turn = self._turn(name)
        if turn is not None:
            with contextlib.suppress(ServiceError):
                turn_block(turn=turn, actor=self.operator, reason="hold it")

    @rule(
        action=st.sampled_from(["approve", "block"]),
        filter=st.sampled_from([{"state": "held"}, {"state": "waiting"}, {"reason": "unsafe_redispatch"}, None]),
    )
    def bulk(self, action: str, filter: dict[str, str] | None) -> None:
        response = self.api.post(
            "/api/v1/turns/bulk",
            {"action": action, "reason": "bulk review", "filter": filter or {"run": self.run_id}},
            format="json",
        )
        assert response.status_code == 200, response.content

    @rule(name=st.sampled_from(TURNS), worker=st.sampled_from(["w1", "w2"]))
    def claim(self, name: str, worker: str) -> None:
        turn = self._turn(name)
        if turn is None:
            return
        with contextlib.suppress(ServiceError):
            self.claims[name] = turn_claim(turn=turn, worker_id=worker).fencing_token

    @rule(name=st.sampled_from(TURNS))
    def release(self, name: str) -> None:
        turn = self._turn(name)
        if turn is not None and name in self.claims:
            with contextlib.suppress(ServiceError):
                turn_release(turn=turn, fencing_token=self.claims.pop(name))

    @rule(name=st.sampled_from(TURNS))
    def park(self, name: str) -> None:
        turn = self._turn(name)
        if turn is not None:
            view = turn_decision(turn=turn)
            if view.gate != "done":
                turn_park(turn=turn, view=view)

    @rule(name=st.sampled_from(TURNS), block=st.booleans())
    def admin_edit(self, name: str, block: bool) -> None:
        turn = self._turn(name)
        if turn is None:
            return
        self.admin_pages.post(
            reverse("admin:journals_turn_change", args=[turn.pk]),
            {"lineage_repair": "", "notes": "called the owner", "block_turn": "owner says wait" if block else "",
             "change_reason": "edited"},
        )

    @rule(resolve=st.booleans())
    def integrity(self, resolve: bool) -> None:
        run = self.run
        if not resolve:
            finding_open_or_touch(kind="chain_broken", run=run, fact_key="line-3", evidence={"line": 3})
            return
        for finding in Finding.objects.filter(run=run, blocks_run=True, state__in=UNRESOLVED):
            finding_resolve(finding=finding, actor=self.operator, reason="the records were checked")

    # --- what every surface says -----------------------------------------------------------------------

    @invariant()
    def every_surface_tells_the_same_state(self) -> None:
        run = self.run
        stored = {e.turn_id: state_of(e) for e in TurnEffective.objects.filter(run=run)}
        turns = list(Turn.objects.filter(run=run).select_related("run"))
        api_list = {
            row["turn"]: row["state"]
            for row in self.api.get(f"/api/v1/runs/{self.run_id}/turns", {"page_size": 100}).json()["results"]
        }
        held_queue = {t.pk for t in blocked_queue(limit=10_000, scope=EVERY_RUN) if t.run_id == run.pk}
        for turn in turns:
            mine = stored.get(turn.pk)
            assert mine is not None, turn.turn_id  # every turn of an assessed run has a state
            gate = turn_decision(turn=turn)  # the gate's own answer (refreshes nothing: the prefix is assessed)
            value = gate.value
            assert value is not None
            said = (str(value.state), value.gate, value.decision, value.reason, value.resume_from, value.actor_name)
            kept = (str(mine.state), mine.gate, mine.decision, mine.reason, mine.resume_from, mine.actor_name)
            assert said == kept, turn.turn_id
            detail = self.api.get(f"/api/v1/runs/{self.run_id}/turns/{turn.turn_id}").json()["state"]
            assert (detail["state"], detail["gate"], detail["reason"]) == (kept[0], kept[1], kept[3])
            assert (api_list[turn.turn_id]["state"], api_list[turn.turn_id]["gate"]) == (kept[0], kept[1])
            page = turn_page(turn_with_timeline(turn=turn))
            assert page.state is not None and str(page.state.state) == kept[0]
            assert page.held == (kept[1] == "hold")
            for wanted in (kept[0], *(g for g, members in STATE_GROUPS.items() if kept[0] in members)):
                listed = turns_matching(filters={"run": self.run_id, "state": wanted}, scope=EVERY_RUN)
                assert listed.filter(pk=turn.pk).exists(), wanted  # the turns list's filter finds it
            assert (turn.pk in held_queue) == (kept[1] == "hold")
            # Unknown never becomes "probably fine".
            if Intent.objects.filter(turn=turn, live=True, resolution="indeterminate", effect_class="unsafe").exists():
                assert gate.gate != "proceed", turn.turn_id
        counts = {**Counter(str(v.state) for v in stored.values()), "unassessed": len(turns) - len(stored)}
        assert state_counts(scope=EVERY_RUN, runs=[run.pk]) == counts  # the overview's tiles and chart count with it
        present = {k: n for k, n in counts.items() if n}
        assert self.api.get(f"/api/v1/runs/{self.run_id}").json()["states"] == present  # the API's run
        decorate_runs([run])
        assert run.state_counts == present  # the runs list

    @invariant()
    def the_run_status_is_the_rule_over_its_states(self) -> None:
        """The status the writer stored is the rule's over the states now, and the API and the runs list's
        filter say the same (docs/state.md, "A run's status")."""
        run = Run.objects.get(pk=self.run.pk)
        assert run.status_shown == run_status_decide(run=run)
        assert self.api.get(f"/api/v1/runs/{self.run_id}").json()["status"] == run.status_shown
        assert Run.objects.filter(run_status_q(run.status_shown), pk=run.pk).exists()

    @invariant()
    def findings_follow_the_state(self) -> None:
        run = self.run
        audit_unclaimed_blocked_turns(older_than=timedelta(0), limit=10_000)
        open_for = set(
            Finding.objects.filter(run=run, kind="blocked_turn_unclaimed", state__in=UNRESOLVED).values_list(
                "turn_id", "fact_key"
            )
        )
        for effective in TurnEffective.objects.filter(run=run, turn__isnull=False):
            turn_level = (effective.turn_id, effective.reason or "blocked") in open_for
            run_level = (None, effective.reason or "blocked") in open_for
            if effective.state in WAITING:
                assert turn_level or run_level, (effective.turn_id, effective.state)
            else:
                assert not turn_level, (effective.turn_id, effective.state)


OneTruth.TestCase.settings = settings(
    max_examples=10,
    stateful_step_count=8,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def test_one_truth(db, django_capture_on_commit_callbacks):
    # The machine's examples run in this test's transaction; nothing is committed.
    from hypothesis.stateful import run_state_machine_as_test

    run_state_machine_as_test(OneTruth, settings=OneTruth.TestCase.settings)
