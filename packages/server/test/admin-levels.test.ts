import { afterAll, beforeAll, expect, it } from 'vitest';
import { describeApp, startApp, type TestApp } from './support/app.js';
import type { Answer, Client } from './support/client.js';
import { createBot, createLoginBot, login, operator, setLevel } from './support/flows.js';

/**
 * Every admin action × every caller × every target, against spec 2.11 (and docs/api.md for what
 * the spec leaves open). The expected answers are written out by hand below: `Y` = 200, `.` = 403
 * ERR_FORBIDDEN. Callers: sessions of level 0 User, 1 Moderator, 2 Admin, 3 Owner, and the
 * operator token. User and Moderator sessions are refused by every admin route.
 */

type ActorName = 'user' | 'moderator' | 'admin' | 'owner' | 'operator';
const ACTORS: ActorName[] = ['user', 'moderator', 'admin', 'owner', 'operator'];
const LEVEL: Record<Exclude<ActorName, 'operator'>, number> = { user: 0, moderator: 1, admin: 2, owner: 3 };

/**
 * Actions on a user; columns are the target's level 0 User, 1 Moderator, 2 Admin, 3 Owner (always
 * another account than the caller's). Admins act only on users below their level; Owners on
 * everyone, other Owners included; the operator on all.
 */
const ON_USERS = {
  'permission set (to User)': { user: '....', moderator: '....', admin: 'YY..', owner: 'YYYY', operator: 'YYYY' },
  'username set': { user: '....', moderator: '....', admin: 'YY..', owner: 'YYYY', operator: 'YYYY' },
  'user delete': { user: '....', moderator: '....', admin: 'YY..', owner: 'YYYY', operator: 'YYYY' },
  ban: { user: '....', moderator: '....', admin: 'YY..', owner: 'YYYY', operator: 'YYYY' },
  unban: { user: '....', moderator: '....', admin: 'YY..', owner: 'YYYY', operator: 'YYYY' },
  timeout: { user: '....', moderator: '....', admin: 'YY..', owner: 'YYYY', operator: 'YYYY' },
  warn: { user: '....', moderator: '....', admin: 'YY..', owner: 'YYYY', operator: 'YYYY' },
  'subscription grant': { user: '....', moderator: '....', admin: 'YY..', owner: 'YYYY', operator: 'YYYY' },
  'targeted notification': { user: '....', moderator: '....', admin: 'YY..', owner: 'YYYY', operator: 'YYYY' },
} as const satisfies Record<string, Record<ActorName, string>>;

/**
 * Actions on a bot; columns are its type: community, verified, official. Admins manage bots;
 * official bots, and making a bot official, are for Owners and the operator (docs/api.md).
 */
const BOT_TYPES = ['community', 'verified', 'official'] as const;
const ON_BOTS = {
  'bot update (rate limit)': { user: '...', moderator: '...', admin: 'YY.', owner: 'YYY', operator: 'YYY' },
  'bot update (type → official)': { user: '...', moderator: '...', admin: '...', owner: 'YYY', operator: 'YYY' },
  'bot delete': { user: '...', moderator: '...', admin: 'YY.', owner: 'YYY', operator: 'YYY' },
} as const satisfies Record<string, Record<ActorName, string>>;

/**
 * Actions on a chat; columns: a public chat owned by a User, a Moderator, an Admin, an Owner, and
 * an official chat. Admins manage any chat, whoever owns it, as the chat settings routes already let
 * them; official chats are for Owners and the operator (docs/api.md).
 */
const CHAT_TARGETS = ['owner User', 'owner Moderator', 'owner Admin', 'owner Owner', 'official'] as const;
const ON_CHATS = {
  'chat update': { user: '.....', moderator: '.....', admin: 'YYYY.', owner: 'YYYYY', operator: 'YYYYY' },
  'chat delete': { user: '.....', moderator: '.....', admin: 'YYYY.', owner: 'YYYYY', operator: 'YYYYY' },
} as const satisfies Record<string, Record<ActorName, string>>;

/** Actions without a target. */
const UNTARGETED = {
  'official chat create': { user: '.', moderator: '.', admin: '.', owner: 'Y', operator: 'Y' },
} as const satisfies Record<string, Record<ActorName, string>>;

