import {
  INT32_MAX,
  KEY_SHARE_BODY_MAX_BYTES,
  Limits,
  RoomJoinPayload,
  RoomLeavePayload,
  VmChatPayload,
  VmControlGrantPayload,
  VmFrameAckPayload,
  VmInputPayload,
  VmWatchPayload,
} from '@parlor/protocol';
import fc from 'fast-check';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { SOCKET_MESSAGE_MAX_BYTES } from '../src/platform/realtime.js';
import { describeApp, startApp, type TestApp } from './support/app.js';
import { join, keyEpoch, type Member, member } from './support/chat-flows.js';
import { type Answer, Client, nextIp } from './support/client.js';
import { createBot, login, operator, setLevel } from './support/flows.js';
import { closeAllSockets } from './support/sockets.js';

/**
 * Spec section 9 / DESIGN 9: bad input never yields a 5xx. Every route of the running app (read
 * from its own /openapi.json) gets random JSON bodies, query strings and path parameters, with the
 * credentials its `security` names and without any; every answer must be below 500 and, when it is
 * an error, have the error body `{code: ERR_…, message, …}`. Each request comes from its own
 * client address so per-address login limits never interfere.
 */

type Method = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE' | 'OPTIONS';
/** The security schemes of the OpenAPI document, plus an Owner session for the admin routes. */
type Cred = 'publicKey' | 'botKey' | 'session' | 'ownerSession' | 'operatorToken';

interface Route {
  method: Method;
  /** OpenAPI template, `{name}` for path parameters. */
  path: string;
  /** Alternatives of the `security` requirement; each alternative lists the schemes it needs. */
  security: Cred[][];
  pathParams: string[];
  /** Query parameters by name, with their schemas. */
  query: Record<string, JsonSchema>;
  /** The JSON body schema; null when the route takes no body. */
  body: JsonSchema | null;
}

/** The parts of JSON Schema the OpenAPI document uses for bodies. */
interface JsonSchema {
  type?: string;
  properties?: Record<string, JsonSchema>;
  required?: string[];
  items?: JsonSchema;
  anyOf?: JsonSchema[];
  enum?: unknown[];
  const?: unknown;
  minLength?: number;
  maxLength?: number;
  pattern?: string;
  format?: string;
  minimum?: number;
  maximum?: number;
  minItems?: number;
  maxItems?: number;
  nullable?: boolean;
}

interface Variant {
  route: Route;
  /** [] = no credentials. */
  creds: Cred[];
  label: string;
}

const ERROR_KEYS = new Set(['code', 'message', 'errors', 'retry_after', 'ttl']);
const SCHEMES: Record<string, Cred> = {
  publicKey: 'publicKey',
  botKey: 'botKey',
  session: 'session',
  operatorToken: 'operatorToken',
};
/** A valid-looking value per path parameter, used where the parameter is not what is fuzzed. */
const PLAIN_PARAM: Record<string, string> = { token_suffix: 'abcdef', key: 'platform_a_1' };
/** Routes the OpenAPI document hides but a client can still reach. */
const HIDDEN_ROUTES: Route[] = [
  { method: 'GET', path: '/avatars/{key}.svg', security: [], pathParams: ['key'], query: {}, body: null },
  { method: 'GET', path: '/', security: [], pathParams: [], query: {}, body: null },
  { method: 'GET', path: '/openapi.json', security: [], pathParams: [], query: {}, body: null },
];

let app: TestApp;
let routes: Route[] = [];
let variants: Variant[] = [];

// ---------------------------------------------------------------------------------------------
// Callers: the public key, bot keys (replaced before they reach their per-minute limit), and
// sessions (logged in again whenever a fuzzed request ended one); both are replaced after any fuzzed
// admin action that went through.

let bot: { apiKey: string; used: number } | null = null;
const cookies: Record<'session' | 'ownerSession', string | null> = { session: null, ownerSession: null };

async function botKey(): Promise<string> {
  if (!bot || bot.used >= Limits.BOT_REQUESTS_PER_MINUTE / 2) {
    // Official, so fuzzed bodies reach the login-code routes' rules (other bots get 403 first).
    bot = { apiKey: (await createBot(app, { name: 'Fuzz bot', type: 'official' })).apiKey, used: 0 };
  }
  bot.used += 1;
  return bot.apiKey;
}

async function sessionCookie(kind: 'session' | 'ownerSession'): Promise<string> {
  const known = cookies[kind];
  if (known) return known;
  const { client, user } = await login(app);
  if (kind === 'ownerSession') await setLevel(app, user.id, 3);
  if (!client.cookie) throw new Error('login gave no session cookie');
  cookies[kind] = client.cookie;
  return client.cookie;
}

/** A fresh client (its own address) carrying the given credentials. */
async function caller(creds: Cred[]): Promise<Client> {
  let apiKey: string | null = null;
  let cookie: string | null = null;
  const headers: Record<string, string> = {};
  for (const c of creds) {
    if (c === 'publicKey') apiKey = app.publicApiKey;
    if (c === 'botKey') apiKey = await botKey();
    if (c === 'operatorToken') headers.authorization = `Bearer ${app.operatorToken}`;
    if (c === 'session' || c === 'ownerSession') cookie = await sessionCookie(c);
  }
  const client = new Client(app.url, nextIp(), apiKey, headers);
  client.cookie = cookie;
  return client;
}

