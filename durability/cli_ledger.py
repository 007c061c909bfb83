"""The `durability ledger` commands: what each runs and how a table shows its result."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from durability.cli_bounds import SNAPSHOT_LIMIT, STOP_QUERY_DEADLINE_MS, STOP_QUERY_LIMIT
from durability.cli_common import (
    NEW_HELP,
    Command,
    Show,
    UsageError,
    add_configure,
    counters_table,
    iso,
    json_arg,
    phases,
    show_fields,
    show_settings,
    table,
)

if TYPE_CHECKING:
    from durability.client import DurabilityClient


async def ledger_list(client: DurabilityClient, args: argparse.Namespace) -> Any:
    return await client.list_ledgers(args.query, args.limit)


def read_operations(path: str) -> list[dict[str, Any]]:
    source = sys.stdin.read() if path == "-" else Path(path).read_text()
    data = json_arg("--file", source)
    operations = data.get("operations") if isinstance(data, dict) else data
    if not isinstance(operations, list):
        raise UsageError(
            "--file must hold a list of operations or an object with 'operations', "
            f"got {type(data).__name__}"
        )
    return operations


async def ledger_enqueue(client: DurabilityClient, args: argparse.Namespace) -> Any:
    operations, options = args.operations, args.options
    if args.signal:
        await client.signal_enqueue(args.ledger_id, operations, options=options, new=args.new)
        return {"signalled": True}
    return await client.enqueue(args.ledger_id, operations, options=options, new=args.new)


def show_enqueue(result: Any, args: argparse.Namespace) -> str:
    if "signalled" in result:
        return (
            f"signalled: {len(args.operations)} operation(s) (checked before sending; "
            "`snapshot` shows them once recorded)"
        )
    return table(
        ("field", "value"),
        [(field, result.get(field, [])) for field in ("accepted", "duplicates", "conflicts")],
    )


async def ledger_hold(client: DurabilityClient, args: argparse.Namespace) -> Any:
    return {"token": await client.hold(args.ledger_id, args.token)}


async def ledger_release(client: DurabilityClient, args: argparse.Namespace) -> Any:
    await client.release(args.ledger_id, args.token)
    return {"released": args.token}


def show_release(result: Any, args: argparse.Namespace) -> str:
    return f"released {result['released']}"


async def ledger_settle(client: DurabilityClient, args: argparse.Namespace) -> Any:
    return await client.settle(args.ledger_id)


def show_settle(result: Any, args: argparse.Namespace) -> str:
    counts = result.get("counts", {})
    phases = ", ".join(f"{p} {n}" for p, n in counts.get("operations", {}).items())
    held = "held" if result.get("held") else "not held: launches go on"
    return (
        f"settled: no attempt in progress ({held}); "
        f"{result.get('waiting', 0)} requests waiting for their retry; "
        f"operations: {phases or 'none'}"
    )


async def ledger_resume(client: DurabilityClient, args: argparse.Namespace) -> Any:
    return {"resumed": await client.resume(args.ledger_id)}


def show_resume(result: Any, args: argparse.Namespace) -> str:
    if not result["resumed"]:
        return "nothing to resume (no unresolved or blocked request)"
    return "resumed: " + ", ".join(result["resumed"])


async def ledger_skip(client: DurabilityClient, args: argparse.Namespace) -> Any:
    await client.skip(args.ledger_id, args.operation_id, args.reason)
    return {"skipped": args.operation_id}


def show_skip(result: Any, args: argparse.Namespace) -> str:
    return f"skipped {result['skipped']}"


async def ledger_stop(client: DurabilityClient, args: argparse.Namespace) -> Any:
    return await client.stop(
        args.ledger_id, query_limit=args.query_limit, query_deadline_ms=args.query_deadline_ms
    )


async def ledger_final(client: DurabilityClient, args: argparse.Namespace) -> Any:
    return await client.final_result(args.ledger_id)


def show_stop(result: Any, args: argparse.Namespace) -> str:
    """The final snapshot, then what the stop's queries resolved and what stays unknown."""
    parts = [show_snapshot(result, args)]
    resolved = result.get("resolved_at_stop") or []
    if resolved:
        rows = [
            (r.get("request_id"), ",".join(r.get("operation_ids") or []), r.get("outcome"))
            for r in resolved
        ]
        parts.append("resolved at stop:\n" + table(("request", "operations", "outcome"), rows))
    unknown = result.get("unknown")
    if unknown is None:  # a final result recorded before 0.1.1
        return "\n\n".join(parts)
    if not unknown:
        parts.append("unknown: none (every request sent was resolved, or never sent)")
        return "\n\n".join(parts)
    unknown_rows = [
        (u.get("request_id"), ",".join(u.get("operation_ids") or []), u.get("at_stop"),
         u.get("attempt"), u.get("next_action"),
         ((u.get("last_status") or {}).get("outcome")),
         (u.get("request") or {}).get("idempotency_key", "(body left out)"))
        for u in unknown
    ]  # fmt: skip
    parts.append(
        f"unknown: {len(unknown)} request(s) may have reached the far side and are not "
        "resolved; ask the far side about each by its idempotency key before enqueueing it "
        "again (--json prints each frozen body)\n"
        + table(
            ("request", "operations", "at_stop", "attempt", "next", "last", "key"), unknown_rows
        )
    )
    return "\n\n".join(parts)


