import { afterAll, afterEach, beforeAll } from 'vitest';
import { startApp, type TestApp } from '../../server/test/support/app.js';
import { nextIp } from '../../server/test/support/client.js';
import { createBot, nextIdentity, setLevel } from '../../server/test/support/flows.js';
import {
  BotClient,
  type ChatEntry,
  E2EChatSession,
  type E2EChatSessionOptions,
  ParlorApiError,
  ParlorClient,
  type User,
} from '../src/index.js';

/**
 * A bot client for the test app (through the operator route), speaking from its own address.
 * Official by default: it delivers login codes (loginUser), which only Official bots may
 * (docs/api.md Login); a test of what third-party bots do asks for `community` or `verified`.
 */
export async function testBot(
  app: TestApp,
  type: 'official' | 'verified' | 'community' = 'official',
): Promise<BotClient> {
  const { apiKey } = await createBot(app, { type });
  return new BotClient({ baseUrl: app.url, apiKey, headers: { 'x-forwarded-for': nextIp() } });
}

/**
 * The hooks of an E2E suite: an app and a bot client started before its tests (handed to
 * `started`), the E2E sessions it opened closed after each test, the app closed after all.
 */
export function e2eSuite(started: (suite: { app: TestApp; bot: BotClient }) => void): void {
  let app: TestApp | undefined;
  beforeAll(async () => {
    app = await startApp();
    started({ app, bot: await testBot(app) });
  });
  afterEach(async () => {
    await closeSessions();
  });
  afterAll(async () => {
    await app?.close();
  });
}

/** A user client with the public key, from its own address (the test app trusts X-Forwarded-For). */
export function userClient(app: TestApp): ParlorClient {
  return new ParlorClient({ baseUrl: app.url, apiKey: app.publicApiKey, headers: { 'x-forwarded-for': nextIp() } });
}

export interface TestUser {
  client: ParlorClient;
  user: User;
  platformUserId: string;
}

/**
 * The web login of spec 5 with the SDK: the site requests a code, the bot fetches it, the user
 * verifies it. Passing the same `platformUserId` again logs the same user in on a new session.
 */
export async function loginUser(
  app: TestApp,
  bot: BotClient,
  opts: { platformUserId?: string; level?: number } = {},
): Promise<TestUser> {
  const platformUserId = opts.platformUserId ?? nextIdentity();
  const client = userClient(app);
  await client.requestCode({ platform: 'platform_a', platform_user_id: platformUserId });
  const { code } = await bot.loginCode({
    platform: 'platform_a',
    platform_user_id: platformUserId,
    platform_username: `sdk${platformUserId}`,
    platform_avatar_url: `https://cdn.example/${platformUserId}.png`,
  });
  if (!code) throw new Error('the bot found no pending code');
  const { user } = await client.verify(code);
  if (opts.level !== undefined) await setLevel(app, user.id, opts.level);
  return { client, user, platformUserId };
}

/** Opened E2E sessions, closed by {@link closeSessions} after each test. */
const opened: E2EChatSession[] = [];

export async function openSession(
  client: ParlorClient,
  opts: Omit<E2EChatSessionOptions, 'client'> = {},
): Promise<E2EChatSession> {
  const session = await E2EChatSession.open({ client, ...opts });
  opened.push(session);
  return session;
}

export async function closeSessions(): Promise<void> {
  await Promise.all(opened.splice(0).map((s) => s.close()));
}

/** Collects a session's incoming entries of one chat from now on. */
export function collector(session: E2EChatSession, chatId: number) {
  const entries: ChatEntry[] = [];
  session.on('message', (e) => {
    if (e.chatId === chatId) entries.push(e);
  });
  return {
    entries,
    /** Waits (bounded) until at least `n` entries satisfy `filter`. */
    async waitFor(n: number, filter: (e: ChatEntry) => boolean = () => true, timeoutMs = 15_000): Promise<ChatEntry[]> {
      const end = Date.now() + timeoutMs;
      while (Date.now() < end) {
        const matching = entries.filter(filter);
        if (matching.length >= n) return matching;
        await new Promise((r) => setTimeout(r, 20));
      }
      throw new Error(`expected ${n} entries, got ${entries.filter(filter).length}: ${JSON.stringify(entries)}`);
    },
  };
}

/** The plaintexts of user entries. */
export const plaintexts = (entries: ChatEntry[]) =>
  entries.flatMap((e) => (e.kind === 'user' ? [e.plaintext] : [])).sort();

/** Every stored message content (ciphertext bundles and empty system contents). */
export async function storedContents(app: TestApp): Promise<string[]> {
  const result = (await app.database.db.execute('select content from messages' as never)) as unknown as
    | { rows: { content: string }[] }
    | { content: string }[];
  const rows = 'rows' in result ? result.rows : result;
  return rows.map((r) => r.content);
}

/** Runs `fn` and returns the ParlorApiError it throws. */
export async function apiError(fn: () => Promise<unknown>): Promise<ParlorApiError> {
  try {
    await fn();
  } catch (error) {
    if (error instanceof ParlorApiError) return error;
    throw error;
  }
  throw new Error('expected a ParlorApiError');
}

/** Waits until `check` holds; fails after `timeoutMs`. */
export async function until(what: string, check: () => boolean, timeoutMs = 15_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}
