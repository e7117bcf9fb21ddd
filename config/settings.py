"""Settings of the catalog monolith, read once from the environment (django-environ).

Every value an operator can set is listed in `.env.example`. A malformed value stops the process at
start-up with `ImproperlyConfigured` naming the variable (`manage.py` turns that into one line and exit 2).
"""

from pathlib import Path
from urllib.parse import unquote, urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import environ
from django.core.exceptions import ImproperlyConfigured

from config.keepalives import keepalives
from config.numbers import decimal_number, whole_number

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
environ.Env.read_env(BASE_DIR / ".env")

POSTGRES_SCHEMES = ("postgres", "postgresql", "pgsql", "psql")


def env_int(name: str, default: int) -> int:
    raw = env.str(name, default=str(default))
    try:
        return whole_number(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a whole number in plain digits, got {raw!r}") from None


def env_float(name: str, default: float) -> float:
    raw = env.str(name, default=str(default))
    try:
        return decimal_number(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a decimal number in plain digits, got {raw!r}") from None


def env_bool(name: str, default: bool) -> bool:
    raw = env.str(name, default="true" if default else "false").strip().lower()
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off", ""):
        return False
    raise ImproperlyConfigured(f"{name} must be true or false, got {raw!r}")


CONNECT_TIMEOUT_SECONDS = 10
# Both ends of the job's connection give up on a silent peer after this long: libpq's keepalives (on every connection
# of the process, below) and the server's, which the job sets on its own session; the server then ends the job's
# session left by a partition, and its advisory lock with it (docs/operations.md, "Known limits").
DELISTED_RETENTION_DEAD_PEER_TIMEOUT_SECONDS = env_int("DELISTED_RETENTION_DEAD_PEER_TIMEOUT_SECONDS", 30)


def database_from_url(name: str, default: str) -> dict:
    url = env.str(name, default=default)
    scheme = url.split("://", 1)[0] if "://" in url else ""
    if scheme not in POSTGRES_SCHEMES:
        raise ImproperlyConfigured(
            f"{name} must be a PostgreSQL URL like postgres://user@host:5432/dbname, got {url!r}"
        )
    try:
        config = environ.Env.db_url_config(url)
    except ValueError as error:
        raise ImproperlyConfigured(f"{name} is malformed ({error}): {url!r}") from None
    if not config.get("NAME"):
        raise ImproperlyConfigured(f"{name} names no database: {url!r}")
    # libpq names a Unix socket's directory percent-encoded in the host part (postgres://user@%2Frun%2Fpostgresql/db),
    # which django-environ leaves encoded and lowercased: decode it from the URL as written.
    host = urlsplit(url).netloc.rpartition("@")[2]
    if host[:3].lower() == "%2f":
        config["HOST"] = unquote(host.rsplit(":", 1)[0] if host.rsplit(":", 1)[-1].isdigit() else host)
    # A server that never answers (a dead host, a pooler with no server to give) would hold a connect for the
    # operating system's TCP timeout, minutes; `?connect_timeout=N` in the URL sets another bound.
    # A peer gone silent mid-statement (a partition: no FIN, no RST) fails the statement after the dead-peer timeout
    # instead of holding it for hours; the URL's own options win.
    idle, interval, count, user_timeout = keepalives(max(0, DELISTED_RETENTION_DEAD_PEER_TIMEOUT_SECONDS))
    libpq = {"connect_timeout": CONNECT_TIMEOUT_SECONDS, "keepalives": 1, "keepalives_idle": idle,
             "keepalives_interval": interval, "keepalives_count": count, "tcp_user_timeout": user_timeout}
    config["OPTIONS"] = libpq | config.get("OPTIONS", {})
    # Django's PostgreSQL backend, its statements, commits and rollbacks spans when tracing is on (config.database).
    config["ENGINE"] = "config.database"
    return config


APP_ENV = env.str("APP_ENV", default="development")
if APP_ENV not in ("development", "production"):
    raise ImproperlyConfigured(f"APP_ENV must be development or production, got {APP_ENV!r}")
PRODUCTION = APP_ENV == "production"

DEBUG = env_bool("DJANGO_DEBUG", False)
# The marks of a key anyone can read: the example docs/production.md once showed
# (change-me-to-at-least-fifty-random-characters-0123456789), "change me" texts, Django's startproject key. Such a key
# of 50 characters or more passes every other check, and a web app sharing the file would sign with it.
PLACEHOLDER_SECRET_KEY_MARKS = ("change-me", "change_me", "changeme", "django-insecure-")
GENERATE_SECRET_KEY = "python3 -c 'import secrets; print(secrets.token_urlsafe(50))'"

if PRODUCTION:
    SECRET_KEY = env.str("DJANGO_SECRET_KEY", default="")
    if len(SECRET_KEY) < 50:
        raise ImproperlyConfigured(
            "DJANGO_SECRET_KEY must be set to a random string of at least 50 characters in production"
        )
    if any(mark in SECRET_KEY.lower() for mark in PLACEHOLDER_SECRET_KEY_MARKS):
        raise ImproperlyConfigured(
            "DJANGO_SECRET_KEY is a published example or placeholder, not a secret: generate one with "
            + GENERATE_SECRET_KEY
        )
else:
    SECRET_KEY = env.str("DJANGO_SECRET_KEY", default="") or "development-only-key-never-use-in-production"
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", default=[] if PRODUCTION else ["localhost", "127.0.0.1"])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",  # runserver leaves static files to WhiteNoise too, as in production
    "django.contrib.staticfiles",
    "django_prometheus",
    "catalog",
    "retention",
]

MIDDLEWARE = [
    "django_prometheus.middleware.PrometheusBeforeMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_prometheus.middleware.PrometheusAfterMiddleware",
]

ROOT_URLCONF = "config.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

WSGI_APPLICATION = "config.wsgi.application"

DATABASES = {
    "default": database_from_url("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/catalog"),
}
# The retention job's own connection, straight to PostgreSQL, when the web app reaches it through a connection pooler
# (the job needs a real session for its advisory lock: docs/poolers.md), or to run the job as its own role.
if env.str("DELISTED_RETENTION_DATABASE_URL", default=""):
    DATABASES["retention"] = database_from_url("DELISTED_RETENTION_DATABASE_URL", "")

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LANGUAGE_CODE = "en-us"
# Django's zone stays UTC: it is the process's clock (Django sets TZ from it), and so the job's log lines, and the
# default of any other page the web app serves. The catalog's admin pages show their moments in CATALOG_TIME_ZONE.
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
# The catalog's own time zone, the nightly schedule's (deploy/: 03:30 Europe/Moscow) unless set: the zone staff
# read the Delisted retention page and the card pages in.
CATALOG_TIME_ZONE = env.str("CATALOG_TIME_ZONE", default="Europe/Moscow")
try:
    ZoneInfo(CATALOG_TIME_ZONE)
except (ZoneInfoNotFoundError, ValueError):
    raise ImproperlyConfigured(
        f"CATALOG_TIME_ZONE must be an IANA time zone name such as Europe/Moscow, got {CATALOG_TIME_ZONE!r}"
    ) from None

STATIC_URL = "static/"

# Static files (the admin's CSS and JS) served by the app itself through WhiteNoise, under gunicorn, uwsgi and
# runserver alike, with no front server. Production serves STATIC_ROOT, filled at deploy by
# `manage.py collectstatic --noinput`; development serves straight from the apps and has no STATIC_ROOT (WhiteNoise
# would warn about a missing one at every start).
STATIC_ROOT = BASE_DIR / "staticfiles" if PRODUCTION else None
WHITENOISE_USE_FINDERS = not PRODUCTION
# Served at the site's root, in production too (no collectstatic): the favicon.ico every browser asks for, which
# otherwise answers 404 and shows as an error in the console of every admin page.
WHITENOISE_ROOT = BASE_DIR / "config" / "root"

# /metrics (config/metrics_auth.py): with a token, only scrapes sending `Authorization: Bearer <token>`; without
# one, open in development and closed in production.
METRICS_BEARER_TOKEN = env.str("METRICS_BEARER_TOKEN", default="").strip()

if PRODUCTION:
    SECURE_SSL_REDIRECT = env_bool("DJANGO_SECURE_SSL_REDIRECT", True)
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = env_int("DJANGO_SECURE_HSTS_SECONDS", 31536000)
    if SECURE_HSTS_SECONDS < 0:
        raise ImproperlyConfigured(f"DJANGO_SECURE_HSTS_SECONDS must not be negative, got {SECURE_HSTS_SECONDS}")
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True

# The retention job (purge_delisted). Ranges are checked by the job and by `manage.py check`.
DELISTED_RETENTION_PERIOD_DAYS = env_int("DELISTED_RETENTION_PERIOD_DAYS", 30)
DELISTED_RETENTION_BATCH_SIZE = env_int("DELISTED_RETENTION_BATCH_SIZE", 2000)
DELISTED_RETENTION_MAX_BATCHES_PER_RUN = env_int("DELISTED_RETENTION_MAX_BATCHES_PER_RUN", 100)
DELISTED_RETENTION_MAX_RUN_DURATION_SECONDS = env_int("DELISTED_RETENTION_MAX_RUN_DURATION_SECONDS", 1200)
DELISTED_RETENTION_BATCH_PAUSE_MS = env_int("DELISTED_RETENTION_BATCH_PAUSE_MS", 0)
DELISTED_RETENTION_BATCH_PAUSE_FACTOR = env_float("DELISTED_RETENTION_BATCH_PAUSE_FACTOR", 0)
# 0: the job does not look at the standbys' replication lag.
DELISTED_RETENTION_MAX_REPLICA_LAG_SECONDS = env_int("DELISTED_RETENTION_MAX_REPLICA_LAG_SECONDS", 0)
DELISTED_RETENTION_REPLICA_LAG_WAIT_SECONDS = env_int("DELISTED_RETENTION_REPLICA_LAG_WAIT_SECONDS", 300)
# Orphan overrides (of a card that no longer exists) written within this many days are swept by every run.
DELISTED_RETENTION_ORPHAN_SWEEP_DAYS = env_int("DELISTED_RETENTION_ORPHAN_SWEEP_DAYS", 7)
# Bound every batch transaction: a stuck batch gives up instead of holding its row locks.
DELISTED_RETENTION_STATEMENT_TIMEOUT_MS = env_int("DELISTED_RETENTION_STATEMENT_TIMEOUT_MS", 60_000)
DELISTED_RETENTION_LOCK_TIMEOUT_MS = env_int("DELISTED_RETENTION_LOCK_TIMEOUT_MS", 5_000)
# The database alias the job runs on (lock, batches, counts); `purge_delisted --database` overrides it per run.
DELISTED_RETENTION_LOCK_DATABASE = env.str(
    "DELISTED_RETENTION_LOCK_DATABASE", default="retention" if "retention" in DATABASES else "default"
)
if DELISTED_RETENTION_LOCK_DATABASE not in DATABASES:
    raise ImproperlyConfigured(
        f"DELISTED_RETENTION_LOCK_DATABASE must name a configured database ({', '.join(DATABASES)}), "
        f"got {DELISTED_RETENTION_LOCK_DATABASE!r}"
    )

# Metrics of a run, each way switched on by its variable (see retention/metrics.py); empty: off. Unset in
# development, the textfile is the checkout's own (.demo/, ignored by git), so that `make demo`, `make admin` and
# `purge_delisted --last-run` see the same last run.
PROMETHEUS_PUSHGATEWAY_URL = env.str("PROMETHEUS_PUSHGATEWAY_URL", default="").strip()
DELISTED_RETENTION_METRICS_TEXTFILE = env.str(
    "DELISTED_RETENTION_METRICS_TEXTFILE",
    default="" if PRODUCTION else str(BASE_DIR / ".demo" / "catalog_delisted_retention.prom"),
).strip()

# Pushgateway grouping key: the `instance` label of the job's group, so that environments (and catalogs) sharing
# one gateway do not overwrite each other's series. Unset or empty: the default database as host:port/name, which
# differs between environments without anyone setting it.
PROMETHEUS_PUSHGATEWAY_INSTANCE = env.str("PROMETHEUS_PUSHGATEWAY_INSTANCE", default="").strip() or "{}:{}/{}".format(
    DATABASES["default"]["HOST"] or "localhost", DATABASES["default"]["PORT"] or 5432, DATABASES["default"]["NAME"]
)

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
LOG_LEVEL = env.str("LOG_LEVEL", default="INFO").strip().upper()
if LOG_LEVEL not in LOG_LEVELS:
    raise ImproperlyConfigured(f"LOG_LEVEL must be one of {', '.join(LOG_LEVELS)}, got {LOG_LEVEL!r}")
# json: one JSON object per line (journald, Loki, ...), structured fields such as run_id included.
LOG_FORMAT = env.str("LOG_FORMAT", default="text").strip().lower()
if LOG_FORMAT not in ("text", "json"):
    raise ImproperlyConfigured(f"LOG_FORMAT must be text or json, got {LOG_FORMAT!r}")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    # Both: ISO 8601 UTC timestamps, structured fields (`extra`) rendered once, every line at most 8 KiB.
    "formatters": {
        "text": {"()": "config.logging.TextFormatter"},
        "json": {"()": "config.logging.JsonFormatter"},
    },
    # Each line carries the trace_id and span_id of the span in progress, when tracing is on (config.tracing), and
    # the run's ids while a job runs (config.logging.carried).
    "filters": {"trace_context": {"()": "config.logging.TraceContext"}},
    "handlers": {
        # stderr: a command's result owns stdout. Under systemd each line starts with its syslog priority.
        "stderr": {"class": "config.logging.JournalStreamHandler", "formatter": LOG_FORMAT,
                   "stream": "ext://sys.stderr", "filters": ["trace_context"]},
    },
    "root": {"handlers": ["stderr"], "level": "WARNING"},
    "loggers": {
        "catalog": {"level": LOG_LEVEL},
        "retention": {"level": LOG_LEVEL},
        # The SDK's exporter logs a line per retry and per failed batch: config.tracing says it once, at the end.
        "opentelemetry": {"level": "CRITICAL"},
    },
}
