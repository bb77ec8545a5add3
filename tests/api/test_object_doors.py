"""One door to every object (journals/doors.py, recovery/*/doors.py): each door refuses an outsider before it
reads anything else, as a missing object (404, never a 403 that would confirm it), on the console and the API
alike; and no console or API view looks a scoped object up by itself."""

from __future__ import annotations

import ast
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.http import Http404
from django.test import Client
from django.test.utils import CaptureQueriesContext

from journals.doors import run_for_read, run_for_write, turn_for_read, turn_for_write
from kernel.errors import ServiceError
from recovery.findings.doors import finding_for_read, finding_for_write
from recovery.findings.services import finding_open_or_touch
from recovery.imports.doors import history_import_for_read, history_import_for_write, imported_run_for_read
from recovery.imports.models import ImportedRun
from recovery.imports.services import history_upload_receive
from recovery.packages.doors import package_upload_for_read, package_upload_for_write
from recovery.packages.models import PackageUpload
from teams.services import team_ensure, team_members_add
from tests.console.scenarios import payments_run
from tests.imports.charge_history import history_bytes
from tests.personas import make_runtime

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]
BLUE_RUN = "blue-door"


@pytest.fixture
def blue(blue_operator: Any, eager_tasks: Any, django_capture_on_commit_callbacks: Any) -> dict[str, Any]:
    """The blue team's run, turn, finding, package upload and history import (with the run it wrote)."""
    scenario = payments_run(BLUE_RUN)
    turn = scenario.turns["t-resume"]
    finding, _ = finding_open_or_touch(kind="blocked_turn_unclaimed", run=scenario.run, turn=turn)
    upload = PackageUpload.objects.create(
        sha256="1" * 64, size=10, uploader=blue_operator, uploader_name=blue_operator.username, run_ident=BLUE_RUN
    )
    history = SimpleUploadedFile("blue.json", history_bytes(run_id="blue-hist"), content_type="application/json")
    with django_capture_on_commit_callbacks(execute=True):
        imported, _ = history_upload_receive(file=history, source="temporal", run="blue-imported", actor=blue_operator)
    return {
        "run": scenario.run,
        "turn": turn,
        "finding": finding,
        "upload": upload,
        "import": imported,
        "imported_run": ImportedRun.objects.get(history_import=imported),
    }


def _doors(blue: dict[str, Any]) -> dict[str, Callable[[Any], object]]:
    """Each door, called for the blue team's object by whoever ``actor`` is."""
    run, turn = blue["run"], blue["turn"]
    return {
        "run_for_read(pk)": lambda a: run_for_read(actor=a, pk=run.pk),
        "run_for_write(pk)": lambda a: run_for_write(actor=a, pk=run.pk),
        "turn_for_read(pk)": lambda a: turn_for_read(actor=a, pk=turn.pk),
        "turn_for_read(pk, timeline)": lambda a: turn_for_read(actor=a, pk=turn.pk, timeline=True),
        "turn_for_write(pk)": lambda a: turn_for_write(actor=a, pk=turn.pk),
        "finding_for_read": lambda a: finding_for_read(actor=a, pk=blue["finding"].pk),
        "finding_for_write": lambda a: finding_for_write(actor=a, pk=blue["finding"].pk),
        "package_upload_for_read": lambda a: package_upload_for_read(actor=a, pk=blue["upload"].pk),
        "package_upload_for_write": lambda a: package_upload_for_write(actor=a, pk=blue["upload"].pk),
        "history_import_for_read": lambda a: history_import_for_read(actor=a, pk=blue["import"].pk),
        "history_import_for_write": lambda a: history_import_for_write(actor=a, pk=blue["import"].pk),
        "imported_run_for_read": lambda a: imported_run_for_read(actor=a, pk=blue["imported_run"].pk),
    }


def _by_id(blue: dict[str, Any]) -> dict[str, Callable[[Any], object]]:
    """The doors the API opens by the run's id (and the turn's)."""
    run_id, turn_id = blue["run"].run_id, blue["turn"].turn_id
    return {
        "run_for_read(run_id)": lambda a: run_for_read(actor=a, run_id=run_id),
        "run_for_write(run_id)": lambda a: run_for_write(actor=a, run_id=run_id),
        "turn_for_read(run_id)": lambda a: turn_for_read(actor=a, run_id=run_id, turn_id=turn_id),
        "turn_for_write(run_id)": lambda a: turn_for_write(actor=a, run_id=run_id, turn_id=turn_id),
    }


def _refusal(door: Callable[[Any], object], actor: Any) -> int:
    try:
        door(actor)
    except Http404:
        return 404
    except ServiceError as err:
        return err.status
    return 200


def test_every_door_opens_to_its_team_and_is_a_missing_object_to_an_outsider(
    blue, red_operator, blue_operator, teamless_operator
):
    doors = {**_doors(blue), **_by_id(blue)}
    for name, door in doors.items():
        assert _refusal(door, blue_operator) == 200, name
        for outsider in (red_operator, teamless_operator):
            assert _refusal(door, outsider) == 404, (name, outsider.username)


def test_a_door_answers_another_teams_object_as_it_answers_a_missing_one(blue, red_operator):
    missing = {
        "run": lambda a: run_for_read(actor=a, pk=blue["run"].pk + 10_000),
        "turn": lambda a: turn_for_read(actor=a, pk=blue["turn"].pk + 10_000),
        "finding": lambda a: finding_for_read(actor=a, pk=blue["finding"].pk + 10_000),
        "upload": lambda a: package_upload_for_read(actor=a, pk=uuid.uuid4()),
        "import": lambda a: history_import_for_read(actor=a, pk=uuid.uuid4()),
    }
    words = {}
    for name, door in missing.items():
        with pytest.raises(Http404) as err:
            door(red_operator)
        words[name] = str(err.value)
    doors = _doors(blue)
    for name, key in (
        ("run_for_read(pk)", "run"),
        ("turn_for_read(pk)", "turn"),
        ("finding_for_read", "finding"),
        ("package_upload_for_read", "upload"),
        ("history_import_for_read", "import"),
    ):
        with pytest.raises(Http404) as err:
            doors[name](red_operator)
        assert str(err.value) == words[key], name


