"""`manage.py purge_delisted`: the nightly DelistedRetentionJob. Thin: parse, run the service, print.

The result goes to stdout (`--json`: one JSON object, however the run ends); logs and errors go to stderr through
logging, so with LOG_FORMAT=json every stderr line is JSON, the final error included. From the command line the
whole command is one run: its run id and root span carry every line it writes, from a bad option to the final error.
"""

import argparse
import json
import logging
import signal
import sys
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser, DjangoHelpFormatter
from django.db import DatabaseError
from opentelemetry import trace
from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from config.logging import carried, first_line, syslog_prefixed
from config.numbers import decimal_number, whole_number
from config.tracing import FLUSH_BOUND_SECONDS, cut_flush, flush_traces
from config.version import VERSION
from retention.last_run import last_run_report
from retention.limits import LIMIT_OF_FIELD, LIMITS, Limit, PurgeLimits, PurgeLimitsError, number
from retention.results import Outcome, PurgeFailed, PurgeResult, StopReason
from retention.service import database_problem, job_database, purge_delisted_cards
from retention.stopping import StopRequest
from retention.spans import current_trace_id, failed, result_attributes, run_span

logger = logging.getLogger("retention.command")

ERROR_PREFIX = "purge_delisted: error: "
EXIT_CODES = """exit status:
  0  completed, stopped on a limit (has_more), stopped by SIGTERM/SIGINT, or skipped: another run holds the lock
  1  the run failed: a database error, a card that cannot be deleted (culprit; also when then stopped), the
     database connection lost, the database unreachable, the catalog schema missing, or a connection pooler in
     front of the job's database
  2  bad option or setting: nothing was read, locked or deleted"""
# -v: 0 errors only, 1 the start and end of a run, 2 and 3 a line per batch.
LOG_LEVEL_OF_VERBOSITY = {0: logging.ERROR, 2: logging.DEBUG, 3: logging.DEBUG}


