"""Saved views: a person names a filter of the turns or runs list, finds it there as a link and deletes it;
nobody else sees or deletes it; a filter the list would refuse is not saved."""

from __future__ import annotations

import pytest
from django.contrib.messages import get_messages
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from console.models import SavedView
from console.services import SAVED_VIEWS_MAX, SavedViewError, saved_view_create, saved_view_delete
from tests.console.conftest import page_client

pytestmark = pytest.mark.django_db

CREATE = reverse("console:saved_view_create")


def _save(client, name: str, query: str, page: str = "turns"):
    return client.post(CREATE, {"page": page, "name": name, "query": query})


def _said(response) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


def test_a_viewer_saves_the_filter_they_are_on_and_finds_it_as_a_link(viewer_pages, viewer, pay):
    html = viewer_pages.get(reverse("console:turns") + "?sort=updated&state=held&page=2").content.decode()
    # The save form carries the filter without its page number.
    assert 'name="query" value="sort=updated&amp;state=held"' in html
    response = _save(viewer_pages, "  held,   oldest first ", "sort=updated&state=held")
    # Kept in the filter form's order, the name's spaces tidied, and the person sent to the view.
    view = SavedView.objects.get(user=viewer)
    assert (view.page, view.name, view.query) == ("turns", "held, oldest first", "state=held&sort=updated")
    assert response.status_code == 302 and response["Location"] == reverse("console:turns") + "?state=held&sort=updated"
    assert _said(response) == ["Saved the view \u201cheld, oldest first\u201d."]
    html = viewer_pages.get(reverse("console:turns")).content.decode()
    assert '<a href="?state=held&amp;sort=updated">held, oldest first</a>' in html
    assert f'action="{reverse("console:saved_view_delete", args=[view.pk])}"' in html
    # The link is the list with that filter: the held turns only.
    shown = viewer_pages.get(reverse("console:turns") + "?" + view.query).content.decode()
    assert ">t-charge</a>" in shown and ">t-resume</a>" not in shown and 'aria-current="true">held, oldest' in shown


def test_the_runs_list_keeps_its_own_views(op_pages, operator, pay):
    response = _save(op_pages, "blocked runs", "state=blocked", page="runs")
    assert response["Location"] == reverse("console:runs") + "?state=blocked"
    assert ">blocked runs</a>" in op_pages.get(reverse("console:runs")).content.decode()
    assert "blocked runs" not in op_pages.get(reverse("console:turns")).content.decode()
    # The same name on the other list is another view.
    _save(op_pages, "blocked runs", "decision=blocked")
    assert SavedView.objects.filter(user=operator, name="blocked runs").count() == 2


@pytest.mark.parametrize(
    ("query", "page", "said"),
    [
        ("colour=red&state=held", "turns", "Not a filter of the turns list: colour."),
        ("page=3&state=held", "turns", "Not a filter of the turns list: page."),
        ("state=bogus", "turns", "The list refuses a value of the filter (state: Select a valid choice."),
        ("per_page=7", "runs", "The list refuses a value of the filter (per_page: Select a valid choice."),
        ("assignee=no%20spaces", "turns", "The list refuses a value of the filter (assignee: Enter a valid value.)."),
        ("state=held&state=complete", "turns", "Each filter is given once: state."),
        ("", "turns", "There is no filter to save: choose one and apply it first."),
        ("state=&q=", "turns", "There is no filter to save: choose one and apply it first."),
        ("decision=blocked", "findings", "Views are saved of the turns list and the runs list only."),
        ("q=" + "x" * 2001, "turns", "The filter is longer than 2000 characters."),
    ],
)
def test_a_filter_the_list_refuses_is_not_saved(viewer_pages, query, page, said):
    response = _save(viewer_pages, "mine", query, page=page)
    assert response.status_code == 302 and not SavedView.objects.exists()
    (message,) = _said(response)
    assert message.startswith("Not saved: " + said), message


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("   ", "Give the view a name."),
        ("x" * 81, "A name is printable text of at most 80 characters."),
        ("bell\x07", "A name is printable text of at most 80 characters."),
    ],
)
def test_a_view_needs_a_plain_name(viewer_pages, name, said):
    response = _save(viewer_pages, name, "state=held")
    assert _said(response) == [f"Not saved: {said}"] and not SavedView.objects.exists()


