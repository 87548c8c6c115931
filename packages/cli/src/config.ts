import { readFileSync } from 'node:fs';
import path from 'node:path';

/** The environment as the CLI sees it (process.env in production, a plain object in tests). */
export type Env = Readonly<Record<string, string | undefined>>;

/** Where the server listens when PARLOR_URL is unset: the server's own HOST:PORT defaults. */
export const DEFAULT_URL = 'http://127.0.0.1:8080';
/** The server's DATA_DIR default; the operator token file lives inside it. */
export const DEFAULT_DATA_DIR = './data';
export const TOKEN_FILE_NAME = 'operator-token';

/** A local problem (bad PARLOR_URL, no usable token) found before anything is sent. */
export class ConfigError extends Error {}

/** Which server to talk to and with what token. */
export interface Target {
  /** Base URL, always ending in `/` so that a path prefix behind a proxy is kept. */
  baseUrl: URL;
  token: string;
}

/** An unset and an empty variable mean the same, as in the server's config. */
function read(env: Env, name: string): string | null {
  const value = env[name];
  return value === undefined || value === '' ? null : value;
}

/**
 * `raw` with everything from after its `//` (or its start) to its last `@` masked: the user name
 * and password of a URL, however malformed the rest, so a message may quote it.
 */
function withoutUserinfo(raw: string): string {
  const at = raw.lastIndexOf('@');
  if (at < 0) return raw;
  const slashes = raw.indexOf('//');
  const start = slashes >= 0 && slashes < at ? slashes + 2 : 0;
  return `${raw.slice(0, start)}…${raw.slice(at)}`;
}

/** PARLOR_URL, validated. The messages never repeat a user name or password it carries. */
export function serverUrl(env: Env): URL {
  const raw = read(env, 'PARLOR_URL') ?? DEFAULT_URL;
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new ConfigError(
      `PARLOR_URL is not a valid URL (got "${withoutUserinfo(raw)}"); expected e.g. ${DEFAULT_URL}`,
    );
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    throw new ConfigError(`PARLOR_URL must start with http:// or https:// (got "${url.protocol}")`);
  if (url.username || url.password)
    throw new ConfigError('PARLOR_URL must not contain a user name or password; the operator token authenticates');
  if (url.search || url.hash) throw new ConfigError('PARLOR_URL must not have a query string or fragment');
  if (!url.pathname.endsWith('/')) url.pathname += '/';
  return url;
}

/** Visible ASCII only: anything else cannot travel in an HTTP header and would fail as a network error. */
const TOKEN_PATTERN = /^[\x21-\x7e]+$/;
/** The server's longest operator token: it takes a longer Bearer token for none ("Authentication is required"). */
const TOKEN_MAX_LENGTH = 256;
const TOKEN_RULE = `the server takes at most ${TOKEN_MAX_LENGTH} visible ASCII characters (! to ~, no spaces)`;

/** What keeps `token` from authenticating, for a message that never repeats it; null when nothing does. */
function tokenFault(token: string): string | null {
  if (!TOKEN_PATTERN.test(token)) return 'spaces or non-ASCII characters';
  if (token.length > TOKEN_MAX_LENGTH) return `${token.length} characters`;
  return null;
}

/**
 * The operator token: OPERATOR_TOKEN, else the file the server generates on first start,
 * DATA_DIR/operator-token (DATA_DIR relative to `cwd`, default ./data). Messages name the file,
 * never its content.
 */
export function operatorToken(env: Env, cwd: string): string {
  const fromEnv = read(env, 'OPERATOR_TOKEN');
  if (fromEnv !== null) {
    const fault = tokenFault(fromEnv);
    if (fault !== null) throw new ConfigError(`OPERATOR_TOKEN holds ${fault}; ${TOKEN_RULE}`);
    return fromEnv;
  }
  const file = path.resolve(cwd, read(env, 'DATA_DIR') ?? DEFAULT_DATA_DIR, TOKEN_FILE_NAME);
  let content: string;
  try {
    content = readFileSync(file, 'utf8');
  } catch (e) {
    throw new ConfigError(tokenFileProblem(file, e));
  }
  const token = content.trim();
  if (token === '') throw new ConfigError(`the operator token file ${file} is empty`);
  const fault = tokenFault(token);
  if (fault !== null) throw new ConfigError(`the operator token file ${file} holds ${fault}; ${TOKEN_RULE}`);
  return token;
}

function tokenFileProblem(file: string, e: unknown): string {
  const code = e instanceof Error && 'code' in e ? String(e.code) : 'unknown error';
  if (code === 'ENOENT')
    return (
      `no operator token: OPERATOR_TOKEN is unset and ${file} does not exist ` +
      '(set OPERATOR_TOKEN, or DATA_DIR to the server’s data directory)'
    );
  if (code === 'EACCES' || code === 'EPERM')
    return `cannot read the operator token file ${file} (permission denied); run as the server's user or set OPERATOR_TOKEN`;
  return `cannot read the operator token file ${file} (${code})`;
}

/** Both halves of the target; called only when a command is about to send, so --help needs neither. */
export function resolveTarget(env: Env, cwd: string): Target {
  return { baseUrl: serverUrl(env), token: operatorToken(env, cwd) };
}
