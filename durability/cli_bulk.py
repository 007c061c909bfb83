"""`--query` of the schedule's bulk commands: one signal to every running schedule a
visibility query matches, sent by a Temporal batch job (`durability.bulk`)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from durability.bulk import BULK_MESSAGES, bulk_payload, bulk_reason, schedule_query
from durability.cli_common import NotDone, UsageError, table

if TYPE_CHECKING:
    from durability.client import DurabilityClient

# The commands that take `--query` instead of an object ID: the messages a batch job sends.
BULK_COMMANDS = BULK_MESSAGES
BULK_OPTIONS = ("dry_run", "yes", "no_wait", "reason")


async def schedule_bulk(client: DurabilityClient, args: argparse.Namespace) -> Any:
    """Count the schedules `--query` matches (and list some); with `--yes`, start the batch
    job that signals them all and (unless `--no-wait`) wait for it."""
    args.show = show_bulk
    version = getattr(args, "version", None)
    changes = args.set if args.command == "configure" else None
    note = getattr(args, "note", None)
    # Checked before anything is sent: the query, the payload and the reason.
    schedule_query(args.query)
    bulk_payload(args.command, version=version, changes=changes, note=note)
    try:
        reason = bulk_reason(default_reason(args.command) if args.reason is None else args.reason)
    except ValueError as error:
        raise UsageError(f"--{error}") from None
    matches = await client.match_schedules(args.query)
    result: dict[str, Any] = {
        "query": matches.query,
        "matched": matches.count,
        "object_ids": matches.object_ids,
        "job_id": None,
    }
    if args.dry_run or matches.count == 0:
        return result
    if not args.yes:
        raise NotDone(
            result,
            f"nothing sent: add --yes to {args.command} the {matches.count} schedule(s) "
            "--query matches (--dry-run lists them and sends nothing)",
        )
    job_id = await client.start_bulk(
        args.command, args.query, reason=reason, version=version, changes=changes, note=note
    )
    result["job_id"] = job_id
    job = await (client.bulk_job(job_id) if args.no_wait else client.wait_bulk_job(job_id))
    result["job"] = {
        "state": job.state, "matched": job.matched, "completed": job.completed,
        "failed": job.failed, "reason": job.reason,
    }  # fmt: skip
    if job.state == "failed" or job.failed:
        raise NotDone(
            result,
            f"batch job {job_id} {job.state}: {job.failed} of {job.matched} signal(s) failed "
            f"(a schedule that closed or continued as new meanwhile); the same command "
            f"again sends {args.command} to those still matching",
        )
    return result


def default_reason(command: str) -> str:
    """What a batch job records as its reason when `--reason` is not given."""
    import getpass

    try:
        user = getpass.getuser()
    except (OSError, KeyError):  # no login name in this environment
        user = "unknown user"
    return f"durability schedule {command} --query, by {user}"


def show_bulk(result: Any, args: argparse.Namespace) -> str:
    count, ids = result["matched"], result["object_ids"]
    listed = ", ".join(ids) + (f" (first {len(ids)})" if len(ids) < count else "")
    rows: list[tuple[str, Any]] = [
        ("query", result["query"]),
        ("matched", f"{count} running schedule(s)"),
        ("object_ids", listed or "-"),
    ]
    job = result.get("job")
    if job is None:
        why = "no schedule matches" if count == 0 else "dry run"
        return table(("field", "value"), rows) + f"\n\nnothing sent ({why})"
    rows += [
        ("job_id", result["job_id"]),
        ("state", job["state"]),
        ("signals", f"{job['matched']} matched, {job['completed']} completed, "
                    f"{job['failed']} failed"),
        ("reason", job["reason"]),
    ]  # fmt: skip
    text = table(("field", "value"), rows)
    if job["state"] == "running":
        text += (
            f"\n\nstill running: temporal batch describe --job-id {result['job_id']} "
            "shows its progress"
        )
    return text


def add_bulk_options(cmd: argparse.ArgumentParser) -> None:
    """`--query` and what goes with it, on a command that then needs no object ID."""
    cmd.add_argument(
        "--query",
        help="instead of an object ID: every running schedule this visibility filter matches, "
        "e.g. \"DurabilityObjectId STARTS_WITH 'acct-'\" (a Temporal batch job signals them)",
    )
    cmd.add_argument(
        "--dry-run",
        action="store_true",
        help="with --query: count and list, send nothing (configure with an object_id: print "
        "the next fire times before and after and the settings that change)",
    )
    cmd.add_argument(
        "--yes", action="store_true", help="with --query: start the batch job (else refused)"
    )
    cmd.add_argument(
        "--no-wait", action="store_true", help="with --query: return once the job started"
    )
    cmd.add_argument(
        "--reason", help="with --query: recorded on the batch job (default names the command)"
    )


def check_bulk_usage(args: argparse.Namespace) -> None:
    """A command of BULK_COMMANDS takes an object ID or `--query`, and the bulk options only
    with `--query`."""
    query = args.query
    if args.object_id is None and query is None:
        raise UsageError(f"schedule {args.command} needs an object_id or --query")
    if args.object_id is not None and query is not None:
        raise UsageError(
            f"give an object_id or --query, not both (got {args.object_id!r} and {query!r})"
        )
    if query is None:
        for option in BULK_OPTIONS:
            if option == "dry_run" and args.command == "configure":
                continue  # a preview of this schedule's configure
            if getattr(args, option) not in (None, False):
                flag = "--" + option.replace("_", "-")
                raise UsageError(f"{flag} goes with --query, not with an object_id")
        return
    if getattr(args, "signal", False):
        raise UsageError("--signal goes with an object_id: --query always sends signals")
    if args.dry_run and (args.yes or args.no_wait):
        flag = "--yes" if args.yes else "--no-wait"
        raise UsageError(f"--dry-run sends nothing: {flag} contradicts it")
