/**
 * Drive a schedule and a ledger from TypeScript and print what was observed as one JSON line.
 *
 *   node dist/demo.js --address localhost:7233 --task-queue durability --suffix abc123
 *
 * Flags fall back to TEMPORAL_ADDRESS, DURABILITY_TASK_QUEUE and DEMO_SUFFIX (default: random).
 * A worker serving durability (`make run`, or `python worker.py`) must poll the task queue.
 * Exits 1, after printing `{"ok": false, "error": ...}`, on anything the contract does not
 * promise.
 */
import { randomUUID } from 'node:crypto';
import { parseArgs } from 'node:util';

import * as check from './check';
import { DurabilityClient, RejectedError } from './client';
import {
  EnqueueResult,
  ledgerWorkflowId,
  OperationIntent,
  OperationPhase,
  RunState,
  RunView,
  ScheduleView,
  scheduleWorkflowId,
  Snapshot,
  SnapshotOperation,
} from './wire';

const { values: flags } = parseArgs({
  options: {
    address: { type: 'string' },
    namespace: { type: 'string' },
    'task-queue': { type: 'string' },
    suffix: { type: 'string' },
    'timeout-ms': { type: 'string' },
  },
});

const address = flags.address ?? process.env.TEMPORAL_ADDRESS ?? 'localhost:7233';
const taskQueue = flags['task-queue'] ?? process.env.DURABILITY_TASK_QUEUE ?? 'durability';
const suffix = flags.suffix ?? process.env.DEMO_SUFFIX ?? randomUUID().slice(0, 8);
const timeoutMs = Number(flags['timeout-ms'] ?? 120_000);

class Mismatch extends Error {
  override name = 'Mismatch';
}

function expect(condition: boolean, message: string): asserts condition {
  if (!condition) throw new Mismatch(message);
}

const show = (value: unknown): string => JSON.stringify(value);

