import { cachedFor } from '../../platform/cache.js';
import type { Clock } from '../../platform/clock.js';
import { appError } from '../../platform/errors.js';
import { TIMED_OUT, withinTime } from '../../platform/timeout.js';
import type { BotsService } from '../bots/bots.service.js';
import type { UsersStore } from '../users/users.store.js';

export interface StatsDeps {
  clock: Clock;
  usersStore: UsersStore;
  bots: BotsService;
  version: string;
  sourceHash: string;
  storage: 'embedded' | 'cluster';
  startedAt: Date;
  /** One check per backing store, by name; each throws when its store does not answer. */
  probes: Record<string, () => Promise<unknown>>;
  log: { warn(obj: object, msg: string): void };
  /** Live room VM figures; zero until the VM provider reports (shared browsers). */
  rooms: () => { active_browsers: number; viewers: number; controllers: number };
}

/**
 * How long a node keeps the user counts of GET /statistics/users and /statistics/app: they count
 * over the whole users and sessions tables, and any holder of the public key may ask.
 */
export const STATS_CACHE_MS = 30_000;

/**
 * How long the health probe waits for each backing store: well under a load balancer's probe
 * timeout (often 5 s), so a store that hangs gives a 503 rather than a probe that never answers.
 */
export const HEALTH_PROBE_TIMEOUT_MS = 2_500;

export function makeStatsService(deps: StatsDeps) {
  const uptime = () => Math.floor((deps.clock.now().getTime() - deps.startedAt.getTime()) / 1000);
  const userCounts = cachedFor(STATS_CACHE_MS, deps.clock, () => deps.usersStore.statistics(deps.clock.now()));
  return {
    async users() {
      const s = await userCounts();
      return {
        total: s.total,
        active_24h: s.active24h,
        new_24h: s.new24h,
        premium: s.premium,
        banned: s.banned,
        sessions_active: s.sessionsActive,
      };
    },
    bots: () => deps.bots.statistics(),
    async chats() {
      return deps.rooms();
    },
    async app() {
      const [u, b] = await Promise.all([userCounts(), deps.bots.statistics()]);
      return {
        version: deps.version,
        uptime_seconds: uptime(),
        users: u.total,
        bots: b.total,
        sessions_active: u.sessionsActive,
      };
    },
    async health() {
      const checks = await Promise.all(
        Object.entries(deps.probes).map(([store, probe]) => check(store, probe, deps.log)),
      );
      const down = checks.filter((store) => store !== null);
      if (down.length > 0) throw appError('ERR_SERVICE_UNAVAILABLE', `Not answering: ${down.join(', ')}.`);
      return {
        status: 'ok' as const,
        source_hash: deps.sourceHash,
        uptime_seconds: uptime(),
        version: deps.version,
        storage: deps.storage,
      };
    },
  };
}

/** Null when the store answered in time; else its name, and why it did not is logged at warn. */
async function check(store: string, probe: () => Promise<unknown>, log: StatsDeps['log']): Promise<string | null> {
  try {
    const answer = await withinTime(Promise.resolve().then(probe), HEALTH_PROBE_TIMEOUT_MS);
    if (answer !== TIMED_OUT) return null;
    log.warn({ store, timeout_ms: HEALTH_PROBE_TIMEOUT_MS }, 'health probe: a backing store did not answer in time');
  } catch (err) {
    log.warn({ store, err }, 'health probe: a backing store failed');
  }
  return store;
}

export type StatsService = ReturnType<typeof makeStatsService>;