async def ledger_snapshot(client: DurabilityClient, args: argparse.Namespace) -> Any:
    return await client.snapshot(
        args.ledger_id, phase=args.phase, after=args.after, limit=args.limit
    )


async def ledger_claims(client: DurabilityClient, args: argparse.Namespace) -> Any:
    return await client.claims(args.ledger_id)


def show_snapshot(result: Any, args: argparse.Namespace) -> str:
    operations = result.get("operations", [])
    rows = [
        (op.get("id"), op.get("phase"),
         ",".join(op.get("blockers") or []) or None,
         ",".join(op.get("waiting_for") or []) or None, op.get("request_id"), op.get("outcome"))
        for op in operations
    ]  # fmt: skip
    phase = getattr(args, "phase", None)
    columns = ("operation", "phase", "blockers", "waiting_for", "request", "outcome")
    if rows:
        parts = [table(columns, rows)]
    else:
        parts = [f"no operation in phase {phase}" if phase else "no operation"]
    counts = (result.get("counts") or {}).get("operations")
    if counts:
        summary = ", ".join(f"{phase} {count}" for phase, count in counts.items())
        more = result.get("next_after")
        parts.append(f"operations: {summary}" + (f"; next page: --after {more}" if more else ""))
    requests = result.get("requests", [])
    if requests:
        request_rows = [
            (rq.get("id"), rq.get("phase"), rq.get("attempt"), iso(rq.get("retry_at")),
             None if rq.get("phase") == "resolved" else rq.get("retry_action"),
             ",".join(rq.get("canvas_ids") or []))
            for rq in requests
        ]  # fmt: skip
        parts.append(
            table(("request", "phase", "attempt", "retry_at", "next", "canvases"), request_rows)
        )
    parts.append(table(("ledger", "value"), _ledger_rows(result)))
    counters = result.get("counters")
    if counters:
        parts.append(counters_table(counters, "counters"))
    return "\n\n".join(parts)


def _ledger_rows(result: dict[str, Any]) -> list[tuple[str, Any]]:
    """Whether the ledger is held or stopped, its operations and requests per phase (blocked
    included), and the signals it dropped, as a snapshot reports them."""
    counts = result.get("counts") or {}
    holds = result.get("holds")
    held = result.get("held")
    held_text: str | None = None if held is None else "no"
    if held:
        held_text = f"yes: {holds} hold(s), nothing is launched until each token is released"
    rows: list[tuple[str, Any]] = [
        ("stopped", result.get("stopped")),
        ("held", held_text),
        ("operations", phases(counts.get("operations"))),
        ("requests", phases(counts.get("requests"))),
        ("dropped_signals", result.get("dropped_signals")),
    ]
    if result.get("signal_conflicts"):
        rows.append(("signal_conflicts", result["signal_conflicts"]))
    return rows


