"""The pictures and an imported run's words in a real Chromium, at a laptop's width (1440 px) and a phone's
(375 px): the run timeline and the source's ids (opened) on an imported run's pages, the held age on the
overview and a repair's preview, each drawn and none wider than the screen."""

from __future__ import annotations

import os

import pytest

from tests.browser.conftest import login, make_user, sized_page

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _imported_turn(monkeypatch) -> tuple[int, int]:
    """A Temporal history imported and assessed, as the worker would; (its run's pk, its turn's pk)."""
    from django.core.files.uploadedfile import SimpleUploadedFile

    from journals.models import Turn
    from recovery.imports.services import history_upload_receive
    from recovery.tasks import assess_run, convert_history
    from tests.imports.charge_history import RUN, history_bytes

    converts: list[str] = []
    assessments: list[str] = []
    monkeypatch.setattr(convert_history, "apply_async", lambda args=None, **_: converts.append(args[0]))
    monkeypatch.setattr(assess_run, "apply_async", lambda args=None, **_: assessments.append(args[0]))
    uploader = make_user("ulla", "operator")
    upload, _ = history_upload_receive(
        file=SimpleUploadedFile("charge-order.json", history_bytes()), source="temporal", actor=uploader
    )
    assert convert_history(str(upload.pk)) == "imported"
    for run in dict.fromkeys(assessments):
        assess_run(run)
    turn = Turn.objects.get(run__run_id=RUN, turn_id="workflow")
    return turn.run_id, turn.pk


def _fits(page, what: str) -> None:
    scroll, inner = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert scroll <= inner, f"{what}: {scroll} px wide on a {inner} px screen"


@pytest.mark.parametrize("width", [1440, 375])
def test_the_pictures_and_an_imported_run_s_words_fit_the_screen(live_server, chromium, monkeypatch, shot, width):
    from tests.console.test_pictures import broken_run

    run_pk, turn_pk = _imported_turn(monkeypatch)
    broken = broken_run()
    make_user("ada", "admin")
    with sized_page(chromium, width) as page:
        base = live_server.url
        login(page, base, "ada")
        assert page.locator("svg.heldage[role=img]").count() == 1
        _fits(page, "overview")

        page.goto(f"{base}/runs/{run_pk}/")
        assert "Temporal history" in page.locator("#source-words").inner_text()
        page.locator("#source-ids summary").click()
        assert "4d6f0c2a" in page.locator("#source-ids").inner_text()  # the run id, once opened
        assert page.locator("#run-timeline svg.runtl[role=img] rect.tl-bar").count() == 1
        _fits(page, "an imported run's page")
        shot(page, f"imported-run-{width}")

        page.goto(f"{base}/turns/{turn_pk}/")
        assert page.locator("#turn-name").inner_text() == "ChargeOrder"
        page.locator("#source-ids summary").click()
        _fits(page, "an imported turn's page")

        page.goto(f"{base}/runs/{broken.pk}/repair/")
        page.get_by_label("accept prefix").check()
        page.get_by_label("Accept the records through seq").fill(str(broken.last_seq - 2))
        page.get_by_label("Reason").fill("cut at the break")
        page.get_by_role("button", name="Preview").click()
        assert page.locator("#repair-preview svg.repairpic[role=img] rect.aside").count() == 1
        _fits(page, "a repair's preview")
        shot(page, f"repair-preview-{width}")
