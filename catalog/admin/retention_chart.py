"""The picture of the backlog on the Delisted retention page: the overdue cards now (and after the last run, from the
metrics sink), the cards becoming deletable on each of the next days (counted here), and the nights the job needs at
its limits.

SVG written here by hand: no script, no chart library (pygal, the well-kept one, loads its tooltips' script from
kozea.github.io, which fails wherever the admin has no internet access), and format_html rather than a template loop,
which was too slow for the page (docs/benchmark-findings.md). Every number drawn is also in the chart's description,
a tooltip per bar, a table beside it (the text alternative), and on each bar as data attributes.
"""

import math
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from functools import cached_property

from django.template.defaultfilters import pluralize
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from catalog.statements import STATEMENTS
from retention.backlog import Backlog, KindBacklog
from retention.session import Session

CHART_DAYS = 30
WIDTH = 760
PLOT_TOP = 34
PLOT_HEIGHT = 170
PLOT_BOTTOM = PLOT_TOP + PLOT_HEIGHT
# The overdue panel on the left, the next days on the right, each with its own scale: tens of thousands overdue
# would flatten a few hundred arriving a day.
OVERDUE_PANEL = (64, 226)
DAYS_PANEL = (330, 750)
# Lines at 1, 2, ... nights' worth of cards across the overdue panel, while they stay readable.
MAX_NIGHT_LINES = 8


@dataclass(frozen=True)
class DeletableOn:
    """The Delisted cards, not overdue yet, whose retention period ends on `day` (None: after the chart's days)."""

    day: date | None
    property_objects: int
    projects: int

    @property
    def cards(self) -> int:
        return self.property_objects + self.projects


@dataclass(frozen=True)
class BecomingDeletable:
    """The Delisted cards within the retention window by when they become deletable: on each of `days`, today (from
    now on) first, and `later`, after them (its day is None)."""

    days: list[DeletableOn]
    later: DeletableOn

    def within_window(self, cutoff: datetime) -> Backlog:
        """These cards as a backlog with none overdue, for retention.backlog.measure_backlog's `within_window_from`."""
        every = [*self.days, self.later]
        return Backlog(
            cutoff,
            property_objects=KindBacklog(sum(on.property_objects for on in every), overdue=0, oldest_delisted_at=None),
            projects=KindBacklog(sum(on.projects for on in every), overdue=0, oldest_delisted_at=None),
        )


def count_becoming_deletable(
    session: Session, *, cutoff: datetime, retention: timedelta, days: int, time_zone: str
) -> BecomingDeletable:
    """Per day of `time_zone`, today (from now on) first, the cards becoming deletable: the arrivals of the next
    nightly runs; and those after them."""
    with session.transaction() as cursor:
        cursor.execute(STATEMENTS["becoming deletable"],
                       {"cutoff": cutoff, "retention": retention, "days": days, "time_zone": time_zone})
        *each_day, later = [DeletableOn(*row) for row in cursor.fetchall()]
        return BecomingDeletable(each_day, later)


@dataclass(frozen=True)
class Bar:
    """One stacked bar: property objects below, projects above."""

    key: str  # "after-last-run", "now", or the day (ISO date)
    label: str
    property_objects: int
    projects: int

    @property
    def cards(self) -> int:
        return self.property_objects + self.projects


@dataclass(frozen=True)
class Line:
    """A horizontal line across a panel at a number of cards, and what it marks."""

    cards: int
    label: str


