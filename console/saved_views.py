"""Saved views: a person names the filter of the turns or runs list they are on, and finds it again as a
link on that list. Thin: console.services.saved_view_create and saved_view_delete decide."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, QueryDict
from django.shortcuts import get_object_or_404
from django.urls import reverse
from django.views.decorators.http import require_POST

from .models import SavedView
from .permissions import viewer_required
from .services import SAVED_VIEW_PAGES, SavedViewError, saved_view_create, saved_view_delete

LIST_URLS = {"turns": "console:turns", "runs": "console:runs"}


def _pk(request: HttpRequest) -> int:
    return int(request.user.pk or 0)  # the pages are signed in (viewer_required)


def saved_views_context(request: HttpRequest, page: str) -> dict[str, object]:
    """What a list page shows of its saved views: the person's own (read when the page draws them: a live
    refresh of the results does not), and its current filter, to save."""
    current = request.GET.copy()
    current.pop("page", None)
    return {
        "saved_views": SavedView.objects.filter(user_id=_pk(request), page=page).order_by("name", "id"),
        "saved_page": page,
        "save_query": current.urlencode(),
    }


def _list(page: str, query: str = "") -> HttpResponse:
    url = reverse(LIST_URLS.get(page, "console:turns"))
    return HttpResponseRedirect(f"{url}?{QueryDict(query).urlencode()}" if query else url)


@viewer_required
@require_POST
def saved_view_new(request: HttpRequest) -> HttpResponse:
    page, query = request.POST.get("page", ""), request.POST.get("query", "")
    try:
        view = saved_view_create(user=request.user, page=page, name=request.POST.get("name", ""), query=query)
    except SavedViewError as err:
        messages.error(request, f"Not saved: {err.detail}")
        return _list(page, query if page in SAVED_VIEW_PAGES else "")
    messages.success(request, f"Saved the view \u201c{view.name}\u201d.")
    return _list(page, view.query)


@viewer_required
@require_POST
def saved_view_remove(request: HttpRequest, pk: int) -> HttpResponse:
    view = get_object_or_404(SavedView.objects.filter(user_id=_pk(request)), pk=pk)  # another's is a 404
    saved_view_delete(view=view, actor=request.user)
    messages.success(request, f"Deleted the view \u201c{view.name}\u201d.")
    return _list(view.page)
