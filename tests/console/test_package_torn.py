"""A package whose journal has lines that are not complete records (a torn tail, a damaged line) is imported
with those lines kept as evidence (docs/package-import.md, "Torn tails"). The console's upload page says how
many were kept, where each was (line, byte offset, size: never its bytes) and links each to the finding an
operator resolves; the turn page names the kept lines as the cause of the run's storage_corruption block."""

from __future__ import annotations

import html as html_lib
import re

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from journals.models import Run, Turn
from recovery.findings.models import Finding
from recovery.models import PackageUpload
from recovery.packages import build_package
from recovery.packages.models import JournalCorruption
from recovery.services import assessment_refresh
from tests.console.test_queries import QUIET_TURN_PAGE_QUERIES
from tests.journal_builder import JournalBuilder

pytestmark = pytest.mark.django_db

RUN = "torn-pkg-1"
SECRET = "TORN-SECRET-0091"
# Cut off mid-record after a secret, with characters the page would have to escape were it ever shown.
TORN = b'{"v":2,"run":"' + RUN.encode() + b'","token":"' + SECRET.encode() + b'<b>&\'","ls'
# A damaged line in the middle of the journal (terminated): its package line is not its assessment position.
DAMAGED = b'{"v":2,"run":"' + RUN.encode() + b'","password":"' + SECRET.encode() + b'-MID", NaN}'


def _journal() -> tuple[bytes, list[tuple[int, int, int]]]:
    """The package's journal: two complete turns with a damaged line between them and a torn tail; returns the
    body and the (line, offset, size) of each non-record line."""
    b = JournalBuilder(RUN)
    b.full_turn("t1")
    first = b.body()
    b.plan("t2")
    b.commit("t2", "plan")
    rest = b.body()[len(first) :]
    body = first + DAMAGED + b"\n" + rest + TORN
    mid_line = first.count(b"\n") + 1
    torn_line = mid_line + rest.count(b"\n") + 1
    torn_offset = len(first) + len(DAMAGED) + 1 + len(rest)
    return body, [(mid_line, len(first), len(DAMAGED)), (torn_line, torn_offset, len(TORN))]


@pytest.fixture
def imported(op_pages, settings, tmp_path, eager_tasks, django_capture_on_commit_callbacks):
    """Upload the package through the console (the task runs inline); returns (upload, kept positions)."""
    settings.LOOPX_PACKAGE_DIR = tmp_path
    body, kept = _journal()
    build_package(tmp_path / "torn.tar.gz", RUN, body)
    package = SimpleUploadedFile("torn.tar.gz", (tmp_path / "torn.tar.gz").read_bytes())
    with django_capture_on_commit_callbacks(execute=True):
        response = op_pages.post(reverse("console:package_upload"), {"package": package})
    upload = PackageUpload.objects.get()
    assert response["Location"] == reverse("console:package", args=[upload.pk])
    assert upload.state == "imported", upload.result
    return upload, kept


def _no_torn_bytes(page: str) -> None:
    """Neither line's bytes, raw or escaped, nor any piece of them that carries the secret."""
    assert SECRET not in page
    for line in (TORN, DAMAGED):
        text = line.decode()
        assert text not in page and html_lib.escape(text) not in page and text[-20:] not in page


def test_the_upload_page_lists_the_kept_lines_and_their_findings(op_pages, imported):
    upload, kept = imported
    page = op_pages.get(reverse("console:package", args=[upload.pk])).content.decode()
    _no_torn_bytes(page)
    assert "Accepted and imported as run" in page
    assert "2 lines of its journal were not a complete record and were kept as evidence" in page
    assert "2 journal lines kept as evidence" in page
    assert "stays blocked" in page and "until each finding is resolved with a reason" in page
    cell = r'<td class="num">(\d+)</td>'
    rows = re.findall("<tr>" + cell * 3, page)
    assert [tuple(map(int, r)) for r in rows] == kept
    findings = {c.line_no: c.finding_id for c in JournalCorruption.objects.all()}
    assert sorted(findings) == [k[0] for k in kept]
    for pk in findings.values():
        link = reverse("console:findings") + f"?state=all&amp;id={pk}#finding-{pk}"
        assert f'<a href="{link}">finding {pk}</a>' in page
    assert page.count("open: blocks the run") == 2
    # The partial the page polls says the same; the list of recent uploads says lines were kept.
    partial = op_pages.get(reverse("console:package_status", args=[upload.pk])).content.decode()
    assert 'id="kept-lines"' in partial
    _no_torn_bytes(partial)
    listing = op_pages.get(reverse("console:packages")).content.decode()
    assert "2 lines kept as evidence" in listing