@dataclass
class Panel:
    """Bars side by side on a scale of their own, each in an equal slot of which `gap` stays empty, every
    `tick_every`th named under the axis. A line above the top of the scale is left out."""

    name: str  # its id in the SVG: backlog-chart-{name}
    title: str
    x1: int
    x2: int
    bars: list[Bar]
    lines: list[Line]
    gap: float
    tick_every: int = 1
    # The values written over the bars push the lines' labels out, into the gap right of the panel.
    values_on_bars: bool = False
    scale_max: int = field(init=False)

    def __post_init__(self):
        self.scale_max = nice_ceiling(max((bar.cards for bar in self.bars), default=0))
        self.lines = [line for line in self.lines if line.cards <= self.scale_max]

    def height(self, cards: int) -> float:
        return round(PLOT_HEIGHT * cards / self.scale_max, 2)

    def y(self, cards: int) -> float:
        """Where `cards` reach up to on the scale (y grows downwards, as in SVG)."""
        return round(PLOT_BOTTOM - PLOT_HEIGHT * cards / self.scale_max, 2)

    @property
    def svg(self) -> SafeString:
        """Its title, its scale (0 and its top), its bars with their tooltips and labels, and its lines."""
        return format_html(
            '<g class="panel" id="backlog-chart-{}">'
            '<text class="panel-title" x="{}" y="16" text-anchor="middle">{}</text>'
            '<text class="tick" x="{}" y="{}" text-anchor="end">{}</text>'
            '<text class="tick" x="{}" y="{}" text-anchor="end">0</text>'
            '<line class="grid" x1="{}" y1="{}" x2="{}" y2="{}"/>'
            '<line class="axis" x1="{}" y1="{}" x2="{}" y2="{}"/>{}{}</g>',
            self.name, (self.x1 + self.x2) / 2, self.title,
            self.x1 - 6, PLOT_TOP + 4, f"{self.scale_max:,}",
            self.x1 - 6, PLOT_BOTTOM + 4,
            self.x1, PLOT_TOP, self.x2, PLOT_TOP,
            self.x1, PLOT_BOTTOM, self.x2, PLOT_BOTTOM,
            format_html_join("", "{}", ((self.bar_svg(index, bar),) for index, bar in enumerate(self.bars))),
            format_html_join("", "{}", ((self.line_svg(line),) for line in self.lines)),
        )

    def bar_svg(self, index: int, bar: Bar) -> SafeString:
        slot = (self.x2 - self.x1) / len(self.bars)
        x = round(self.x1 + index * slot + slot * self.gap / 2, 2)
        width = round(slot * (1 - self.gap), 2)
        center, top = x + width / 2, self.y(bar.cards)
        text = '<text class="{}" x="{}" y="{}" text-anchor="middle">{}</text>'
        value = format_html(text, "value", center, top - 4, f"{bar.cards:,}") if self.values_on_bars else ""
        tick = format_html(text, "tick", center, PLOT_BOTTOM + 15, bar.label) if index % self.tick_every == 0 else ""
        return format_html(
            '<g class="bar" data-key="{}" data-property-objects="{}" data-projects="{}">'
            "<title>{}: {} property objects, {} projects</title>"
            '<rect class="property-objects" x="{}" y="{}" width="{}" height="{}"/>'
            '<rect class="projects" x="{}" y="{}" width="{}" height="{}"/>{}</g>{}',
            bar.key, bar.property_objects, bar.projects, bar.label, f"{bar.property_objects:,}", f"{bar.projects:,}",
            x, self.y(bar.property_objects), width, self.height(bar.property_objects),
            x, top, width, self.height(bar.projects),
            value, tick,
        )

    def line_svg(self, line: Line) -> SafeString:
        y = self.y(line.cards)
        label_x, label_y = (self.x2 + 4, y + 4) if self.values_on_bars else (self.x1 + 4, y - 4)
        return format_html(
            '<line class="limit" x1="{}" y1="{}" x2="{}" y2="{}"/><text class="limit-label" x="{}" y="{}">{}</text>',
            self.x1, y, self.x2, y, label_x, label_y, line.label,
        )