def test_a_runtime_token_outside_its_prefix_is_refused_whether_or_not_the_run_exists(blue):
    red = make_runtime("red-runtime", run_prefix="red-").token
    for name, door in _doors(blue).items():
        assert _refusal(door, red) == 404, name  # by pk: the token's scope filters the read
    for name, door in _by_id(blue).items():
        assert _refusal(door, red) == 403, name  # by id: it knows its own prefix (run_forbidden)
    assert _refusal(lambda a: run_for_read(actor=a, run_id="blue-nosuch"), red) == 403


def test_a_write_door_asks_for_the_operator_role(blue):
    blue_viewer = User.objects.create_user(username="bo-blue-viewer", password="correct-horse-battery")
    blue_viewer.groups.add(Group.objects.get(name="viewer"))
    team_members_add(team=team_ensure(name="blue", prefixes=["blue-"]), users=[blue_viewer])
    doors = _doors(blue)
    for name in ("run", "turn", "finding", "package_upload", "history_import"):
        read = next(door for key, door in doors.items() if key.startswith(f"{name}_for_read"))
        write = next(door for key, door in doors.items() if key.startswith(f"{name}_for_write"))
        assert _refusal(read, blue_viewer) == 200, name
        assert _refusal(write, blue_viewer) == 403, name


def test_the_console_and_the_api_answer_an_outsider_404_through_the_doors(blue, red_operator, blue_operator):
    run, turn = blue["run"], blue["turn"]
    pages = [
        ("get", f"/runs/{run.pk}/"),
        ("get", f"/turns/{turn.pk}/"),
        ("post", f"/turns/{turn.pk}/approve/"),
        ("post", f"/findings/{blue['finding'].pk}/resolve/"),
        ("get", f"/packages/{blue['upload'].pk}/"),
        ("get", f"/imports/{blue['import'].pk}/"),
    ]
    api = [
        ("get", f"/api/v1/runs/{run.run_id}"),
        ("get", f"/api/v1/runs/{run.run_id}/turns/{turn.turn_id}/intents"),
        ("post", f"/api/v1/runs/{run.run_id}/turns/{turn.turn_id}/block"),
        ("get", f"/api/v1/findings/{blue['finding'].pk}"),
        ("get", f"/api/v1/packages/{blue['upload'].pk}"),
        ("get", f"/api/v1/imports/{blue['import'].pk}"),
    ]
    outsider, member = Client(), Client()
    outsider.force_login(red_operator)
    member.force_login(blue_operator)
    proposal = ("post", "/effect-maps/propose/", {"imported_run": blue["imported_run"].pk, "name": "X"})
    answer = outsider.post(proposal[1], proposal[2])
    assert answer.status_code == 404
    assert member.post(proposal[1], proposal[2]).status_code == 302
    for method, url in pages + api:
        answer = getattr(outsider, method)(url)
        assert answer.status_code == 404, (url, answer.status_code)
        if url.startswith("/api/"):
            assert answer.json()["error"] == "not_found", url
    for method, url in pages + api:
        if method == "get":
            assert member.get(url).status_code == 200, url
    # The turn page is not built for the outsider: it answers before its page's reads.
    with CaptureQueriesContext(connection) as seen:
        assert outsider.get(f"/turns/{turn.pk}/").status_code == 404
    assert not any("recovery_turnassessment" in q["sql"] for q in seen.captured_queries)


# The models whose rows belong to a run, and so to a team: only their doors read one of them by its key.
SCOPED = {"Run", "Turn", "Finding", "PackageUpload", "HistoryImport", "ImportedRun"}
VIEW_MODULES = [
    *sorted((ROOT / "console").glob("*.py")),
    ROOT / "journals" / "views.py",
    ROOT / "recovery" / "views.py",
    ROOT / "recovery" / "packages" / "views.py",
    ROOT / "recovery" / "imports" / "views.py",
    ROOT / "recovery" / "repair" / "views.py",
    ROOT / "audits" / "views.py",
]
GONE = {"_visible_turns", "_import", "_finding", "_visible", "package_upload_visible"}


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | {
        n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)
    }


def test_no_view_module_reads_a_scoped_object_by_itself():
    for path in VIEW_MODULES:
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "get_object_or_404":
                assert not (_names(node.args[0]) & SCOPED), f"{path.name}:{node.lineno} reads a scoped object"
            if isinstance(node, ast.FunctionDef):
                assert node.name not in GONE, f"{path.name}: {node.name} is a door of its own"
            if isinstance(node, ast.ImportFrom):
                assert not ({a.name for a in node.names} & GONE), f"{path.name}:{node.lineno}"


def test_the_role_context_is_imported_at_the_top_from_one_module():
    for path in sorted((ROOT / "console").glob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef):
                for inner in ast.walk(node):
                    if isinstance(inner, ast.ImportFrom):
                        assert inner.module != "views", f"{path.name}:{inner.lineno} imports the pages lazily"
            if isinstance(node, ast.FunctionDef) and path.name != "context.py":
                assert node.name not in {"_role_context", "_role", "_review_context", "role_context"}, path.name
