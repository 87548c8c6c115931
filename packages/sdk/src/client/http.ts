import { ClientErrorCode, ParlorApiError } from './errors.js';

/** The name of the session cookie the server sets on verify (docs/api.md, Login). */
export const SESSION_COOKIE = 'psession';

/** How long one HTTP request may take before it is aborted. */
export const DEFAULT_REQUEST_TIMEOUT_MS = 30_000;

export interface HttpClientOptions {
  /** The server's origin, e.g. `http://127.0.0.1:8080` (a trailing slash is ignored). */
  baseUrl: string;
  /** Sent as `X-API-Key` on every request: the public key (K) or, for {@link BotClient}, a bot key. */
  apiKey?: string;
  /** Extra headers on every request and on the socket handshake (e.g. `X-Forwarded-For` behind a proxy). */
  headers?: Record<string, string>;
  /** A session token to start with (the value of the `psession` cookie). */
  session?: string | null;
  /** Per-request timeout in milliseconds (default 30 s). */
  timeoutMs?: number;
  /** The fetch to use (default: the global one). */
  fetch?: typeof fetch;
}

export type Query = Record<string, string | number | undefined>;

/**
 * The HTTP layer shared by the clients: JSON in and out, `X-API-Key`, and a one-cookie jar. Node has
 * no cookie jar, so the `psession` cookie from `Set-Cookie` is kept here and sent back as
 * `Cookie: psession=…`; in browsers the cookie is HttpOnly and handled by the browser
 * (`credentials: 'include'`), and this jar simply stays empty.
 */
export class HttpClient {
  readonly baseUrl: string;
  readonly apiKey: string | undefined;
  readonly headers: Readonly<Record<string, string>>;
  readonly timeoutMs: number;
  #session: string | null;
  readonly #fetch: typeof fetch;

  constructor(opts: HttpClientOptions) {
    this.baseUrl = opts.baseUrl.replace(/\/+$/, '');
    this.apiKey = opts.apiKey;
    this.headers = { ...opts.headers };
    this.timeoutMs = opts.timeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS;
    this.#session = opts.session ?? null;
    this.#fetch = opts.fetch ?? ((input, init) => fetch(input, init));
  }

  /** The current session token (`psession` cookie value), or null when logged out. */
  get session(): string | null {
    return this.#session;
  }

  /** Replaces the stored session token (e.g. restored from storage); null forgets it. */
  setSession(token: string | null): void {
    this.#session = token;
  }

  /** The `Cookie` header value carrying the session, or undefined without one. */
  cookieHeader(): string | undefined {
    return this.#session ? `${SESSION_COOKIE}=${this.#session}` : undefined;
  }

