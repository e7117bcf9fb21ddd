"""`manage.py purge_delisted`: the nightly DelistedRetentionJob. Thin: parse, run the service, print.

Exit status: 0 when the run completed, stopped on a limit or a signal, or skipped a busy lock; 2 for bad options
or settings; 1 when a batch failed. The result goes to stdout (`--json`: one JSON object); logs go to stderr.
"""

import json
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError
from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from retention.backlog import compute_cutoff, measure_backlog
from retention.service import PurgeResult, PurgeSettingsError, purge_delisted_cards

# Which option and setting feed each limit, for error messages an operator can act on.
LIMIT_SOURCES = {
    "retention": "--retention-days / DELISTED_RETENTION_PERIOD_DAYS",
    "batch_size": "--batch-size / DELISTED_RETENTION_BATCH_SIZE",
    "max_batches": "--max-batches / DELISTED_RETENTION_MAX_BATCHES_PER_RUN",
    "max_duration": "--max-duration-seconds / DELISTED_RETENTION_MAX_RUN_DURATION_SECONDS",
    "batch_pause": "--batch-pause-ms / DELISTED_RETENTION_BATCH_PAUSE_MS",
    "statement_timeout": "DELISTED_RETENTION_STATEMENT_TIMEOUT_MS",
    "lock_timeout": "DELISTED_RETENTION_LOCK_TIMEOUT_MS",
}


class OneLineErrorParser(CommandParser):
    """A mistyped option is reported on one line (exit 2), like every other error of the job, instead of
    argparse's usage block: cron mails and log lines stay readable. `--help` still shows the usage."""

    def error(self, message):
        if self.called_from_command_line:
            self.exit(2, f"{self.prog}: error: {message}\n")
        super().error(message)  # call_command(): CommandError


class Command(BaseCommand):
    help = "Physically delete catalog cards Delisted longer than the retention period, in bounded batches."
    # Options override settings, so the settings check (retention.checks) must not stop a run the options fix;
    # the service validates the limits it is given.
    requires_system_checks = []

    def create_parser(self, prog_name, subcommand, **kwargs):
        # A deleting job does not guess: `--retention` is not taken for `--retention-days`.
        parser = super().create_parser(prog_name, subcommand, allow_abbrev=False, **kwargs)
        parser.__class__ = OneLineErrorParser  # BaseCommand.create_parser has no hook for the parser class
        return parser

    def add_arguments(self, parser):
        parser.add_argument("--retention-days", type=int, help="default: DELISTED_RETENTION_PERIOD_DAYS")
        parser.add_argument("--batch-size", type=int, help="cards per batch; default: DELISTED_RETENTION_BATCH_SIZE")
        parser.add_argument("--max-batches", type=int, help="default: DELISTED_RETENTION_MAX_BATCHES_PER_RUN")
        parser.add_argument(
            "--max-duration-seconds", type=int, help="default: DELISTED_RETENTION_MAX_RUN_DURATION_SECONDS"
        )
        parser.add_argument(
            "--batch-pause-ms", type=int, help="sleep between batches; default: DELISTED_RETENTION_BATCH_PAUSE_MS"
        )
        parser.add_argument("--dry-run", action="store_true", help="count what would be deleted; delete nothing")
        parser.add_argument("--json", action="store_true", help="print the result as one JSON object")

    def handle(self, *args, **options):
        def option_or_setting(option, setting):
            return options[option] if options[option] is not None else getattr(settings, setting)

        try:
            retention = duration("retention", days=option_or_setting("retention_days", "DELISTED_RETENTION_PERIOD_DAYS"))
            show_progress = sys.stderr.isatty() and not options["json"] and not options["dry_run"]
            with (
                stop_on_signals() as stop_requested,
                progress_bar(enabled=show_progress, retention=retention) as on_batch,
            ):
                result = purge_delisted_cards(
                    retention=retention,
                    batch_size=option_or_setting("batch_size", "DELISTED_RETENTION_BATCH_SIZE"),
                    max_batches=option_or_setting("max_batches", "DELISTED_RETENTION_MAX_BATCHES_PER_RUN"),
                    max_duration=duration(
                        "max_duration",
                        seconds=option_or_setting(
                            "max_duration_seconds", "DELISTED_RETENTION_MAX_RUN_DURATION_SECONDS"
                        ),
                    ),
                    batch_pause=duration(
                        "batch_pause",
                        milliseconds=option_or_setting("batch_pause_ms", "DELISTED_RETENTION_BATCH_PAUSE_MS"),
                    ),
                    statement_timeout=duration(
                        "statement_timeout", milliseconds=settings.DELISTED_RETENTION_STATEMENT_TIMEOUT_MS
                    ),
                    lock_timeout=duration("lock_timeout", milliseconds=settings.DELISTED_RETENTION_LOCK_TIMEOUT_MS),
                    dry_run=options["dry_run"],
                    should_stop=stop_requested.is_set,
                    on_batch=on_batch,
                    lock_using=settings.DELISTED_RETENTION_LOCK_DATABASE,
                )
        except PurgeSettingsError as error:
            raise CommandError(f"{LIMIT_SOURCES[error.field]}: {error}", returncode=2) from None
        except DatabaseError as error:
            # The failed batch is already logged with run_id and its ids, and rolled back whole.
            raise CommandError(f"purge failed: {error}".strip(), returncode=1) from error

        if options["json"]:
            self.stdout.write(json.dumps(result.as_dict()))
        else:
            self.stdout.write(summary(result))


def duration(field: str, **amount: int) -> timedelta:
    """A limit as a timedelta; a number too large for one is reported like any other out-of-range limit."""
    try:
        return timedelta(**amount)
    except OverflowError:
        [(unit, value)] = amount.items()
        raise PurgeSettingsError(field, f"{value} {unit} is out of range") from None


def summary(result: PurgeResult) -> str:
    if result.stop_reason == "lock_busy":
        return f"skipped: another purge_delisted run holds the lock (run_id {result.run_id})"
    verb = "would delete" if result.dry_run else "deleted"
    return (
        f"{'dry run' if result.dry_run else 'purge'} {result.stop_reason}: {verb} "
        f"{result.deleted_property_object_cards} property object cards, {result.deleted_project_cards} project cards "
        f"and {result.deleted_overrides} display overrides in {result.batches_processed} batches; "
        f"has_more={'yes' if result.has_more else 'no'}, projects held back: {result.projects_held_back}, "
        f"overdue at start: {result.overdue_property_object_cards} property objects, "
        f"{result.overdue_project_cards} projects; cutoff {result.cutoff.isoformat()}; "
        f"{result.duration_seconds:.3f}s; run_id {result.run_id}"
    )


@contextmanager
def progress_bar(*, enabled: bool, retention: timedelta) -> Iterator[Callable[[int], None] | None]:
    """For a person at a terminal: a bar over the cards overdue now, on stderr, with log lines printed above it.
    Cron, pipes, --json and --dry-run get nothing extra, not even the count."""
    if not enabled:
        yield None
        return
    overdue = measure_backlog(cutoff=compute_cutoff(retention, None, "default")).overdue_cards
    with logging_redirect_tqdm(), tqdm(total=overdue, unit="cards", desc="purge_delisted", file=sys.stderr) as bar:
        yield bar.update


@contextmanager
def stop_on_signals():
    """SIGTERM and SIGINT ask for a graceful stop: the service checks before each batch, so the batch in flight
    commits or rolls back whole. Outside the main thread (tests) no handler can be installed; nothing changes."""
    stop_requested = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield stop_requested
        return
    previous = {sig: signal.signal(sig, lambda *_: stop_requested.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield stop_requested
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
