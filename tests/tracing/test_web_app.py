"""The web app (config/wsgi.py) under the same OTEL_* variables: Django's instrumentation makes each request a
server span, the admin's and /metrics' alike."""

import subprocess
import sys

import pytest

from tests.support import PROJECT_ROOT, manage_env

# The WSGI application as a server loads it, asked for two pages; then the process exits as a worker does.
REQUESTS = """
from wsgiref.util import setup_testing_defaults
from config.wsgi import application
for path in ("/admin/login/", "/metrics"):
    environ = {"PATH_INFO": path}
    setup_testing_defaults(environ)
    b"".join(application(environ, lambda status, headers: None))
"""


@pytest.mark.django_db(transaction=True)
def test_admin_and_metrics_requests_are_server_spans(receiver):
    completed = subprocess.run(
        [sys.executable, "-c", REQUESTS], env=manage_env(**receiver.env()), cwd=PROJECT_ROOT, capture_output=True,
        text=True, timeout=60,
    )

    assert completed.returncode == 0, completed.stderr
    routes = {span.attributes.get("http.route") for span in receiver.spans if span.kind == "server"}
    assert {"admin/login/", "metrics"} <= routes, [(span.name, span.attributes) for span in receiver.spans]
