import { afterEach, describe, expect, it, vi } from 'vitest';
import { AppError } from '../../platform/errors.js';
import type { BotsService } from '../bots/bots.service.js';
import type { UsersStore } from '../users/users.store.js';
import { HEALTH_PROBE_TIMEOUT_MS, makeStatsService } from './stats.service.js';

/** The stats service with the given store checks; `warnings` collects what it logs. */
function stats(probes: Record<string, () => Promise<unknown>>) {
  const warnings: { obj: object; msg: string }[] = [];
  const service = makeStatsService({
    clock: { now: () => new Date('2026-01-01T00:00:10Z') },
    usersStore: {} as UsersStore,
    bots: {} as BotsService,
    version: '1.0.0',
    sourceHash: 'abc',
    storage: 'cluster',
    startedAt: new Date('2026-01-01T00:00:00Z'),
    probes,
    log: { warn: (obj, msg) => void warnings.push({ obj, msg }) },
    rooms: () => ({ active_browsers: 0, viewers: 0, controllers: 0 }),
  });
  return { service, warnings };
}

/** The promise's outcome so far: pending, its value, or its error. */
function track<T>(p: Promise<T>) {
  const state: { settled: boolean; value?: T; error?: unknown } = { settled: false };
  p.then(
    (value) => Object.assign(state, { settled: true, value }),
    (error: unknown) => Object.assign(state, { settled: true, error }),
  );
  return state;
}

afterEach(() => {
  vi.useRealTimers();
});

describe('health', () => {
  it('answers ok with the source hash and uptime when every store answers', async () => {
    const { service } = stats({ database: async () => 1, redis: async () => null });
    expect(await service.health()).toEqual({
      status: 'ok',
      source_hash: 'abc',
      uptime_seconds: 10,
      version: '1.0.0',
      storage: 'cluster',
    });
  });

  it('answers 503 ERR_SERVICE_UNAVAILABLE naming a store that does not answer within HEALTH_PROBE_TIMEOUT_MS', async () => {
    vi.useFakeTimers();
    const { service, warnings } = stats({ database: async () => 1, redis: () => new Promise(() => {}) });
    const answer = track(service.health());
    await vi.advanceTimersByTimeAsync(HEALTH_PROBE_TIMEOUT_MS - 1);
    expect(answer.settled).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    expect(answer.settled).toBe(true);
    expect(answer.error).toBeInstanceOf(AppError);
    expect((answer.error as AppError).status).toBe(503);
    expect((answer.error as AppError).body()).toEqual({
      code: 'ERR_SERVICE_UNAVAILABLE',
      message: 'Not answering: redis.',
    });
    expect(warnings).toEqual([
      {
        obj: { store: 'redis', timeout_ms: HEALTH_PROBE_TIMEOUT_MS },
        msg: 'health probe: a backing store did not answer in time',
      },
    ]);
  });

  it('answers 503 naming a store whose check fails, with the failure logged', async () => {
    const failure = new Error('connect ECONNREFUSED 127.0.0.1:5432');
    const { service, warnings } = stats({
      database: async () => {
        throw failure;
      },
      redis: async () => 'ok',
    });
    await expect(service.health()).rejects.toMatchObject({
      code: 'ERR_SERVICE_UNAVAILABLE',
      message: 'Not answering: database.',
    });
    expect(warnings).toEqual([
      { obj: { store: 'database', err: failure }, msg: 'health probe: a backing store failed' },
    ]);
  });
});