def test_a_name_is_taken_once_per_list_and_the_first_view_stays(viewer_pages, viewer):
    _save(viewer_pages, "mine", "state=held")
    response = _save(viewer_pages, "mine", "state=complete")
    assert _said(response)[-1] == "Not saved: You already have a view named \u201cmine\u201d."
    assert list(SavedView.objects.values_list("query", flat=True)) == ["state=held"]


def test_a_person_keeps_a_bounded_number_of_views(viewer):
    for i in range(SAVED_VIEWS_MAX):
        saved_view_create(user=viewer, page="turns", name=f"v{i}", query=f"q=t{i}")
    with pytest.raises(SavedViewError) as refused:
        saved_view_create(user=viewer, page="turns", name="one more", query="q=x")
    assert (refused.value.status, refused.value.code) == (409, "too_many")


def test_nobody_sees_or_deletes_another_persons_view(viewer_pages, op_pages, viewer, operator, pay):
    _save(op_pages, "olivia's held", "state=held")
    theirs = SavedView.objects.get(user=operator)
    assert "olivia&#x27;s held" not in viewer_pages.get(reverse("console:turns")).content.decode()
    assert "olivia&#x27;s held" in op_pages.get(reverse("console:turns")).content.decode()
    delete = reverse("console:saved_view_delete", args=[theirs.pk])
    assert viewer_pages.post(delete).status_code == 404  # another's view is a missing one
    assert SavedView.objects.filter(pk=theirs.pk).exists()
    with pytest.raises(SavedViewError) as refused:
        saved_view_delete(view=theirs, actor=viewer)
    assert (refused.value.status, refused.value.code) == (404, "not_found")
    # Its owner deletes it, and is back on the list it was of.
    response = op_pages.post(delete)
    assert response.status_code == 302 and response["Location"] == reverse("console:turns")
    assert _said(response) == ["Deleted the view \u201colivia's held\u201d."] and not SavedView.objects.exists()
    assert op_pages.post(delete).status_code == 404


def test_saving_and_deleting_need_a_role_a_post_and_the_csrf_token(client, outsider_pages, outsider, viewer):
    assert _save(outsider_pages, "mine", "state=held").status_code == 403
    assert _save(client, "mine", "state=held")["Location"].startswith(reverse("login"))
    assert page_client(viewer).get(CREATE).status_code == 405
    assert _save(page_client(viewer, csrf=True), "mine", "state=held").status_code == 403
    with pytest.raises(SavedViewError) as refused:
        saved_view_create(user=outsider, page="turns", name="x", query="state=held")
    assert refused.value.code == "role_required"
    assert not SavedView.objects.exists()


# Session, user and role (3), the capped count and the rows, and the person's saved views: one query
# however many they keep (test_queries counts the lists the same way).
LIST_QUERIES = {"turns": 6, "runs": 8}


@pytest.mark.parametrize("page", LIST_QUERIES)
def test_a_list_with_saved_views_costs_the_same_queries(viewer_pages, viewer, pay, page):
    url = reverse(f"console:{page}")
    counts = []
    for total in (0, 3, 30):
        for i in range(SavedView.objects.filter(user=viewer, page=page).count(), total):
            saved_view_create(user=viewer, page=page, name=f"view {i:02d}", query=f"q=x{i}")
        with CaptureQueriesContext(connection) as ctx:
            html = viewer_pages.get(url).content.decode()
        counts.append(len(ctx.captured_queries))
        assert html.count('<li><a href="?q=x') == total
    assert counts == [LIST_QUERIES[page]] * 3
