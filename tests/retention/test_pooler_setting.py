"""`manage.py check` accepts DELISTED_RETENTION_POOLER only as the one declaration the job knows: a session pool."""

import pytest
from django.core.management import call_command

from retention.checks import POOLER_DECLARATION
from tests.support import run_manage


@pytest.mark.parametrize("value", ["", "session"])
def test_check_accepts_no_pooler_or_a_session_pool(settings, value):
    settings.DELISTED_RETENTION_POOLER = value

    call_command("check")


@pytest.mark.django_db
@pytest.mark.parametrize("value", ["transaction", "statement", "Session"])
def test_manage_py_check_refuses_any_other_pooler_declaration(value):
    completed = run_manage("check", DELISTED_RETENTION_POOLER=value)

    assert completed.returncode != 0
    assert f"(retention.E002) {POOLER_DECLARATION.format(value=value)}" in completed.stderr
