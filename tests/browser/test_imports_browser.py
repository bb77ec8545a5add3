"""The import of a Temporal history through the console, in a real Chromium: upload, the page follows the
background conversion by itself, then the run's turns and where each intent's class came from."""

from __future__ import annotations

import os

import pytest

from tests.browser.conftest import login, make_user

# Playwright's sync API runs an event loop in this thread; the ORM calls between its steps are synchronous.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_upload_a_temporal_history_wait_for_the_import_and_open_the_runs_turns(
    live_server, page, shot, tmp_path, monkeypatch
):
    from recovery.imports.models import HistoryImport
    from recovery.tasks import assess_run, convert_history
    from tests.imports.charge_history import RUN, SECRET, history_bytes

    converts: list[str] = []
    assessments: list[str] = []
    monkeypatch.setattr(convert_history, "apply_async", lambda args=None, **_: converts.append(args[0]))
    monkeypatch.setattr(assess_run, "apply_async", lambda args=None, **_: assessments.append(args[0]))
    path = tmp_path / "charge-order.json"
    path.write_bytes(history_bytes(close=False))
    make_user("olivia", "operator")
    login(page, live_server.url, "olivia")
    page.get_by_role("link", name="Imports").click()
    page.get_by_label("History file").set_input_files(str(path))
    page.get_by_label("Runtime").select_option("temporal")
    page.get_by_role("button", name="Upload and import").click()
    page.locator("#import-status[data-state='received']").wait_for()
    facts = page.locator("#import-source").inner_text()
    upload = HistoryImport.objects.select_related("source").get()
    assert "charge-order.json" in facts and upload.source.sha256 in facts and "14" in facts
    assert "WorkflowTaskStarted" in facts  # what was skipped
    shot(page, "import-received")

    assert converts == [str(upload.pk)]
    assert convert_history(converts[0]) == "imported"  # the worker's turn; the open page is not reloaded
    page.locator("#import-status[data-state='imported']").wait_for()
    assert "Imported" in page.locator("#verdict").inner_text()
    for run in dict.fromkeys(assessments):
        assess_run(run)
    shot(page, "import-imported")

    page.locator("#import-runs a.imported-run").click()
    page.wait_for_url("**/turns/?run=*")
    page.get_by_role("link", name="workflow").first.click()
    sources = page.locator("#intent-class-sources")
    text = sources.inner_text()
    assert "unsafe (not in the map)" in text
    assert "activity:1" in text and "activity:2" in text
    assert SECRET not in page.content()
    assert RUN in page.content()
    shot(page, "import-turn-class-sources")
    # The one-click proposal opens the map editor pre-filled (no map yet: the new-map form).
    sources.get_by_role("button", name="Propose an entry").first.click()
    page.wait_for_url("**/effect-maps/?add=*")
    assert "ChargeCard = unsafe" in page.locator("#new-map-form textarea[name=entries]").input_value()
