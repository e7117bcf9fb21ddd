"""The documentation stays a door and stays inside the repository: README.md at most 12 KiB, every relative link of
README.md and docs/ resolving to a file of the checkout (none outside it), and every test docs/contract.md maps the
design document's tests to existing. The README's options table gives each limit the range and default of
retention/limits.py and .env.example."""

import re

import pytest

from retention.limits import LIMITS, number
from tests.support import PROJECT_ROOT

README = PROJECT_ROOT / "README.md"
PAGES = [README, *sorted((PROJECT_ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_the_readme_is_at_most_12_kib():
    assert len(README.read_bytes()) <= 12 * 1024


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(PROJECT_ROOT)))
def test_every_relative_link_resolves_inside_the_repository(page):
    targets = [link for link in LINK.findall(page.read_text()) if not re.match(r"[a-z]+:", link)]
    resolved = {link: (page.parent / link.split("#", 1)[0]).resolve() for link in targets if not link.startswith("#")}

    outside = {link for link, path in resolved.items() if not path.is_relative_to(PROJECT_ROOT)}
    missing = {link for link, path in resolved.items() if not path.exists()}
    assert (outside, missing) == (set(), set())


def test_every_test_the_contract_names_exists():
    named = re.findall(r"`(tests/[\w/]+\.py)::(\w+)`", (PROJECT_ROOT / "docs" / "contract.md").read_text())
    assert len(named) >= 9

    absent = [f"{path}::{name}" for path, name in named if f"def {name}(" not in (PROJECT_ROOT / path).read_text()]
    assert absent == []


def test_the_readme_options_give_each_limit_its_range_and_default():
    rows = {
        setting: (default, low.replace(" ", ""), high.replace(" ", ""))
        for setting, default, low, high in re.findall(
            r"^\| [^|]+ \| `(\w+)` \| ([\d.]+) \| ([\d ]+)–([\d ]+) \|", README.read_text(), re.MULTILINE
        )
    }

    # The defaults as .env.example shows them, which tests/test_env_example.py holds to settings.py's.
    defaults = dict(re.findall(r"^(\w+)=(.*)$", (PROJECT_ROOT / ".env.example").read_text(), re.MULTILINE))

    for limit in LIMITS:
        low = 1 if limit.minimum is None else limit.minimum
        expected = (defaults[limit.setting], number(low), number(limit.maximum))
        assert rows.get(limit.setting.removeprefix("DELISTED_RETENTION_")) == expected, limit.setting
