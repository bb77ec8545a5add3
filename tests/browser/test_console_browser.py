"""The console in a real browser: an operator reviews and decides, a viewer only reads."""

from __future__ import annotations

import os

import pytest

from tests.browser.conftest import login, make_user, sized_page
from tests.console.scenarios import SECRET, many_runs, payments_run

# Playwright's sync API runs an event loop in this thread; Django's ORM must still be usable from it.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_operator_filters_reads_the_reason_and_approves_with_evidence(live_server, page, shot):
    payments_run()
    make_user("olivia", "operator")
    base = live_server.url
    login(page, base, "olivia")

    page.get_by_role("link", name="Turns", exact=True).click()
    page.get_by_label("State", exact=True).select_option("waiting")
    page.get_by_role("button", name="Apply").click()
    page.wait_for_url("**/turns/?*state=waiting*")
    rows = page.locator("#turns-table tbody tr")
    assert rows.count() == 2  # t-charge and t-skip
    shot(page, "turns-filtered-blocked")

    page.get_by_role("link", name="t-charge", exact=True).click()
    reason = page.locator("#blocking-reason")
    assert "The engine blocks it: unknown whether an effect happened effect_indeterminate" in reason.inner_text()
    assert "a person must say whether it happened" in reason.inner_text()
    assert "intent_dispatched" in reason.inner_text()
    assert SECRET not in page.content()
    shot(page, "turn-blocked-indeterminate")

    form = page.locator("#approve-form")
    form.get_by_label("it did not happen").check()
    form.get_by_label("Reason for approving").fill("The bank shows no charge for this card today.")
    form.get_by_role("button", name="Approve").click()

    page.wait_for_selector(".messages")
    assert "Approved turn t-charge" in page.locator(".messages").inner_text()
    history = page.locator("#history")
    assert "approved the turn turn_approve" in history.inner_text()
    assert "The bank shows no charge" in history.inner_text()
    # The operator's evidence turned the effect into a replay: the engine resumes the turn, approved.
    assert "approved by olivia" in page.locator("h1 .badge").inner_text()
    assert "proceeds (resume" in page.locator("#gate-effect").inner_text()
    assert "Evidence: not happened" in page.locator("#intents-h + div").inner_text().replace("\n", " ")
    shot(page, "turn-approved-with-evidence")


def test_viewer_sees_no_buttons(live_server, page, shot):
    scenario = payments_run()
    make_user("victor", "viewer")
    base = live_server.url
    login(page, base, "victor")
    page.goto(f"{base}/turns/{scenario.turns['t-skip'].pk}/")
    assert page.locator("#timeline").is_visible()
    assert page.get_by_role("button", name="Approve").count() == 0
    assert page.get_by_role("button", name="Block").count() == 0
    assert "approving and blocking need the operator role" in page.content()
    page.goto(f"{base}/turns/?decision=blocked")
    assert page.get_by_text("Decide").count() == 0
    assert page.get_by_role("link", name="Block all…").count() == 0
    shot(page, "viewer-turns-no-buttons")


def test_bulk_block_asks_for_confirmation(live_server, page, shot):
    many_runs(3, 2)
    make_user("olivia", "operator")
    base = live_server.url
    login(page, base, "olivia")
    page.goto(f"{base}/turns/?decision=blocked")
    page.get_by_role("link", name="Block all…").click()
    assert page.locator("#bulk-count").inner_text() == "6"
    shot(page, "bulk-block-confirm")
    page.get_by_label("Reason (recorded on every turn)").fill("Payments provider incident: hold everything.")
    page.get_by_role("button", name="Yes, block 6 turns").click()
    page.wait_for_selector("#result-h")
    assert "Blocked 6 turns" in page.locator("#result-h").inner_text()
    page.get_by_role("link", name="← Back to the list").click()
    assert page.locator('#turns-table [data-state="blocked_operator"]').count() == 6
    shot(page, "bulk-block-done")


def test_turn_page_layout_shows_every_planned_phase_in_order(live_server, page, shot):
    scenario = payments_run()
    make_user("olivia", "operator")
    base = live_server.url
    login(page, base, "olivia")
    page.goto(f"{base}/turns/{scenario.turns['t-skip'].pk}/")
    steps = page.locator("ol.timeline > li")
    plan = ["plan", "envelope", "dispatch", "execute", "readback", "writeback", "spend"]
    assert steps.count() == len(plan)
    boxes = []
    for i, name in enumerate(plan):
        step = steps.nth(i)
        assert step.get_attribute("data-phase") == name
        assert step.is_visible()
        boxes.append(step.bounding_box())
    width = page.viewport_size["width"]
    for left, right in zip(boxes, boxes[1:], strict=False):
        assert abs(left["y"] - right["y"]) < 2, "the phases sit on one row"
        assert left["x"] + left["width"] <= right["x"] + 1, "each phase is right of the one before, no overlap"
    assert boxes[-1]["x"] + boxes[-1]["width"] <= width
    # The blocking phase is marked in words, not only by colour.
    assert "held here: held for review" in steps.nth(1).inner_text()
    assert "committed" in steps.nth(0).inner_text()
    shot(page, "turn-timeline-layout")


