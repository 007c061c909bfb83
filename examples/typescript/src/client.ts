/**
 * A small typed client for durability's schedules and ledgers, thin over `@temporalio/client`.
 *
 * It speaks only the public wire contract (docs/contract.md, typed in ./wire.ts): what it does
 * can also be done with the `temporal` CLI, the Python client or any other SDK.
 *
 *   const client = await DurabilityClient.connect({ address: 'localhost:7233' });
 *   await client.setSchedule('acct-42', { expression: '@every 5m', version: 3 });
 *   console.log(await client.getSchedule('acct-42'));
 */
import {
  ApplicationFailure,
  Client,
  Connection,
  WithStartWorkflowOperation,
  Workflow,
  WorkflowNotFoundError,
  WorkflowUpdateFailedError,
} from '@temporalio/client';

import {
  CancelPayload,
  EnqueueResult,
  LEDGER_WORKFLOW_TYPE,
  LedgerStartInput,
  ledgerWorkflowId,
  OperationIntent,
  RunView,
  SCHEDULE_WORKFLOW_TYPE,
  ScheduleStartInput,
  ScheduleUpdateResults,
  ScheduleView,
  scheduleWorkflowId,
  SetPayload,
  Snapshot,
  SnapshotArgs,
} from './wire';

/** The contract's default task queue (docs/contract.md 1). */
export const DEFAULT_TASK_QUEUE = 'durability';

/** An update refused by the workflow's validator: nothing was recorded. */
export class RejectedError extends Error {
  constructor(
    message: string,
    /** The rejection `type` (contract 2.8, 3.8), e.g. `InvalidRequest`, `LedgerStopped`. */
    readonly type: string | undefined,
    readonly update: string,
    readonly workflowId: string,
  ) {
    super(message);
    this.name = 'RejectedError';
  }
}

/** No schedule or ledger workflow has that ID. */
export class NotFoundError extends Error {
  constructor(readonly workflowId: string) {
    super(`no workflow ${JSON.stringify(workflowId)}`);
    this.name = 'NotFoundError';
  }
}

export interface ConnectOptions {
  /** host:port; default `TEMPORAL_ADDRESS` or `localhost:7233`. */
  address?: string;
  /** Default `TEMPORAL_NAMESPACE` or `default`. */
  namespace?: string;
  /** Default `DURABILITY_TASK_QUEUE` or `durability`. */
  taskQueue?: string;
  /** Default `TEMPORAL_API_KEY`; when set, the connection uses TLS. */
  apiKey?: string;
}

/** Turn a refused update into RejectedError and a missing workflow into NotFoundError. */
async function userErrors<T>(workflowId: string, message: string, call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (error) {
    if (error instanceof WorkflowUpdateFailedError) {
      const cause = error.cause;
      const type = cause instanceof ApplicationFailure ? (cause.type ?? undefined) : undefined;
      throw new RejectedError(cause?.message ?? error.message, type, message, workflowId);
    }
    if (error instanceof WorkflowNotFoundError) {
      throw new NotFoundError(workflowId);
    }
    throw error;
  }
}

/** Schedules and ledgers by business ID: `acct-42`, not `schedule:acct-42`. */
export class DurabilityClient {
  constructor(
    readonly temporal: Client,
    readonly taskQueue: string = DEFAULT_TASK_QUEUE,
  ) {}

  static async connect(options: ConnectOptions = {}): Promise<DurabilityClient> {
    const env = process.env;
    const apiKey = options.apiKey ?? env.TEMPORAL_API_KEY;
    const connection = await Connection.connect({
      address: options.address ?? env.TEMPORAL_ADDRESS ?? 'localhost:7233',
      ...(apiKey ? { apiKey, tls: true } : {}),
      connectTimeout: '20s',
    });
    const temporal = new Client({
      connection,
      namespace: options.namespace ?? env.TEMPORAL_NAMESPACE ?? 'default',
    });
    return new DurabilityClient(
      temporal,
      options.taskQueue ?? env.DURABILITY_TASK_QUEUE ?? DEFAULT_TASK_QUEUE,
    );
  }

  /** Close the connection (the process can then exit). */
  async close(): Promise<void> {
    await this.temporal.connection.close();
  }

