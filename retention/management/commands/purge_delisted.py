"""`manage.py purge_delisted`: the nightly DelistedRetentionJob. Thin: parse, run the service, print its result and
exit with the status its outcome maps to. The result goes to stdout (`--json`: one JSON object on every exit); logs
and the final error line go to stderr through logging, so with LOG_FORMAT=json every stderr line is JSON.
"""

import argparse
import json
import logging
import os
import signal
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, DjangoHelpFormatter
from django.db import DatabaseError
from opentelemetry import trace
from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from config.logging import carried, current_trace_id, first_line, syslog_prefixed
from config.numbers import decimal_number, whole_number
from config.tracing import flush_traces
from config.version import VERSION
from retention.last_run import last_run_report
from retention.limits import LIMIT_OF_FIELD, LIMITS, Limit, PurgeLimits, PurgeLimitsError, number
from retention.results import Outcome, PurgeResult, Run, StopReason, database_problem
from retention.service import job_database, purge_delisted_cards
from retention.session import StopRequest
from retention.spans import failed, result_attributes, run_attributes, run_span

logger = logging.getLogger("retention.command")

ERROR_PREFIX = "purge_delisted: error: "
SECOND_SIGNAL = (
    "a second {signal} ended the process at once: the server rolls back the batch in flight and frees the advisory "
    "lock as the connection closes"
)
EXIT_CODES = """exit status:
  0  completed, stopped on a limit (has_more), stopped by SIGTERM/SIGINT, or skipped: another run holds the lock
  1  the run failed: a database error, a card that cannot be deleted (culprit; also when then stopped), the
     database connection lost, the database unreachable, the catalog schema missing, or a connection pooler in
     front of the job's database
  2  bad option or setting: nothing was read, locked or deleted
  143, 130  a second SIGTERM, SIGINT ended the process at once"""
# -v: 0 errors only, 1 the start and end of a run, 2 and 3 a line per batch.
LOG_LEVEL_OF_VERBOSITY = {0: logging.ERROR, 2: logging.DEBUG, 3: logging.DEBUG}


