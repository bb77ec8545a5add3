"""Teams: another team's runs, turns, records, assessments, recoveries, findings and packages answer 404 (the
answer of a missing one, never a 403 that would confirm them), in pages and API alike, and none of them
appears in a list, a count, a search or an export (journals.access.run_scope, docs/access.md).

Every route of the URL resolver is walked: a route that takes a parameter must be named in ``OWNED`` (built
from the blue team's objects) or ``NOT_RUN_DATA`` (with why), so that a new page cannot slip out unchecked.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse

from console.selectors import turn_counts
from journals.access import NO_RUN, run_scope
from journals.models import Turn
from recovery.findings.models import Finding
from recovery.findings.services import finding_open_or_touch
from recovery.models import Assessment, GateDecision, OperatorEvidence, TurnClaim
from recovery.packages.models import PackageUpload
from recovery.recovery_audits.models import RecoveryAudit
from recovery.recovery_audits.services import recovery_audit_open
from recovery.services import turn_approve, turn_claim
from tests.console.conftest import page_client
from tests.console.scenarios import payments_run
from trail.models import OperatorAction

pytestmark = pytest.mark.django_db

BLUE_RUN, RED_RUN = "blue-pay", "red-pay"

# A team's channels and rules are its configuration, named by the team, not a run's data.
NOTICES_ARE_TEAMS = "tests/notifications/test_pages.py: another team's channels and rules answer 404"
# Routes with parameters that name no run's data, and why they are outside this walk.
NOT_RUN_DATA = {
    "password_reset_confirm": "a password reset link: no run data",
    "api-webhook": "a webhook's configuration: admin role only (403 to anyone else, whatever the id)",
    "api-webhook-delivery-resend": "tests/ops/test_webhooks.py: deliveries of another team's runs answer 404",
    "api-schedule": "a beat schedule: admin role only, no run's data",
    "api-token-revoke": "a runtime token: admin role only, no run's data",
    "console:effect_map": "an effect map: shared configuration of the imports, no run's data",
    "console:effect_map_save": "an effect map: shared configuration of the imports, no run's data",
    "console:effect_map_attach": "an effect map: shared configuration of the imports, no run's data",
    "api-run-import": "the run is found by get_run, as api-run is (walked); the blue run has no import, so it "
    "answers 404 to its own team too",
    "api-import": "test_an_import_of_another_teams_run_is_404 (an import is found by its uuid, not by a run)",
    "console:import": "test_an_import_of_another_teams_run_is_404",
    "console:import_status": "test_an_import_of_another_teams_run_is_404",
    "console:import_requeue": "test_an_import_of_another_teams_run_is_404",
    "console:saved_view_delete": "a person's own saved filter, no run's data: another person's answers 404 "
    "(tests/console/test_saved_views.py)",
    "api-notification-channel": NOTICES_ARE_TEAMS,
    "api-notification-channel-test": NOTICES_ARE_TEAMS,
    "api-notification-rule": NOTICES_ARE_TEAMS,
    "notices:team": NOTICES_ARE_TEAMS,
    "notices:channel_new": NOTICES_ARE_TEAMS,
    "notices:channel_edit": NOTICES_ARE_TEAMS,
    "notices:channel_delete": NOTICES_ARE_TEAMS,
    "notices:channel_test": NOTICES_ARE_TEAMS,
    "notices:rule_new": NOTICES_ARE_TEAMS,
    "notices:rule_edit": NOTICES_ARE_TEAMS,
    "notices:rule_delete": NOTICES_ARE_TEAMS,
}


def _routes(resolver: URLResolver | None = None, namespace: str = "") -> list[tuple[str, list[str]]]:
    found = []
    for entry in (resolver or get_resolver()).url_patterns:
        if isinstance(entry, URLResolver):
            inner = f"{namespace}:{entry.namespace}".strip(":") if entry.namespace else namespace
            if inner != "admin":  # the Django admin: the admin role only, who sees every run
                found += _routes(entry, inner)
        elif isinstance(entry, URLPattern) and entry.name:
            name = f"{namespace}:{entry.name}".strip(":")
            found.append((name, sorted(getattr(entry.pattern, "converters", {}))))
    return found


@pytest.fixture
def blue(db, blue_operator) -> dict[str, Any]:
    """The blue team's run with something of every kind: assessments, a claim and a recovery audit, a finding,
    an operator decision, a package upload."""
    scenario = payments_run(BLUE_RUN)
    resume, skip = scenario.turns["t-resume"], scenario.turns["t-skip"]
    claim = turn_claim(turn=resume, worker_id="blue-worker")
    audit = recovery_audit_open(turn=resume, fencing_token=claim.fencing_token)
    finding, _ = finding_open_or_touch(kind="blocked_turn_unclaimed", run=scenario.run, turn=skip)
    turn_approve(turn=skip, actor=blue_operator, reason="checked by the blue team")
    upload = PackageUpload.objects.create(
        sha256="0" * 64, size=10, uploader=blue_operator, uploader_name=blue_operator.username, run_ident=BLUE_RUN
    )
    return {
        "run": scenario.run,
        "turn": resume,
        "finding": finding,
        "audit": audit,
        "upload": upload,
        "assessment": Assessment.objects.filter(run=scenario.run).latest("id"),
    }


@pytest.fixture
def red(db) -> Any:
    return payments_run(RED_RUN)


def _owned(blue: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each route's parameters naming the blue team's objects."""
    run, turn = blue["run"], blue["turn"]
    of_run, of_turn = {"run_id": run.run_id}, {"run_id": run.run_id, "turn_id": turn.turn_id}
    owned: dict[str, dict[str, Any]] = {
        "console:run": {"pk": run.pk},
        "console:run_export": {"pk": run.pk},
        "console:turn": {"pk": turn.pk},
        "console:approve": {"pk": turn.pk},
        "console:block": {"pk": turn.pk},
        "console:assign": {"pk": turn.pk},
        "console:unassign": {"pk": turn.pk},
        "console:finding_acknowledge": {"pk": blue["finding"].pk},
        "console:finding_resolve": {"pk": blue["finding"].pk},
        "console:package": {"pk": blue["upload"].pk},
        "console:package_status": {"pk": blue["upload"].pk},
        "console:package_requeue": {"pk": blue["upload"].pk},
        "console:records": {"pk": run.pk},
        "console:record": {"pk": run.pk, "branch": 0, "lsn": 0},
        "console:run_repair": {"pk": run.pk},
        "api-finding": {"finding_id": blue["finding"].pk},
        "api-finding-ack": {"finding_id": blue["finding"].pk},
        "api-finding-resolve": {"finding_id": blue["finding"].pk},
        "api-package": {"upload_id": blue["upload"].pk},
        "api-assessment": {**of_run, "assessment_id": blue["assessment"].pk},
    }
    for name in (
        "api-run", "api-records", "api-branches", "api-run-turns", "api-assessments", "api-run-export",
        "api-repairs", "api-repair-preview",
    ):  # fmt: skip
        owned[name] = of_run
    for name in (
        "api-turn", "api-turn-intents", "api-turn-records", "api-turn-decision", "api-turn-claim",
        "api-turn-release", "api-turn-approve", "api-turn-block", "api-turn-evidence", "api-turn-gate-decisions",
        "api-turn-recovery", "api-turn-intent-classes", "api-turn-annotations", "api-turn-assign", "api-turn-unassign",
    ):  # fmt: skip
        owned[name] = of_turn
    for name in ("api-recovery-audit", "api-recovery-actions", "api-recovery-close"):
        owned[name] = {**of_turn, "audit_id": blue["audit"].pk}
    return owned


