"""The project's URLs plus the baseline of benchmarks/bench_reads.py: a plain Django view rendering 50
rows of one indexed table."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.urls import path

from journals.models import Turn
from loopx_site.urls import urlpatterns as project_urlpatterns


def baseline(request: HttpRequest) -> JsonResponse:
    rows = list(
        Turn.objects.filter(decision=request.GET.get("decision", "blocked"))
        .order_by("-updated_at", "-id")
        .values("turn_id", "decision", "reason", "status", "updated_at")[:50]
    )
    return JsonResponse({"results": rows})


urlpatterns = [path("bench/baseline", baseline), *project_urlpatterns]
