import { Limits, LOGIN_CODE_ALPHABET } from '@parlor/protocol';
import { addressKey } from '../../platform/client-address.js';
import type { Clock } from '../../platform/clock.js';
import { randomCode } from '../../platform/secrets.js';
import type { CountedSet, StateStore } from '../../platform/state/index.js';

/**
 * Codes come from separate pools per login source (spec 5): a code's pool says how it verifies
 * (web codes from the addresses that requested them, bot codes from anywhere) and what the login
 * counts as (bot logins towards BOT_LOGIN_WEB_REQUIRED_EVERY). An identity holds one active code
 * of either pool at a time.
 */
export type CodePool = 'web' | 'bot';

export interface CodeRecord {
  pool: CodePool;
  platform: string;
  platformUserId: string;
  /**
   * The address whose request made a web code; null for bot codes. Addresses that asked for the
   * same identity's code later are in the code's requester set (join), in either pool.
   */
  ip: string | null;
  expiresAt: number;
}

/** A live code with its record, as an identity holds it. */
export type HeldCode = { code: string; rec: CodeRecord };

/** The platform profile a bot supplied (bot/login-code), used when the account is created. */
export interface CodeProfile {
  username: string;
  avatarUrl: string;
}

/** A record as verify takes it, with the profile a bot left for it. */
export type TakenCode = CodeRecord & { profile: CodeProfile | null };

const codeKey = (pool: CodePool, code: string) => `code:${pool}:${code}`;
/** An identity's one active code, as `pool:code`, whichever pool it came from. */
const identityKey = (platform: string, id: string) => `codeid:${platform}:${id}`;
/** The codes pending for a client address (counted per addressKey: an IPv6 client by its /64). */
const pendingKey = (ip: string) => `codeip:${addressKey(ip)}`;
/**
 * Every address besides the one that made it that asked for a code (join): a web code verifies
 * from each of them, and using or ending a code frees the pending slot it holds at each. A web
 * code's set keeps the name it had when only web codes had one, so nodes of both versions find it
 * during an upgrade; codes never contain `:`, so the two pools' names never meet.
 */
const requestersKey = (pool: CodePool, code: string) => (pool === 'web' ? `codeby:${code}` : `codeby:bot:${code}`);
/**
 * Kept apart from the record, so that saving it never writes the record again: a record written
 * after a verify took it would make a used code usable once more.
 */
const profileKey = (pool: CodePool, code: string) => `codeprofile:${pool}:${code}`;
export const CODE_SHAPE = new RegExp(`^[${LOGIN_CODE_ALPHABET}]{${Limits.LOGIN_CODE_LENGTH}}$`);

/**
 * Login codes in the coordination store, so every node sees them: code → record, identity → its
 * one active code, and per client address the set of codes pending for it. Records are written
 * once; single use is an atomic take.
 */