class OneLineErrorParser(CommandParser):
    """A mistyped option is reported on one line (exit 2), like every other error of the job, instead of
    argparse's usage block: cron mails and log lines stay readable. `--help` still shows the usage."""

    def error(self, message):
        if self.called_from_command_line:
            raise CommandError(message, returncode=2)  # the run's final line: Command.run_from_argv
        super().error(message)  # call_command(): CommandError


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
    # Options override settings, so the settings check (retention.checks) must not stop a run the options fix;
    # the command validates the limits it is given.
    requires_system_checks = []

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.run_id = uuid.uuid4()
        self.json_wanted = False
        self.result: PurgeResult | None = None  # the run's, once the service returned one
        self.result_printed = False

    def get_version(self):
        """`--version` names the deployed project (pyproject.toml), not Django."""
        return VERSION

    def create_parser(self, prog_name, subcommand, **kwargs):
        # A deleting job does not guess: `--retention` is not taken for `--retention-days`.
        parser = super().create_parser(prog_name, subcommand, allow_abbrev=False, epilog=EXIT_CODES, **kwargs)
        parser.__class__ = OneLineErrorParser  # BaseCommand.create_parser has no hook for the parser class
        parser.formatter_class = HelpFormatter
        # Django's "raise on CommandError": the run's errors reach run_from_argv, which ends the run on them
        # (Command.fail), instead of Django printing them.
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
        """The command line's run, from its first line to its last: the run's root span is open before the options
        are parsed and until after the final line; every line carries the run id and the trace id, the trace flush's
        warning at the end included. A bug is logged with its traceback and ends the run as an error too."""
        self.json_wanted = "--json" in argv[2:]  # before parsing: a bad option answers in JSON as well
        runs = "--last-run" not in argv[2:]  # which only reads: no run, so no run span in the traces
        with carried(run_id=str(self.run_id)) as fields:
            try:
                with run_span(self.run_id) if runs else nullcontext():
                    fields["trace_id"] = current_trace_id()
                    try:
                        super().run_from_argv(argv)
                    except CommandError as error:  # a bad option or setting, a failed run
                        self.fail(error)
                    except Exception as error:
                        self.fail(CommandError(f"unexpected error: {first_line(error)}", returncode=1), bug=True)
            finally:
                flush_traces()

    def fail(self, error: CommandError, *, bug: bool = False):
        """End the run on `error`, within its span: the final line (one line, in the log format; a bug's with its
        traceback), the --json object unless the run's result was printed, the span's error status and outcome;
        then exit with the error's status."""
        logger.error(ERROR_PREFIX + str(error), exc_info=bug)
        run = trace.get_current_span()
        if self.result is None:  # the service never ran: a bad option or setting, a bug
            self.result = PurgeResult(run_id=self.run_id, cutoff=None, stop_reason=StopReason.FAILED,
                                      outcome=Outcome.FAILED, error=str(error), trace_id=current_trace_id())
            run.set_attributes(result_attributes(self.result))
        if self.json_wanted and not self.result_printed:
            self.print_result(self.result, {"json": True})
        failed(run, error)
        sys.exit(error.returncode)

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
            try:
                report = last_run_report(limits=limits, using=using)
            except DatabaseError as error:
                raise CommandError(database_problem(error, using), returncode=1) from None
            self.stdout.write(json.dumps(report.as_dict()) if options["json"] else report.summary())
            return
        verbosity = options["verbosity"]
        if verbosity in LOG_LEVEL_OF_VERBOSITY:
            logging.getLogger("retention").setLevel(LOG_LEVEL_OF_VERBOSITY[verbosity])
        show_progress = sys.stderr.isatty() and not options["json"] and not options["dry_run"] and verbosity >= 1

        with stop_on_signals() as stop, progress_bar(enabled=show_progress) as progress:
            try:
                result = purge_delisted_cards(
                    limits, dry_run=options["dry_run"], stop=stop, using=using, run_id=self.run_id,
                    on_start=lambda backlog: progress.reset(total=backlog.overdue_cards), on_batch=progress.update,
                )
            except PurgeFailed as failure:
                self.result = failure.result
                if failure.result.cutoff is not None:  # a run that never started has no summary: its error says it
                    self.print_result(failure.result, options)
                raise CommandError(failure.result.error, returncode=1) from None
        self.print_result(result, options)

    def print_result(self, result: PurgeResult, options) -> None:
        """On stdout; under systemd a failed run's line is filed as an error (syslog_prefixed)."""
        self.result_printed = True
        level = logging.ERROR if result.outcome is Outcome.FAILED else logging.INFO
        if options["json"]:
            self.stdout.write(syslog_prefixed(json.dumps(result.as_dict()), self.stdout, level))
        elif options["verbosity"] >= 1:
            self.stdout.write(syslog_prefixed(summary(result), self.stdout, level))


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


class ProgressBar(tqdm):
    monitor_interval = 0  # no tqdm monitor thread: the stop watcher stays the run's one helper thread


@contextmanager
def progress_bar(*, enabled: bool) -> Iterator[ProgressBar]:
    """For a person at a terminal: on stderr, a count of cards until the run's start count gives the bar its total,
    with log lines printed above it. Cron, pipes, --json and --dry-run get nothing extra."""
    bar = ProgressBar(unit="cards", desc="purge_delisted", file=sys.stderr, disable=not enabled)
    with logging_redirect_tqdm() if enabled else nullcontext(), bar:
        yield bar


@contextmanager
def stop_on_signals() -> Iterator[StopRequest]:
    """SIGTERM and SIGINT ask for a graceful stop: it cancels the statement in flight, whose batch rolls back whole,
    and ends the run before the next batch; the trace flush at exit then gets what is left of the run's exit bound
    (retention.stopping.EXIT_BOUND). Outside the main thread (tests) no handler can be installed."""
    stop = StopRequest()
    in_main_thread = threading.current_thread() is threading.main_thread()
    signals = (signal.SIGTERM, signal.SIGINT) if in_main_thread else ()
    previous = {sig: signal.signal(sig, lambda *_: stop.request()) for sig in signals}
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        cut_flush(stop.exit_wait(FLUSH_BOUND_SECONDS))
