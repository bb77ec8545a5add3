"""History imports and shared effect maps keep to the teams (docs/access.md): another team's import, run or
use of a map answers as a missing one does, and nothing is created under another team's prefix. The trail's
export needs the operator role on the API as in the console."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse
from rest_framework.test import APIClient

from journals.models import Run
from recovery.imports.models import HistoryImport, ImportedRun
from recovery.imports.services import effect_map_create, effect_map_update, history_upload_receive
from tests.console.conftest import page_client
from tests.imports.charge_history import history_bytes
from tests.personas import make_runtime
from trail.models import OperatorAction

pytestmark = pytest.mark.django_db

BLUE_IMPORTED = "blue-imported"


def _file(run_id: str = "blue-hist") -> SimpleUploadedFile:
    return SimpleUploadedFile("blue.json", history_bytes(run_id=run_id), content_type="application/json")


@pytest.fixture
def blue_import(blue_operator: Any, eager_tasks: Any, django_capture_on_commit_callbacks: Any) -> HistoryImport:
    effect_map_create(name="shared", entries={"SendReceipt": "idempotent"}, actor=blue_operator, reason="r")
    with django_capture_on_commit_callbacks(execute=True):
        upload, _ = history_upload_receive(
            file=_file(), source="temporal", run=BLUE_IMPORTED, actor=blue_operator, effect_map="shared"
        )
    upload.refresh_from_db()
    assert upload.state == "imported"
    return upload


def _api(user: Any) -> APIClient:
    client = APIClient()
    client.force_login(user)
    return client


def _rows() -> tuple[Any, ...]:
    return (
        list(HistoryImport.objects.order_by("pk").values_list("pk", "state", "generation")),
        list(ImportedRun.objects.order_by("pk").values_list("pk", "run_ident")),
        list(Run.objects.order_by("pk").values_list("run_id", flat=True)),
    )


def _upload(client: APIClient, run: str | None, data: bytes | None = None) -> Any:
    file = _file() if data is None else SimpleUploadedFile("x.json", data)
    body: dict[str, Any] = {"file": file, "source": "temporal"}
    if run is not None:
        body["run"] = run
    return client.post("/api/v1/imports", body, format="multipart")


def test_an_import_into_another_teams_run_answers_as_a_missing_run(blue_import, red_operator):
    red = _api(red_operator)
    before = _rows()
    existing = _upload(red, BLUE_IMPORTED)  # same bytes, another team's run
    other_bytes = _upload(red, BLUE_IMPORTED, history_bytes(run_id="something-else"))
    nonexistent = _upload(red, "blue-nosuch")
    missing_read = red.get("/api/v1/runs/blue-nosuch")
    for answer in (existing, other_bytes, nonexistent):
        assert answer.status_code == 404, answer.content
        assert answer.json() == missing_read.json()
    assert _rows() == before, "nothing is created under another team's prefix"
    assert not Run.objects.filter(run_id="blue-nosuch").exists()


def test_a_history_that_names_another_teams_run_itself_is_refused(blue_import, red_operator):
    """No ``run``: the history's own run id (``temporal-<id>``) is outside the red team's prefix."""
    red = _api(red_operator)
    before = _rows()
    answer = _upload(red, None)
    assert answer.status_code == 404 and answer.json() == red.get("/api/v1/runs/blue-nosuch").json()
    assert _rows() == before


def test_a_token_outside_its_prefix_is_refused_whether_the_run_exists_or_not(blue_import):
    red_token = make_runtime("red-rt", run_prefix="red-")
    before = _rows()
    existing = _upload(red_token.client, BLUE_IMPORTED)
    nonexistent = _upload(red_token.client, "blue-nosuch")
    assert existing.status_code == nonexistent.status_code == 403
    assert existing.json() == nonexistent.json()
    assert _rows() == before


def test_an_import_of_the_uploaders_own_run_still_works(blue_import, red_operator, no_broker):
    answer = _upload(_api(red_operator), "red-hist")
    assert answer.status_code == 202, answer.content
    assert HistoryImport.objects.get(pk=answer.json()["id"]).requested_run == "red-hist"


def test_the_same_bytes_again_hand_out_only_an_import_the_uploader_sees(blue_import, blue_operator, operator):
    same = _upload(_api(blue_operator), BLUE_IMPORTED)
    assert same.status_code == 200 and same.json()["id"] == str(blue_import.pk)
    assert _upload(_api(operator), BLUE_IMPORTED).json()["id"] == str(blue_import.pk)  # the all-runs team


def test_proposing_an_entry_from_another_teams_import_is_404(blue_import, red_operator, blue_operator):
    row = ImportedRun.objects.get(history_import=blue_import)
    red = page_client(red_operator)
    url = reverse("console:effect_map_propose")
    theirs = red.post(url, {"imported_run": row.pk, "name": "ChargeCard"})
    missing = red.post(url, {"imported_run": row.pk + 1000, "name": "ChargeCard"})
    assert theirs.status_code == missing.status_code == 404
    # The same page (less the request's own id, which every error page quotes).
    assert re.sub(rb"[0-9a-f]{32}", b"", theirs.content) == re.sub(rb"[0-9a-f]{32}", b"", missing.content)
    assert page_client(blue_operator).post(url, {"imported_run": row.pk, "name": "ChargeCard"}).status_code == 302


def test_a_shared_maps_page_lists_only_the_readers_uses(blue_import, red_operator, blue_operator):
    red_page = page_client(red_operator).get(reverse("console:effect_map", args=["shared"])).content.decode()
    assert str(blue_import.pk) not in red_page and "blue.json" not in red_page
    blue_page = page_client(blue_operator).get(reverse("console:effect_map", args=["shared"])).content.decode()
    assert str(blue_import.pk) in blue_page


def test_a_change_to_a_shared_map_reimports_only_what_the_changer_sees(
    blue_import, red_operator, blue_operator, eager_tasks, django_capture_on_commit_callbacks
):
    shared = blue_import.map_version.map
    with django_capture_on_commit_callbacks(execute=True):
        effect_map_update(effect_map=shared, entries={"ChargeCard": "idempotent"}, default="unsafe",
                          actor=red_operator, reason="the red team's change")  # fmt: skip
    assert not HistoryImport.objects.filter(supersedes=blue_import).exists(), "the blue import was not touched"
    shared.refresh_from_db()
    with django_capture_on_commit_callbacks(execute=True):
        effect_map_update(effect_map=shared, entries={"ChargeCard": "safe"}, default="unsafe",
                          actor=blue_operator, reason="the blue team's change")  # fmt: skip
    newer = HistoryImport.objects.get(supersedes=blue_import)
    assert newer.generation == 2 and newer.map_version.number == 3


def test_a_viewer_cannot_export_the_trail_through_any_door(viewer, operator):
    api, pages = _api(viewer), page_client(viewer)
    before = OperatorAction.objects.filter(kind="trail_export").count()
    for fmt in ("jsonl", "csv"):
        answer = api.get(f"/api/v1/operator-actions/export?output={fmt}")
        assert answer.status_code == 403, answer.status_code
        assert pages.get(f"/trail/export/?format={fmt}").status_code == 403
    assert OperatorAction.objects.filter(kind="trail_export").count() == before
    assert make_runtime("rt").client.get("/api/v1/operator-actions/export").status_code == 403
    answer = _api(operator).get("/api/v1/operator-actions/export?output=csv")
    assert answer.status_code == 200
    b"".join(answer.streaming_content)
    assert OperatorAction.objects.filter(kind="trail_export").count() == before + 1