def _call(client: Client, method: str, url: str) -> int:
    if method == "get":
        return client.get(url).status_code
    # An empty body: whatever the view would refuse, the run's lookup comes first.
    return client.post(url, data=json.dumps({}), content_type="application/json").status_code


def _snapshot() -> tuple[int, ...]:
    models = (GateDecision, OperatorAction, OperatorEvidence, TurnClaim, RecoveryAudit, Assessment)
    states = tuple(Finding.objects.order_by("pk").values_list("state", flat=True))
    return (*(m.objects.count() for m in models), hash(states), PackageUpload.objects.filter(sweeps__gt=0).count())


def test_every_route_with_a_parameter_is_walked(blue):
    owned = _owned(blue)
    with_parameters = {name for name, params in _routes() if params}
    assert with_parameters - set(owned) - set(NOT_RUN_DATA) == set(), "a new route: add it to OWNED or NOT_RUN_DATA"
    assert set(owned) - with_parameters == set(), "a route named here no longer exists"


def test_another_teams_objects_are_404_in_pages_and_api(blue, red, red_operator, blue_operator, no_broker):
    owned = _owned(blue)
    outsider, member = Client(), Client()
    outsider.force_login(red_operator)
    member.force_login(blue_operator)
    before = _snapshot()
    for name, kwargs in owned.items():
        url = reverse(name, kwargs=kwargs)
        answers = {method: _call(outsider, method, url) for method in ("get", "post")}
        # 405 (a method the route never takes) says nothing about the run; anything else is a 404.
        assert set(answers.values()) <= {404, 405} and 404 in answers.values(), (name, answers)
        # The same read of a missing run of the outsider's own prefix: the same answer (a write differs, as
        # it may well: the outsider may ingest into a run of their own prefix).
        if "run_id" in kwargs:
            missing = reverse(name, kwargs={**kwargs, "run_id": "red-missing"})
            assert _call(outsider, "get", missing) == answers["get"], name
    assert _snapshot() == before, "an outsider's request changed something"
    # The owning team reaches each of them (the 404 above is the team's rule, not a broken URL).
    for name, kwargs in owned.items():
        url = reverse(name, kwargs=kwargs)
        method = "get" if _call(outsider, "get", url) == 404 else "post"
        assert _call(member, method, url) != 404, name


