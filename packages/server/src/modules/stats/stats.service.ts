import { cachedFor } from '../../platform/cache.js';
import type { Clock } from '../../platform/clock.js';
import { appError } from '../../platform/errors.js';
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
  /** Throws when a backing store does not answer. */
  probe: () => Promise<void>;
  /** Live room VM figures; zero until the VM provider reports (shared browsers). */
  rooms: () => { active_browsers: number; viewers: number; controllers: number };
}

/**
 * How long a node keeps the user counts of GET /statistics/users and /statistics/app: they count
 * over the whole users and sessions tables, and any holder of the public key may ask.
 */
export const STATS_CACHE_MS = 30_000;

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
      try {
        await deps.probe();
      } catch {
        throw appError('ERR_SERVICE_UNAVAILABLE', 'A backing store does not answer.');
      }
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

export type StatsService = ReturnType<typeof makeStatsService>;
