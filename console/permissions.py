"""Page-level guards on top of journals.access (the one place roles are decided).

Anonymous visitors are sent to the login page (a live refresh through htmx's redirect header); a signed-in
person without the role gets a 403 (never a login loop, never a silent no-op), so a forged POST from a
viewer changes nothing and says so.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase

from journals import access

View = Callable[..., HttpResponseBase]  # a page, a redirect, a download (FileResponse streams)


def _guard(check: Callable[[Any], bool]) -> Callable[[View], View]:
    def decorator(view: View) -> View:
        @wraps(view)
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            if not request.user.is_authenticated:
                login = redirect_to_login(request.get_full_path())
                if request.headers.get("HX-Request") == "true":
                    # A live refresh after the session ended: the whole page goes to the login page,
                    # rather than the login form landing inside the polled table.
                    return HttpResponse(status=204, headers={"HX-Redirect": login["Location"]})
                return login
            if not check(request.user):
                raise PermissionDenied("Your role does not allow this.")
            return view(request, *args, **kwargs)

        return wrapped

    return decorator


# Looked up on each call, so that the access helper stays the one place a role is decided.
viewer_required = _guard(lambda user: access.can_view(user))
operator_required = _guard(lambda user: access.can_operate(user))
admin_required = _guard(lambda user: access.can_administer(user))
