"""The picture of the backlog on the Delisted retention page: the overdue cards now (and after the last run, from the
metrics sink), the cards becoming deletable on each of the next days, and the nights the job needs at its limits.

Drawn server-side as SVG, written here by hand: a few dozen rectangles and lines, no script, no library (pygal, the
well-kept candidate, embeds a script tag for its tooltips from kozea.github.io by default: a failing request and a
console error wherever the admin has no internet access, as here). The SVG is
built with format_html rather than in a template: the Django template loop over 30 days of bars and table rows took
5-6 ms, most of what the page has left within its budget (8x the admin index at 1M cards). Every number drawn is
also in the chart's description, a tooltip per bar, a table beside it (the text alternative), and on each bar as
data attributes.
"""

import math
from dataclasses import dataclass
from functools import cached_property

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from retention.backlog import Backlog, DeletableOn

CHART_DAYS = 30
WIDTH = 760
PLOT_TOP = 34
PLOT_HEIGHT = 170
# The overdue panel on the left, the next days on the right, each with its own scale: tens of thousands overdue
# would flatten a few hundred arriving a day.
OVERDUE_PANEL = (64, 226)
DAYS_PANEL = (330, 750)
BAR_GAP = 0.25  # of a day's slot
# Lines at 1, 2, ... nights' worth of cards across the overdue panel, while they stay readable.
MAX_NIGHT_LINES = 8


@dataclass(frozen=True)
class Bar:
    """One stacked bar: property objects below, projects above; y grows downwards, as in SVG."""

    key: str  # "after-last-run", "now", or the day (ISO date)
    label: str
    property_objects: int
    projects: int
    x: float
    width: float
    property_objects_y: float
    property_objects_height: float
    projects_y: float
    projects_height: float
    show_label: bool

    @property
    def cards(self) -> int:
        return self.property_objects + self.projects

    @property
    def top(self) -> float:
        return self.projects_y

    @property
    def center(self) -> float:
        return self.x + self.width / 2


@dataclass(frozen=True)
class Line:
    """A horizontal line across a panel at a number of cards, and what it marks; the label starts at label_x, on
    the line, or just above it when inside the panel."""

    y: float
    x1: float
    x2: float
    label: str
    label_x: float
    label_y: float


@dataclass(frozen=True)
class Panel:
    title: str
    x1: float
    x2: float
    scale_max: int
    bars: list[Bar]
    lines: list[Line]

    @property
    def middle(self) -> float:
        return (self.x1 + self.x2) / 2


@dataclass(frozen=True)
class BacklogChart:
    overdue: Panel
    days: Panel
    overdue_now: Bar
    after_last_run: Bar | None
    arriving: list[Bar]
    cards_per_night: int
    nights_needed: int
    busiest_day: Bar | None
    width: int = WIDTH
    plot_top: int = PLOT_TOP
    plot_bottom: int = PLOT_TOP + PLOT_HEIGHT

    @property
    def height(self) -> int:
        return self.plot_bottom + 44

    @property
    def arriving_cards(self) -> int:
        return sum(bar.cards for bar in self.arriving)

    @cached_property
    def summary(self) -> str:
        """The chart in one paragraph: its caption and its SVG description."""
        now = self.overdue_now
        text = [
            f"Overdue now: {now.cards:,} card{plural(now.cards)} ({now.property_objects:,} property objects, "
            f"{now.projects:,} projects)"
            + (f"; the last run left {self.after_last_run.cards:,}." if self.after_last_run else ".")
        ]
        if self.nights_needed:
            text.append(
                f"At up to {self.cards_per_night:,} cards a night the job needs {self.nights_needed:,} "
                f"night{plural(self.nights_needed)} to clear them."
            )
        else:
            text.append("Nothing for the job to clear.")
        arriving = self.arriving_cards
        busiest = (
            f", at most {self.busiest_day.cards:,} on one day ({self.busiest_day.key})" if self.busiest_day else ""
        )
        verb = "becomes" if arriving == 1 else "become"
        text.append(
            f"In the next {len(self.arriving)} days {arriving:,} more card{plural(arriving)} {verb} deletable{busiest}."
        )
        return " ".join(text)

    @cached_property
    def svg(self) -> SafeString:
        return format_html(
            '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {} {}" role="img" '
            'aria-labelledby="backlog-chart-title backlog-chart-desc">'
            '<title id="backlog-chart-title">Delisted backlog: cards overdue now and cards becoming deletable on '
            "each of the next {} days</title>"
            '<desc id="backlog-chart-desc">{}</desc>{}{}{}</svg>',
            self.width, self.height, len(self.arriving), self.summary,
            panel_svg(self.overdue, "overdue", self, values_on_bars=True),
            panel_svg(self.days, "days", self, values_on_bars=False),
            format_html(
                '<g class="legend" transform="translate({}, {})">'
                '<rect class="property-objects" width="10" height="10" y="-9"/><text x="14">property objects</text>'
                '<rect class="projects" x="130" width="10" height="10" y="-9"/><text x="144">projects</text></g>',
                self.days.x1, self.plot_bottom + 30,
            ),
        )

    @cached_property
    def table_rows(self) -> SafeString:
        """The rows of the chart's table: the overdue bars, then one row per day."""
        headed = []
        if self.after_last_run:
            headed.append((self.after_last_run, "Overdue after the last run"))
        headed.append((self.overdue_now, "Overdue now"))
        headed += [
            (bar, f"Becoming deletable on {bar.key}{' (from now on)' if index == 0 else ''}")
            for index, bar in enumerate(self.arriving)
        ]
        return format_html_join(
            "\n", '<tr data-key="{}"><th>{}</th><td class="property-objects">{}</td><td class="projects">{}</td></tr>',
            ((bar.key, heading, grouped(bar.property_objects), grouped(bar.projects)) for bar, heading in headed),
        )