/** Sends one request; forgets a session the request ended (logout) so the next one logs in again. */
async function send(
  creds: Cred[],
  method: string,
  path: string,
  opts: { raw?: string; contentType?: string; headers?: Record<string, string> } = {},
): Promise<Answer<unknown>> {
  const client = await caller(creds);
  const res = await client.request<unknown>(method, path, opts);
  const code = (res.body as { code?: unknown } | null)?.code;
  for (const kind of ['session', 'ownerSession'] as const) {
    if (!creds.includes(kind)) continue;
    if (client.cookie === null || res.status === 401 || code === 'ERR_BANNED' || code === 'ERR_TIMED_OUT') {
      cookies[kind] = null;
    }
  }
  // A fuzzed admin action that went through (a bot deleted, a user banned, timed out, demoted or
  // deleted, a hard mute) may have hit the harness's own bot or users, whose ids are small integers
  // like the fuzzed ones: the next callers get a fresh bot and fresh sessions.
  if (method === 'POST' && res.status < 400 && (path.startsWith('/v1/admin/') || path === '/v1/portal/hard-mute')) {
    bot = null;
    cookies.session = null;
    cookies.ownerSession = null;
  }
  return res;
}

// ---------------------------------------------------------------------------------------------
// Assertions.

function describeAnswer(what: string, res: Answer<unknown>): string {
  const body = typeof res.body === 'string' ? res.body : JSON.stringify(res.body);
  return `${what} → ${res.status} ${String(body).slice(0, 300)}`;
}

/** Below 500; an error answer has exactly the error body's shape. */
function expectWellFormed(what: string, res: Answer<unknown>): void {
  expect(res.status, describeAnswer(what, res)).toBeLessThan(500);
  if (res.status < 400) return;
  const body = res.body as Record<string, unknown> | null;
  expect(body, describeAnswer(what, res)).toEqual(
    expect.objectContaining({ code: expect.stringMatching(/^ERR_[A-Z_]+$/), message: expect.any(String) }),
  );
  const extra = Object.keys(body ?? {}).filter((k) => !ERROR_KEYS.has(k));
  expect(extra, describeAnswer(what, res)).toEqual([]);
  if (body && body.errors !== undefined) {
    expect(body.errors, describeAnswer(what, res)).toEqual(
      expect.arrayContaining([{ path: expect.any(String), message: expect.any(String) }]),
    );
  }
}

/** Without credentials a protected route answers 401 whatever the input. */
function expectRefusedWithoutCredentials(v: Variant, what: string, res: Answer<unknown>): void {
  if (v.creds.length > 0 || v.route.security.length === 0) return;
  expect(res.status, describeAnswer(what, res)).toBe(401);
  expect((res.body as { code?: string }).code).toMatch(/^ERR_(UNAUTHENTICATED|INVALID_API_KEY)$/);
}

// ---------------------------------------------------------------------------------------------
// Generators.

const NASTY = [
  '',
  ' ',
  '\u0000',
  'a\u0000b',
  '\uD800',
  '\uDFFF',
  '\u202E',
  '\uFEFF',
  '🎉',
  '𝕏𝕐',
  'Ω≈ç√∫',
  'e\u0301',
  '%00',
  '%s%n%x',
  "' OR '1'='1",
  '"; DROP TABLE users; --',
  '../../etc/passwd',
  '<script>alert(1)</script>',
  '__proto__',
  'constructor',
  'null',
  'true',
  '0',
  '-1',
  '1e309',
  'NaN',
  'Infinity',
  '99999999999999999999999999',
  'platform_a',
  'user_1',
  'https://example.org/a.png',
  'javascript:alert(1)',
  '2024-02-30T25:61:00Z',
];
const nasty = fc.constantFrom(...NASTY);
const hugeString = fc
  .tuple(
    fc.oneof(nasty, fc.string({ minLength: 1, maxLength: 4, unit: 'binary' })),
    fc.integer({ min: 200, max: 20_000 }),
  )
  .map(([s, n]) => s.repeat(Math.ceil(n / Math.max(1, s.length))));
const text = fc.oneof(
  fc.string(),
  fc.string({ unit: 'grapheme' }),
  fc.string({ unit: 'binary' }),
  fc.string({ unit: 'binary-ascii' }),
  nasty,
  hugeString,
);
const number = fc.oneof(
  fc.integer(),
  fc.double({ noNaN: true, noDefaultInfinity: true }),
  fc.constantFrom(0, -1, 1, 2, 3, 4, 2 ** 31 - 1, 2 ** 31, 2 ** 53, -(2 ** 53), 1e308, -1e308, 0.5, 1e-300),
);
const leaf = fc.oneof(text, number, fc.boolean(), fc.constant(null));
const anyValue = fc.anything({ key: fc.oneof(fc.string(), nasty), values: [leaf], maxDepth: 4, maxKeys: 6 });

/** Strings matching a schema pattern; random text where fast-check cannot invert the pattern. */
function matching(pattern: string): fc.Arbitrary<string> {
  try {
    return fc.stringMatching(new RegExp(pattern));
  } catch {
    return text;
  }
}

/**
 * For deep runs (below): real values for the fields and parameters that name a record (ids of
 * users, chats, bots, an invite code), so that input gets past the lookups into the rules; and
 * storable text only, so that it gets past validation.
 */
interface Deep {
  /** Real values for a field or parameter of this name, or null. */
  real(key: string): fc.Arbitrary<unknown> | null;
}

const LONE_SURROGATES = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;
/** Text without what validation refuses anywhere (NUL, lone surrogates). */
const storable = (s: string) => s.replaceAll('\u0000', '').replace(LONE_SURROGATES, '\uFFFD');

/**
 * Values the schema accepts, or nearly: strings of any script (NUL and lone surrogates included,
 * unless `deep`) within the length bounds, integers anywhere in range (huge ones too), dates,
 * enums, constants, nulls. `key`: the name of the field (or parameter) the value is for.
 */
