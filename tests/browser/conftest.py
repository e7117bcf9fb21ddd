"""The admin as staff see it: a real Chromium (Debian's `chromium`, installed by scripts/install_test_tools.sh;
Playwright's own browser download is not used) driven by Playwright, against the app served by pytest-django's
live server on the real PostgreSQL, with DEBUG off and the static files served by WhiteNoise.

`AdminBrowser.open` checks every page it opens the way a member of staff would notice a broken one: every request
the page made answered below 400, the CSS and JS came through WhiteNoise, and the console shows no error.
With SCREENSHOTS_DIR set (`make screenshots`), the tests of the pages staff look at save a screenshot there.
"""

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings
from django.test import Client
from playwright.sync_api import Browser, Page, Request, Response, sync_playwright
from pytest_django.live_server_helper import LiveServer

from catalog.demo_admin import DEMO_STAFF_USERNAME, create_staff_user
from tests.support import installed_tool

VIEWPORT = {"width": 1280, "height": 900}
# WhiteNoise's caching header with DEBUG off (WHITENOISE_MAX_AGE's default); Django's own static view sends none.
WHITENOISE_CACHE_CONTROL = "max-age=60, public"
STATIC_PREFIX = "/static/"
SCREENSHOTS_DIR = os.environ.get("SCREENSHOTS_DIR", "")
LOAD_SECONDS = 30  # a bound for a page's requests to finish, so that one that never does fails the test


@pytest.fixture(scope="session")
def live_server() -> Iterator[LiveServer]:
    """pytest-django's live server on the loopback address, with the static files left to the app's own middleware
    (WhiteNoise), as under gunicorn: pytest-django would hand /static/ to Django's StaticFilesHandler instead."""
    server = LiveServer("127.0.0.1", start=False)
    server.thread.static_handler = lambda application: application
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="package")
def browser() -> Iterator[Browser]:
    chromium = installed_tool("chromium", "chromium")
    with pytest.MonkeyPatch.context() as patch:
        # Playwright's sync API keeps an asyncio event loop running in this thread, and Django's ORM refuses to run
        # while one does (SynchronousOnlyOperation) unless told otherwise; nothing here is async. Set for the browser
        # tests alone.
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        with sync_playwright() as playwright:
            # Chromium's sandbox cannot start as root (CI runs as root).
            arguments = ["--no-sandbox"] if os.geteuid() == 0 else []
            browser = playwright.chromium.launch(executable_path=chromium, args=arguments)
            yield browser
            browser.close()


class AdminBrowser:
    """One browser context (its own cookies) on the live server, recording what went wrong on each page."""

    def __init__(self, page: Page, base_url: str):
        self.page = page
        self.base_url = base_url
        self.problems: list[str] = []
        self.static_responses: list[Response] = []
        self.in_flight: set[Request] = set()
        page.on("request", lambda request: self.in_flight.add(request))
        page.on("requestfinished", lambda request: self.in_flight.discard(request))
        page.on("requestfailed", lambda request: self.in_flight.discard(request))
        page.on("console", lambda message: message.type == "error" and self.problems.append(f"console: {message.text}"))
        page.on("pageerror", lambda error: self.problems.append(f"page error: {error}"))
        page.on("requestfailed", lambda request: self.problems.append(f"failed: {request.url} {request.failure}"))
        page.on("response", self.record)

    def record(self, response: Response) -> None:
        if response.status >= 400:
            self.problems.append(f"{response.status}: {response.url}")
        if response.url.startswith(self.base_url + STATIC_PREFIX):
            self.static_responses.append(response)

    def url(self, path: str) -> str:
        return self.base_url + path

    def open(self, path: str) -> Page:
        """Go to `path` (redirects followed) and wait until the page and everything it asks for has loaded."""
        self.page.goto(self.url(path))
        return self.loaded()

    def loaded(self) -> Page:
        """The load event, then no request in flight: every request the page made has its answer. (Playwright's
        "networkidle" waits for half a second of quiet on top, a third of the browser tests' time; no page here
        starts a request after its load event.)"""
        self.page.wait_for_load_state("load")
        deadline = time.monotonic() + LOAD_SECONDS
        while self.in_flight:
            assert time.monotonic() < deadline, f"still loading: {[request.url for request in self.in_flight]}"
            self.page.wait_for_timeout(10)  # lets Playwright deliver the requests' events
        self.assert_everything_loaded()
        return self.page

    def assert_everything_loaded(self) -> None:
        assert self.problems == [], f"on {self.page.url}"
        served_elsewhere = [
            response.url for response in self.static_responses
            if response.status != 304 and response.headers.get("cache-control") != WHITENOISE_CACHE_CONTROL
        ]
        assert served_elsewhere == [], "static files not served by WhiteNoise"
        assert any(response.url.endswith(".css") for response in self.static_responses)
        assert any(response.url.endswith(".js") for response in self.static_responses)
        self.static_responses.clear()

    def log_in(self, username: str, password: str, *, then: str) -> Page:
        """Open `then` logged out, which lands on the login form, and log in through it."""
        page = self.open(then)
        assert page.url.startswith(self.url("/admin/login/?next="))
        page.fill("#id_username", username)
        page.fill("#id_password", password)
        with page.expect_navigation():
            page.click("#login-form input[type=submit]")
        return self.loaded()

    def screenshot(self, name: str) -> None:
        if SCREENSHOTS_DIR:
            self.page.screenshot(path=Path(SCREENSHOTS_DIR) / name, full_page=True)


@pytest.fixture
def admin_browser(browser, live_server, settings) -> Iterator[AdminBrowser]:
    # The login form checks passwords for real, with a hasher that takes microseconds rather than PBKDF2's second.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    context = browser.new_context(viewport=VIEWPORT)
    try:
        yield AdminBrowser(context.new_page(), live_server.url)
    finally:
        context.close()


@pytest.fixture
def staff_browser(admin_browser, django_user_model) -> AdminBrowser:
    """Logged in as the staff user `make admin` makes (catalog.demo_admin) by its session cookie, from Django's test
    client: the login form itself has tests of its own (AdminBrowser.log_in)."""
    create_staff_user()
    client = Client()
    client.force_login(django_user_model.objects.get(username=DEMO_STAFF_USERNAME))
    admin_browser.page.context.add_cookies([{
        "name": settings.SESSION_COOKIE_NAME, "value": client.cookies[settings.SESSION_COOKIE_NAME].value,
        "url": admin_browser.base_url,
    }])
    return admin_browser
