import { expect } from 'vitest';
import type { TestApp } from './app.js';
import { Client, nextIp } from './client.js';

let identityCounter = 0;
export function nextIdentity(): string {
  identityCounter += 1;
  return `${Date.now()}${identityCounter}`;
}

/** The operator (CLI) as an HTTP client. */
export function operator(app: TestApp): Client {
  return new Client(app.url, nextIp(), null, { authorization: `Bearer ${app.operatorToken}` });
}

/** Registers a bot through the operator route and returns a client speaking with its key. */
export async function createBot(
  app: TestApp,
  body: { name?: string; type?: 'official' | 'verified' | 'community'; rate_limit_per_hour?: number } = {},
): Promise<{ id: number; apiKey: string; client: Client }> {
  const res = await operator(app).post('/v1/admin/bots/create', { name: body.name ?? 'Test bot', ...body });
  expect(res.status).toBe(200);
  return { id: res.body.id, apiKey: res.body.api_key, client: new Client(app.url, nextIp(), res.body.api_key) };
}

/**
 * A bot that delivers login codes: bot/send-code and bot/login-code answer Official bots only
 * (docs/api.md Login), and only the operator or an Owner registers one. Tests of what third-party
 * bots do (guild reports, rate limits, official-only rules) keep `createBot`'s community default.
 */
export async function createLoginBot(app: TestApp, name = 'Login bot'): Promise<Client> {
  return (await createBot(app, { name, type: 'official' })).client;
}

export interface LoggedIn {
  client: Client;
  user: { id: number; username: string; [k: string]: unknown };
  platformUserId: string;
}

/**
 * The web login of spec 5 as a user and a bot perform it: request from the site, the bot fetches
 * the pending code, the user verifies it. Returns a client holding the session cookie. `bot` must
 * be an official bot (createLoginBot); without one, a new one is registered.
 */
export async function login(
  app: TestApp,
  opts: { bot?: Client; platform?: string; platformUserId?: string; client?: Client; username?: string } = {},
): Promise<LoggedIn> {
  const bot = opts.bot ?? (await createLoginBot(app));
  const platform = opts.platform ?? 'platform_a';
  const platformUserId = opts.platformUserId ?? nextIdentity();
  const client = opts.client ?? new Client(app.url, nextIp(), app.publicApiKey);
  const req = await client.post('/v1/authentication/request', { platform, platform_user_id: platformUserId });
  expect(req.status).toBe(200);
  const fetched = await bot.post('/v1/authentication/bot/login-code', {
    platform,
    platform_user_id: platformUserId,
    platform_username: opts.username ?? `name${platformUserId}`,
    platform_avatar_url: `https://cdn.example/${platformUserId}.png`,
  });
  expect(fetched.status).toBe(200);
  const verify = await client.post('/v1/authentication/verify', { code: fetched.body.code });
  expect(verify.status).toBe(200);
  return { client, user: verify.body.user, platformUserId };
}

/** Sets a user's permission level through the operator route. */
export async function setLevel(app: TestApp, userId: number, level: number): Promise<void> {
  const res = await operator(app).post(`/v1/admin/users/${userId}/update`, { permission_level: level });
  expect(res.status).toBe(200);
}