function sameJson(actual: unknown, expected: unknown, what: string): void {
  expect(show(actual) === show(expected), `${what}: expected ${show(expected)}, got ${show(actual)}`);
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** Call `poll` until it returns a value other than undefined; fail after `timeoutMs`. */
async function until<T>(what: string, poll: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await poll();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Mismatch(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(200);
  }
}

/** The rejection type of a refused update, or a mismatch if it was not refused. */
async function rejection(what: string, call: () => Promise<unknown>): Promise<string | undefined> {
  try {
    const result = await call();
    throw new Mismatch(`${what} should have been refused, returned ${show(result)}`);
  } catch (error) {
    if (error instanceof RejectedError) return error.type;
    throw error;
  }
}

const OPERATIONS: OperationIntent[] = [
  { id: 'op-1', operation_type: 'shape.create', participants: ['canvas-a'], payload: { shape: 'rect' } },
  {
    id: 'op-2',
    operation_type: 'shape.move',
    participants: ['canvas-b', 'canvas-a'],
    dependencies: ['op-1'],
    payload: { x: 5 },
  },
  {
    id: 'op-3',
    operation_type: 'shape.delete',
    participants: ['canvas-b'],
    dependencies: ['op-2'],
    payload: null,
    protocol_version: 1,
  },
];

async function main(client: DurabilityClient): Promise<Record<string, unknown>> {
  const unknownFields = new Set<string>();
  const objectId = `ts-demo-${suffix}`;
  const ledgerId = `ts-demo-${suffix}`;

  // -- schedule: set (update-with-start), read, trigger, wait for the run, cancel -------------
  const params = { source: 'typescript', suffix };
  const setAt = Date.now();
  const applied = await client.setSchedule(objectId, { expression: '@yearly', version: 1, params });
  expect(applied, `set version 1 on a new schedule returned ${show(applied)}, expected true`);
  const resent = await client.setSchedule(objectId, { expression: '@yearly', version: 1, params });
  expect(!resent, `set of the stored version again returned ${show(resent)}, expected false (S3)`);

  const view = check.expectShape<ScheduleView | null>(
    check.nullable(check.scheduleView),
    await client.getSchedule(objectId),
    'get',
    unknownFields,
  );
  expect(view !== null, 'get returned null after set');
  sameJson(
    { expression: view.expression, version: view.version, jitter_ms: view.jitter_ms, params: view.params },
    { expression: '@yearly', version: 1, jitter_ms: 0, params },
    'get',
  );
  expect(view.next_at !== null, 'get.next_at is null for @yearly');
  const nextAt = new Date(view.next_at);
  expect(
    view.next_at > setAt &&
      view.next_at <= setAt + 366 * 86_400_000 &&
      nextAt.getUTCMonth() === 0 &&
      nextAt.getUTCDate() === 1 &&
      view.next_at % 86_400_000 === 0,
    `get.next_at ${view.next_at} (${nextAt.toISOString()}) is not the next 1 January 00:00 UTC`,
  );

  const triggered = await client.triggerSchedule(objectId);
  expect(Number.isSafeInteger(triggered), `trigger returned ${show(triggered)}, expected epoch ms`);
  expect(Math.abs(triggered - Date.now()) < 600_000, `trigger returned ${triggered}, not about now`);

  // The triggered run shows in `runs` until its outcome is delivered (S11), then leaves.
  const runStates: RunState[] = [];
  let runPolls = 0;
  await until('the triggered run to be acknowledged (gone from runs)', async () => {
    runPolls += 1;
    const runs = check.expectShape<RunView[]>(
      check.arrayOf(check.runView),
      await client.listRuns(objectId),
      'runs',
      unknownFields,
    );
    const run = runs.find((r) => r.scheduled_time === triggered);
    if (run === undefined) return true;
    expect(run.due_at === triggered, `a triggered run is due at once: due_at ${run.due_at} != ${triggered}`);
    expect(run.error === null, `the triggered run errored: ${show(run.error)}`);
    if (runStates[runStates.length - 1] !== run.state) runStates.push(run.state);
    return undefined;
  });

  const cancelled = await client.cancelSchedule(objectId);
  expect(cancelled, `cancel of a live schedule returned ${show(cancelled)}, expected true`);
  const afterCancel = await client.getSchedule(objectId);
  expect(afterCancel === null, `get after cancel returned ${show(afterCancel)}, expected null`);
  const triggerAfterCancel = await rejection('trigger after cancel', () => client.triggerSchedule(objectId));
  expect(triggerAfterCancel === 'NoLiveSchedule', `trigger after cancel refused as ${triggerAfterCancel}`);

  // -- ledger: enqueue a chain (update-with-start), read every snapshot page until resolved ---
  const enqueued = check.expectShape<EnqueueResult>(
    check.enqueueResult,
    await client.enqueue(ledgerId, OPERATIONS),
    'enqueue',
    unknownFields,
  );
  sameJson(enqueued, { accepted: ['op-1', 'op-2', 'op-3'], duplicates: [], conflicts: [] }, 'enqueue');
  const again = await client.enqueue(ledgerId, [OPERATIONS[0]]);
  sameJson(again, { accepted: [], duplicates: ['op-1'], conflicts: [] }, 'enqueue of a known ID');
  const cycle = await rejection('enqueue of a cycle', () =>
    client.enqueue(ledgerId, [{ id: 'op-4', operation_type: 'shape.move', dependencies: ['op-4'] }]),
  );
  expect(cycle === 'InvalidRequest', `enqueue of a cycle refused as ${cycle}`);

  // Poll whole snapshots (one query: a consistent view) until every operation resolved.
  const observed: Record<string, OperationPhase[]> = {};
  let ledgerPolls = 0;
  await until('all three operations to resolve', async () => {
    ledgerPolls += 1;
    const whole = check.expectShape<Snapshot>(
      check.snapshot,
      await client.snapshot(ledgerId),
      'snapshot',
      unknownFields,
    );
    const byId = new Map(whole.operations.map((op) => [op.id, op]));
    for (const op of whole.operations) {
      const seen = (observed[op.id] ??= []);
      if (seen[seen.length - 1] !== op.phase) seen.push(op.phase);
      // L3: an operation starts only once its dependencies are resolved.
      for (const dependency of OPERATIONS.find((intent) => intent.id === op.id)?.dependencies ?? []) {
        const before = byId.get(dependency);
        if (op.phase === 'dispatched' || op.phase === 'resolved') {
          expect(before?.phase === 'resolved', `${op.id} is ${op.phase} while ${dependency} is ${before?.phase}`);
        }
      }
    }
    const done = whole.operations.length === 3 && whole.operations.every((op) => op.phase === 'resolved');
    return done ? true : undefined;
  });

  // Then read it again two operations a page, following `next_after`.
  const pages: Snapshot[] = [];
  for await (const page of client.snapshotPages(ledgerId, { limit: 2 })) {
    pages.push(check.expectShape<Snapshot>(check.snapshot, page, 'snapshot page', unknownFields));
  }
  const last = pages[pages.length - 1];
  const operations: SnapshotOperation[] = pages.flatMap((page) => page.operations);
  const requests = pages.flatMap((page) => page.requests);
  const requestOf = (op: SnapshotOperation) => requests.find((request) => request.id === op.request_id);
  sameJson(
    operations.map((op) => [op.id, op.sequence, op.outcome, op.blockers, op.error]),
    [
      ['op-1', 1, 'applied', [], null],
      ['op-2', 2, 'applied', [], null],
      ['op-3', 3, 'applied', [], null],
    ],
    'resolved operations',
  );
  for (const op of operations) {
    const request = requestOf(op);
    expect(request !== undefined, `snapshot has no request for ${op.id} (request_id ${op.request_id})`);
    expect(request.phase === 'resolved', `request of ${op.id} is ${request.phase}`);
    sameJson(request.operation_ids, [op.id], `request of ${op.id}: operation_ids`);
  }
  sameJson(last.claims, {}, 'claims once everything resolved');
  expect(last.counts.resolved_total === 3, `counts.resolved_total is ${last.counts.resolved_total}`);
  expect(last.ledger_id === ledgerId, `snapshot.ledger_id is ${last.ledger_id}, expected ${ledgerId}`);

  return {
    ok: true,
    object_id: objectId,
    schedule_workflow_id: scheduleWorkflowId(objectId),
    applied,
    resent,
    schedule: view,
    triggered,
    run_states: runStates,
    run_polls: runPolls,
    cancelled,
    after_cancel: afterCancel,
    trigger_after_cancel: triggerAfterCancel,
    ledger_id: ledgerId,
    ledger_workflow_id: ledgerWorkflowId(ledgerId),
    enqueued,
    enqueued_again: again,
    cycle_rejected: cycle,
    resolved: operations.map((op) => op.id),
    outcomes: Object.fromEntries(operations.map((op) => [op.id, op.outcome])),
    sequences: Object.fromEntries(operations.map((op) => [op.id, op.sequence])),
    request_ids: Object.fromEntries(operations.map((op) => [op.id, op.request_id])),
    canvases: Object.fromEntries(operations.map((op) => [op.id, requestOf(op)?.canvas_ids])),
    phases: last.counts.operations,
    request_phases: last.counts.requests,
    observed_phases: observed,
    ledger_polls: ledgerPolls,
    pages: pages.map((page) => page.operations.map((op) => op.id)),
    next_after: pages.map((page) => page.next_after),
    stopped: last.stopped,
    held: last.held,
    claims: last.claims,
    unknown_fields: [...unknownFields].sort(),
  };
}

async function run(): Promise<number> {
  let client: DurabilityClient | undefined;
  try {
    client = await DurabilityClient.connect({ address, namespace: flags.namespace, taskQueue });
    console.log(JSON.stringify(await main(client)));
    return 0;
  } catch (error) {
    const message = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
    console.log(JSON.stringify({ ok: false, error: message }));
    console.error(error);
    return 1;
  } finally {
    await client?.close();
  }
}

run().then(
  (code) => process.exit(code),
  (error: unknown) => {
    console.error(error);
    process.exit(1);
  },
);