  private async updateWithStart<R>(
    workflowType: string,
    workflowId: string,
    startInput: ScheduleStartInput | LedgerStartInput,
    update: string,
    payload: unknown,
  ): Promise<R> {
    const [kind, ...rest] = workflowId.split(':');
    const startWorkflowOperation = new WithStartWorkflowOperation(workflowType, {
      workflowId,
      taskQueue: this.taskQueue,
      args: [startInput],
      workflowIdConflictPolicy: 'USE_EXISTING',
      staticSummary: `${kind} ${rest.join(':')}`,
    });
    return userErrors(workflowId, update, () =>
      this.temporal.workflow.executeUpdateWithStart<Workflow, R, [unknown]>(update, {
        args: [payload],
        startWorkflowOperation,
      }),
    );
  }

  private async update<R>(workflowId: string, update: string, payload: unknown): Promise<R> {
    const handle = this.temporal.workflow.getHandle(workflowId);
    return userErrors(workflowId, update, () => handle.executeUpdate<R, [unknown]>(update, { args: [payload] }));
  }

  private async query<R>(workflowId: string, query: string, ...args: unknown[]): Promise<R> {
    const handle = this.temporal.workflow.getHandle(workflowId);
    return userErrors(workflowId, query, () => handle.query<R, unknown[]>(query, ...args));
  }

  // -- schedule -----------------------------------------------------------------------------

  /** `set` by update-with-start; returns whether the version was stored (S3). `options` is the
   * start input, read only when this call starts the schedule. */
  async setSchedule(objectId: string, payload: SetPayload, options: ScheduleStartInput = {}): Promise<boolean> {
    return this.updateWithStart<ScheduleUpdateResults['set']>(
      SCHEDULE_WORKFLOW_TYPE,
      scheduleWorkflowId(objectId),
      { object_id: objectId, ...options },
      'set',
      payload,
    );
  }

  /** Record a run now, outside the expression; returns its `scheduled_time` (epoch ms). */
  async triggerSchedule(objectId: string): Promise<number> {
    return this.update<ScheduleUpdateResults['trigger']>(scheduleWorkflowId(objectId), 'trigger', {});
  }

  /** `cancel` by update-with-start (so a tombstone can precede the first set); returns whether a
   * schedule was live (S5). */
  async cancelSchedule(objectId: string, payload: CancelPayload = {}): Promise<boolean> {
    return this.updateWithStart<ScheduleUpdateResults['cancel']>(
      SCHEDULE_WORKFLOW_TYPE,
      scheduleWorkflowId(objectId),
      { object_id: objectId },
      'cancel',
      payload,
    );
  }

  /** The live schedule, or `null` if never set or cancelled. */
  async getSchedule(objectId: string): Promise<ScheduleView | null> {
    // The Python SDK sends `None` as a `binary/null` payload, which this SDK reads as
    // `undefined`, not as the JSON `null` of the contract: normalize it.
    const view = await this.query<ScheduleView | null | undefined>(scheduleWorkflowId(objectId), 'get');
    return view ?? null;
  }

  /** Runs not yet acknowledged, by `scheduled_time`. */
  async listRuns(objectId: string): Promise<RunView[]> {
    return this.query<RunView[]>(scheduleWorkflowId(objectId), 'runs');
  }

  // -- ledger -------------------------------------------------------------------------------

  /** `enqueue` by update-with-start; returns accepted and duplicate IDs once recorded. */
  async enqueue(ledgerId: string, operations: OperationIntent[], options: LedgerStartInput = {}): Promise<EnqueueResult> {
    return this.updateWithStart<EnqueueResult>(
      LEDGER_WORKFLOW_TYPE,
      ledgerWorkflowId(ledgerId),
      { ledger_id: ledgerId, ...options },
      'enqueue',
      { operations },
    );
  }

  /** One page of operations (oldest first) with counts per phase; pass the page's `next_after`
   * as `after` for the next one. */
  async snapshot(ledgerId: string, args: SnapshotArgs = {}): Promise<Snapshot> {
    const page = Object.fromEntries(Object.entries(args).filter(([, value]) => value !== undefined));
    const extra = Object.keys(page).length > 0 ? [page] : [];
    return this.query<Snapshot>(ledgerWorkflowId(ledgerId), 'snapshot', ...extra);
  }

  /** Every page of `snapshot` (optionally one phase), `limit` operations at a time. */
  async *snapshotPages(ledgerId: string, args: Omit<SnapshotArgs, 'after'> = {}): AsyncGenerator<Snapshot> {
    let after: number | undefined;
    for (;;) {
      const page = await this.snapshot(ledgerId, { ...args, after });
      yield page;
      if (page.next_after === null) return;
      after = page.next_after;
    }
  }
}