async def ledger_configure(client: DurabilityClient, args: argparse.Namespace) -> Any:
    if args.signal:
        await client.signal_configure_ledger(args.ledger_id, args.set)
        return {"signalled": True}
    return await client.configure_ledger(args.ledger_id, args.set)


async def ledger_settings(client: DurabilityClient, args: argparse.Namespace) -> Any:
    return await client.ledger_settings(args.ledger_id)


def show_claims(result: Any, args: argparse.Namespace) -> str:
    if not result:
        return "no canvas is claimed"
    return table(("canvas", "request"), sorted(result.items()))


LEDGER_COMMANDS: tuple[tuple[str, Command, Show, str], ...] = (
    ("enqueue", ledger_enqueue, show_enqueue,
     "enqueue operations from a JSON file (- for stdin); creates the ledger if none"),
    ("release", ledger_release, show_release, "release a hold token"),
    ("skip", ledger_skip, show_skip,
     "resolve a stuck (pending or blocked) operation as skipped"),
    ("hold", ledger_hold, show_fields, "stop new launches; prints a token"),
    ("resume", ledger_resume, show_resume, "retry unresolved and blocked requests"),
    ("settle", ledger_settle, show_settle,
     "wait until no attempt is in progress (after hold: quiet)"),
    ("stop", ledger_stop, show_stop,
     "stop the ledger, asking about requests sent; prints the final result"),
    ("final", ledger_final, show_stop,
     "a stopped ledger's final result: what stop resolved, what stays unknown"),
    ("snapshot", ledger_snapshot, show_snapshot, "operations and requests, a page"),
    ("claims", ledger_claims, show_claims, "which request holds each canvas"),
    ("configure", ledger_configure, show_settings,
     "change start settings in place; prints the settings in effect"),
    ("settings", ledger_settings, show_settings, "the start settings in effect"),
)  # fmt: skip


def add_ledger_arguments(commands: dict[str, argparse.ArgumentParser]) -> None:
    """The arguments of the ledger's commands beyond the ledger ID."""
    cmd = commands["enqueue"]
    cmd.add_argument(
        "--file",
        required=True,
        help='JSON file of operations (a list, or {"operations": [...]}); - reads stdin',
    )
    cmd.add_argument(
        "--options",
        help="JSON start input (concurrency, lanes, ...), read only when this starts the ledger",
    )
    cmd.add_argument("--signal", action="store_true", help="signal-with-start instead")
    cmd.add_argument("--new", action="store_true", help=NEW_HELP.format(what="ledger"))
    commands["release"].add_argument("token", help="the token `hold` printed")
    add_configure(commands["configure"], "ledger", '{"concurrency": 4}')
    cmd = commands["stop"]
    cmd.add_argument(
        "--query-limit", type=int, help=f"ask at most this many requests ({STOP_QUERY_LIMIT.text})"
    )
    cmd.add_argument(
        "--query-deadline-ms",
        type=int,
        help=f"stop asking after this long ({STOP_QUERY_DEADLINE_MS.text}); 0 asks none",
    )
    commands["hold"].add_argument(
        "--token", help="your own token: holding it again changes nothing (default: a new one)"
    )
    cmd = commands["skip"]
    cmd.add_argument("operation_id", help="the operation to skip")
    cmd.add_argument("--reason", help='recorded as the operation\'s error (default "skipped")')
    cmd = commands["snapshot"]
    cmd.add_argument(
        "--phase",
        choices=("pending", "dispatched", "resolved", "blocked"),
        help="only the operations in this phase",
    )
    cmd.add_argument("--after", type=int, help="sequence: the previous page's next_after")
    cmd.add_argument("--limit", type=int, help=f"operations per page ({SNAPSHOT_LIMIT.text})")