def test_another_teams_runs_are_in_no_list_count_search_or_export(blue, red, red_operator, red_viewer):
    # Searches of the pages by part of the id (a page shows the words searched for), of the API by the id.
    searches = [
        "/turns/?q=blue", "/runs/?q=blue", "/turns/?q=pay", "/runs/?q=pay", "/findings/?state=all",
        f"/findings/?state=all&id={blue['finding'].pk}", "/turns/?decision=blocked", "/queue/blocked/",
        "/api/v1/turns?run=blue-pay", "/api/v1/audits?run=blue-pay", "/api/v1/operator-actions?run=blue-pay",
    ]  # fmt: skip
    unparameterised = [reverse(name) for name, params in _routes() if not params and name not in ("logout",)]
    for user in (red_operator, red_viewer):
        client = Client()
        client.force_login(user)
        for url in unparameterised + searches:
            response = client.get(url)
            body = b"".join(response) if response.streaming else response.content
            assert BLUE_RUN.encode() not in body, url
            assert str(blue["upload"].pk).encode() not in body, url
        # The lists are not merely empty: the red team's own run is in them.
        assert RED_RUN.encode() in client.get("/runs/").content
        assert RED_RUN.encode() in client.get("/api/v1/turns").content
        assert [r["run_id"] for r in client.get("/api/v1/runs").json()["results"]] == [RED_RUN]
        # Counts: the overview's tiles count the red team's turns only.
        scope = run_scope(user=user)
        assert sum(turn_counts(scope=scope).by_state.values()) == Turn.objects.filter(run=red.run).count()


def test_overview_tiles_count_only_the_teams_turns(blue, red, red_operator):
    client = Client()
    client.force_login(red_operator)
    page = client.get("/")
    assert page.status_code == 200
    red_total = Turn.objects.filter(run=red.run).count()
    assert page.context["ov"].turn_total == red_total < Turn.objects.count()


def test_a_person_in_no_team_sees_no_run(blue, red, teamless_client, teamless_operator):
    assert run_scope(user=teamless_operator) == NO_RUN
    assert teamless_client.get("/api/v1/runs").json()["results"] == []
    assert teamless_client.get("/api/v1/turns").json()["results"] == []
    assert teamless_client.get(f"/api/v1/runs/{RED_RUN}").status_code == 404
    page = teamless_client.get("/")
    assert page.status_code == 200 and page.context["ov"].turn_total == 0


def test_admins_and_all_runs_members_see_every_team(blue, red, admin_client_api, operator_client):
    for client in (admin_client_api, operator_client):
        runs = {r["run_id"] for r in client.get("/api/v1/runs").json()["results"]}
        assert runs == {BLUE_RUN, RED_RUN}
        assert client.get(f"/api/v1/runs/{BLUE_RUN}").status_code == 200


def test_several_teams_add_up(blue, red, red_operator):
    from teams.services import team_ensure, team_members_add

    team_members_add(team=team_ensure(name="blue", prefixes=["blue-"]), users=[red_operator])
    client = Client()
    client.force_login(red_operator)
    assert {r["run_id"] for r in client.get("/api/v1/runs").json()["results"]} == {BLUE_RUN, RED_RUN}


def test_a_token_outside_its_prefix_is_still_refused_403(blue):
    """A runtime token knows its own prefix: it is told it may not (403), as before teams existed."""
    from tests.personas import make_runtime

    red_token = make_runtime("red-runtime", run_prefix="red-")
    assert red_token.client.get(f"/api/v1/runs/{BLUE_RUN}").status_code == 403
    assert red_token.client.get(f"/api/v1/runs/{uuid.uuid4()}").status_code == 403


def test_an_import_of_another_teams_run_is_404(red_operator, operator):
    """An import is found by its uuid: one that wrote another team's run answers as a missing one, in the
    console and the API, and is in no list."""
    from django.core.files.uploadedfile import SimpleUploadedFile

    from recovery.imports.services import history_upload_receive
    from tests.imports.charge_history import history_bytes

    upload, _ = history_upload_receive(
        file=SimpleUploadedFile("h.json", history_bytes(run_id="blue-imported"), content_type="application/json"),
        source="temporal", run="blue-imported", actor=operator,
    )  # fmt: skip
    red_pages = page_client(red_operator)
    for url in (f"/imports/{upload.pk}/", f"/imports/{upload.pk}/status/"):
        assert red_pages.get(url).status_code == 404, url
    assert red_pages.post(f"/imports/{upload.pk}/requeue/").status_code == 404
    assert str(upload.pk) not in red_pages.get("/imports/").content.decode()
    from rest_framework.test import APIClient

    api = APIClient()
    api.force_login(red_operator)
    assert api.get(f"/api/v1/imports/{upload.pk}").status_code == 404
    seen = page_client(operator)  # the all-runs team (docs/access.md) sees it
    assert seen.get(f"/imports/{upload.pk}/").status_code == 200
