"""What the broker says, with short timeouts: is it reachable, and how deep and old is each queue.

Redis (production): one PING, and per queue LLEN plus LINDEX of the oldest message (kombu pushes with
LPUSH and pops from the right, so the oldest is at index -1; priority levels live in sibling keys).
Kombu's filesystem transport (development): one file per message in the ``data_folder_in``.
Any other transport: reachability through kombu, no queue stats.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from django.conf import settings

from .celery_signals import PUBLISHED_AT_HEADER

# kombu.transport.redis: PRIORITY_STEPS = [0, 3, 6, 9], key = queue + SEP + str(step) (step 0: the queue).
_REDIS_PRIORITY_SEP = "\x06\x16"
_REDIS_PRIORITY_STEPS = (0, 3, 6, 9)


class BrokerUnavailable(Exception):
    pass


@dataclass(frozen=True)
class QueueStats:
    queue: str
    depth: int
    oldest_age_seconds: float | None


def broker_url() -> str:
    return str(getattr(settings, "CELERY_BROKER_URL", "") or "")


def _is_redis(url: str) -> bool:
    return url.startswith(("redis://", "rediss://", "redis+socket://", "unix://"))


@lru_cache(maxsize=8)
def _redis_client(url: str, timeout: float) -> Any:
    import redis

    # A client per (url, timeout) keeps one small pool per process instead of a new TCP connection per
    # probe; the timeouts bound both connecting and every reply.
    return redis.Redis.from_url(
        url, socket_connect_timeout=timeout, socket_timeout=timeout, retry_on_timeout=False, health_check_interval=0
    )


def ping(timeout: float = 0.5) -> str:
    """Raise BrokerUnavailable (message names the transport, never the URL's password) unless reachable."""
    url = broker_url()
    if not url:
        raise BrokerUnavailable("no broker configured (CELERY_BROKER_URL is empty)")
    if _is_redis(url):
        try:
            _redis_client(url, timeout).ping()
        except Exception as exc:
            raise BrokerUnavailable(f"redis broker unreachable: {type(exc).__name__}") from None
        return "redis"
    if url.startswith("filesystem://"):
        folder = Path(_transport_options().get("data_folder_in", ""))
        if not folder.is_dir():
            raise BrokerUnavailable("filesystem broker folder is missing")
        return "filesystem"
    if url.startswith("memory://"):
        return "memory"
    from kombu import Connection

    try:
        with Connection(url, connect_timeout=timeout) as conn:
            conn.ensure_connection(max_retries=1, timeout=timeout)  # type: ignore[arg-type]  # seconds; kombu takes a float
    except Exception as exc:
        raise BrokerUnavailable(f"broker unreachable: {type(exc).__name__}") from None
    return url.split("://", 1)[0]


def _transport_options() -> dict[str, Any]:
    return dict(getattr(settings, "CELERY_BROKER_TRANSPORT_OPTIONS", {}) or {})


def queue_names() -> list[str]:
    """The queues to watch: LOOPX_METRICS_QUEUES, else the default queue and any queue named in routes."""
    configured = getattr(settings, "LOOPX_METRICS_QUEUES", None)
    if configured:
        return list(configured)
    names = [str(getattr(settings, "CELERY_TASK_DEFAULT_QUEUE", "celery") or "celery")]
    routes = getattr(settings, "CELERY_TASK_ROUTES", None)
    if isinstance(routes, dict):
        for route in routes.values():
            if isinstance(route, dict) and isinstance(route.get("queue"), str) and route["queue"] not in names:
                names.append(route["queue"])
    return names


def _published_at(raw: bytes | str | None) -> float | None:
    if raw is None:
        return None
    try:
        message = json.loads(raw)
        value = message.get("headers", {}).get(PUBLISHED_AT_HEADER)
    except (ValueError, AttributeError):
        return None
    return float(value) if isinstance(value, int | float) else None


def queue_stats(timeout: float = 0.5) -> list[QueueStats]:
    """Depth and oldest-message age per watched queue. Raises BrokerUnavailable when it cannot tell."""
    url = broker_url()
    now = time.time()
    stats: list[QueueStats] = []
    if _is_redis(url):
        client = _redis_client(url, timeout)
        try:
            for queue in queue_names():
                keys = [queue if step == 0 else f"{queue}{_REDIS_PRIORITY_SEP}{step}" for step in _REDIS_PRIORITY_STEPS]
                pipe = client.pipeline(transaction=False)
                for key in keys:
                    pipe.llen(key)
                    pipe.lindex(key, -1)
                replies = pipe.execute()
                depth = sum(int(n) for n in replies[0::2])
                published = [p for p in (_published_at(raw) for raw in replies[1::2]) if p is not None]
                age = max(0.0, now - min(published)) if published else None
                stats.append(QueueStats(queue, depth, age))
        except Exception as exc:
            raise BrokerUnavailable(f"redis broker unreachable: {type(exc).__name__}") from None
        return stats
    if url.startswith("filesystem://"):
        folder = Path(_transport_options().get("data_folder_in", ""))
        for queue in queue_names():
            suffix = f".{queue}.msg"
            files = [p for p in folder.iterdir() if p.name.endswith(suffix)] if folder.is_dir() else []
            age = None
            if files:
                oldest = min(files, key=lambda p: p.name)  # names start with the publish timestamp
                stamp = _published_at(_read_quietly(oldest))
                if stamp is None:
                    try:
                        stamp = oldest.stat().st_mtime
                    except OSError:  # consumed between the listing and the stat
                        stamp = now
                age = max(0.0, now - stamp)
            stats.append(QueueStats(queue, len(files), age))
        return stats
    return stats


def _read_quietly(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None
