import type { BotProfile, PublicBot } from '@parlor/protocol';
import type { BotRow } from './bots.store.js';

export function toBotProfile(b: BotRow): BotProfile {
  return {
    id: b.id,
    name: b.name,
    avatar_url: b.avatarUrl,
    type: b.type,
    rate_limit_per_hour: b.rateLimitPerHour,
    owner_user_id: b.ownerUserId,
    stats: {
      users: b.statsUsers,
      latency_ms: b.statsLatencyMs,
      reported_at: b.statsReportedAt ? b.statsReportedAt.toISOString() : null,
    },
    created_at: b.createdAt.toISOString(),
    updated_at: b.updatedAt.toISOString(),
  };
}

/** Official and Verified bots count as verified in public listings. */
export function toPublicBot(b: BotRow): PublicBot {
  return {
    id: b.id,
    name: b.name,
    avatar_url: b.avatarUrl,
    verified: b.type !== 3,
    users: b.statsUsers,
    created_at: b.createdAt.toISOString(),
  };
}