function conforming(schema: JsonSchema, deep?: Deep, key = ''): fc.Arbitrary<unknown> {
  let arb: fc.Arbitrary<unknown>;
  const real = deep?.real(key) ?? null;
  if (real) arb = real;
  else if (schema.anyOf) arb = fc.oneof(...schema.anyOf.map((s) => conforming(s, deep, key)));
  else if (schema.const !== undefined) arb = fc.constant(schema.const);
  else if (schema.enum) arb = fc.constantFrom(...schema.enum);
  else if (schema.type === 'string') {
    const min = schema.minLength ?? 0;
    const max = Math.min(schema.maxLength ?? 500, 5_000);
    let str: fc.Arbitrary<string>;
    if (schema.pattern) str = matching(schema.pattern).map((s) => s.slice(0, max));
    else if (schema.format === 'date-time')
      str = fc
        .date({ min: new Date('1900-01-01'), max: new Date('2200-01-01'), noInvalidDate: true })
        .map((d) => d.toISOString());
    else str = fc.oneof(text, nasty).map((s) => s.slice(0, max).padEnd(min, 'x'));
    arb = deep ? str.map(storable) : str;
  } else if (schema.type === 'integer' || schema.type === 'number') {
    const min = schema.minimum ?? -(2 ** 53 - 1);
    const max = schema.maximum ?? 2 ** 53 - 1;
    const edges = fc.constantFrom(min, max, Math.min(min + 1, max), Math.min(2 ** 31, max), Math.min(2 ** 31 - 1, max));
    const any = fc.integer({ min: Math.max(min, -(2 ** 31)), max: Math.min(max, 2 ** 31 - 1) });
    arb = fc.oneof(edges, any, fc.integer({ min: Math.max(min, 0), max: Math.max(min, Math.min(max, 20)) }));
    if (schema.type === 'number') arb = fc.oneof(arb, fc.double({ min, max, noNaN: true }));
  } else if (schema.type === 'boolean') arb = fc.boolean();
  else if (schema.type === 'array' && schema.items) {
    const items = conforming(schema.items, deep, key);
    arb = fc.array(items, { minLength: schema.minItems ?? 0, maxLength: Math.min(schema.maxItems ?? 5, 5) });
  } else if (schema.type === 'object' || schema.properties) {
    const props = Object.fromEntries(
      Object.entries(schema.properties ?? {}).map(([k, v]) => [k, conforming(v, deep, k)]),
    );
    arb = fc.record(props, { requiredKeys: (schema.required ?? []).filter((k) => k in props) });
  } else arb = leaf;
  return schema.nullable ? fc.option(arb, { nil: null }) : arb;
}

/** A conforming object with one thing wrong: a field of another type, a stranger field, or a field missing. */
function mutated(schema: JsonSchema): fc.Arbitrary<unknown> {
  const keys = Object.keys(schema.properties ?? {});
  const base = conforming(schema).map((v) => (v !== null && typeof v === 'object' ? { ...v } : {}));
  const key = keys.length > 0 ? fc.constantFrom(...keys) : fc.constant('x');
  return fc.oneof(
    fc.tuple(base, key, fc.oneof(leaf, anyValue)).map(([o, k, v]) => ({ ...o, [k]: v })),
    fc.tuple(base, fc.oneof(fc.string(), nasty), leaf).map(([o, k, v]) => ({ ...o, [k]: v })),
    fc.tuple(base, key).map(([o, k]) => Object.fromEntries(Object.entries(o).filter(([name]) => name !== k))),
  );
}

/** Random JSON text for a route: near-valid bodies, anything at all, deep nesting, odd number literals. */
function bodyText(schema: JsonSchema): fc.Arbitrary<string> {
  const keys = Object.keys(schema.properties ?? {});
  const known = keys.length > 0 ? fc.constantFrom(...keys) : fc.constant('x');
  const depth = fc.integer({ min: 1, max: 3_000 });
  const json = (v: unknown) => JSON.stringify(v) ?? 'null';
  return fc.oneof(
    { weight: 4, arbitrary: conforming(schema).map(json) },
    { weight: 3, arbitrary: mutated(schema).map(json) },
    { weight: 2, arbitrary: anyValue.map(json) },
    { weight: 1, arbitrary: fc.json({ maxDepth: 4 }) },
    { weight: 1, arbitrary: fc.array(anyValue, { maxLength: 5 }).map(json) },
    { weight: 1, arbitrary: depth.map((n) => `${'['.repeat(n)}${']'.repeat(n)}`) },
    { weight: 1, arbitrary: depth.map((n) => `${'{"a":'.repeat(n)}1${'}'.repeat(n)}`) },
    {
      weight: 1,
      arbitrary: fc
        .tuple(known, fc.constantFrom('1e400', '-0', '123456789012345678901234567890', '0.1e-999', '1E+2'))
        .map(([k, n]) => `{"${k}":${n}}`),
    },
  );
}

/** encodeURIComponent that never throws (a lone surrogate becomes U+FFFD). */
function encode(s: string): string {
  try {
    return encodeURIComponent(s);
  } catch {
    return encodeURIComponent(s.replace(/[\uD800-\uDFFF]/g, '\uFFFD'));
  }
}

/** A path segment: random text (percent-encoded), numbers, and raw, possibly malformed, escapes. */
const pathValue = fc.oneof(
  { weight: 3, arbitrary: text.map((s) => encode(s.slice(0, 300))) },
  { weight: 2, arbitrary: number.map((n) => encode(String(n))) },
  {
    weight: 2,
    arbitrary: fc.constantFrom(
      '%',
      '%zz',
      '%00',
      '%2F',
      '%2e%2e',
      '%C0%AF',
      '%E2%82',
      'a%20b',
      '-0',
      '0x10',
      '1.0',
      '01',
      '+1',
      '1e3',
      '2147483648',
      '9'.repeat(200),
      'me',
      'search',
      ';a=b',
      'x'.repeat(101),
    ),
  },
);

/** Numbers as text that bound checks and SQL integer types must survive. */
const NUMERIC_EDGES = ['1e308', '9223372036854775808', '1e20', '2147483648', '-1', '-0', '1.5', '0x10', ' ', ''];