  /**
   * Sends one request and returns the parsed JSON body of a 2xx answer. A redirect is not
   * followed: fetch would send `X-API-Key` (a bot's key) on to another origin, as it drops only
   * `Authorization` and `Cookie` there. It is an error naming where it led, as in the CLI.
   * @throws ParlorApiError on any non-2xx answer (a 3xx: `ERR_HTTP_<status>`, the message naming
   *   the `Location`); with status 0 and `ERR_HTTP_TIMEOUT` when no complete answer came within
   *   `timeoutMs`, `ERR_NETWORK` when the request failed (`cause`).
   *   `base` replaces `baseUrl` for this request (the guild interface's own base, {guild_api_url}).
   */
  async request<T>(
    method: 'GET' | 'POST' | 'PUT',
    path: string,
    opts: { body?: unknown; query?: Query; base?: string } = {},
  ): Promise<T> {
    const headers: Record<string, string> = { accept: 'application/json', ...this.headers };
    if (this.apiKey) headers['x-api-key'] = this.apiKey;
    const cookie = this.cookieHeader();
    if (cookie) headers.cookie = cookie;
    let body: string | undefined;
    if (opts.body !== undefined) {
      body = JSON.stringify(opts.body);
      headers['content-type'] = 'application/json';
    }
    let res: Response;
    let text: string;
    try {
      res = await this.#fetch((opts.base ?? this.baseUrl) + path + queryString(opts.query), {
        method,
        headers,
        body,
        credentials: 'include',
        redirect: 'manual',
        signal: AbortSignal.timeout(this.timeoutMs),
      });
      this.#keepCookie(res.headers);
      text = await res.text();
    } catch (error) {
      throw transportError(method, path, this.timeoutMs, error);
    }
    if (isRedirect(res)) throw redirectError(method, path, res);
    const parsed = parseJson(text);
    if (!res.ok) throw ParlorApiError.fromResponse(res.status, parsed, res.headers.get('retry-after'));
    return parsed as T;
  }

  /** GET with an optional query string. */
  protected get<T>(path: string, query?: Query): Promise<T> {
    return this.request<T>('GET', path, { query });
  }

  /** POST with a JSON body (`{}` for routes that take none). */
  protected post<T>(path: string, body: unknown = {}): Promise<T> {
    return this.request<T>('POST', path, { body });
  }

  #keepCookie(headers: Headers): void {
    const all = typeof headers.getSetCookie === 'function' ? headers.getSetCookie() : [];
    for (const line of all) {
      const parsed = parseSetCookie(line);
      if (parsed?.name === SESSION_COOKIE) this.#session = parsed.value;
    }
  }
}

/** Parses one `Set-Cookie` line: a cleared or expired cookie gives value null. */
export function parseSetCookie(line: string): { name: string; value: string | null } | null {
  const [pair = '', ...attributes] = line.split(';');
  const eq = pair.indexOf('=');
  if (eq <= 0) return null;
  const name = pair.slice(0, eq).trim();
  const raw = pair.slice(eq + 1).trim();
  let expired = raw === '';
  for (const attribute of attributes) {
    const [key = '', ...rest] = attribute.split('=');
    const value = rest.join('=').trim();
    const k = key.trim().toLowerCase();
    if (k === 'max-age' && Number(value) <= 0) expired = true;
    if (k === 'expires' && Date.parse(value) <= Date.now()) expired = true;
  }
  // The value is kept as sent (already cookie-encoded) and sent back the same way.
  return { name, value: expired ? null : raw };
}

/** A 3xx, or what a browser's fetch makes of one with `redirect: 'manual'` (status 0, no headers). */
function isRedirect(res: Response): boolean {
  return res.type === 'opaqueredirect' || (res.status >= 300 && res.status < 400);
}

/** A redirect as a ParlorApiError naming its target (a browser hides it). */
function redirectError(method: string, path: string, res: Response): ParlorApiError {
  const location = res.headers.get('location');
  const to = location === null ? '' : ` to ${location}`;
  return new ParlorApiError(
    res.status,
    `ERR_HTTP_${res.status}`,
    `${method} ${path} was redirected${to}; redirects are not followed: set baseUrl to the final address.`,
    {},
    'http',
  );
}

/** A failure of fetch itself (no HTTP answer) as a ParlorApiError with status 0. */
function transportError(method: string, path: string, timeoutMs: number, error: unknown): ParlorApiError {
  const name = error instanceof Error || error instanceof DOMException ? error.name : '';
  if (name === 'TimeoutError') {
    return new ParlorApiError(
      0,
      ClientErrorCode.ERR_HTTP_TIMEOUT,
      `${method} ${path} got no answer within ${timeoutMs} ms.`,
      {},
      'http',
      { cause: error },
    );
  }
  return new ParlorApiError(0, ClientErrorCode.ERR_NETWORK, `${method} ${path} failed: no answer.`, {}, 'http', {
    cause: error,
  });
}

function queryString(query: Query | undefined): string {
  if (!query) return '';
  const params = new URLSearchParams();
  for (const [key, value] of Object.entries(query)) if (value !== undefined) params.set(key, String(value));
  const text = params.toString();
  return text ? `?${text}` : '';
}

function parseJson(text: string): unknown {
  if (text === '') return null;
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}