def test_upload_a_hostile_package_and_see_its_findings(live_server, page, shot, settings, tmp_path, monkeypatch):
    """The upload is verified by the background task, not in the request: the page says so, then picks the
    verdict up by itself (htmx polls the status partial every second) once the worker is done."""
    from recovery.models import PackageUpload
    from recovery.tasks import validate_package
    from tests.console.test_packages import hostile_package

    published: list[str] = []
    monkeypatch.setattr(validate_package, "apply_async", lambda args=None, **_: published.append(args[0]))
    settings.LOOPX_PACKAGE_DIR = tmp_path
    archive = tmp_path / "evil.tar.gz"
    archive.write_bytes(hostile_package())
    make_user("olivia", "operator")
    base = live_server.url
    login(page, base, "olivia")
    page.get_by_role("link", name="Packages").click()
    page.get_by_label("Package file (.tar, .tar.gz or .zip)").set_input_files(str(archive))
    page.get_by_role("button", name="Upload and verify").click()
    verdict = page.locator("#verdict")
    assert "waiting for a worker" in verdict.inner_text()
    shot(page, "package-waiting")

    assert published == [str(PackageUpload.objects.get().pk)]
    validate_package(published[0])  # the worker's turn; the open page is not reloaded
    page.locator("#package-status[data-state='rejected']").wait_for()
    assert "Refused" in page.locator("#verdict").inner_text()
    findings = page.locator("#package-findings").inner_text()
    assert "path traversal" in findings and "link member" in findings
    assert page.get_by_role("button", name="Import the run").count() == 0
    assert page.get_by_role("button", name="Queue again").count() == 0
    shot(page, "package-hostile-refused")


def test_the_blocked_queue_stays_inside_its_card_on_a_narrow_screen(live_server, chromium, shot):
    """At a phone's width (375 px) the blocked queue's rows are stacked cards inside its card, each value under
    its column's name, instead of a table pushing the card (and the page) wider than the screen."""
    many_runs(2, 2)  # blocked turns with long ids, so a table would be wider than the screen
    make_user("olivia", "operator")
    with sized_page(chromium, 375, 800) as page:
        base = live_server.url
        login(page, base, "olivia")
        card = page.locator("section.card", has=page.locator("#blocked-queue"))
        rows = page.locator("#blocked-queue table tbody tr")
        assert rows.count() == 4
        card_box = card.bounding_box()
        assert card_box is not None
        assert card_box["x"] >= 0 and card_box["x"] + card_box["width"] <= 375 + 0.5, "the card fits the screen"
        for i in range(4):
            box = rows.nth(i).bounding_box()
            assert box is not None
            assert box["x"] >= card_box["x"] and box["x"] + box["width"] <= card_box["x"] + card_box["width"] + 0.5
        assert rows.first.evaluate("r => getComputedStyle(r).display") == "block", "a row is a card of its own"
        label = rows.first.locator("td").first.evaluate("td => getComputedStyle(td, '::before').content")
        assert "Held since" in label, "each value sits under its column's name"
        widths = card.evaluate(
            "el => ({card: [el.scrollWidth, el.clientWidth], page: [document.documentElement.scrollWidth,"
            " document.documentElement.clientWidth]})"
        )
        assert widths["card"][0] <= widths["card"][1], f"nothing sticks out of the card: {widths}"
        assert widths["page"][0] <= widths["page"][1], f"the page does not scroll sideways: {widths}"
        shot(page, "overview-narrow-375")


def test_upload_a_torn_package_see_its_kept_lines_and_resolve_one(
    live_server, page, shot, settings, tmp_path, monkeypatch
):
    """A package whose journal has a damaged line and a torn tail imports with both kept as evidence: the page
    lists where they were (never their bytes) and links each to its finding, which the operator resolves."""
    from recovery.findings.models import Finding
    from recovery.models import PackageUpload
    from recovery.packages import build_package
    from recovery.tasks import assess_run, validate_package
    from tests.console.test_package_torn import RUN, SECRET, _journal

    published: list[str] = []
    monkeypatch.setattr(validate_package, "apply_async", lambda args=None, **_: published.append(args[0]))
    monkeypatch.setattr(assess_run, "apply_async", lambda args=None, **_: None)
    settings.LOOPX_PACKAGE_DIR = tmp_path
    body, kept = _journal()
    archive = tmp_path / "torn.tar.gz"
    build_package(archive, RUN, body)
    make_user("olivia", "operator")
    login(page, live_server.url, "olivia")
    page.get_by_role("link", name="Packages").click()
    page.get_by_label("Package file (.tar, .tar.gz or .zip)").set_input_files(str(archive))
    page.get_by_role("button", name="Upload and verify").click()
    page.locator("#package-status[data-state='received']").wait_for()
    validate_package(published[0])  # the worker's turn; the open page picks the verdict up by itself
    page.locator("#package-status[data-state='imported']").wait_for()
    box = page.locator("#kept-lines")
    text = box.inner_text()
    assert "2 journal lines kept as evidence" in text and "stays blocked" in text
    cells = [row.locator("td").all_inner_texts()[:3] for row in box.locator("tbody tr").all()]
    assert [tuple(int(c) for c in r) for r in cells] == kept
    assert SECRET not in page.content()
    shot(page, "package-torn-kept-lines")

    first = PackageUpload.objects.get().result["corrupt_lines"][0]["finding"]
    box.get_by_role("link", name=f"finding {first}").click()
    row = page.locator(f"#finding-{first}")
    assert "damaged journal line storage_corruption" in row.inner_text()
    row.get_by_text("Act").click()
    row.get_by_label("Reason").fill("the runtime died mid-write; the line is dropped")
    row.get_by_role("button", name="Resolve").click()
    assert "resolved" in page.locator(f"#finding-{first}").inner_text()
    assert Finding.objects.get(pk=first).state == "resolved"
    shot(page, "package-torn-finding-resolved")
