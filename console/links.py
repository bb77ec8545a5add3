"""Links to the console's objects by their numbers, formed per row as ``reverse()`` would form them.

A list page links every row to its turn, its run and its decision forms, and a grid or a history page every
record to its page. ``reverse()`` matches the whole URL configuration on every call, which a page of rows
pays hundreds of times, so ``url_former`` reads the named route once per URL configuration (its format and
its converters, from the resolver) and forms each URL from the row's own numbers. A route it cannot read that
way (not only integer parts, an optional part, a namespace mounted under a pattern of its own) is reversed per
call, as before: the answer is the same, only its cost differs.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from urllib.parse import quote

from django.conf import settings
from django.urls import get_resolver, get_script_prefix, get_urlconf, reverse
from django.urls.converters import IntConverter
from django.utils.html import conditional_escape, escape
from django.utils.safestring import SafeString

# What reverse() leaves unquoted in a path (django.urls.resolvers: RFC 3986's sub-delimiters, "/~:@").
_SAFE = "!$&'()*+,;=/~:@"

UrlFormer = Callable[..., str]
HtmlUrlFormer = Callable[..., SafeString]


@lru_cache(maxsize=64)
def _route(name: str, urlconf: str) -> tuple[str, tuple[str, ...]] | None:
    """The route named ``name`` as a %-format over its integer parts, and their names; None when the route
    is not one of those (the caller then reverses)."""
    resolver = get_resolver(urlconf)
    *namespaces, view = name.split(":")
    for ns in namespaces:
        prefix, resolver = resolver.namespace_dict[ns]
        if prefix:
            return None
    found = resolver.reverse_dict.getlist(view)
    if len(found) != 1:
        return None
    possibilities, _pattern, defaults, converters = found[0]
    if len(possibilities) != 1 or defaults:
        return None
    form, params = possibilities[0]
    if not params or any(not isinstance(converters.get(p), IntConverter) for p in params):
        return None
    if quote(form % dict.fromkeys(params, 0), safe=_SAFE) != form % dict.fromkeys(params, 0):
        return None  # a literal part that reverse() would quote
    return form, tuple(params)


def url_former(name: str) -> UrlFormer:
    """A function of the route's integer parts (keywords, ``pk=...``) that answers the URL named ``name``
    under the current script prefix: what ``reverse(name, kwargs=...)`` answers."""
    route = _route(name, str(get_urlconf() or settings.ROOT_URLCONF))
    if route is None:
        return lambda **parts: reverse(name, kwargs=parts)
    prefix = quote(get_script_prefix(), safe=_SAFE)  # as reverse() quotes it
    form, params = route

    def former(**parts: int) -> str:
        return prefix + form % {p: int(parts[p]) for p in params}

    return former


def html_url_former(name: str) -> HtmlUrlFormer:
    """``url_former``'s URL escaped for an attribute, as ``escape(url_former(name)(...))`` answers: the
    route's fixed parts are escaped once, and a number needs no escaping."""
    route = _route(name, str(get_urlconf() or settings.ROOT_URLCONF))
    if route is None:
        return lambda **parts: conditional_escape(reverse(name, kwargs=parts))
    prefix = escape(quote(get_script_prefix(), safe=_SAFE))
    form, params = route
    form = escape(form)  # "%(pk)s" holds nothing escape changes

    def former(**parts: int) -> SafeString:
        return SafeString(prefix + form % {p: int(parts[p]) for p in params})

    return former
