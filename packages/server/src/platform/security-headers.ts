import type { IncomingMessage, ServerResponse } from 'node:http';
import helmet, { type HelmetOptions } from 'helmet';
import { decodedSegment } from './logging.js';

/**
 * The security headers every answer carries (helmet's set with Parlor's policy), computed once.
 * helmet rebuilds its Content-Security-Policy string on every response; none of Parlor's directives
 * depend on the request (no nonces), so the whole set is a constant and the hot path only copies it.
 */
export const SECURITY_POLICY: Readonly<HelmetOptions> = {
  // The docs page loads its own scripts and styles (its route sets its own CSP); everything else is JSON.
  contentSecurityPolicy: {
    directives: { 'script-src': ["'self'"], 'style-src': ["'self'", 'https:', "'unsafe-inline'"] },
  },
  crossOriginResourcePolicy: { policy: 'same-site' },
};

/**
 * The headers of the JSON API's answers (`apiPath`). A JSON body is never rendered, so the
 * document-only headers of helmet's set (script and style sources, DNS prefetch, XSS filter,
 * download options, opener policy, agent clustering) mean nothing there; what does matter for an
 * API (the OWASP REST cheat sheet's list) is no sniffing, no framing, no referrer, HTTPS only, the
 * cross-origin resource policy and no caching: answers are private (a profile, sessions with their
 * addresses, messages) or change at once (lists, counts), and no browser or intermediary should keep
 * them. About 290 header bytes per answer instead of about 660, on every call of the hottest paths;
 * pages (`/`, `/docs`) keep the full set and their own caching.
 */
export const API_SECURITY_HEADERS: Readonly<Record<string, string>> = Object.freeze({
  'cache-control': 'no-store',
  'content-security-policy': "default-src 'none'; frame-ancestors 'none'",
  'cross-origin-resource-policy': 'same-site',
  'referrer-policy': 'no-referrer',
  'strict-transport-security': 'max-age=31536000; includeSubDomains',
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY',
});

/**
 * The first path segments of the JSON API's routes: `/v1/…`, and the spec's listings also served
 * without the prefix (`/statistics/…`, `/bots`, `/bots/…`). Every other path is a page, a docs
 * asset, an avatar or Engine.IO's.
 */
const API_ROOTS = new Set(['v1', 'statistics', 'bots']);

/**
 * True for the JSON API's paths (API_ROOTS), which get `API_SECURITY_HEADERS`. Judged on the path
 * as the router reads it, not on the raw request target: the router takes an absolute-form target
 * (`http://host/v1/…`) by its path and decodes %-escapes (`/%761/…` is `/v1/…`), so both reach API
 * routes and must get the API's set. `/v1/…` as sent, the common case, is decided at once.
 */
export function apiPath(url: string): boolean {
  if (url.startsWith('/v1/')) return true;
  const path = routerPath(url);
  if (path === null) return false;
  const end = path.indexOf('/', 1);
  const root = decodedSegment(end < 0 ? path.slice(1) : path.slice(1, end));
  // `/v1` and `/statistics` alone name no route; `/bots` does.
  return API_ROOTS.has(root) && (end >= 0 || root === 'bots');
}

/**
 * The path of a request target as the router takes it: an absolute-form target's path (an
 * http(s) scheme, case aside, then the authority), cut before the query or fragment; null for a
 * target the router does not read (it answers that 404).
 */
function routerPath(url: string): string | null {
  let path = url;
  if (!url.startsWith('/')) {
    const scheme = url.indexOf('://');
    if (scheme < 0 || !['http', 'https'].includes(url.slice(0, scheme).toLowerCase())) return null;
    const rest = url.slice(scheme + 3);
    const start = rest.search(/[/?#]/);
    // An authority alone (or followed by a query) is the root.
    path = start >= 0 && rest[start] === '/' ? rest.slice(start) : '/';
  }
  const end = path.search(/[?#]/);
  return end < 0 ? path : path.slice(0, end);
}

/** Runs helmet once against a recording response and returns the headers it set, lower-cased. */
export function computeSecurityHeaders(policy: Readonly<HelmetOptions> = SECURITY_POLICY): Record<string, string> {
  const headers: Record<string, string> = {};
  const recorder = {
    setHeader(name: string, value: string | number | readonly string[]) {
      headers[name.toLowerCase()] = Array.isArray(value) ? value.join(', ') : String(value);
      return recorder;
    },
    removeHeader(name: string) {
      delete headers[name.toLowerCase()];
    },
  };
  let failure: unknown;
  helmet(policy)({} as IncomingMessage, recorder as unknown as ServerResponse, (err?: unknown) => {
    failure = err;
  });
  if (failure) throw failure;
  return headers;
}
