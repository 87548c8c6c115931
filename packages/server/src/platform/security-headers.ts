import type { IncomingMessage, ServerResponse } from 'node:http';
import helmet, { type HelmetOptions } from 'helmet';

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
 * The headers of the JSON API's answers (`/v1/…`). A JSON body is never rendered, so the
 * document-only headers of helmet's set (script and style sources, DNS prefetch, XSS filter,
 * download options, opener policy, agent clustering) mean nothing there; what does matter for an
 * API (the OWASP REST cheat sheet's list) is no sniffing, no framing, no referrer, HTTPS only and
 * the cross-origin resource policy. About 330 header bytes per answer instead of about 650, on every
 * call of the hottest paths; pages (`/`, `/docs`) keep the full set.
 */
export const API_SECURITY_HEADERS: Readonly<Record<string, string>> = Object.freeze({
  'content-security-policy': "default-src 'none'; frame-ancestors 'none'",
  'cross-origin-resource-policy': 'same-site',
  'referrer-policy': 'no-referrer',
  'strict-transport-security': 'max-age=31536000; includeSubDomains',
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY',
});

/** True for the JSON API's paths, which get `API_SECURITY_HEADERS`. */
export function isApiPath(url: string): boolean {
  return url.startsWith('/v1/');
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