def test_the_finding_link_shows_that_finding_and_resolving_it_is_the_repair(op_pages, imported):
    upload, kept = imported
    first = JournalCorruption.objects.get(line_no=kept[0][0]).finding
    other = JournalCorruption.objects.get(line_no=kept[1][0]).finding
    url = reverse("console:findings") + f"?state=all&id={first.pk}"
    page = op_pages.get(url).content.decode()
    _no_torn_bytes(page)
    assert f'<tr id="finding-{first.pk}">' in page and f'id="finding-{other.pk}"' not in page
    assert f"Showing finding {first.pk} only" in page
    line, offset, size = kept[0]
    assert f"Line {line} of an imported package's journal (byte offset {offset}, {size} bytes)" in page
    assert reverse("console:finding_resolve", args=[first.pk]) in page  # its resolve form, with a reason
    response = op_pages.post(
        reverse("console:finding_resolve", args=[first.pk]), {"reason": "runtime died mid-write", "next": url}
    )
    assert response.status_code == 302 and response["Location"] == url
    first.refresh_from_db()
    assert first.state == "resolved"
    page = op_pages.get(reverse("console:package", args=[upload.pk])).content.decode()
    assert "resolved" in page and page.count("open: blocks the run") == 1
    assert "stays blocked" in page  # one finding is still open
    op_pages.post(reverse("console:finding_resolve", args=[other.pk]), {"reason": "damaged line dropped"})
    page = op_pages.get(reverse("console:package", args=[upload.pk])).content.decode()
    assert "stays blocked" not in page and "Every finding is resolved" in page


def test_the_turn_page_names_the_kept_lines_as_the_cause(op_pages, imported):
    upload, kept = imported
    run = Run.objects.get(run_id=RUN)
    assessment_refresh(run=run)
    turn = Turn.objects.get(run=run, turn_id="t2")
    assert (turn.decision, turn.reason) == ("blocked", "storage_corruption")
    url = reverse("console:turn", args=[turn.pk])
    with CaptureQueriesContext(connection) as ctx:
        page = op_pages.get(url).content.decode()
    # The quiet page, its assessment's violations (the reason is one), the kept lines and the open findings
    # (the kept lines' findings hold the whole run): nothing per line.
    assert len(ctx.captured_queries) == QUIET_TURN_PAGE_QUERIES + 2
    assert 'id="turn-findings"' in page
    _no_torn_bytes(page)
    block = page[page.index('id="blocking-reason"') : page.index('id="decide"')]
    assert "The engine blocks it: damaged journal line" in block
    assert "kept as evidence (not a stored record; their bytes are never shown)" in block
    package = reverse("console:package", args=[upload.pk])
    for (line, offset, size), corruption in zip(kept, JournalCorruption.objects.order_by("line_no"), strict=True):
        pk = corruption.finding_id
        assert (
            f'line {line} of package <a href="{package}">torn.tar.gz</a> (byte offset {offset}, {size} bytes): '
            f'<a href="{reverse("console:findings")}?state=all&amp;id={pk}#finding-{pk}">finding {pk}</a>'
        ) in block
    assert "until each of those findings is resolved with a reason" in block
    # The assessment's position of the kept lines (after the stored records) is not shown as a journal line.
    assert f"journal line {run.last_seq + 1}" not in page
    assert "resolve the finding of each kept line" in page  # the decide section says what the repair is
    assert 'id="approve-form"' not in page
    # Resolved: no kept line is in force, the run's next assessment no longer blocks on them.
    for finding in Finding.objects.filter(kind="storage_corruption"):
        op_pages.post(reverse("console:finding_resolve", args=[finding.pk]), {"reason": "journal repaired"})
    assessment_refresh(run=run)
    turn.refresh_from_db()
    assert turn.reason != "storage_corruption"
    assert 'id="kept-lines"' not in op_pages.get(url).content.decode()