/** Reads one cell; a missing or odd cell is a mistake in the table, not a refusal. */
function cell(line: string, index: number): boolean {
  const c = line[index];
  if (c !== 'Y' && c !== '.') throw new Error(`expected-table cell missing at ${index} of "${line}"`);
  return c === 'Y';
}

let app: TestApp;
let op: Client;
let loginBot: Client;
const callers = {} as Record<ActorName, Client>;
/** One reusable account per level for the actions that leave a target usable as a target. */
const targets: number[] = [];
/** Public chats' owners, by level (they keep their sessions: no punishment reaches them). */
const chatOwners: Client[] = [];
let counter = 0;

const newUser = async (level: number) => {
  const who = await login(app, { bot: loginBot });
  if (level > 0) await setLevel(app, who.user.id, level);
  return who;
};

const expectAnswer = (res: Answer, allowed: boolean, what: string) => {
  expect(res.status, `${what}: ${JSON.stringify(res.body)}`).toBe(allowed ? 200 : 403);
  if (!allowed) expect(res.body.code).toBe('ERR_FORBIDDEN');
};

beforeAll(async () => {
  app = await startApp();
  op = operator(app);
  loginBot = await createLoginBot(app);
  callers.operator = op;
  for (const [name, level] of Object.entries(LEVEL)) callers[name as ActorName] = (await newUser(level)).client;
  for (const level of [0, 1, 2, 3]) targets.push((await newUser(level)).user.id);
  for (const level of [0, 1, 2, 3]) {
    const owner = await newUser(level);
    // Basic accounts have no chat slots: the User and Moderator owners get Premium.
    if (level < 2) {
      const res = await op.post('/v1/admin/subscriptions/grant', {
        user_id: owner.user.id,
        tier: 'PREMIUM',
        duration_days: 30,
      });
      expect(res.status).toBe(200);
    }
    chatOwners.push(owner.client);
  }
}, 120_000);
afterAll(async () => app?.close());

// -------------------------------------------------------------------------------------------------
// Actions on users.

type UserAction = keyof typeof ON_USERS;

/** Sends the action against `targetId`; returns the answer. */
const userActions: Record<UserAction, (by: Client, targetId: number) => Promise<Answer>> = {
  'permission set (to User)': (by, id) => by.post(`/v1/admin/users/${id}/update`, { permission_level: 0 }),
  'username set': (by, id) => {
    counter += 1;
    return by.post(`/v1/admin/users/${id}/update`, { username: `renamed_${Date.now()}_${counter}` });
  },
  'user delete': (by, id) => by.post(`/v1/admin/users/${id}/delete`),
  ban: (by, id) => by.post('/v1/admin/punishments/ban', { user_id: id, duration: 3600, reason: 'levels' }),
  unban: (by, id) => by.post('/v1/admin/punishments/unban', { user_id: id }),
  timeout: (by, id) => by.post('/v1/admin/punishments/timeout', { user_id: id, duration: 60 }),
  warn: (by, id) => by.post('/v1/admin/punishments/warn', { user_id: id, reason: 'levels' }),
  'subscription grant': (by, id) =>
    by.post('/v1/admin/subscriptions/grant', { user_id: id, tier: 'PREMIUM', duration_days: 30 }),
  'targeted notification': (by, id) =>
    by.post('/v1/admin/notifications', { title: 'Levels', body: 'A test.', type: 'info', user_id: id }),
};

const userCases = (Object.keys(ON_USERS) as UserAction[]).flatMap((action) =>
  ACTORS.flatMap((actor) =>
    [0, 1, 2, 3].map((target) => ({ action, actor, target, allowed: cell(ON_USERS[action][actor], target) })),
  ),
);

describeApp('admin actions on users, by caller and target level (spec 2.11)', () => {
  it('covers 9 actions × 5 callers × 4 target levels', () => {
    expect(userCases).toHaveLength(180);
  });

  it.each(userCases)('$action by $actor on a level-$target user → allowed: $allowed', async (c) => {
    // Deletion is destructive: a fresh target each time. The others leave the target a target.
    const targetId = c.action === 'user delete' ? (await newUser(c.target)).user.id : (targets[c.target] as number);
    const res = await userActions[c.action](callers[c.actor], targetId);
    expectAnswer(res, c.allowed, `${c.action} by ${c.actor} on level ${c.target}`);
    // A demotion is undone so the account keeps standing for its level.
    if (c.action === 'permission set (to User)' && c.allowed && c.target > 0) await setLevel(app, targetId, c.target);
  });
});