def grouped(count: int) -> str:
    """A count as the page shows counts: thousands separated by commas."""
    return f"{count:,}"


def plural(count: int) -> str:
    return "" if count == 1 else "s"


def panel_svg(panel: Panel, name: str, chart: BacklogChart, *, values_on_bars: bool) -> SafeString:
    """A panel: its title, its scale (0 and its top), its bars with their tooltips, labels and lines."""
    bottom = chart.plot_bottom
    bars = format_html_join(
        "",
        '<g class="bar" data-key="{}" data-property-objects="{}" data-projects="{}">'
        "<title>{}: {} property objects, {} projects</title>"
        '<rect class="property-objects" x="{}" y="{}" width="{}" height="{}"/>'
        '<rect class="projects" x="{}" y="{}" width="{}" height="{}"/>{}</g>{}',
        (
            (
                bar.key, bar.property_objects, bar.projects, bar.label, grouped(bar.property_objects),
                grouped(bar.projects),
                bar.x, bar.property_objects_y, bar.width, bar.property_objects_height,
                bar.x, bar.projects_y, bar.width, bar.projects_height,
                format_html('<text class="value" x="{}" y="{}" text-anchor="middle">{}</text>', bar.center,
                            bar.top - 4, grouped(bar.cards)) if values_on_bars else "",
                format_html('<text class="tick" x="{}" y="{}" text-anchor="middle">{}</text>', bar.center, bottom + 15,
                            bar.label) if bar.show_label else "",
            )
            for bar in panel.bars
        ),
    )
    lines = format_html_join(
        "",
        '<line class="limit" x1="{}" y1="{}" x2="{}" y2="{}"/><text class="limit-label" x="{}" y="{}">{}</text>',
        ((line.x1, line.y, line.x2, line.y, line.label_x, line.label_y, line.label) for line in panel.lines),
    )
    return format_html(
        '<g class="panel" id="backlog-chart-{}">'
        '<text class="panel-title" x="{}" y="16" text-anchor="middle">{}</text>'
        '<text class="tick" x="{}" y="{}" text-anchor="end">{}</text>'
        '<text class="tick" x="{}" y="{}" text-anchor="end">0</text>'
        '<line class="grid" x1="{}" y1="{}" x2="{}" y2="{}"/>'
        '<line class="axis" x1="{}" y1="{}" x2="{}" y2="{}"/>{}{}</g>',
        name, panel.middle, panel.title,
        panel.x1 - 6, chart.plot_top + 4, grouped(panel.scale_max),
        panel.x1 - 6, bottom + 4,
        panel.x1, chart.plot_top, panel.x2, chart.plot_top,
        panel.x1, bottom, panel.x2, bottom, bars, lines,
    )


