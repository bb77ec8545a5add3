"""The project's URLs plus the floors of benchmarks/bench_reads.py: plain Django views rendering 50 rows
of one indexed table (turns of one decision, newest first; no authentication, no serializer, no
pagination).

``baseline`` (the floor the target is judged on): five columns as dicts, dumped by JsonResponse.
``baseline-page``: for comparison only, the other reading of the issue's "a plain Django view rendering
50 rows of one indexed table, about 16 ms p50 here": the rows as model instances, rendered by a Django
template. It is several times heavier than ``baseline``; the benchmark prints it, and judges nothing on it.
"""

from __future__ import annotations

from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template import engines
from django.urls import path

from journals.models import Turn
from loopx_site.urls import urlpatterns as project_urlpatterns

_PAGE = engines["django"].from_string(
    "<!doctype html><title>turns</title><table>"
    "<tr><th>turn</th><th>lineage</th><th>branch</th><th>plan</th><th>status</th><th>decision</th>"
    "<th>reason</th><th>resume from</th><th>completed</th><th>created</th><th>updated</th></tr>"
    "{% for t in turns %}<tr><td>{{ t.turn_id }}</td><td>{{ t.lineage }}</td><td>{{ t.branch }}</td>"
    "<td>{{ t.plan|join:', ' }}</td><td>{{ t.status }}</td><td>{{ t.decision }}</td><td>{{ t.reason }}</td>"
    "<td>{{ t.resume_from }}</td><td>{{ t.completed_phases|join:', ' }}</td><td>{{ t.created_at|date:'c' }}</td>"
    "<td>{{ t.updated_at|date:'c' }}</td></tr>{% endfor %}</table>"
)


def _turns(request: HttpRequest) -> QuerySet[Turn]:
    return Turn.objects.filter(decision=request.GET.get("decision", "blocked")).order_by("-updated_at", "-id")


def baseline(request: HttpRequest) -> JsonResponse:
    rows = list(_turns(request).values("turn_id", "decision", "reason", "status", "updated_at")[:50])
    return JsonResponse({"results": rows})


def baseline_page(request: HttpRequest) -> HttpResponse:
    return HttpResponse(_PAGE.render({"turns": list(_turns(request)[:50])}, request))


urlpatterns = [
    path("bench/baseline", baseline),
    path("bench/baseline-page", baseline_page),
    *project_urlpatterns,
]
