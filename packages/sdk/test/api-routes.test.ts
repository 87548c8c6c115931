import { readdirSync, readFileSync } from 'node:fs';
import { expect, it } from 'vitest';
import { describeApp, startApp } from '../../server/test/support/app.js';

/**
 * The SDK's REST clients have one method per route (README): the routes the running server's
 * OpenAPI document lists are compared with the `METHOD /path` each method names in its doc comment
 * (in src/client/api/, one file per area of routes). Left out on purpose, and listed here so that
 * a new one is a decision: the admin routes (the operator's and Admins' tools, not a user
 * client's), and the unprefixed aliases of `/v1/bots…` and `/v1/statistics/…`, which the server
 * also serves as the spec lists them.
 */
const ADMIN_ROUTES = [
  'GET /v1/admin/audit',
  'POST /v1/admin/bots/create',
  'POST /v1/admin/bots/{}/delete',
  'POST /v1/admin/bots/{}/update',
  'POST /v1/admin/chats/create',
  'POST /v1/admin/chats/{}/delete',
  'POST /v1/admin/chats/{}/update',
  'POST /v1/admin/guilds/{}/premium',
  'POST /v1/admin/guilds/{}/premium/revoke',
  'POST /v1/admin/guilds/{}/sponsors/add',
  'POST /v1/admin/guilds/{}/sponsors/remove',
  'POST /v1/admin/notifications',
  'POST /v1/admin/notifications/{}/delete',
  'POST /v1/admin/punishments/ban',
  'POST /v1/admin/punishments/timeout',
  'POST /v1/admin/punishments/unban',
  'POST /v1/admin/punishments/warn',
  'POST /v1/admin/subscriptions/grant',
  'POST /v1/admin/subscriptions/revoke',
  'POST /v1/admin/users/{}/delete',
  'POST /v1/admin/users/{}/update',
];
const isAlias = (route: string) => /^GET \/(bots|statistics)(\/|$)/.test(route);

/** `{chat_id}` and the like → `{}`, so that a doc comment may name a parameter differently. */
const normalise = (route: string) => route.replace(/\{[^}]+\}/g, '{}');

/** `METHOD /path` of each doc comment in src/client/api/ (`…` standing for `/v1/portal/chats/{chat_id}`). */
function documentedRoutes(): Set<string> {
  const dir = new URL('../src/client/api/', import.meta.url);
  const files = readdirSync(dir).filter((name) => name.endsWith('.ts') && !name.endsWith('.test.ts'));
  expect(files.length).toBeGreaterThan(0);
  const src = files.map((name) => readFileSync(new URL(name, dir), 'utf8')).join('\n');
  const named = src.matchAll(/`(GET|POST|PUT) (?:\{guild_api_url\})?((?:\/v1\/|…)[^`\s?]*)/g);
  return new Set(
    [...named].map(([, method, path]) => normalise(`${method} ${path?.replace('…', '/v1/portal/chats/{}')}`)),
  );
}

async function serverRoutes(): Promise<string[]> {
  const app = await startApp();
  try {
    const doc = (await (await fetch(`${app.url}/openapi.json`)).json()) as { paths: Record<string, object> };
    return Object.entries(doc.paths).flatMap(([path, ops]) =>
      Object.keys(ops).map((method) => normalise(`${method.toUpperCase()} ${path}`)),
    );
  } finally {
    await app.close();
  }
}

describeApp('ParlorClient and BotClient cover the server’s routes', () => {
  it('has a method for every route of the OpenAPI document but the admin routes and the aliases', async () => {
    const routes = await serverRoutes();
    const documented = documentedRoutes();
    const missing = routes.filter((r) => !documented.has(r) && !ADMIN_ROUTES.includes(r) && !isAlias(r)).sort();
    expect(missing).toEqual([]);
    // A method naming a route the server does not have is a typo or a removed route.
    expect([...documented].filter((r) => !routes.includes(r)).sort()).toEqual([]);
    // The list of admin routes left out is exact: a route gone from the server leaves it too.
    expect(ADMIN_ROUTES.filter((r) => !routes.includes(r))).toEqual([]);
  }, 60_000);
});