export function makeCodeStore(state: StateStore, clock: Clock) {
  const now = () => clock.now().getTime();
  const read = async (pool: CodePool, code: string): Promise<CodeRecord | null> => {
    const raw = await state.get(codeKey(pool, code));
    if (!raw) return null;
    const rec = JSON.parse(raw) as CodeRecord;
    return rec.expiresAt > now() ? rec : null;
  };

  /**
   * Counts a code as pending for an address until the code expires (again: no change). Answers
   * null, or when the address already has its PENDING_WEB_CODES_PER_IP codes pending the wait
   * (ms) until the oldest of them expires, leaving the set as it was. The count is taken with the
   * code added (one atomic step, so concurrent joins never pass the limit together), but the wait
   * is read once it is removed again: the code is not the address's, and may expire first.
   */
  const addPending = async (ip: string, code: string, expiresAt: number): Promise<number | null> => {
    const key = pendingKey(ip);
    const { count } = await state.addExpiring(key, [code], expiresAt);
    if (count <= Limits.PENDING_WEB_CODES_PER_IP) return null;
    await state.removeExpiring(key, code);
    // Adding nothing reads the set's earliest deadline in one step; now, should none be left meanwhile.
    const { earliest } = await state.addExpiring(key, [], now());
    return Math.max(1, earliest - now());
  };

  /**
   * Makes a fresh code its identity's one, if the identity has none; a web code is counted among
   * its address's pending codes in the same step, and is not made the identity's when they are full.
   */
  const claimIdentity = async (identity: string, code: string, rec: CodeRecord): Promise<CountedSet> => {
    const entry = `${rec.pool}:${code}`;
    if (rec.ip === null)
      return (await state.setIfAbsent(identity, entry, Limits.LOGIN_CODE_TTL_MS)) ? 'set' : 'present';
    return state.setIfAbsentCounted(identity, entry, Limits.LOGIN_CODE_TTL_MS, {
      setKey: pendingKey(rec.ip),
      member: code,
      expiresAtMs: rec.expiresAt,
      max: Limits.PENDING_WEB_CODES_PER_IP,
    });
  };

  /**
   * Removes a code whose record is gone (taken or deleted): its identity entry, and its pending
   * entries for the given addresses and for every address that asked for it (join), so no address
   * keeps counting a code that is no longer pending.
   */
  const forget = async (code: string, rec: CodeRecord, ips: (string | null)[]) => {
    // Only while it still names this code: a code issued meanwhile keeps its identity entry.
    await state.delIf(identityKey(rec.platform, rec.platformUserId), `${rec.pool}:${code}`);
    const requesters = await state.takeExpiring(requestersKey(rec.pool, code));
    const keys = new Set([...ips, ...requesters].filter((ip): ip is string => ip !== null).map(pendingKey));
    for (const key of keys) await state.removeExpiring(key, code);
    await state.del(profileKey(rec.pool, code));
  };

  const store = {
    read,

    /** The identity's live code, of whichever pool, with its record. */
    async active(platform: string, platformUserId: string): Promise<{ code: string; rec: CodeRecord } | null> {
      const held = await state.get(identityKey(platform, platformUserId));
      const at = held?.indexOf(':') ?? -1;
      if (!held || at < 0) return null;
      const pool = held.slice(0, at);
      const code = held.slice(at + 1);
      if (pool !== 'web' && pool !== 'bot') return null;
      const rec = await read(pool, code);
      return rec ? { code, rec } : null;
    },

    /**
     * Issues a fresh code for an identity unless it has one already (another request won the
     * race), in which case that code is returned, whatever its pool. A web code is counted among
     * its address's pending codes in the same atomic step that makes it the identity's code
     * (setIfAbsentCounted): a request that loses the identity to another never counts a code of
     * its own, and one whose address already has its PENDING_WEB_CODES_PER_IP codes pending makes
     * none and gets `limited`, the time until its oldest pending code expires.
     */
    async issue(
      pool: CodePool,
      platform: string,
      platformUserId: string,
      ip: string | null,
    ): Promise<{ code: string; rec: CodeRecord } | { limited: number }> {
      for (;;) {
        const code = randomCode(LOGIN_CODE_ALPHABET, Limits.LOGIN_CODE_LENGTH);
        const rec: CodeRecord = { pool, platform, platformUserId, ip, expiresAt: now() + Limits.LOGIN_CODE_TTL_MS };
        // The record first: whoever finds the identity entry must find its record.
        await state.set(codeKey(pool, code), JSON.stringify(rec), Limits.LOGIN_CODE_TTL_MS);
        const identity = identityKey(platform, platformUserId);
        const claim = await claimIdentity(identity, code, rec);
        if (claim === 'set') return { code, rec };
        await state.del(codeKey(pool, code));
        if (claim !== 'present') return { limited: Math.max(1, claim.full - now()) };
        // The identity has a code already: hand back that one.
        const winner = await store.active(platform, platformUserId);
        if (winner) return winner;
        // The entry names a code that is gone (taken, or left by a process that stopped between
        // the take and `forget`): remove that entry, unless it changed meanwhile, and try again.
        const held = await state.get(identity);
        if (held !== null) await state.delIf(identity, held);
      }
    },

    /**
     * Makes an identity's code pending for one more requesting address: it counts against that
     * address's pending codes (spec 8), and a web code verifies from that address too. Nothing
     * changes for an address that asked before. Answers null, or the wait (ms) when the address
     * has no pending code left to spend. The address is recorded among the code's requesters in
     * either pool, so that using or ending the code frees its slot (forget).
     */
    async join(code: string, rec: CodeRecord, ip: string): Promise<number | null> {
      const requesters = requestersKey(rec.pool, code);
      if (rec.ip === ip || (await state.hasExpiring(requesters, ip))) return null;
      const limited = await addPending(ip, code, rec.expiresAt);
      if (limited !== null) return limited;
      await state.addExpiring(requesters, [ip], rec.expiresAt);
      // A take or revoke that collected the requesters before this address joined missed it, and
      // its record was gone before that (forget runs after): finding no record, free the slot here.
      if ((await state.get(codeKey(rec.pool, code))) === null) await state.removeExpiring(pendingKey(ip), code);
      return null;
    },

    /** Whether `ip` may use the code: a bot code from anywhere, a web code from an address that asked for it. */
    async usableFrom(code: string, rec: CodeRecord, ip: string): Promise<boolean> {
      return rec.pool === 'bot' || rec.ip === ip || state.hasExpiring(requestersKey(rec.pool, code), ip);
    },

    /** Leaves the platform profile a bot supplied with a live code, until the code expires. */
    async setProfile(code: string, rec: CodeRecord, profile: CodeProfile) {
      await state.set(profileKey(rec.pool, code), JSON.stringify(profile), Math.max(1, rec.expiresAt - now()));
    },

    /**
     * Consumes a code: of two concurrent takes only one gets the record. The pending entries of
     * every address that counted it are freed: the one that made it, those that asked for it, and
     * the one taking it.
     */
    async take(pool: CodePool, code: string, ip: string): Promise<TakenCode | null> {
      const raw = await state.take(codeKey(pool, code));
      if (!raw) return null;
      const rec = JSON.parse(raw) as CodeRecord;
      const profile = await state.get(profileKey(pool, code));
      await forget(code, rec, [rec.ip, ip]);
      if (rec.expiresAt <= now()) return null;
      return { ...rec, profile: profile ? (JSON.parse(profile) as CodeProfile) : null };
    },

    /** Ends a code before its time, freeing every address's pending entry for it. */
    async revoke(code: string, rec: CodeRecord) {
      await state.del(codeKey(rec.pool, code));
      await forget(code, rec, [rec.ip]);
    },

    /**
     * Replaces an identity's pending web code with a fresh bot code (bot/send-code): the identity
     * entry moves from the one to the other in one atomic step (replaceIf), so no web request can
     * win the identity in between, then the web code ends (revoke). Null, and nothing made, when
     * the identity no longer holds that code (used or expired meanwhile): the caller looks again.
     */
    async replaceWithBotCode(web: HeldCode): Promise<HeldCode | null> {
      const { platform, platformUserId } = web.rec;
      const code = randomCode(LOGIN_CODE_ALPHABET, Limits.LOGIN_CODE_LENGTH);
      const expiresAt = now() + Limits.LOGIN_CODE_TTL_MS;
      const rec: CodeRecord = { pool: 'bot', platform, platformUserId, ip: null, expiresAt };
      // The record first: whoever finds the identity entry must find its record.
      await state.set(codeKey('bot', code), JSON.stringify(rec), Limits.LOGIN_CODE_TTL_MS);
      const identity = identityKey(platform, platformUserId);
      if (!(await state.replaceIf(identity, `${web.rec.pool}:${web.code}`, `bot:${code}`, Limits.LOGIN_CODE_TTL_MS))) {
        await state.del(codeKey('bot', code));
        return null;
      }
      // Its identity entry names the bot code now, which forget's compare-and-delete leaves.
      await store.revoke(web.code, web.rec);
      return { code, rec };
    },
  };
  return store;
}

export type CodeStore = ReturnType<typeof makeCodeStore>;
