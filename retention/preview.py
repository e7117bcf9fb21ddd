"""What the next run would delete, without deleting: the job's dry run (preview_purge), the run's loop as arithmetic
(preview_run) on exact counts of the rows its batches would take, read without locks. The admin page reckons its
preview with the same arithmetic from its own counts.
"""

from datetime import datetime

from retention.backlog import Backlog, measure_backlog
from retention.results import StopReason
from retention.session import JobSession
from retention.statements import STATEMENTS


def objects_taken(cursor, *, cutoff: datetime, objects: int) -> dict:
    """The parameters that say which overdue property objects a run reaching `objects` of them takes: the cutoff and
    the first object it leaves, `kept_from_*` (None: it leaves no overdue object). An index-only scan of up to
    `objects` entries."""
    cursor.execute(STATEMENTS["first object kept"], {"cutoff": cutoff, "objects": objects})
    kept_from_at, kept_from_id = cursor.fetchone() or (None, None)
    return {"cutoff": cutoff, "kept_from_at": kept_from_at, "kept_from_id": kept_from_id}


def count_held_back(cursor, taken: dict) -> int:
    """The overdue projects still holding a property-object card once the objects `taken` (objects_taken) are gone."""
    cursor.execute(STATEMENTS["held back after"], taken)
    return cursor.fetchone()[0]


def take_in_batches(count: int, batch_size: int, batches_left: int) -> tuple[int, int, bool]:
    """The job's loop (retention.service.purge_phases) on one phase's count: the rows it takes, the batches that
    select something, whether it ran dry. A phase ends on a short batch (an empty one too, which needs a batch
    left to be tried); max_batches is checked before every batch."""
    full_batches = count // batch_size
    if batches_left > full_batches:
        return count, full_batches + (count % batch_size > 0), True
    return batches_left * batch_size, batches_left, False


def preview_run(
    *, backlog: Backlog, held_back_after_overdue_objects: int, batch_size: int, max_batches: int
) -> dict:
    """What the next run would do at these limits (MaxRunDuration aside), as its result's fields: the run's loop as
    arithmetic. The projects phase runs only once the property objects ran dry, and then every overdue project not held
    back by a card that is not overdue is purgeable (held_back_after_overdue_objects)."""
    overdue_objects = backlog.property_objects.overdue
    purgeable_projects = backlog.projects.overdue - held_back_after_overdue_objects
    # The orphan-override phases come first and are left out: a preview does not count orphans.
    objects, object_batches, objects_ran_dry = take_in_batches(overdue_objects, batch_size, max_batches)
    projects, project_batches, projects_ran_dry = (
        take_in_batches(purgeable_projects, batch_size, max_batches - object_batches) if objects_ran_dry
        else (0, 0, False)
    )
    return {
        "deleted_property_object_cards": objects, "deleted_project_cards": projects,
        "batches_processed": object_batches + project_batches,
        "has_more": objects < overdue_objects or projects < purgeable_projects,
        "stop_reason": StopReason.COMPLETED if projects_ran_dry else StopReason.MAX_BATCHES,
    }


def preview_purge(session: JobSession, *, cutoff: datetime) -> dict:
    """Dry run: the fields of the result of a run with these limits now (max_duration and orphan overrides aside).
    The loop's arithmetic is preview_run's, on the exact count of the projects held back once the property objects
    the run reaches are gone; the overrides are those of the rows taken."""
    limits = session.limits
    backlog = measure_backlog(session, cutoff=cutoff, count_held_back=False, in_chunks=True)
    objects_reached = min(backlog.property_objects.overdue, limits.batch_size * limits.max_batches)
    with session.transaction() as cursor:
        taken = objects_taken(cursor, cutoff=cutoff, objects=objects_reached)
        held_back = count_held_back(cursor, taken)
    preview = preview_run(
        backlog=backlog, held_back_after_overdue_objects=held_back, batch_size=limits.batch_size,
        max_batches=limits.max_batches,
    )
    with session.transaction() as cursor:
        cursor.execute(STATEMENTS["overrides of taken"], {**taken, "projects": preview["deleted_project_cards"]})
        object_overrides, building_overrides = cursor.fetchone()
    return preview | {
        "deleted_property_object_overrides": object_overrides, "deleted_building_overrides": building_overrides,
        "projects_held_back": held_back, "overdue_property_object_cards": backlog.property_objects.overdue,
        "overdue_project_cards": backlog.projects.overdue,
    }