/** A query string: declared names with near-valid and edge values, strangers, repeats, raw escapes. */
function queryString(params: Record<string, JsonSchema>): fc.Arbitrary<string> {
  const declared = Object.entries(params).map(([name, schema]) =>
    fc.tuple(
      fc.constant(name),
      fc.oneof(
        conforming(schema).map((v) => encode(String(v))),
        fc.constantFrom(...NUMERIC_EDGES),
      ),
    ),
  );
  const stranger = fc.tuple(
    fc.oneof(
      fc.constantFrom('limit[]', 'a[b]', '__proto__', 'constructor[prototype]', ''),
      fc.string({ maxLength: 10 }).map(encode),
    ),
    fc.oneof(
      // Short enough that a whole query stays under Node's 16 KiB header limit once percent-encoded.
      text.map((s) => encode(s.slice(0, 300))),
      fc.constantFrom('', '%', '%zz', '%00', 'true', ...NUMERIC_EDGES),
    ),
  );
  const pair = fc.oneof(
    ...declared.map((arbitrary) => ({ weight: 3, arbitrary })),
    { weight: 1, arbitrary: stranger },
    { weight: 1, arbitrary: fc.tuple(fc.constantFrom(...Object.keys(params), 'q'), fc.constant(null)) },
  );
  return fc
    .array(pair, { maxLength: 5 })
    .map((pairs) => `?${pairs.map(([k, v]) => (v === null ? k : `${k}=${v}`)).join('&')}`);
}

function fillPath(template: string, values: Record<string, string> = {}): string {
  return template.replace(/\{(\w+)\}/g, (_, name: string) => values[name] ?? PLAIN_PARAM[name] ?? '1');
}

/** Whether a concrete path fits an OpenAPI template (`{name}` stands for one segment). */
function fits(template: string, path: string): boolean {
  const source = template
    .split('/')
    .map((seg) => seg.replace(/[.*+?^$()|[\]\\]/g, '\\$&').replace(/\{\w+\}/g, '[^/]+'))
    .join('/');
  return new RegExp(`^${source}$`).test(path);
}

// ---------------------------------------------------------------------------------------------
// The route list, from the running app's OpenAPI document.

interface OpenApiOperation {
  security?: Record<string, unknown>[];
  parameters?: { in: string; name: string; schema?: JsonSchema }[];
  requestBody?: { content?: Record<string, { schema?: JsonSchema }> };
}

async function loadRoutes(url = app.url): Promise<Route[]> {
  const res = await new Client(url).get<{ paths: Record<string, Record<string, OpenApiOperation>> }>('/openapi.json');
  expect(res.status).toBe(200);
  const found: Route[] = [];
  for (const [path, ops] of Object.entries(res.body.paths)) {
    for (const [method, op] of Object.entries(ops)) {
      const security = (op.security ?? []).map((alt) =>
        Object.keys(alt).map((scheme) => {
          const cred = SCHEMES[scheme];
          if (!cred) throw new Error(`unknown security scheme ${scheme} on ${method} ${path}`);
          return cred;
        }),
      );
      const params = op.parameters ?? [];
      const schema = op.requestBody?.content?.['application/json']?.schema;
      found.push({
        method: method.toUpperCase() as Method,
        path,
        security,
        pathParams: params.filter((p) => p.in === 'path').map((p) => p.name),
        query: Object.fromEntries(params.filter((p) => p.in === 'query').map((p) => [p.name, p.schema ?? {}])),
        body: op.requestBody ? (schema ?? {}) : null,
      });
    }
  }
  return found;
}

/** Each route once per alternative of its security, once more with an Owner session on admin routes, and bare. */
function variantsOf(route: Route): Variant[] {
  const alternatives = route.security.map((alt) => [...alt]);
  if (route.security.some((alt) => alt.includes('operatorToken'))) alternatives.push(['ownerSession']);
  if (route.security.length > 0) alternatives.push([]);
  if (alternatives.length === 0) alternatives.push([]);
  return alternatives.map((creds) => ({
    route,
    creds,
    label: `${route.method} ${route.path} [${creds.join('+') || 'no credentials'}]`,
  }));
}

/** Creds that pass the route's guard (the first alternative), or none for a public route. */
const passingCreds = (r: Route): Cred[] => [...(r.security[0] ?? [])];

const posts = () => routes.filter((r) => r.body !== null);

// ---------------------------------------------------------------------------------------------

