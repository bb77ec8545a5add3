"""``/metrics``: Prometheus text format.

Two kinds of series:

- **From the database at scrape time** (:class:`DatabaseCollector`, one grouped query per family): turns by
  decision and reason, open findings by kind, recovery audits by divergence, operator actions by kind,
  webhook deliveries by status, and the broker's queue depth and oldest-message age. They are exact
  whichever process answers the scrape. Operator actions and divergences are append-only tables, so
  their counts are true counters (``_total``).
- **Counters and a histogram fed by events** (kernel.events): ingest batches and records by
  outcome, assessment latency, webhook attempts, operational events. These live in the memory of the
  process where the event happened. Without ``PROMETHEUS_MULTIPROC_DIR`` each process counts its own,
  so a scrape sees only the process that answered it (fine for one web process; wrong behind several
  gunicorn workers or when assessments run in Celery). With ``PROMETHEUS_MULTIPROC_DIR`` set to an empty
  directory shared by the web and worker processes of a host (set before they start, emptied at deploy),
  prometheus-client writes the values to files there and every scrape adds up all processes
  (docs/deployment.md; gunicorn's ``child_exit`` hook is in ops/gunicorn_conf.py).

Access (``metrics_allowed``): a client address in ``METRICS_ALLOW_IPS`` (addresses or CIDR networks,
compared with REMOTE_ADDR, never a forwarded header), or ``Authorization: Bearer`` with
``METRICS_TOKEN`` or an active runtime API token. Everyone else gets 401 without a hint of what exists.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import os
import time
from collections.abc import Iterable, Iterator
from functools import lru_cache
from typing import Any

from django.conf import settings
from django.db.models import Count
from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

from journals.models import DECISIONS, Turn, TurnEffective
from journals.selectors import api_token_find
from kernel import events
from notifications.models import DELIVERY_STATUSES, WebhookDelivery
from recovery.recovery_audits.models import DIVERGENCE_CODES, RecoveryAudit, RecoveryDivergence
from trail.models import OPERATOR_ACTION_KINDS, OperatorAction

from . import broker, integrations


def _counts_by(manager: Any, field: str, known: Iterable[str], count: Any = None) -> dict[str, int]:
    """Rows per value of ``field`` in one grouped query; every known value appears, at 0 when absent, so a
    series never vanishes from a scrape (Prometheus would read that as "no data", not zero)."""
    counts = dict.fromkeys(known, 0)
    for row in manager.order_by().values(field).annotate(n=count if count is not None else Count("id")):
        counts[row[field]] = row["n"]
    return counts


def _filled(family: Any, counts: dict[str, int]) -> Any:
    for label, n in counts.items():
        family.add_metric([label], n)
    return family


logger = logging.getLogger("loopx.metrics")

MULTIPROC_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"

# `*_created` timestamps double the exposition for no use here (rate() does not need them).
disable_created_metrics()  # type: ignore[no-untyped-call]  # unannotated in prometheus_client

# The event-fed metrics register here, not in prometheus-client's global REGISTRY, so that importing this
# module twice (tests, autoreload) never raises "Duplicated timeseries".
REGISTRY = CollectorRegistry(auto_describe=True)

INGEST_BATCHES = Counter(
    "loopx_ingest_batches",
    "Ingest batches by outcome (accepted, conflict, refused) and refusal code ('' when accepted).",
    ["outcome", "code"],
    registry=REGISTRY,
)
INGEST_RECORDS = Counter(
    "loopx_ingest_records",
    "Records in accepted ingest batches, by outcome (stored, duplicate).",
    ["outcome"],
    registry=REGISTRY,
)
ASSESSMENT_SECONDS = Histogram(
    "loopx_assessment_duration_seconds",
    "Wall time of one assessment of a run.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0),
    registry=REGISTRY,
)
EVENTS = Counter(
    "loopx_events",
    "Operational events: turn_blocked, finding_opened, crash_loop_parked, package_rejected.",
    ["event"],
    registry=REGISTRY,
)
WEBHOOK_ATTEMPTS = Counter(
    "loopx_webhook_attempts",
    "Webhook delivery attempts by result (delivered, failed).",
    ["result"],
    registry=REGISTRY,
)

# Series that exist from the first scrape, so that rate() and absence alerts work before any traffic.
for _outcome in ("stored", "duplicate"):
    INGEST_RECORDS.labels(_outcome)
INGEST_BATCHES.labels("accepted", "")
for _event in ("turn_blocked", "finding_opened", "crash_loop_parked", "package_rejected"):
    EVENTS.labels(_event)
for _result in ("delivered", "failed"):
    WEBHOOK_ATTEMPTS.labels(_result)


# --- event receivers (connected by notifications.apps) ----------------------------------------------


def on_ingest_finished(
    outcome: str = "refused", code: str = "", stored: int = 0, duplicates: int = 0, **_: Any
) -> None:
    INGEST_BATCHES.labels(outcome, code or "").inc()
    if outcome == "accepted":
        if stored:
            INGEST_RECORDS.labels("stored").inc(stored)
        if duplicates:
            INGEST_RECORDS.labels("duplicate").inc(duplicates)


def on_assessment_finished(seconds: float = 0.0, **_: Any) -> None:
    ASSESSMENT_SECONDS.observe(max(0.0, float(seconds)))


def _counting(name: str) -> Any:
    def receiver(**_: Any) -> None:
        EVENTS.labels(name).inc()

    receiver.__qualname__ = f"count_{name}"
    return receiver


_EVENT_RECEIVERS = {
    events.turn_blocked: _counting("turn_blocked"),
    events.finding_opened: _counting("finding_opened"),
    events.crash_loop_parked: _counting("crash_loop_parked"),
    events.package_rejected: _counting("package_rejected"),
}


def on_webhook_attempted(delivered: bool = False, **_: Any) -> None:
    WEBHOOK_ATTEMPTS.labels("delivered" if delivered else "failed").inc()


def connect() -> None:
    events.webhook_attempted.connect(on_webhook_attempted, weak=False, dispatch_uid="loopx-metrics-webhook")
    events.ingest_finished.connect(on_ingest_finished, weak=False, dispatch_uid="loopx-metrics-ingest")
    events.assessment_finished.connect(on_assessment_finished, weak=False, dispatch_uid="loopx-metrics-assess")
    for signal, receiver in _EVENT_RECEIVERS.items():
        signal.connect(receiver, weak=False, dispatch_uid=f"loopx-metrics-{receiver.__qualname__}")


# --- scrape-time collector --------------------------------------------------------------------------


class DatabaseCollector(Collector):
    """Gauges (and append-only counters) computed from the database and the broker at scrape time.

    Each family is computed on its own: a failing source yields ``loopx_scrape_error{source=...} 1``
    instead of failing the whole scrape, so the queue depth still shows when the database is down.
    """

    def collect(self) -> Iterator[Metric]:
        errors = GaugeMetricFamily(
            "loopx_scrape_error", "1 when a source of this scrape could not be read.", labels=["source"]
        )
        for source, producer in (
            ("turns", self._turns),
            ("findings", self._findings),
            ("recovery_audits", self._recovery_audits),
            ("operator_actions", self._operator_actions),
            ("webhooks", self._webhooks),
            ("heartbeat", self._heartbeat),
            ("broker", self._queues),
        ):
            try:
                families = list(producer())
            except Exception as exc:  # a scrape must answer; the error is its own series
                logger.warning(
                    "metrics source failed",
                    extra={"event": "metrics.source_failed", "source": source, "error": type(exc).__name__},
                )
                errors.add_metric([source], 1)
                continue
            errors.add_metric([source], 0)
            yield from families
        yield errors

    @staticmethod
    def _turns() -> Iterable[Metric]:
        family = GaugeMetricFamily(
            "loopx_turns",
            "Turns by effective state, with the decision and reason the recovery gate answers "
            "('unassessed' before the first assessment).",
            labels=["state", "decision", "reason"],
        )
        seen: set[str] = set()
        assessed = 0
        rows = TurnEffective.objects.order_by().values("state", "decision", "reason").annotate(n=Count("turn_id"))
        for row in rows:
            seen.add(row["decision"])
            assessed += row["n"]
            family.add_metric([row["state"], row["decision"], row["reason"] or ""], row["n"])
        family.add_metric(["unassessed", "unassessed", ""], max(0, Turn.objects.count() - assessed))
        for decision in DECISIONS:
            if decision not in seen:
                family.add_metric(["", decision, ""], 0)
        yield family

    @staticmethod
    def _findings() -> Iterable[Metric]:
        family = GaugeMetricFamily("loopx_findings_open", "Open findings by kind.", labels=["kind"])
        yield _filled(family, dict(sorted(integrations.open_findings_by_kind().items())))

    @staticmethod
    def _recovery_audits() -> Iterable[Metric]:
        family = CounterMetricFamily(
            "loopx_recovery_audits",
            "Recovery audits by divergence code (an audit counts once per code it has; 'none': no divergence).",
            labels=["divergence"],
        )
        counts = _counts_by(RecoveryDivergence.objects, "code", DIVERGENCE_CODES, Count("audit", distinct=True))
        counts["none"] = RecoveryAudit.objects.filter(divergences__isnull=True).count()
        yield _filled(family, counts)

    @staticmethod
    def _operator_actions() -> Iterable[Metric]:
        family = CounterMetricFamily("loopx_operator_actions", "Operator actions by kind.", labels=["kind"])
        yield _filled(family, _counts_by(OperatorAction.objects, "kind", OPERATOR_ACTION_KINDS))

    @staticmethod
    def _webhooks() -> Iterable[Metric]:
        family = GaugeMetricFamily("loopx_webhook_deliveries", "Webhook deliveries by status.", labels=["status"])
        yield _filled(family, _counts_by(WebhookDelivery.objects, "status", DELIVERY_STATUSES))

    @staticmethod
    def _heartbeat() -> Iterable[Metric]:
        age = integrations.beat_heartbeat_age()
        if age is None:
            return
        yield GaugeMetricFamily(
            "loopx_beat_heartbeat_age_seconds", "Seconds since Celery beat's last heartbeat.", value=age
        )

    @staticmethod
    def _queues() -> Iterable[Metric]:
        depth = GaugeMetricFamily("loopx_task_queue_depth", "Messages waiting in the task queue.", labels=["queue"])
        age = GaugeMetricFamily(
            "loopx_task_queue_oldest_age_seconds",
            "Age of the oldest waiting message (0 when the queue is empty).",
            labels=["queue"],
        )
        for stats in broker.queue_stats(timeout=_setting("LOOPX_METRICS_BROKER_TIMEOUT", 0.5)):
            depth.add_metric([stats.queue], stats.depth)
            age.add_metric([stats.queue], stats.oldest_age_seconds or 0.0)
        yield depth
        yield age


class _ProcessRegistryCollector(Collector):
    """This process's event-fed metrics (single-process mode)."""

    def collect(self) -> Iterator[Metric]:
        yield from REGISTRY.collect()


