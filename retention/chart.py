"""The picture of the backlog on the Delisted retention page: the overdue cards now (and after the last run, from the
metrics sink), the cards becoming deletable on each of the next days, and the nights the job needs at its limits.

Drawn server-side as SVG by a template (admin/retention/backlog_chart.html) from the geometry computed here: a few
dozen rectangles and lines, no script, no library. Every number drawn is also in the chart's title, its description
and a table beside it (the text alternative), and on each bar as data attributes.
"""

import math
from dataclasses import dataclass
from retention.backlog import Backlog, DeletableOn

CHART_DAYS = 30
WIDTH = 760
PLOT_TOP = 34
PLOT_HEIGHT = 170
# The overdue panel on the left, the next days on the right, each with its own scale: tens of thousands overdue
# would flatten a few hundred arriving a day.
OVERDUE_PANEL = (64, 240)
DAYS_PANEL = (310, 750)
BAR_GAP = 0.25  # of a day's slot
# Lines at 1, 2, ... nights' worth of cards in the overdue panel, while they stay readable.
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
    """A horizontal line across a panel at a number of cards, and what it marks."""

    y: float
    x1: float
    x2: float
    label: str


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
    def panels(self) -> tuple[Panel, Panel]:
        return self.overdue, self.days

    @property
    def arriving_cards(self) -> int:
        return sum(bar.cards for bar in self.arriving)


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
    night_lines = [
        Line(y=level(nights * cards_per_night, overdue_max), x1=x1, x2=x2, label=f"{nights} night{'s' * (nights > 1)}")
        for nights in range(1, MAX_NIGHT_LINES + 1)
        if nights * cards_per_night <= overdue_max
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
    capacity_lines = [Line(level(cards_per_night, days_max), x1, x2, "one night's run")] if cards_per_night <= days_max else []
    days = Panel(f"Becoming deletable, next {len(deletable_on)} days", x1, x2, days_max, arriving, capacity_lines)
    busiest = max(arriving, key=lambda bar: bar.cards, default=None)
    return BacklogChart(
        overdue=overdue, days=days, overdue_now=bars[-1], after_last_run=bars[0] if len(bars) > 1 else None,
        arriving=arriving, cards_per_night=cards_per_night, nights_needed=nights_needed,
        busiest_day=busiest if busiest is not None and busiest.cards else None,
    )
