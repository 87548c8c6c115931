import { afterEach, describe, expect, it } from 'vitest';
import { FakeClock } from '../../platform/clock.js';
import { MemoryState } from '../../platform/state/memory.js';
import { makeCodeStore } from './auth.codes.js';

const identity = 'codeid:platform_a:1001';

/**
 * Runs `between` once, the first time the identity key is touched after it is armed: after a read
 * has read (before it answers) or before a compare-and-delete compares. That is another node's
 * flow landing inside this one's round trip to the store.
 */
class InterleavingState extends MemoryState {
  between: (() => Promise<void>) | null = null;
  private async fire(key: string) {
    const run = key === identity ? this.between : null;
    if (!run) return;
    this.between = null;
    await run();
  }
  override async get(key: string) {
    const value = await super.get(key);
    await this.fire(key);
    return value;
  }
  override async delIf(key: string, expected: string) {
    await this.fire(key);
    return super.delIf(key, expected);
  }
}

describe('login code store: the identity entry under concurrent issue, take and revoke', () => {
  const states: MemoryState[] = [];
  afterEach(async () => {
    for (const s of states.splice(0)) await s.close();
  });
  const store = () => {
    const clock = new FakeClock(Date.UTC(2026, 10, 25));
    const state = new MemoryState(clock);
    states.push(state);
    return { state, codes: makeCodeStore(state, clock) };
  };

  it('a take that finishes after a new code was issued leaves the new code as the identity’s one', async () => {
    const { state, codes } = store();
    const web = await codes.issue('web', 'platform_a', '1001', '203.0.113.5');
    if (!('code' in web)) throw new Error('expected a code');
    // Interleaving: the take has consumed the web code, a new bot code is issued before the
    // take's clean-up runs. The clean-up must not remove the new code's identity entry.
    const raw = await state.take(`code:web:${web.code}`);
    expect(raw).not.toBeNull();
    const bot = await codes.issue('bot', 'platform_a', '1001', null);
    if (!('code' in bot)) throw new Error('expected a code');
    expect(bot.code).not.toBe(web.code);
    await state.set(`code:web:${web.code}`, raw as string, 60_000);
    await codes.take('web', web.code, '203.0.113.5');
    expect(await codes.active('platform_a', '1001')).toMatchObject({ code: bot.code });
    // A repeated request returns that same code (one active code per identity).
    const again = await codes.issue('bot', 'platform_a', '1001', null);
    expect(again).toMatchObject({ code: bot.code });
  });

  it('a take whose clean-up is overtaken by bot/send-code (revoke, then issue) leaves the new code the identity’s one', async () => {
    const clock = new FakeClock(Date.UTC(2026, 10, 25));
    const state = new InterleavingState(clock);
    states.push(state);
    const codes = makeCodeStore(state, clock);
    const web = await codes.issue('web', 'platform_a', '1001', '203.0.113.5');
    if (!('code' in web)) throw new Error('expected a code');
    let bot: { code: string } | null = null;
    // While verify's take clears the web code's identity entry, bot/send-code revokes the same
    // web code and issues a bot code (what it does with a web code it finds).
    state.between = async () => {
      await codes.revoke(web.code, web.rec);
      const issued = await codes.issue('bot', 'platform_a', '1001', null);
      if ('code' in issued) bot = issued;
    };
    expect(await codes.take('web', web.code, '203.0.113.5')).not.toBeNull();
    expect(state.between).toBeNull();
    expect(bot).not.toBeNull();
    const botCode = (bot as unknown as { code: string }).code;
    // The bot code stays the identity's one code: a repeated request returns it (spec 5).
    expect(await codes.active('platform_a', '1001')).toMatchObject({ code: botCode });
    expect(await codes.issue('bot', 'platform_a', '1001', null)).toMatchObject({ code: botCode });
  });

  it('an identity entry naming a code that is gone is replaced by the next issue, not spun on', async () => {
    const { state, codes } = store();
    await state.set(identity, 'web:ABCDEFGH', 600_000);
    const issued = await codes.issue('web', 'platform_a', '1001', '203.0.113.5');
    if (!('code' in issued)) throw new Error('expected a code');
    expect(issued.code).not.toBe('ABCDEFGH');
    expect(await state.get(identity)).toBe(`web:${issued.code}`);
  });
});