class HelpFormatter(DjangoHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Django's option order, and the exit codes' lines kept as written."""


def accepted_range(limit: Limit) -> str:
    """What `--help` says an option accepts: a minimum of 0 means off, one of None greater than 0."""
    low = 1 if limit.minimum is None else limit.minimum
    unit = f" {limit.unit}" if limit.is_duration else ""
    off = ", 0 = off" if limit.minimum == 0 else ""
    return f"{number(low)}..{number(limit.maximum)}{unit}{off}"


class Command(BaseCommand):
    help = "Physically delete catalog cards Delisted longer than the retention period, in bounded batches."
    # Options override settings, so the settings check (retention.apps) must not stop a run the options fix;
    # the command validates the limits it is given.
    requires_system_checks = []

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.run_id = uuid.uuid4()
        self.from_command_line = False
        self.handles_signals = False  # SIGTERM and SIGINT stop the run (stop_on_signals)
        self.exit_status = 0

    def get_version(self):
        """`--version` names the deployed project (pyproject.toml), not Django."""
        return VERSION

    def create_parser(self, prog_name, subcommand, **kwargs):
        # A deleting job does not guess: `--retention` is not taken for `--retention-days`.
        parser = super().create_parser(
            prog_name, subcommand, allow_abbrev=False, epilog=EXIT_CODES, formatter_class=HelpFormatter, **kwargs,
        )
        # A bad option raises CommandError, as under call_command(), instead of argparse's usage block: it ends the
        # run in one line (run_from_argv), as every other error does. So does a bad setting (Django's "raise on
        # CommandError").
        parser.called_from_command_line = False
        parser.set_defaults(traceback=True)
        return parser

    def add_arguments(self, parser):
        for limit in LIMITS:
            if limit.option:
                parser.add_argument(
                    limit.option, dest=limit.field, type=decimal_number if limit.unit == "factor" else whole_number,
                    metavar="N", help=f"{limit.description}, {accepted_range(limit)} "
                    f"(default: {limit.setting} = {getattr(settings, limit.setting)})",
                )
        parser.add_argument(
            "--database", help=f"database alias to run on (default: DELISTED_RETENTION_LOCK_DATABASE = "
            f"{settings.DELISTED_RETENTION_LOCK_DATABASE})",
        )
        parser.add_argument("--dry-run", action="store_true", help="count what would be deleted; delete nothing")
        parser.add_argument("--json", action="store_true", help="print the result as one JSON object")
        parser.add_argument(
            "--last-run", action="store_true",
            help="print the last run (from the metrics sink the admin page reads) and the backlog now; run nothing",
        )

    def run_from_argv(self, argv):
        """The command line's run, from its first line to its last: its root span is open, and its run id and trace
        id on every line, from before the options are parsed until after the final line; then the exit status. A bad
        option or setting and a bug end it in one line too. `--last-run` runs nothing: no span, no run id."""
        self.from_command_line, json_wanted = True, "--json" in argv[2:]
        runs = "--last-run" not in argv[2:]
        with carried(run_id=str(self.run_id) if runs else None) as fields:
            try:
                with run_span(self.run_id) if runs else nullcontext():
                    fields["trace_id"] = current_trace_id()
                    try:
                        super().run_from_argv(argv)
                    except CommandError as error:  # a bad option or setting: nothing read, locked or deleted
                        refused = Run(self.run_id).result(StopReason.FAILED, error=str(error).removeprefix("Error: "))
                        self.end(refused, json_wanted=json_wanted, status=2)
                    except Exception as error:
                        bug = Run(self.run_id).result(StopReason.FAILED, error=f"unexpected error: {first_line(error)}")
                        self.end(bug, json_wanted=json_wanted, traceback=True)
            finally:
                flush_traces()
        if self.handles_signals:
            # Said and done. Python's finalization puts the default handlers back, and a SIGTERM or SIGINT then
            # would end the process killed, whatever the run's exit status: the exit is the run's.
            for signum in (signal.SIGTERM, signal.SIGINT):
                signal.signal(signum, signal.SIG_IGN)
        sys.exit(self.exit_status)

    def handle(self, *args, **options):
        try:
            limits = PurgeLimits.from_settings({field: options.get(field) for field in LIMIT_OF_FIELD})
        except PurgeLimitsError as error:
            raise CommandError(str(error), returncode=2) from None
        using = job_database(options["database"])
        if using not in settings.DATABASES:
            raise CommandError(
                f"--database: no database alias {using!r} (configured: {', '.join(settings.DATABASES)})",
                returncode=2,
            )
        if options["last_run"]:
            return self.show_last_run(limits, using, json_wanted=options["json"])
        verbosity = options["verbosity"]
        if verbosity in LOG_LEVEL_OF_VERBOSITY:
            logging.getLogger("retention").setLevel(LOG_LEVEL_OF_VERBOSITY[verbosity])
        trace.get_current_span().set_attributes(run_attributes(database=using, limits=limits,
                                                               dry_run=options["dry_run"]))
        self.handles_signals = self.from_command_line
        stop = stop_on_signals() if self.handles_signals else StopRequest()
        show_progress = sys.stderr.isatty() and not options["json"] and not options["dry_run"] and verbosity >= 1
        with progress_bar(enabled=show_progress) as progress:
            result = purge_delisted_cards(limits, dry_run=options["dry_run"], stop=stop, using=using,
                                          run_id=self.run_id, progress=progress)
        self.end(result, json_wanted=options["json"], verbosity=verbosity)

    def end(self, result: PurgeResult, *, json_wanted: bool, verbosity: int = 1, status: int | None = None,
            traceback: bool = False) -> None:
        """Every ending of a run, from its result: printed on stdout (a run that never started has no summary, its
        error says it; under systemd a failed run's line is filed as an error), the final error line, the root span's
        outcome, and the exit status: 1 for a failed run unless `status` says otherwise."""
        run_failed = result.outcome is Outcome.FAILED
        level = logging.ERROR if run_failed else logging.INFO
        if json_wanted:
            self.stdout.write(syslog_prefixed(json.dumps(result.as_dict()), self.stdout, level))
        elif verbosity >= 1 and result.cutoff is not None:
            self.stdout.write(syslog_prefixed(summary(result), self.stdout, level))
        span = trace.get_current_span()
        span.set_attributes(result_attributes(result))
        if run_failed:
            logger.error(ERROR_PREFIX + result.error, exc_info=traceback)
            failed(span, result.error)
        self.exit_status = int(run_failed) if status is None else status

    def show_last_run(self, limits: PurgeLimits, using: str, *, json_wanted: bool) -> None:
        try:
            report = last_run_report(limits=limits, using=using)
        except DatabaseError as error:
            message = database_problem(error, using)
            if json_wanted:
                self.stdout.write(json.dumps({"error": message}))
            logger.error(ERROR_PREFIX + message)
            self.exit_status = 1
            return
        self.stdout.write(json.dumps(report.as_dict()) if json_wanted else report.summary())


def summary(result: PurgeResult) -> str:
    if result.outcome == Outcome.LOCK_BUSY:
        return f"skipped: another purge_delisted run holds the lock (run_id {result.run_id})"
    verb = "would delete" if result.dry_run else "deleted"
    has_more = {True: "yes", False: "no", None: "unknown"}[result.has_more]
    culprits = f", cards that cannot be deleted: {result.culprit_count}" if result.culprit_count else ""
    return (
        f"{'dry run' if result.dry_run else 'purge'} {result.stop_reason}: {verb} "
        f"{result.deleted_property_object_cards} property object cards, {result.deleted_project_cards} project cards "
        f"and {result.deleted_overrides} display overrides in {result.batches_processed} batches; "
        f"has_more={has_more}, projects held back: {result.projects_held_back}{culprits}, "
        f"overdue at start: {result.overdue_property_object_cards} property objects, "
        f"{result.overdue_project_cards} projects; cutoff {result.cutoff.isoformat()}; "
        f"{result.duration_seconds:.3f}s; run_id {result.run_id}"
    )


@contextmanager
def progress_bar(*, enabled: bool) -> Iterator[tqdm | None]:
    """For a person at a terminal: on stderr, a count of cards until the run's start count gives the bar its total,
    with log lines printed above it. Cron, pipes, --json and --dry-run get nothing."""
    if not enabled:
        yield None
        return
    tqdm.monitor_interval = 0  # no tqdm monitor thread
    with logging_redirect_tqdm(), tqdm(unit="cards", desc="purge_delisted", file=sys.stderr) as bar:
        yield bar


def stop_on_signals() -> StopRequest:
    """SIGTERM and SIGINT ask the run to stop before its next batch. A second ends the process at once, as kill -9
    would: the server rolls back the batch in flight and frees the lock when the connection closes. The handlers stay
    until the run's last line is out (then both signals are ignored: run_from_argv): a first signal after the run
    still lets it print its result."""
    stop = StopRequest()

    def handle(signum, frame):
        if not stop.requested:
            stop.request()
            return
        try:
            logger.error(ERROR_PREFIX + SECOND_SIGNAL.format(signal=signal.Signals(signum).name))
        finally:
            os._exit(128 + signum)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, handle)
    return stop