describeApp('fuzzing every route', () => {
  beforeAll(async () => {
    app = await startApp();
    routes = [...(await loadRoutes()), ...HIDDEN_ROUTES];
    variants = routes.flatMap(variantsOf);
  });
  afterAll(async () => app?.close());

  it('finds every route of the app in /openapi.json, each with known security', () => {
    expect(routes.length).toBeGreaterThanOrEqual(35);
    const names = routes.map((r) => `${r.method} ${r.path}`);
    for (const known of [
      'POST /v1/authentication/request',
      'GET /v1/users/{id}',
      'POST /v1/users/me/sessions/{token_suffix}/destroy',
      'POST /v1/bot/batch',
      'GET /v1/bots/search',
      'POST /v1/admin/users/{user_id}/update',
      'GET /v1/health',
    ]) {
      expect(names).toContain(known);
    }
    expect(posts().length).toBeGreaterThanOrEqual(10);
    expect(variants.filter((v) => v.creds.length === 0).length).toBeGreaterThanOrEqual(routes.length);
  });

  it('answers random JSON bodies on every route below 500, with the error shape', async () => {
    const statuses = new Map<string, number[]>();
    for (const v of variants.filter((x) => x.route.body !== null)) {
      await fc.assert(
        fc.asyncProperty(bodyText(v.route.body ?? {}), async (raw) => {
          const path = fillPath(v.route.path);
          const res = await send(v.creds, v.route.method, path, { raw });
          const what = `${v.label} body ${raw.slice(0, 200)}`;
          expectWellFormed(what, res);
          expectRefusedWithoutCredentials(v, what, res);
          statuses.set(v.label, [...(statuses.get(v.label) ?? []), res.status]);
        }),
        { numRuns: 10 },
      );
    }
    // Not vacuous: every set of credentials got past authentication, and near-valid bodies got
    // through validation into the services on many routes.
    for (const v of variants.filter((x) => x.route.body !== null && x.creds.length > 0)) {
      expect(
        statuses.get(v.label)?.some((st) => st !== 401),
        `${v.label} was let in at least once`,
      ).toBe(true);
    }
    const succeeded = [...statuses].filter(([, list]) => list.some((st) => st < 300)).map(([label]) => label);
    expect(succeeded.length, `routes with a 2xx: ${succeeded.join(', ')}`).toBeGreaterThanOrEqual(8);
  }, 120_000);

  it('answers random query strings on every route below 500, with the error shape', async () => {
    for (const v of variants) {
      await fc.assert(
        fc.asyncProperty(queryString(v.route.query), async (query) => {
          const path = fillPath(v.route.path) + query;
          const opts = v.route.body === null ? {} : { raw: '{}' };
          const res = await send(v.creds, v.route.method, path, opts);
          const what = `${v.label} ${path.slice(0, 300)}`;
          expectWellFormed(what, res);
          expectRefusedWithoutCredentials(v, what, res);
        }),
        { numRuns: 5 },
      );
    }
  }, 120_000);

  it('answers random path parameters below 500, with the error shape', async () => {
    for (const v of variants.filter((x) => x.route.pathParams.length > 0)) {
      const params = fc.record(Object.fromEntries(v.route.pathParams.map((p) => [p, pathValue])));
      await fc.assert(
        fc.asyncProperty(params, async (values) => {
          const path = fillPath(v.route.path, values);
          const opts = v.route.body === null ? {} : { raw: '{}' };
          const res = await send(v.creds, v.route.method, path, opts);
          expectWellFormed(`${v.label} ${path.slice(0, 300)}`, res);
        }),
        { numRuns: 15 },
      );
    }
  }, 120_000);

  it('answers random credentials with 401 on every protected route', async () => {
    const junk = fc.string({ unit: 'grapheme-ascii', minLength: 1, maxLength: 300 });
    for (const route of routes.filter((r) => r.security.length > 0)) {
      await fc.assert(
        fc.asyncProperty(junk, fc.constantFrom('x-api-key', 'cookie', 'authorization'), async (value, header) => {
          const headers = {
            [header]:
              header === 'cookie' ? `psession=${value}` : header === 'authorization' ? `Bearer ${value}` : value,
          };
          const res = await send([], route.method, fillPath(route.path), {
            headers,
            ...(route.body === null ? {} : { raw: '{}' }),
          });
          const what = `${route.method} ${route.path} with ${header}: ${value.slice(0, 60)}`;
          expectWellFormed(what, res);
          expect(res.status, describeAnswer(what, res)).toBe(401);
        }),
        { numRuns: 4 },
      );
    }
  }, 60_000);

  it('answers malformed JSON with 400 ERR_INVALID_JSON once the caller is let in', async () => {
    const malformed = fc.oneof(
      fc.constantFrom(
        '{',
        '{"a":',
        '[1,2',
        "{'a':1}",
        '{"a":1,}',
        'nul',
        'tru',
        '{"a" 1}',
        '"unterminated',
        '\u0000',
        '{}{}',
      ),
      fc.string({ unit: 'binary', minLength: 1, maxLength: 50 }).filter((s) => {
        try {
          JSON.parse(s);
          return false;
        } catch {
          return s.trim().length > 0;
        }
      }),
    );
    for (const route of posts()) {
      await fc.assert(
        fc.asyncProperty(malformed, async (raw) => {
          const res = await send(passingCreds(route), route.method, fillPath(route.path), { raw });
          const what = `${route.method} ${route.path} raw ${JSON.stringify(raw)}`;
          expectWellFormed(what, res);
          expect(res.status, describeAnswer(what, res)).toBe(400);
          expect((res.body as { code: string }).code).toBe('ERR_INVALID_JSON');
        }),
        { numRuns: 5 },
      );
      const bare = await send([], route.method, fillPath(route.path), { raw: '{"a":' });
      expectWellFormed(`${route.method} ${route.path} malformed, no credentials`, bare);
    }
  });

  it.each([
    'text/plain',
    'text/plain; charset=utf-8',
    'application/x-www-form-urlencoded',
    'multipart/form-data; boundary=x',
    'application/xml',
    'application/octet-stream',
  ])('answers a %s body with 415 ERR_UNSUPPORTED_MEDIA_TYPE on every POST route', async (contentType) => {
    for (const route of posts()) {
      const res = await send(passingCreds(route), route.method, fillPath(route.path), {
        raw: contentType.startsWith('text/') ? 'hello' : '{}',
        contentType,
      });
      const what = `${route.method} ${route.path} as ${contentType}`;
      expectWellFormed(what, res);
      expect(res.status, describeAnswer(what, res)).toBe(415);
      expect((res.body as { code: string }).code).toBe('ERR_UNSUPPORTED_MEDIA_TYPE');
    }
  });

  /** Routes with a body limit of their own (the largest body their schema admits); others: 64 KiB. */
  const OWN_BODY_LIMITS: Record<string, number> = {
    '/v1/portal/chats/{chat_id}/keys/share': KEY_SHARE_BODY_MAX_BYTES,
  };

  it(`accepts a body of exactly ${Limits.BODY_LIMIT_BYTES} bytes (or the route's own limit) for validation and refuses one byte more with 413`, async () => {
    /** A JSON object of exactly `bytes` bytes: {"padding":"xxx…"}. */
    const ofSize = (bytes: number) => `{"padding":"${'x'.repeat(bytes - '{"padding":""}'.length)}"}`;
    expect(Buffer.byteLength(ofSize(Limits.BODY_LIMIT_BYTES))).toBe(Limits.BODY_LIMIT_BYTES);
    for (const path of Object.keys(OWN_BODY_LIMITS)) expect(posts().map((r) => r.path)).toContain(path);
    for (const route of posts()) {
      const creds = passingCreds(route);
      const path = fillPath(route.path);
      const limit = OWN_BODY_LIMITS[route.path] ?? Limits.BODY_LIMIT_BYTES;
      const atLimit = await send(creds, route.method, path, { raw: ofSize(limit) });
      expectWellFormed(`${route.method} ${route.path} at the limit`, atLimit);
      expect(atLimit.status, describeAnswer(`${route.path} at the limit`, atLimit)).toBe(400);
      expect((atLimit.body as { code: string }).code).toBe('ERR_VALIDATION');

      const over = await send(creds, route.method, path, { raw: ofSize(limit + 1) });
      expectWellFormed(`${route.method} ${route.path} over the limit`, over);
      expect(over.status, describeAnswer(`${route.path} over the limit`, over)).toBe(413);
      expect((over.body as { code: string }).code).toBe('ERR_PAYLOAD_TOO_LARGE');

      const huge = await send([], route.method, path, { raw: ofSize(4 * limit) });
      expectWellFormed(`${route.method} ${route.path} 256 KiB, no credentials`, huge);
    }
  });

  it('answers 405 with an Allow header to a method a known path does not have', async () => {
    const byPath = new Map<string, Set<string>>();
    for (const r of routes) byPath.set(r.path, (byPath.get(r.path) ?? new Set()).add(r.method));
    for (const [template, methods] of byPath) {
      for (const method of ['GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'] as const) {
        if (methods.has(method)) continue;
        const path = fillPath(template);
        // GET /v1/things/create may be GET /v1/things/{id}: another route answers that one.
        if (routes.some((r) => r.method === method && fits(r.path, path))) continue;
        const res = await send([], method, path);
        const what = `${method} ${path}`;
        expectWellFormed(what, res);
        expect(res.status, describeAnswer(what, res)).toBe(405);
        expect((res.body as { code: string }).code).toBe('ERR_METHOD_NOT_ALLOWED');
        const allow = (res.headers.get('allow') ?? '').split(',').map((m) => m.trim());
        for (const m of methods) expect(allow, `Allow of ${what}`).toContain(m);
        expect(allow).not.toContain(method);
      }
    }
  });

  // Inputs these properties once found answering 500, kept as fixed cases.
  const surrogates = '\\udfff'.repeat(40);
  it.each<{ name: string; cred: Cred; method: string; path: string; raw?: string; status: number }>([
    {
      name: 'a NUL in a body string',
      cred: 'publicKey',
      method: 'POST',
      path: '/v1/authentication/lookup',
      raw: '{"username":"a\\u0000b"}',
      status: 400,
    },
    {
      name: 'lone surrogates in a body string',
      cred: 'botKey',
      method: 'POST',
      path: '/v1/bot/me/update',
      raw: `{"name":"${surrogates}"}`,
      status: 400,
    },
    { name: 'a NUL in a query string', cred: 'publicKey', method: 'GET', path: '/v1/bots/search?q=%00', status: 400 },
    {
      name: 'a NUL in a path parameter',
      cred: 'session',
      method: 'POST',
      path: '/v1/users/me/sessions/%00/destroy',
      raw: '{}',
      status: 400,
    },
    { name: 'an offset beyond 32 bits', cred: 'publicKey', method: 'GET', path: '/v1/bots?offset=1e308', status: 400 },
    {
      name: 'a user id beyond 32 bits',
      cred: 'botKey',
      method: 'POST',
      path: '/v1/bot/batch',
      raw: '{"commands":[{"command":"x","user_id":2147483648}]}',
      status: 400,
    },
    {
      name: 'an owner id beyond 32 bits',
      cred: 'operatorToken',
      method: 'POST',
      path: '/v1/admin/bots/create',
      raw: '{"name":"x","owner_user_id":9007199254740991}',
      status: 400,
    },
    { name: 'a malformed %-escape in the path', cred: 'publicKey', method: 'GET', path: '/v1/users/%zz', status: 400 },
    {
      name: 'a path parameter over 100 characters',
      cred: 'publicKey',
      method: 'GET',
      path: `/v1/bots/${'9'.repeat(101)}`,
      status: 400,
    },
    {
      name: 'a latency too small for a 4-byte real',
      cred: 'botKey',
      method: 'POST',
      path: '/v1/bot/me/update',
      raw: '{"stats":{"latency_ms":5e-324}}',
      status: 200,
    },
  ])('answers $name with $status', async ({ cred, method, path, raw, status }) => {
    const res = await send([cred], method, path, raw === undefined ? {} : { raw });
    expectWellFormed(`${method} ${path}`, res);
    expect(res.status, describeAnswer(`${method} ${path}`, res)).toBe(status);
    if (status === 400) expect((res.body as { code: string }).code).toBe('ERR_VALIDATION');
  });

  it('answers a request line over the 16 KiB header limit with 431 ERR_HEADERS_TOO_LARGE and keeps serving', async () => {
    // Node's parser refuses it before Fastify routes it; the client-error handler
    // (platform/connections.ts) answers the error shape all the same.
    const res = await send(['publicKey'], 'GET', `/v1/bots?q=${'x'.repeat(20_000)}`);
    expectWellFormed('GET /v1/bots?q=…', res);
    expect(res.status).toBe(431);
    expect((res.body as { code: string }).code).toBe('ERR_HEADERS_TOO_LARGE');
    const after = await send(['publicKey'], 'GET', '/v1/bots');
    expect(after.status).toBe(200);
  });

  it('answers 404 ERR_NOT_FOUND to unknown paths, whatever the method', async () => {
    const segment = fc.oneof(fc.string({ minLength: 1, maxLength: 20 }).map(encode), nasty.map(encode));
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom('/v1/no-such-thing', '/no-such-thing', '/v2/no-such-thing'),
        fc.array(segment, { maxLength: 4 }),
        fc.constantFrom('GET', 'POST', 'PUT', 'PATCH', 'DELETE'),
        async (prefix, rest, method) => {
          // A `.` or `..` segment is resolved by the URL parser and may land on a real path.
          fc.pre(!rest.some((s) => /^(\.|%2e){1,2}$/i.test(s)));
          const path = [prefix, ...rest].join('/').replace(/\/+$/, '');
          const res = await send([], method, path);
          const what = `${method} ${path}`;
          expectWellFormed(what, res);
          expect(res.status, describeAnswer(what, res)).toBe(404);
          expect((res.body as { code: string }).code).toBe('ERR_NOT_FOUND');
        },
      ),
      { numRuns: 40 },
    );
  });
});

