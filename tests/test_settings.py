"""Bad settings stop the process with one clear line and exit 2, not a traceback."""

import pytest

from tests.support import run_manage


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("DATABASE_URL", "not a url", "DATABASE_URL must be a PostgreSQL URL"),
        ("DATABASE_URL", "mysql://root@localhost/catalog", "DATABASE_URL must be a PostgreSQL URL"),
        ("DATABASE_URL", "postgres://postgres@127.0.0.1:notaport/catalog", "DATABASE_URL is malformed"),
        ("DATABASE_URL", "postgres://postgres@127.0.0.1:5432", "DATABASE_URL names no database"),
        ("DELISTED_RETENTION_BATCH_SIZE", "lots", "DELISTED_RETENTION_BATCH_SIZE must be a whole number"),
        ("DJANGO_DEBUG", "maybe", "DJANGO_DEBUG must be true or false"),
        ("LOG_FORMAT", "xml", "LOG_FORMAT must be text or json"),
        ("CATALOG_TIME_ZONE", "Moscow", "CATALOG_TIME_ZONE must be an IANA time zone name"),
        ("CATALOG_TIME_ZONE", "../../etc/passwd", "CATALOG_TIME_ZONE must be an IANA time zone name"),
    ],
)
def test_malformed_setting_is_one_line_and_exit_2(variable, value, message):
    result = run_manage("check", **{variable: value})

    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("configuration error: ") and message in line
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("url", "host", "port"),
    [
        ("postgres://postgres@%2Frun%2FPostgreSQL/catalog", "/run/PostgreSQL", ""),
        ("postgres://postgres@%2frun%2fpostgresql:5433/catalog", "/run/postgresql", "5433"),
        ("postgres://postgres@/catalog?host=/run/postgresql", "", ""),
        ("postgres://postgres@db-host:5432/catalog", "db-host", "5432"),
    ],
)
def test_a_unix_socket_directory_may_be_percent_encoded_in_the_host_as_libpq_reads_it(url, host, port):
    shown = (
        "from django.conf import settings; d = settings.DATABASES['default']; print(repr((d['HOST'], str(d['PORT']))))"
    )

    result = run_manage("shell", "-c", shown, DATABASE_URL=url)

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == repr((host, port))