// -------------------------------------------------------------------------------------------------
// Actions on bots.

type BotAction = keyof typeof ON_BOTS;

const botActions: Record<BotAction, (by: Client, botId: number) => Promise<Answer>> = {
  'bot update (rate limit)': (by, id) => by.post(`/v1/admin/bots/${id}/update`, { rate_limit_per_hour: 5000 }),
  'bot update (type → official)': (by, id) => by.post(`/v1/admin/bots/${id}/update`, { type: 'official' }),
  'bot delete': (by, id) => by.post(`/v1/admin/bots/${id}/delete`),
};

const botCases = (Object.keys(ON_BOTS) as BotAction[]).flatMap((action) =>
  ACTORS.flatMap((actor) =>
    BOT_TYPES.map((type, i) => ({ action, actor, type, allowed: cell(ON_BOTS[action][actor], i) })),
  ),
);

describeApp('admin actions on bots, by caller and bot type', () => {
  it('covers 3 actions × 5 callers × 3 bot types', () => {
    expect(botCases).toHaveLength(45);
  });

  it.each(botCases)('$action by $actor on a $type bot → allowed: $allowed', async (c) => {
    const bot = await createBot(app, { name: `Levels ${c.type}`, type: c.type });
    const res = await botActions[c.action](callers[c.actor], bot.id);
    expectAnswer(res, c.allowed, `${c.action} by ${c.actor} on a ${c.type} bot`);
  });
});

// -------------------------------------------------------------------------------------------------
// Actions on chats.

type ChatAction = keyof typeof ON_CHATS;

/** The live chat of each column; a deleted one is replaced by a new one on demand. */
const liveChats = new Map<number, number>();

async function chatOf(column: number): Promise<number> {
  const known = liveChats.get(column);
  if (known !== undefined) return known;
  counter += 1;
  const name = `Levels ${counter}`;
  const res =
    column < 4
      ? await (chatOwners[column] as Client).post('/v1/portal/chats/create', { name, type: 'public' })
      : await op.post('/v1/admin/chats/create', { name });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  liveChats.set(column, res.body.chat.id);
  return res.body.chat.id;
}

const chatCases = (Object.keys(ON_CHATS) as ChatAction[]).flatMap((action) =>
  ACTORS.flatMap((actor) =>
    CHAT_TARGETS.map((target, i) => ({ action, actor, target, column: i, allowed: cell(ON_CHATS[action][actor], i) })),
  ),
);

describeApp('admin actions on chats, by caller and chat', () => {
  it('covers 2 actions × 5 callers × 5 chats', () => {
    expect(chatCases).toHaveLength(50);
  });

  it.each(chatCases)('$action by $actor on a chat ($target) → allowed: $allowed', async (c) => {
    const chatId = await chatOf(c.column);
    counter += 1;
    const res =
      c.action === 'chat update'
        ? await callers[c.actor].post(`/v1/admin/chats/${chatId}/update`, { name: `Renamed ${counter}` })
        : await callers[c.actor].post(`/v1/admin/chats/${chatId}/delete`);
    expectAnswer(res, c.allowed, `${c.action} by ${c.actor} on ${c.target}`);
    if (c.action === 'chat delete' && c.allowed) liveChats.delete(c.column);
  });
});

// -------------------------------------------------------------------------------------------------
// Actions without a target.

const untargetedCases = ACTORS.map((actor) => ({
  action: 'official chat create' as const,
  actor,
  allowed: cell(UNTARGETED['official chat create'][actor], 0),
}));

describeApp('admin actions without a target, by caller', () => {
  it.each(untargetedCases)('$action by $actor → allowed: $allowed', async (c) => {
    const res = await callers[c.actor].post('/v1/admin/chats/create', { name: 'Official by levels' });
    expectAnswer(res, c.allowed, `${c.action} by ${c.actor}`);
    if (c.allowed) expect(res.body.chat).toMatchObject({ type: 'official', owner_id: null });
  });
});