// ---------------------------------------------------------------------------------------------
// Deep: the input above mostly stops at validation or at a lookup of a random id. Here every
// route gets conforming input with the ids of real records (users, a chat the caller is in, a
// bot, a guild, an invite, a notification), from a caller that passes its guard (an Owner member
// in the chat, the operator, a bot), so that it reaches the rules behind the lookups.

describeApp('fuzzing every route deep: real ids, callers that pass the guard', () => {
  const GUILD = '123456789012345678';
  const VANITY = 'deep-fuzz';
  let deepApp: TestApp;
  let caller: Member;
  let deepBot: { id: number; client: Client };
  let chatId: number;
  let invite: string;
  let notificationId: number;
  const victims: number[] = [];

  /** An Owner in the chat with the chat key; a fresh one when a fuzzed call ended its session. */
  const newCaller = async () => {
    caller = await member(deepApp, { level: 3 });
    expect((await join(caller, { chat_id: chatId })).ok).toBe(true);
    const list = await caller.client.get('/v1/notifications');
    notificationId = list.body.notifications[0]?.id ?? 1;
  };

  beforeAll(async () => {
    deepApp = await startApp();
    const bot = await createBot(deepApp, { name: 'Deep fuzz bot', type: 'official' });
    deepBot = { id: bot.id, client: bot.client };
    for (let i = 0; i < 4; i++) victims.push((await login(deepApp, { bot: bot.client })).user.id);
    const owner = await member(deepApp, { level: 3 });
    chatId = (await owner.client.post('/v1/portal/chats/create', { name: 'deep', type: 'public' })).body.chat.id;
    expect((await join(owner, { chat_id: chatId })).ok).toBe(true);
    await keyEpoch(owner, chatId);
    invite = (await owner.client.post(`/v1/portal/chats/${chatId}/invites/create`, {})).body.invite.code;
    await bot.client.post(`/v1/bot/guilds/${GUILD}`, {
      name: 'Deep',
      member_count: 1,
      owner_chatplatform_id: owner.platformUserId,
    });
    await operator(deepApp).post(`/v1/admin/guilds/${GUILD}/premium`, { days: 30 });
    await owner.client.request('PUT', `/v1/guilds/${GUILD}/vanity`, { body: { vanity_invite: VANITY } });
    await newCaller();
  });
  afterAll(async () => {
    closeAllSockets();
    await deepApp?.close();
  });

  const deep: Deep = {
    real(key) {
      // A real record mostly, sometimes one that does not exist.
      const some = <T>(values: T[]) =>
        fc.oneof({ weight: 4, arbitrary: fc.constantFrom(...values) }, fc.constant(INT32_MAX));
      if (/(^|_)user_id$/.test(key)) return some(victims);
      if (key === 'chat_id' || key === 'room_id') return some([chatId]);
      if (key === 'bot_id') return some([deepBot.id]);
      if (key === 'notification_id') return some([notificationId]);
      if (key === 'invite') return fc.constant(invite);
      if (key === 'vanity') return fc.constant(VANITY);
      return null;
    },
  };

  /** Path parameters: the records the fixtures made. */
  const fillReal = (template: string) =>
    template.replace(/\{(\w+)\}/g, (_, name: string) => {
      if (name === 'chat_id' || name === 'room_id') return String(chatId);
      if (name === 'user_id') return String(victims[0]);
      if (name === 'bot_id') return String(deepBot.id);
      if (name === 'guild_id') return GUILD;
      if (name === 'id') return String(template.includes('/bots/') ? deepBot.id : victims[1]);
      if (name === 'notification_id') return String(notificationId);
      if (name === 'code') return invite;
      return PLAIN_PARAM[name] ?? '1';
    });

  /** Routes that would end the caller's session or remove the fixtures every other call uses. */
  const SKIPPED = [
    /logout$/,
    /sessions\/.*destroy$/,
    /^\/v1\/admin\/users\/\{user_id\}\/delete$/,
    /^\/v1\/admin\/(bots|chats)\/\{\w+\}\/delete$/,
    /^\/v1\/portal\/chats\/\{chat_id\}\/delete$/,
  ];

  /** Below 400, or an error a handler (not validation or authentication) gave. */
  const reachedHandler = (res: Answer<unknown>) => {
    const code = (res.body as { code?: string } | null)?.code;
    return res.status !== 401 && code !== 'ERR_VALIDATION' && code !== 'ERR_INVALID_JSON';
  };

  it('answers conforming input with real ids below 500, with the error shape; most of it reaches the handlers', async () => {
    const deepRoutes = (await loadRoutes(deepApp.url)).filter((r) => !SKIPPED.some((re) => re.test(r.path)));
    expect(deepRoutes.length).toBeGreaterThanOrEqual(60);
    const clientFor = (r: Route): Client => {
      const creds = passingCreds(r);
      if (creds.includes('operatorToken')) return operator(deepApp);
      if (creds.includes('session')) return caller.client;
      if (creds.includes('botKey')) return deepBot.client;
      return new Client(deepApp.url, nextIp(), creds.includes('publicKey') ? deepApp.publicApiKey : null);
    };
    let calls = 0;
    let reached = 0;
    const reachedRoutes = new Set<string>();
    const succeededRoutes = new Set<string>();
    for (const r of deepRoutes) {
      const label = `${r.method} ${r.path}`;
      const query = fc.record(
        Object.fromEntries(Object.entries(r.query).map(([k, v]) => [k, conforming(v, deep, k)])),
        { requiredKeys: [] },
      );
      const body = r.body ? conforming(r.body, deep) : fc.constant(undefined);
      await fc.assert(
        fc.asyncProperty(query, body, async (q, b) => {
          const qs = Object.entries(q as Record<string, unknown>)
            .map(([k, v]) => `${k}=${encode(String(v))}`)
            .join('&');
          const path = fillReal(r.path) + (qs ? `?${qs}` : '');
          const res = await clientFor(r).request(r.method, path, b === undefined ? {} : { body: b });
          const what = `${label} ${path.slice(0, 200)} ${JSON.stringify(b)?.slice(0, 300)}`;
          expectWellFormed(what, res);
          calls += 1;
          if (reachedHandler(res)) {
            reached += 1;
            reachedRoutes.add(label);
          }
          if (res.status < 300) succeededRoutes.add(label);
          if (res.status === 401 && passingCreds(r).includes('session')) await newCaller();
        }),
        { numRuns: 6 },
      );
    }
    // Not vacuous: most calls got past validation and authentication into the services, on
    // nearly every route, and many routes did what they were asked.
    const missed = deepRoutes.map((r) => `${r.method} ${r.path}`).filter((l) => !reachedRoutes.has(l));
    expect(reached, `${reached} of ${calls} calls reached a handler`).toBeGreaterThanOrEqual(calls * 0.6);
    expect(missed.length, `routes no call got through to: ${missed.join(', ')}`).toBeLessThanOrEqual(
      deepRoutes.length * 0.1,
    );
    expect(succeededRoutes.size, `routes with a 2xx: ${[...succeededRoutes].join(', ')}`).toBeGreaterThanOrEqual(
      deepRoutes.length * 0.5,
    );
  }, 120_000);

  /** Every client event the app serves, with its payload schema (chats.routes.ts, vm.routes.ts). */
  const EVENTS: Record<string, JsonSchema> = {
    'room:join': RoomJoinPayload,
    'room:leave': RoomLeavePayload,
    'vm:credentials': VmChatPayload,
    'vm:watch': VmWatchPayload,
    'vm:unwatch': VmChatPayload,
    'vm:frame:ack': VmFrameAckPayload,
    'vm:control:request': VmChatPayload,
    'vm:control:grant': VmControlGrantPayload,
    'vm:control:release': VmChatPayload,
    'vm:input': VmInputPayload,
  } as Record<string, JsonSchema>;

  it('acks every client event with random and conforming payloads (real ids): never ERR_INTERNAL, always the ack shape', async () => {
    // The route fuzzing above may have renamed the caller, which drops its sockets (docs/api.md, Users).
    if (!caller.socket.connected) await newCaller();
    const sent = new Map<string, { calls: number; reached: number }>();
    for (const [event, schema] of Object.entries(EVENTS)) {
      // Within one socket message (a longer one closes the connection: socket-limits.test.ts).
      const payload = fc
        .oneof(
          { weight: 4, arbitrary: conforming(schema, deep) },
          { weight: 2, arbitrary: mutated(schema) },
          { weight: 1, arbitrary: anyValue },
        )
        .filter((p) => Buffer.byteLength(JSON.stringify([event, p]) ?? '') < SOCKET_MESSAGE_MAX_BYTES - 64);
      const tally = { calls: 0, reached: 0 };
      sent.set(event, tally);
      await fc.assert(
        fc.asyncProperty(payload, async (p) => {
          const socket = caller.socket;
          // Any event name, any payload: past what the typed event map allows.
          const raw = socket.timeout(5000) as unknown as { emitWithAck(e: string, p: unknown): Promise<unknown> };
          const ack = (await raw.emitWithAck(event, p)) as { ok?: unknown; code?: unknown; message?: unknown };
          const what = `${event} ${JSON.stringify(p)?.slice(0, 300)} → ${JSON.stringify(ack)?.slice(0, 300)}`;
          if (ack.ok !== true) {
            expect(ack, what).toMatchObject({
              ok: false,
              code: expect.stringMatching(/^ERR_[A-Z_]+$/),
              message: expect.any(String),
            });
            expect(ack.code, what).not.toBe('ERR_INTERNAL');
          }
          expect(socket.connected, what).toBe(true);
          tally.calls += 1;
          if (ack.ok === true || ack.code !== 'ERR_VALIDATION') tally.reached += 1;
        }),
        { numRuns: 30 },
      );
    }
    // Not vacuous: every event got past validation into its handler, many times over.
    const calls = [...sent.values()].reduce((n, t) => n + t.calls, 0);
    const reached = [...sent.values()].reduce((n, t) => n + t.reached, 0);
    for (const [event, t] of sent)
      expect(t.reached, `${event}: ${t.reached} of ${t.calls} reached its handler`).toBeGreaterThan(0);
    expect(reached, `${reached} of ${calls} events reached a handler`).toBeGreaterThanOrEqual(calls * 0.4);
  }, 60_000);
});
