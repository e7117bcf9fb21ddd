"""The web app (config/wsgi.py) under the same OTEL_* variables: each request a server span by the current HTTP
conventions, named by its route's template; /metrics left out by default, and with it the statements its
collectors run."""

import subprocess
import sys

import pytest
from opentelemetry.semconv.attributes.http_attributes import (
    HTTP_REQUEST_METHOD, HTTP_RESPONSE_STATUS_CODE, HTTP_ROUTE,
)
from opentelemetry.semconv.attributes.service_attributes import SERVICE_NAME, SERVICE_VERSION
from opentelemetry.semconv.attributes.url_attributes import URL_PATH

from config.version import VERSION
from tests.support import PROJECT_ROOT, manage_env

# The WSGI application as a server loads it, asked for three pages; then the process exits as a worker does.
REQUESTS = """
from wsgiref.util import setup_testing_defaults
from config.wsgi import application
for path in ("/admin/login/", "/admin/catalog/", "/metrics"):
    environ = {"PATH_INFO": path}
    setup_testing_defaults(environ)
    b"".join(application(environ, lambda status, headers: None))
"""
OLD_HTTP_ATTRIBUTES = ("http.method", "http.url", "http.status_code", "http.target", "net.host.name")


def serve_requests(receiver, **env):
    completed = subprocess.run(
        [sys.executable, "-c", REQUESTS], env=manage_env(**receiver.env(**env)), cwd=PROJECT_ROOT,
        capture_output=True, text=True, timeout=60,
    )
    assert completed.returncode == 0, completed.stderr
    return [span for span in receiver.spans if span.kind == "server"]


@pytest.mark.django_db(transaction=True)
def test_requests_are_server_spans_by_the_current_http_conventions_named_by_route_templates(receiver):
    servers = serve_requests(receiver)

    assert [span.name for span in servers] == ["GET /admin/login/", "GET /admin/<app_label>/"]
    login, app_list = servers
    assert login.attributes[HTTP_ROUTE] == "/admin/login/" and app_list.attributes[HTTP_ROUTE] == "/admin/<app_label>/"
    assert app_list.attributes[HTTP_REQUEST_METHOD] == "GET" and app_list.attributes[URL_PATH] == "/admin/catalog/"
    assert login.attributes[HTTP_RESPONSE_STATUS_CODE] == 200 and app_list.attributes[HTTP_RESPONSE_STATUS_CODE] == 302
    assert not [name for span in servers for name in OLD_HTTP_ATTRIBUTES if name in span.attributes]
    assert login.resource[SERVICE_NAME] == "catalog-web" and login.resource[SERVICE_VERSION] == VERSION
    # /metrics is no trace, and its statements are none either: every span belongs to a request's trace.
    assert {span.trace_id for span in receiver.spans} == {span.trace_id for span in servers}


@pytest.mark.django_db(transaction=True)
def test_the_environment_can_trace_metrics_again(receiver):
    servers = serve_requests(receiver, OTEL_PYTHON_DJANGO_EXCLUDED_URLS="/admin/login")

    assert [span.attributes[HTTP_ROUTE] for span in servers] == ["/admin/<app_label>/", "/metrics"]
    # The backlog gauges' reads (a transaction), which the default leaves untraced with their scrape.
    scrape = servers[1]
    statements = [span.name for span in sorted(receiver.spans, key=lambda span: span.start_ns)
                  if span.trace_id == scrape.trace_id and span.kind == "client"]
    assert "backlog: property_object_cards, whole" in statements and statements[-1] == "COMMIT"