class BacklogChart:
    """The chart of the page. `last_run_overdue` is (property objects, projects) the last run left overdue, as the
    metrics sink holds it, None when it holds none."""

    def __init__(
        self, *, backlog: Backlog, deletable_on: list[DeletableOn], cards_per_night: int,
        last_run_overdue: tuple[int, int] | None = None,
    ):
        self.cards_per_night = cards_per_night
        self.nights_needed = backlog.nights_needed(cards_per_night)
        self.overdue_now = Bar("now", "now", backlog.property_objects.overdue, backlog.projects.overdue)
        self.after_last_run = Bar("after-last-run", "after last run", *last_run_overdue) if last_run_overdue else None
        self.arriving = [
            Bar(day.day.isoformat(), f"{day.day:%b %-d}", day.property_objects, day.projects) for day in deletable_on
        ]
        self.arriving_cards = sum(bar.cards for bar in self.arriving)
        self.busiest_day = max((bar for bar in self.arriving if bar.cards), key=lambda bar: bar.cards, default=None)
        # What each night's run takes off the overdue cards: a line where each of the nights before the last one ends.
        night_lines = [
            Line(nights * cards_per_night, f"{nights} night{pluralize(nights)}")
            for nights in range(1, min(self.nights_needed, MAX_NIGHT_LINES + 1))
        ]
        overdue_bars = [bar for bar in (self.after_last_run, self.overdue_now) if bar]
        self.overdue = Panel(
            "overdue", "Overdue", *OVERDUE_PANEL, overdue_bars, night_lines, gap=0.4, values_on_bars=True
        )
        # Arrivals above one night's capacity make the backlog grow: the line shows only where a day comes near it.
        self.days = Panel(
            "days", f"Becoming deletable, next {len(self.arriving)} days", *DAYS_PANEL, self.arriving,
            [Line(cards_per_night, "one night's run")], gap=0.25, tick_every=7,
        )

    @cached_property
    def summary(self) -> str:
        """The chart in one paragraph: its caption and its SVG description."""
        now, arriving, busiest = self.overdue_now, self.arriving_cards, self.busiest_day
        left = f"; the last run left {self.after_last_run.cards:,}" if self.after_last_run else ""
        nights = (
            f"At up to {self.cards_per_night:,} cards a night the job needs {self.nights_needed:,} "
            f"night{pluralize(self.nights_needed)} to clear them."
            if self.nights_needed else "Nothing for the job to clear."
        )
        most = f", at most {busiest.cards:,} on one day ({busiest.key})" if busiest else ""
        return (
            f"Overdue now: {now.cards:,} card{pluralize(now.cards)} ({now.property_objects:,} property objects, "
            f"{now.projects:,} projects){left}. {nights} In the next {len(self.arriving)} days {arriving:,} more "
            f"card{pluralize(arriving)} become{pluralize(arriving, 's,')} deletable{most}."
        )

    @property
    def svg(self) -> SafeString:
        return format_html(
            '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {} {}" role="img" '
            'aria-labelledby="backlog-chart-title backlog-chart-desc">'
            '<title id="backlog-chart-title">Delisted backlog: cards overdue now and cards becoming deletable on '
            "each of the next {} days</title>"
            '<desc id="backlog-chart-desc">{}</desc>{}{}'
            '<g class="legend" transform="translate({}, {})">'
            '<rect class="property-objects" width="10" height="10" y="-9"/><text x="14">property objects</text>'
            '<rect class="projects" x="130" width="10" height="10" y="-9"/><text x="144">projects</text></g></svg>',
            WIDTH, PLOT_BOTTOM + 44, len(self.arriving), self.summary, self.overdue.svg, self.days.svg,
            self.days.x1, PLOT_BOTTOM + 30,
        )

    @property
    def table_rows(self) -> SafeString:
        """The rows of the chart's table: the overdue bars, then one row per day."""
        overdue = {"after-last-run": "Overdue after the last run", "now": "Overdue now"}
        headed = [(bar, overdue[bar.key]) for bar in self.overdue.bars] + [
            (bar, f"Becoming deletable on {bar.key}{' (from now on)' if index == 0 else ''}")
            for index, bar in enumerate(self.arriving)
        ]
        return format_html_join(
            "\n", '<tr data-key="{}"><th>{}</th><td class="property-objects">{}</td><td class="projects">{}</td></tr>',
            ((bar.key, heading, f"{bar.property_objects:,}", f"{bar.projects:,}") for bar, heading in headed),
        )


def nice_ceiling(value: int) -> int:
    """The smallest 1, 2 or 5 times a power of ten that is at least `value` (at least 1): the top of a scale."""
    if value <= 1:
        return 1
    power = 10 ** math.floor(math.log10(value))
    return next(step * power for step in (1, 2, 5, 10) if step * power >= value)
