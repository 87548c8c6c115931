import { Limits, LOGIN_CODE_ALPHABET } from '@parlor/protocol';
import type { Clock } from '../../platform/clock.js';
import { randomCode } from '../../platform/secrets.js';
import type { StateStore } from '../../platform/state/index.js';

/** Codes come from separate pools per login source (spec 5). */
export type CodePool = 'web' | 'bot';

export interface CodeRecord {
  pool: CodePool;
  platform: string;
  platformUserId: string;
  /** The requesting address for web codes (they are bound to it); null for bot codes. */
  ip: string | null;
  expiresAt: number;
  /** The platform profile a bot supplied (bot/login-code), used when the account is created. */
  profile: { username: string; avatarUrl: string } | null;
}

const codeKey = (pool: CodePool, code: string) => `code:${pool}:${code}`;
const identityKey = (pool: CodePool, platform: string, id: string) => `codeid:${pool}:${platform}:${id}`;
const ipKey = (ip: string) => `codeip:${ip}`;
export const CODE_SHAPE = new RegExp(`^[${LOGIN_CODE_ALPHABET}]{${Limits.LOGIN_CODE_LENGTH}}$`);

/**
 * Login codes in the coordination store, so every node sees them: code → record, identity → its
 * one active code, and per IP the set of pending web codes. Single use is an atomic take.
 */
export function makeCodeStore(state: StateStore, clock: Clock) {
  const ttl = (rec: CodeRecord) => Math.max(1, rec.expiresAt - clock.now().getTime());
  const read = async (pool: CodePool, code: string): Promise<CodeRecord | null> => {
    const raw = await state.get(codeKey(pool, code));
    if (!raw) return null;
    const rec = JSON.parse(raw) as CodeRecord;
    return rec.expiresAt > clock.now().getTime() ? rec : null;
  };

  return {
    read,
    /** The live code of an identity in a pool, with its record. */
    async activeFor(pool: CodePool, platform: string, platformUserId: string) {
      const code = await state.get(identityKey(pool, platform, platformUserId));
      if (!code) return null;
      const rec = await read(pool, code);
      return rec ? { code, rec } : null;
    },

    /**
     * Issues a fresh code for an identity unless another request won the race, in which case the
     * winner's code is returned. For web codes the IP's pending count is checked first: the caller
     * gets `limited` with the time until the oldest pending code expires.
     */
    async issue(
      pool: CodePool,
      platform: string,
      platformUserId: string,
      ip: string | null,
    ): Promise<{ code: string; rec: CodeRecord } | { limited: number }> {
      const now = clock.now().getTime();
      const code = randomCode(LOGIN_CODE_ALPHABET, Limits.LOGIN_CODE_LENGTH);
      const rec: CodeRecord = {
        pool,
        platform,
        platformUserId,
        ip,
        expiresAt: now + Limits.LOGIN_CODE_TTL_MS,
        profile: null,
      };
      if (ip !== null) {
        const { count, earliest } = await state.addExpiring(ipKey(ip), [code], rec.expiresAt);
        if (count > Limits.PENDING_WEB_CODES_PER_IP) {
          await state.removeExpiring(ipKey(ip), code);
          return { limited: Math.max(1, earliest - now) };
        }
      }
      await state.set(codeKey(pool, code), JSON.stringify(rec), Limits.LOGIN_CODE_TTL_MS);
      if (await state.setIfAbsent(identityKey(pool, platform, platformUserId), code, Limits.LOGIN_CODE_TTL_MS)) {
        return { code, rec };
      }
      // Another request for this identity won: undo ours and hand back theirs.
      await state.del(codeKey(pool, code));
      if (ip !== null) await state.removeExpiring(ipKey(ip), code);
      const winner = await this.activeFor(pool, platform, platformUserId);
      if (winner) return winner;
      return this.issue(pool, platform, platformUserId, ip);
    },

    /** Replaces a record's details, keeping its deadline. */
    async save(code: string, rec: CodeRecord) {
      await state.set(codeKey(rec.pool, code), JSON.stringify(rec), ttl(rec));
    },

    /** Consumes a code: of two concurrent verifies only one gets the record. */
    async take(pool: CodePool, code: string): Promise<CodeRecord | null> {
      const raw = await state.take(codeKey(pool, code));
      if (!raw) return null;
      const rec = JSON.parse(raw) as CodeRecord;
      await this.forget(code, rec);
      return rec.expiresAt > clock.now().getTime() ? rec : null;
    },

    /** Removes a code's identity and pending-IP entries. */
    async forget(code: string, rec: CodeRecord) {
      const idKey = identityKey(rec.pool, rec.platform, rec.platformUserId);
      if ((await state.get(idKey)) === code) await state.del(idKey);
      if (rec.ip !== null) await state.removeExpiring(ipKey(rec.ip), code);
    },

    async revoke(code: string, rec: CodeRecord) {
      await state.del(codeKey(rec.pool, code));
      await this.forget(code, rec);
    },
  };
}

export type CodeStore = ReturnType<typeof makeCodeStore>;
