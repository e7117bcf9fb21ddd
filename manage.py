#!/usr/bin/env python
"""Django's command-line utility for administrative tasks."""
import logging
import os
import sys

TRACED_COMMAND = "purge_delisted"


def main():
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    from config.tracing import JOB_SERVICE_NAME, configure_tracing

    try:
        # The settings and the log format first (inside the try: they may be what is wrong), so that tracing's
        # warning lines are log lines too; then tracing, before the command runs. Only the job traces: a migration,
        # a seed or a check sends nothing, whatever OTEL_* variables a shared environment file holds.
        django.setup()
        if sys.argv[1:2] == [TRACED_COMMAND]:
            configure_tracing(service_name=JOB_SERVICE_NAME)
        execute_from_command_line(sys.argv)
    except ImproperlyConfigured as error:
        # A bad deploy setting is an operator's mistake, not a bug: one line, exit 2.
        from config.logging import syslog_prefixed

        print(syslog_prefixed(configuration_error_line(error), sys.stderr, logging.ERROR), file=sys.stderr)
        sys.exit(2)
    except Exception:
        # Through logging, so that with LOG_FORMAT=json even a traceback is one JSON line.
        logging.getLogger("manage").exception("unexpected error")
        sys.exit(1)


def configuration_error_line(error) -> str:
    """In the log format asked for: the settings that configure logging may be what failed, so LOG_FORMAT is read
    from the environment."""
    message = f"configuration error: {error}"
    if os.environ.get("LOG_FORMAT", "").strip().lower() != "json":
        return message
    from config.logging import JsonFormatter

    record = logging.makeLogRecord({"name": "manage", "levelname": "ERROR", "levelno": logging.ERROR, "msg": message})
    return JsonFormatter().format(record)


if __name__ == "__main__":
    main()
