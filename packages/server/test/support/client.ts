/** A small HTTP client for tests: keeps its session cookie and speaks from its own IP. */
export interface Answer<T = any> {
  status: number;
  body: T;
  headers: Headers;
}

let ipCounter = 0;
/**
 * A distinct client address per test client, sent as X-Forwarded-For (test apps trust the proxy).
 * Private (10/8), as for clients on a LAN: their geo is empty without a lookup, so a suite does
 * not load the offline geo database (about 100 MB, most of a second) unless it gives a public
 * address itself (sessions.test.ts does).
 */
export function nextIp(): string {
  ipCounter += 1;
  return `10.${(ipCounter >> 16) & 255}.${(ipCounter >> 8) & 255}.${ipCounter & 255}`;
}

export interface RequestOptions {
  body?: unknown;
  /** Raw body text (with contentType), for malformed-input tests. */
  raw?: string;
  contentType?: string;
  apiKey?: string | null;
  headers?: Record<string, string>;
}

export class Client {
  cookie: string | null = null;
  constructor(
    readonly base: string,
    readonly ip: string = nextIp(),
    public apiKey: string | null = null,
    readonly fixedHeaders: Record<string, string> = {},
  ) {}

  /**
   * The same caller (address, key and the cookie it holds now) talking to another node: two
   * nodes of one cluster behind a load balancer. The copy keeps its own cookie from then on.
   */
  on(node: { url: string }): Client {
    return Object.assign(new Client(node.url, this.ip, this.apiKey, this.fixedHeaders), { cookie: this.cookie });
  }

  async request<T = any>(method: string, path: string, opts: RequestOptions = {}): Promise<Answer<T>> {
    const headers: Record<string, string> = { 'x-forwarded-for': this.ip, ...this.fixedHeaders, ...opts.headers };
    const key = opts.apiKey === undefined ? this.apiKey : opts.apiKey;
    if (key) headers['x-api-key'] = key;
    if (this.cookie) headers.cookie = `psession=${this.cookie}`;
    let body: string | undefined;
    if (opts.raw !== undefined) {
      body = opts.raw;
      headers['content-type'] = opts.contentType ?? 'application/json';
    } else if (opts.body !== undefined) {
      body = JSON.stringify(opts.body);
      headers['content-type'] = 'application/json';
    }
    const res = await fetch(this.base + path, { method, headers, body });
    const setCookie = res.headers.getSetCookie().find((c) => c.startsWith('psession='));
    if (setCookie) {
      const value = setCookie.slice('psession='.length).split(';')[0] ?? '';
      this.cookie = value === '' ? null : value;
    }
    const text = await res.text();
    let parsed: unknown = text;
    try {
      parsed = text ? JSON.parse(text) : null;
    } catch {
      // Not JSON (HTML pages, SVG): keep the text.
    }
    return { status: res.status, body: parsed as T, headers: res.headers };
  }

  get<T = any>(path: string, opts?: RequestOptions) {
    return this.request<T>('GET', path, opts);
  }
  post<T = any>(path: string, body?: unknown, opts: RequestOptions = {}) {
    return this.request<T>('POST', path, { ...opts, body });
  }
}
