"""One settings module for every environment, driven by environment variables with working defaults.

Defaults give a newcomer a working `make run` on a bare machine: SQLite under var/ and kombu's
filesystem broker (no server). Production sets DATABASE_URL, REDIS_URL, SECRET_KEY, ALLOWED_HOSTS and
LOOPX_PRODUCTION=1 (docs/deployment.md lists them).
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

import dj_database_url
import django_stubs_ext

from kernel.env import env_bool, env_int, env_list, env_str
from ops.logconfig import json_logging

# Django's admin and form classes take type arguments in the stubs (admin.ModelAdmin[Team]); this lets the
# same subscript run as a class base. It only adds __class_getitem__ returning the class itself.
django_stubs_ext.monkeypatch()

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("LOOPX_VAR_DIR", str(BASE_DIR / "var")))
VAR_DIR.mkdir(parents=True, exist_ok=True)

PRODUCTION = env_bool("LOOPX_PRODUCTION", False)
DEBUG = env_bool("DEBUG", not PRODUCTION)
# The development key is only ever used when LOOPX_PRODUCTION is off; production refuses to start without one.
SECRET_KEY = env_str("SECRET_KEY", "" if PRODUCTION else "dev-only-insecure-key-change-me-loopx-recovery-audit")
if PRODUCTION and not SECRET_KEY:
    raise RuntimeError("SECRET_KEY must be set when LOOPX_PRODUCTION=1")
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "loopx_site.admin_site.LoopxAdminConfig",  # the admin, opened to the admin role
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    # Swagger UI's files, served from this site (the API explorer loads nothing from another host).
    "drf_spectacular_sidecar",
    "django_celery_beat",
    # Teams (who sees which runs): below the journal store, whose selectors filter by them.
    "teams",
    "journals",
    # The operator trail (who did what, when and why): above journals, below everything that acts.
    "trail",
    "recovery",
    "audits",
    # Webhooks.
    "notifications",
    # Operations: metrics, health, retention; it reads every app's tables and nothing imports it.
    "ops",
    # The operator console: pages, template tags and the admin registrations.
    "console",
    # The certification rig (`manage.py chaos`): crashes a reference runtime, the web and the worker at every
    # point of its matrix. Installed for its command only; nothing in the product imports it.
    "certification",
]

MIDDLEWARE = [
    # First, so that every later log line carries the request id (ops/middleware.py).
    "ops.middleware.RequestIdMiddleware",
    # Next, so that it wraps every middleware that reads the database: an unreachable database (or broker)
    # is a 503 with Retry-After, never a 500 (ops/unavailable.py).
    "ops.unavailable.DependencyUnavailableMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # Content-Security-Policy: every page loads only from this host (LOOPX_CSP).
    "ops.middleware.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # Dates on pages in the operator's own zone (a session setting; TIME_ZONE otherwise).
    "console.middleware.OperatorTimezoneMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Each trail row says whether the act came through the API, the admin or the console (kernel/via.py).
    "kernel.via.TrailViaMiddleware",
    # Under DEBUG, a missing page is still the friendly one, never Django's list of URL patterns.
    "console.errors.FriendlyErrorsMiddleware",
]

ROOT_URLCONF = "loopx_site.urls"
WSGI_APPLICATION = "loopx_site.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "loopx_site.oidc.login_context",
            ],
        },
    },
]

DATABASES = {
    "default": dj_database_url.parse(
        env_str("DATABASE_URL", f"sqlite:///{VAR_DIR / 'loopx.sqlite3'}"),
        conn_max_age=env_int("DB_CONN_MAX_AGE", 60),
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # WAL + a busy timeout let the web server and the worker share the embedded database.
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 20,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
    DATABASES["default"]["CONN_MAX_AGE"] = 0
elif DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # Django turns psycopg's prepared statements off for every query. Its own cursors bind client-side and
    # are never prepared either way; only the statements written for ingest and an assessment's many-row
    # writes on psycopg's server-bound cursor (journals/postgres.py, kernel/dialect.py) are, after 5 uses on
    # a connection: every batch runs them, so parsing and planning them once per connection spares every
    # later batch (docs/api.md). A pooler in transaction mode without prepared-statement support (PgBouncer
    # before 1.21) needs DB_PREPARED_STATEMENTS=0.
    DATABASES["default"].setdefault("OPTIONS", {})["prepare_threshold"] = (
        5 if env_bool("DB_PREPARED_STATEMENTS", True) else None
    )
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

# OpenID Connect sign-in (loopx_site/oidc.py, docs/access.md): on when a client id and the provider are set
# (its discovery URL, or its four endpoints). Local accounts keep working beside it.
OIDC_RP_CLIENT_ID = env_str("OIDC_RP_CLIENT_ID")
OIDC_RP_CLIENT_SECRET = env_str("OIDC_RP_CLIENT_SECRET")
OIDC_OP_DISCOVERY_URL = env_str("OIDC_OP_DISCOVERY_URL")
OIDC_OP_ISSUER = env_str("OIDC_OP_ISSUER")  # checked against the id_token's `iss`; discovery's when unset
OIDC_OP_AUTHORIZATION_ENDPOINT = env_str("OIDC_OP_AUTHORIZATION_ENDPOINT")
OIDC_OP_TOKEN_ENDPOINT = env_str("OIDC_OP_TOKEN_ENDPOINT")
OIDC_OP_USER_ENDPOINT = env_str("OIDC_OP_USER_ENDPOINT")
OIDC_OP_JWKS_ENDPOINT = env_str("OIDC_OP_JWKS_ENDPOINT")
OIDC_RP_SIGN_ALGO = env_str("OIDC_RP_SIGN_ALGO", "RS256")
OIDC_RP_SCOPES = env_str("OIDC_RP_SCOPES", "openid email profile")
OIDC_USE_PKCE = env_bool("OIDC_USE_PKCE", True)
OIDC_TIMEOUT = env_int("OIDC_TIMEOUT", 10)
LOGIN_REDIRECT_URL_FAILURE = "/accounts/login/?sso=failed"
LOOPX_OIDC_ENABLED = bool(
    OIDC_RP_CLIENT_ID
    and (OIDC_OP_DISCOVERY_URL or (OIDC_OP_AUTHORIZATION_ENDPOINT and OIDC_OP_TOKEN_ENDPOINT and OIDC_OP_USER_ENDPOINT))
)
LOOPX_OIDC_PROVIDER_NAME = env_str("LOOPX_OIDC_PROVIDER_NAME", "single sign-on")
LOOPX_OIDC_USERNAME_CLAIM = env_str("LOOPX_OIDC_USERNAME_CLAIM", "preferred_username")
LOOPX_OIDC_GROUPS_CLAIM = env_str("LOOPX_OIDC_GROUPS_CLAIM", "groups")
LOOPX_OIDC_GROUPS_VIEWER = env_list("LOOPX_OIDC_GROUPS_VIEWER", [])
LOOPX_OIDC_GROUPS_OPERATOR = env_list("LOOPX_OIDC_GROUPS_OPERATOR", [])
LOOPX_OIDC_GROUPS_ADMIN = env_list("LOOPX_OIDC_GROUPS_ADMIN", [])
AUTHENTICATION_BACKENDS = [
    *(["loopx_site.oidc.LoopxOIDCBackend"] if LOOPX_OIDC_ENABLED else []),
    "django.contrib.auth.backends.ModelBackend",
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = env_str("TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = Path(env_str("STATIC_ROOT", str(BASE_DIR / "staticfiles")))
if not PRODUCTION:
    # whitenoise warns on every request when the folder is missing; production fills it with collectstatic.
    STATIC_ROOT.mkdir(parents=True, exist_ok=True)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "whitenoise.storage.CompressedManifestStaticFilesStorage"
            if PRODUCTION
            else "django.contrib.staticfiles.storage.StaticFilesStorage"
        )
    },
}
MEDIA_ROOT = VAR_DIR / "media"

# --- Security headers (manage.py check --deploy is clean with LOOPX_PRODUCTION=1) ---
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
# Every page loads scripts, styles, images and fonts from this host only, posts its forms here only and is
# framed by nobody. data: images are the API docs' icons (its stylesheet inlines them); no inline script or
# style anywhere, so no 'unsafe-inline'. An empty LOOPX_CSP sends no policy (a proxy that sets its own).
LOOPX_CSP = env_str(
    "LOOPX_CSP",
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; font-src 'self'; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
)
SESSION_COOKIE_HTTPONLY = True
if PRODUCTION:
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31536000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True

# --- REST framework ---
REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_THROTTLE_RATES": {"api_token": env_str("API_TOKEN_THROTTLE", "6000/min")},
    # One error shape for every refusal of the API, the framework's own included.
    "EXCEPTION_HANDLER": "journals.api.api_exception_handler",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "LoopX Recovery Audit API",
    "DESCRIPTION": "Turn journal ingest, recovery decisions and the recovery gate.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # Three different "kind" vocabularies share a field name; each gets its own enum component.
    "ENUM_NAME_OVERRIDES": {
        "OperatorActionKindEnum": "trail.models.OPERATOR_ACTION_KINDS",
        "RecoveryActionKindEnum": "recovery.recovery_audits.models.ACTION_KINDS",
        "GateDecisionKindEnum": "recovery.models.GATE_KINDS",
        "TurnStateEnum": "journals.models.TurnState",
        "RunStatusEnum": "journals.models.RunStatus",
        # A turn's status keeps the name it had before runs had one.
        "StatusEnum": "journals.models.TURN_STATUSES",
        "GateStateEnum": "journals.models.GATE_STATES",
        "StateFilterEnum": "recovery.state.STATE_FILTER_VALUES",
        "DecisionFilterEnum": "recovery.state.DECISION_FILTER_VALUES",
        "TurnDecisionEnum": "journals.models.DECISIONS",
        "EffectClassEnum": "journals.models.EFFECT_CLASSES",
        "ImportSystemEnum": "recovery.imports.models.IMPORT_SYSTEMS",
    },
}

# --- Celery ---
# Hard time limits of the tasks (Celery kills a task that reaches its own). The broker's visibility timeout
# below is derived from them.
LOOPX_ASSESS_TIME_LIMIT = env_int("LOOPX_ASSESS_TIME_LIMIT", 300)
LOOPX_AUDIT_TIME_LIMIT = env_int("LOOPX_AUDIT_TIME_LIMIT", 600)
# validate_package reads up to LOOPX_PACKAGE_MAX_TOTAL_BYTES and ingests up to a 64 MiB journal.
LOOPX_PACKAGE_TIME_LIMIT = env_int("LOOPX_PACKAGE_TIME_LIMIT", 1800)
CELERY_TASK_TIME_LIMIT = env_int("CELERY_TASK_TIME_LIMIT", 600)
CELERY_TASK_SOFT_TIME_LIMIT = env_int("CELERY_TASK_SOFT_TIME_LIMIT", 540)
# A webhook retry waits for its countdown in a worker, unacknowledged (docs/deployment.md, Webhooks).
LOOPX_WEBHOOK_BACKOFF_MAX_SECONDS = env_int("LOOPX_WEBHOOK_BACKOFF_MAX_SECONDS", 1800)
# The longest a message may stay unacknowledged while all is well: its longest countdown plus the longest
# hard time limit. Redis gives a message older than the visibility timeout to another worker, so the
# timeout must not be shorter (a running task would run twice); the default is exactly that. Assessments do
# not wait for it: their lease (LOOPX_ASSESS_LEASE_SECONDS) brings a dead worker's run back much sooner.
CELERY_LONGEST_UNACKED_SECONDS = LOOPX_WEBHOOK_BACKOFF_MAX_SECONDS + max(
    LOOPX_ASSESS_TIME_LIMIT, LOOPX_AUDIT_TIME_LIMIT, LOOPX_PACKAGE_TIME_LIMIT, CELERY_TASK_TIME_LIMIT
)
# REDIS_URL (or CELERY_BROKER_URL) in CI and production; otherwise kombu's filesystem transport, which
# needs no server and works between the web, worker and beat processes of one host (docs/celery.md).
REDIS_URL = env_str("REDIS_URL", "")
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", REDIS_URL or "filesystem://")
BROKER_DIR = VAR_DIR / "broker"
if CELERY_BROKER_URL.startswith("filesystem://"):
    for sub in ("out", "processed", "control"):
        (BROKER_DIR / sub).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(BROKER_DIR / "out"),
        "data_folder_out": str(BROKER_DIR / "out"),
        "processed_folder": str(BROKER_DIR / "processed"),
        # Fanout bindings (the workers' remote control); kombu's default is ./control in the working directory.
        "control_folder": str(BROKER_DIR / "control"),
        "store_processed": False,
    }
else:
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "visibility_timeout": env_int("CELERY_VISIBILITY_TIMEOUT", CELERY_LONGEST_UNACKED_SECONDS),
        # How often a consumer looks for messages a dead worker left unacknowledged (they come back once
        # older than the visibility timeout); the fault tests shorten both (docs/celery.md).
        "unacked_restore_interval": env_int("CELERY_UNACKED_RESTORE_INTERVAL", 10),
        "unacked_restore_throttle": env_int("CELERY_UNACKED_RESTORE_THROTTLE", 10),
        # An unreachable Redis fails a publish in seconds instead of hanging an ingest answer (the batch is
        # committed either way; the sweep publishes what could not be).
        "socket_connect_timeout": env_int("CELERY_REDIS_CONNECT_TIMEOUT", 5),
    }
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", False)
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# In production a task's stray print becomes a JSON log line; under `make run` the console mail backend's
# messages reach the terminal as the plain emails they are.
CELERY_WORKER_REDIRECT_STDOUTS = PRODUCTION
# django-celery-beat's DatabaseScheduler (schedules editable in the admin) plus beat's own heartbeat.
CELERY_BEAT_SCHEDULER = "audits.beat:HeartbeatScheduler"
CELERY_TIMEZONE = TIME_ZONE

# --- LoopX limits (the contract's defaults where it names one; each one a setting) ---
LOOPX_INGEST_MAX_LINE_BYTES = env_int("LOOPX_INGEST_MAX_LINE_BYTES", 256 * 1024)
LOOPX_INGEST_MAX_BATCH_BYTES = env_int("LOOPX_INGEST_MAX_BATCH_BYTES", 8 * 1024 * 1024)
LOOPX_INGEST_MAX_BATCH_RECORDS = env_int("LOOPX_INGEST_MAX_BATCH_RECORDS", 10_000)
LOOPX_MAX_RECOVERY_ATTEMPTS = env_int("LOOPX_MAX_RECOVERY_ATTEMPTS", 5)
LOOPX_CLAIM_LEASE_SECONDS = env_int("LOOPX_CLAIM_LEASE_SECONDS", 300)
# A superseded assessment keeps its identity, digests and counts; its output (every turn's decision, large on
# a large run) is dropped this long after a newer assessment of the run was stored (docs/state.md).
LOOPX_ASSESSMENT_COMPACT_AFTER_SECONDS = env_int("LOOPX_ASSESSMENT_COMPACT_AFTER_SECONDS", 300)
# A worker keeps the run's fold in memory between batches and writes the fold snapshot (O(turns) bytes) only
# once this many records or seconds passed since the stored one (docs/engine.md, "The worker's fold").
LOOPX_SNAPSHOT_EVERY_RECORDS = env_int("LOOPX_SNAPSHOT_EVERY_RECORDS", 10_000)
LOOPX_SNAPSHOT_EVERY_SECONDS = env_int("LOOPX_SNAPSHOT_EVERY_SECONDS", 60)
# The kept fold's undo log, in records per branch: a fork or checkpoint reaching back this far continues it;
# one reaching further folds the whole prefix (docs/engine.md, "Incremental assessment").
LOOPX_REWIND_WINDOW_LINES = env_int("LOOPX_REWIND_WINDOW_LINES", 20_000)
# How many runs the re-fold audit folds again whole, each time it runs, to check their stored assessment.
LOOPX_REFOLD_AUDIT_SAMPLE = env_int("LOOPX_REFOLD_AUDIT_SAMPLE", 20)
LOOPX_PACKAGE_MAX_MEMBER_BYTES = env_int("LOOPX_PACKAGE_MAX_MEMBER_BYTES", 64 * 1024 * 1024)
LOOPX_PACKAGE_MAX_TOTAL_BYTES = env_int("LOOPX_PACKAGE_MAX_TOTAL_BYTES", 512 * 1024 * 1024)
LOOPX_PACKAGE_MAX_MEMBERS = env_int("LOOPX_PACKAGE_MAX_MEMBERS", 10_000)
LOOPX_PACKAGE_MAX_RATIO = env_int("LOOPX_PACKAGE_MAX_RATIO", 200)
LOOPX_PACKAGE_DIR = Path(env_str("LOOPX_PACKAGE_DIR", str(VAR_DIR / "packages")))
# An uploaded history of another runtime (docs/imports.md): Temporal caps a history at 50 MB.
LOOPX_IMPORT_MAX_BYTES = env_int("LOOPX_IMPORT_MAX_BYTES", 64 * 1024 * 1024)
# Background work and the scheduled audits (docs/celery.md). Per pass, each audit handles at
# most LOOPX_AUDIT_BATCH runs or turns so that a pass stays well inside its task's time limit.
# (The tasks' hard time limits are with the broker's settings above.)
# The package sweep (docs/package-import.md): an upload still `received` this long after its latest publish
# is published again; a file under uploads/ that no upload names is removed once this old.
LOOPX_PACKAGE_SWEEP_GRACE_SECONDS = env_int("LOOPX_PACKAGE_SWEEP_GRACE_SECONDS", 120)
LOOPX_PACKAGE_ORPHAN_GRACE_SECONDS = env_int("LOOPX_PACKAGE_ORPHAN_GRACE_SECONDS", 3600)
LOOPX_AUDIT_BATCH = env_int("LOOPX_AUDIT_BATCH", 500)
LOOPX_SWEEP_GRACE_SECONDS = env_int("LOOPX_SWEEP_GRACE_SECONDS", 30)
# A published message holds a raised flag this long; a running assessment holds its lease this long,
# renewed while it runs. The sweep asks again for either once it ran out (docs/celery.md).
LOOPX_SWEEP_REPUBLISH_SECONDS = env_int("LOOPX_SWEEP_REPUBLISH_SECONDS", 60)
LOOPX_ASSESS_LEASE_SECONDS = env_int("LOOPX_ASSESS_LEASE_SECONDS", 30)
LOOPX_STALE_TURN_SECONDS = env_int("LOOPX_STALE_TURN_SECONDS", 900)
LOOPX_BLOCKED_ESCALATION_SECONDS = env_int("LOOPX_BLOCKED_ESCALATION_SECONDS", 3600)
LOOPX_CHAIN_RECORDS_PER_PASS = env_int("LOOPX_CHAIN_RECORDS_PER_PASS", 200_000)
LOOPX_CHAIN_FULL_PASS_RUNS = env_int("LOOPX_CHAIN_FULL_PASS_RUNS", 20)
LOOPX_CHAIN_FULL_PASS_MIN_AGE_SECONDS = env_int("LOOPX_CHAIN_FULL_PASS_MIN_AGE_SECONDS", 24 * 3600)
LOOPX_HEARTBEAT_SECONDS = env_int("LOOPX_HEARTBEAT_SECONDS", 15)

# --- Operability (ops, notifications; docs/deployment.md) ---
METRICS_TOKEN = env_str("METRICS_TOKEN", "")
METRICS_ALLOW_IPS = env_list("METRICS_ALLOW_IPS", [])
LOOPX_READYZ_REQUIRE_BEAT = env_bool("LOOPX_READYZ_REQUIRE_BEAT", True)
LOOPX_READYZ_BEAT_MAX_AGE = env_int("LOOPX_READYZ_BEAT_MAX_AGE", 300)
# Seconds a client is told to wait (Retry-After) when a request found the database or the broker down.
LOOPX_UNAVAILABLE_RETRY_AFTER = env_int("LOOPX_UNAVAILABLE_RETRY_AFTER", 5)
LOOPX_WEBHOOK_TIMEOUT_SECONDS = env_int("LOOPX_WEBHOOK_TIMEOUT_SECONDS", 5)
LOOPX_WEBHOOK_MAX_ATTEMPTS = env_int("LOOPX_WEBHOOK_MAX_ATTEMPTS", 8)
LOOPX_WEBHOOK_BACKOFF_SECONDS = env_int("LOOPX_WEBHOOK_BACKOFF_SECONDS", 10)
# Networks (CIDRs) a webhook may reach although they are not public (notifications/destinations.py). Empty:
# webhooks reach public addresses only. A bad CIDR stops the start here rather than at a delivery.
LOOPX_WEBHOOK_ALLOW_NETS = [
    str(ipaddress.ip_network(n, strict=False)) for n in env_list("LOOPX_WEBHOOK_ALLOW_NETS", [])
]
# Team channels (notifications/notices.py, docs/notifications.md). Email goes through Django's mail backend:
# printed on the worker's stdout (the console backend) unless EMAIL_HOST names an SMTP server.
EMAIL_HOST = env_str("EMAIL_HOST", "")
EMAIL_PORT = env_int("EMAIL_PORT", 25)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
EMAIL_BACKEND = env_str(
    "EMAIL_BACKEND",
    "django.core.mail.backends.smtp.EmailBackend" if EMAIL_HOST else "django.core.mail.backends.console.EmailBackend",
)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "loopx@localhost")
# The console's address as people reach it: every message links to the turn's page under it.
LOOPX_PUBLIC_URL = env_str("LOOPX_PUBLIC_URL", "http://127.0.0.1:8000")
# The hour (in UTC) from which a rule's daily digest is sent.
LOOPX_NOTIFY_DIGEST_HOUR = env_int("LOOPX_NOTIFY_DIGEST_HOUR", 8)
# 0 (unset) = retention off: nothing is ever removed.
LOOPX_RETENTION_DAYS = env_int("LOOPX_RETENTION_DAYS", 0)
LOOPX_RETENTION_DIR = Path(env_str("LOOPX_RETENTION_DIR", str(VAR_DIR / "retention")))
# Celery keeps its hands off the root logger, so the worker and beat log JSON through LOGGING too.
CELERY_WORKER_HIJACK_ROOT_LOGGER = False

# JSON lines on stderr, secrets scrubbed (kernel/logging.py).
LOGGING = json_logging(
    # Django's own default handlers would print a second, plain and unscrubbed copy: replace them.
    loggers={
        "django": {"handlers": [], "level": env_str("LOG_LEVEL", "INFO"), "propagate": True},
        "django.server": {"handlers": ["console"], "level": "INFO", "propagate": False},
    },
    root_level=env_str("LOG_LEVEL", "INFO"),
)