def scrape_registry() -> CollectorRegistry:
    """The registry one scrape renders: the database collector plus either this process's counters or,
    with PROMETHEUS_MULTIPROC_DIR, the sum over every process that wrote to that directory."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DatabaseCollector())
    if os.environ.get(MULTIPROC_DIR_ENV):
        from prometheus_client import multiprocess

        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]  # unannotated in prometheus_client
    else:
        registry.register(_ProcessRegistryCollector())
    return registry


# --- access and view --------------------------------------------------------------------------------


def _setting(name: str, default: Any) -> Any:
    return getattr(settings, name, default)


@lru_cache(maxsize=16)
def _networks(entries: tuple[str, ...]) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    return tuple(ipaddress.ip_network(entry.strip(), strict=False) for entry in entries if entry.strip())


def _ip_allowed(remote: str | None) -> bool:
    entries = tuple(_setting("METRICS_ALLOW_IPS", ()) or ())
    if not remote or not entries:
        return False
    try:
        address = ipaddress.ip_address(remote)
    except ValueError:
        return False
    return any(address in network for network in _networks(entries))


def metrics_allowed(request: HttpRequest) -> bool:
    if _ip_allowed(request.META.get("REMOTE_ADDR")):
        return True
    scheme, _, raw = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
    raw = raw.strip()
    if scheme.lower() != "bearer" or not raw:
        return False
    expected = str(_setting("METRICS_TOKEN", "") or "")
    if expected and hmac.compare_digest(raw.encode(), expected.encode()):
        return True

    return api_token_find(raw=raw) is not None


@never_cache
@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    if not metrics_allowed(request):
        response = HttpResponse("authentication required\n", status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="loopx-metrics"'
        return response
    started = time.perf_counter()
    encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
    body = encoder(scrape_registry())
    logger.debug("metrics scraped", extra={"event": "metrics.scrape", "ms": (time.perf_counter() - started) * 1000})
    return HttpResponse(body, content_type=content_type)