def nice_ceiling(value: int) -> int:
    """The smallest 1, 2 or 5 times a power of ten that is at least `value` (at least 1): the top of a scale."""
    if value <= 1:
        return 1
    power = 10 ** math.floor(math.log10(value))
    return next(step * power for step in (1, 2, 5, 10) if step * power >= value)


def stacked_bar(
    *, key: str, label: str, property_objects: int, projects: int, x: float, width: float, scale_max: int,
    show_label: bool = True,
) -> Bar:
    def height(cards: int) -> float:
        return PLOT_HEIGHT * cards / scale_max

    bottom = PLOT_TOP + PLOT_HEIGHT
    property_objects_height = height(property_objects)
    projects_height = height(projects)
    return Bar(
        key=key, label=label, property_objects=property_objects, projects=projects, x=round(x, 2),
        width=round(width, 2), property_objects_y=round(bottom - property_objects_height, 2),
        property_objects_height=round(property_objects_height, 2),
        projects_y=round(bottom - property_objects_height - projects_height, 2),
        projects_height=round(projects_height, 2), show_label=show_label,
    )


def level(cards: int, scale_max: int) -> float:
    return round(PLOT_TOP + PLOT_HEIGHT * (1 - cards / scale_max), 2)


def night_line(y: float, x1: float, x2: float, label: str) -> Line:
    """Labelled in the gap right of the overdue panel, clear of its bars."""
    return Line(y, x1, x2, label, label_x=x2 + 4, label_y=y + 4)


def backlog_chart(
    *, backlog: Backlog, deletable_on: list[DeletableOn], cards_per_night: int, nights_needed: int,
    last_run_overdue: tuple[int, int] | None = None,
) -> BacklogChart:
    """The chart of the page: `last_run_overdue` is (property objects, projects) the last run left overdue, as the
    metrics sink holds it, None when it holds none."""
    overdue_bars = [("now", "now", backlog.property_objects.overdue, backlog.projects.overdue)]
    if last_run_overdue is not None:
        overdue_bars.insert(0, ("after-last-run", "after last run", *last_run_overdue))
    overdue_max = nice_ceiling(max(objects + projects for _, _, objects, projects in overdue_bars))
    x1, x2 = OVERDUE_PANEL
    slot = (x2 - x1) / len(overdue_bars)
    bars = [
        stacked_bar(
            key=key, label=label, property_objects=objects, projects=projects, x=x1 + index * slot + slot * 0.2,
            width=slot * 0.6, scale_max=overdue_max,
        )
        for index, (key, label, objects, projects) in enumerate(overdue_bars)
    ]
    # What each night's run takes off the overdue cards: a line where each of the nights before the last one ends.
    night_lines = [
        night_line(level(nights * cards_per_night, overdue_max), x1, x2, f"{nights} night{'s' * (nights > 1)}")
        for nights in range(1, min(nights_needed, MAX_NIGHT_LINES + 1))
    ]
    overdue = Panel("Overdue", x1, x2, overdue_max, bars, night_lines)

    days_max = nice_ceiling(max((day.cards for day in deletable_on), default=0))
    x1, x2 = DAYS_PANEL
    slot = (x2 - x1) / max(len(deletable_on), 1)
    arriving = [
        stacked_bar(
            key=day.day.isoformat(), label=f"{day.day:%b %-d}", property_objects=day.property_objects,
            projects=day.projects, x=x1 + index * slot + slot * BAR_GAP / 2, width=slot * (1 - BAR_GAP),
            scale_max=days_max, show_label=index % 7 == 0,
        )
        for index, day in enumerate(deletable_on)
    ]
    # Arrivals above one night's capacity make the backlog grow: the line shows only where a day comes near it.
    capacity_lines = []
    if cards_per_night <= days_max:
        y = level(cards_per_night, days_max)
        capacity_lines.append(Line(y, x1, x2, "one night's run", label_x=x1 + 4, label_y=y - 4))
    days = Panel(f"Becoming deletable, next {len(deletable_on)} days", x1, x2, days_max, arriving, capacity_lines)
    busiest = max(arriving, key=lambda bar: bar.cards, default=None)
    return BacklogChart(
        overdue=overdue, days=days, overdue_now=bars[-1], after_last_run=bars[0] if len(bars) > 1 else None,
        arriving=arriving, cards_per_night=cards_per_night, nights_needed=nights_needed,
        busiest_day=busiest if busiest is not None and busiest.cards else None,
    )
