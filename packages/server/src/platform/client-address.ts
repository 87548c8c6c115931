/**
 * Who the client is: its address as Fastify reads it (TRUST_PROXY decides whose X-Forwarded-For
 * entries count: parseTrustProxy, trustProxyOption), and the key per-address limits count it
 * under (addressKey).
 */
import type { IncomingMessage } from 'node:http';
import { BlockList, isIP } from 'node:net';
import type { FastifyRequest } from 'fastify';

/**
 * The client address: the socket's peer, or with TRUST_PROXY Fastify's reading of
 * X-Forwarded-For (configured at app creation, trustProxyOption). Always a plain string.
 */
export function clientIp(request: FastifyRequest): string {
  const ip = withoutPort(request.ip ?? '');
  return ip.startsWith('::ffff:') ? ip.slice(7) : ip;
}

/**
 * The client address of a raw request (an Engine.IO handshake, which never reaches Fastify), read
 * as Fastify reads a request's (`trust`: trustProxyOption of TRUST_PROXY): the socket's peer and
 * the X-Forwarded-For entries from the right, the first one not trusted as a proxy (or the
 * leftmost), then as clientIp gives it.
 */
export function rawClientIp(req: IncomingMessage, trust: ReturnType<typeof trustProxyOption>): string {
  const chain = [req.socket.remoteAddress ?? ''];
  if (trust) {
    const header = req.headers['x-forwarded-for'];
    const entries = (Array.isArray(header) ? header.join(',') : (header ?? '')).split(',');
    for (const entry of entries.reverse()) if (entry.trim() !== '') chain.push(entry.trim());
  }
  let hop = 0;
  while (trust && hop < chain.length - 1 && trust(chain[hop] as string, hop)) hop += 1;
  const ip = withoutPort(chain[hop] as string);
  return ip.startsWith('::ffff:') ? ip.slice(7) : ip;
}

/**
 * An address without the port some proxies write into X-Forwarded-For (`203.0.113.9:41234`,
 * `[2001:db8::1]:41234`): each new connection of a client has another port, so counted with it,
 * one client would get a fresh per-address limit on every connection.
 */
function withoutPort(ip: string): string {
  const v4 = /^(\d{1,3}(?:\.\d{1,3}){3}):\d{1,5}$/.exec(ip);
  if (v4?.[1]) return v4[1];
  const v6 = /^\[([0-9a-fA-F:.%]+)\](?::\d{1,5})?$/.exec(ip);
  return v6?.[1] ?? ip;
}

/** What TRUST_PROXY says (Config.trustProxy): off, a hop count, or the proxies' addresses. */
export type TrustProxy = false | number | readonly string[];

/**
 * Fastify's `trustProxy` for TRUST_PROXY. A hop count N trusts the socket's peer and the N-1
 * X-Forwarded-For entries nearest to it, so the client is the Nth entry from the right: the one
 * the outermost proxy wrote, never one the client wrote itself. It is given as a function because
 * Fastify 5 ignores X-Forwarded-For altogether for a plain number. A list (addresses, CIDR ranges,
 * `loopback`, `linklocal`, `uniquelocal`) trusts the entries it names, read without the port a
 * proxy may write with its own entry (proxyMatcher): the client is the rightmost entry that is
 * not one of them.
 */
export function trustProxyOption(tp: TrustProxy): false | ((address: string, hop: number) => boolean) {
  if (tp === false) return false;
  if (typeof tp === 'number') return (_address, hop) => hop < tp;
  const isProxy = proxyMatcher(tp);
  return (address) => isProxy(address);
}

/** The ranges of proxy-addr's names, which TRUST_PROXY lists may use. */
const NAMED_RANGES: Record<string, readonly string[]> = {
  loopback: ['127.0.0.1/8', '::1/128'],
  linklocal: ['169.254.0.0/16', 'fe80::/10'],
  uniquelocal: ['10.0.0.0/8', '172.16.0.0/12', '192.168.0.0/16', 'fc00::/7'],
};

/**
 * Whether an address (socket peer or X-Forwarded-For entry, a port written with it dropped) is one
 * of a TRUST_PROXY list's entries (parseTrustProxy has checked them). An IPv4-mapped IPv6 address
 * matches its IPv4 address's entries (BlockList reads it so). Anything that is not an IP address is
 * never a proxy.
 */
export function proxyMatcher(entries: readonly string[]): (address: string) => boolean {
  const ranges = new BlockList();
  for (const entry of entries)
    for (const range of NAMED_RANGES[entry] ?? [entry]) {
      const [address = '', prefix] = range.split('/');
      const v4 = isIP(address) === 4;
      ranges.addSubnet(address, prefix === undefined ? (v4 ? 32 : 128) : Number(prefix), v4 ? 'ipv4' : 'ipv6');
    }
  return (raw) => {
    const address = withoutPort(raw.trim()).split('%')[0] ?? '';
    const family = isIP(address);
    return family !== 0 && ranges.check(address, family === 4 ? 'ipv4' : 'ipv6');
  };
}

/** The 16-bit groups of an IPv6 address (a zone id dropped, a dotted IPv4 tail read), or null. */
function ipv6Groups(ip: string): number[] | null {
  if (isIP(ip) !== 6) return null;
  const bare = (ip.split('%')[0] ?? '').replace(
    /(\d+)\.(\d+)\.(\d+)\.(\d+)$/,
    (_m, a: string, b: string, c: string, d: string) =>
      `${((Number(a) << 8) | Number(b)).toString(16)}:${((Number(c) << 8) | Number(d)).toString(16)}`,
  );
  const words = (part: string) => (part === '' ? [] : part.split(':').map((h) => Number.parseInt(h, 16)));
  const [head = '', tail] = bare.split('::');
  if (tail === undefined) return words(head);
  const left = words(head);
  const right = words(tail);
  return [...left, ...new Array<number>(8 - left.length - right.length).fill(0), ...right];
}

/**
 * The key per-address limits count a client under (pending login codes, failed verifications,
 * stranger accounts). IPv4 addresses as they are, IPv4-mapped IPv6 addresses as their IPv4
 * address, and other IPv6 addresses by their /64 (`2001:db8:0:1::/64`): a subscriber is routed a
 * whole /64 at least and may use any address in it (privacy addresses change by themselves), so
 * counting each address apart would let one client step past every limit. Anything else (no
 * address at all) is kept as it is.
 */
export function addressKey(ip: string): string {
  const groups = ipv6Groups(ip);
  if (groups === null) return ip;
  const [a = 0, b = 0, c = 0, d = 0, e = 0, f = 0, g = 0, h = 0] = groups;
  if (a === 0 && b === 0 && c === 0 && d === 0 && e === 0 && f === 0xffff)
    return `${g >> 8}.${g & 255}.${h >> 8}.${h & 255}`;
  return `${[a, b, c, d].map((x) => x.toString(16)).join(':')}::/64`;
}

/** The named ranges proxy-addr (Fastify's trustProxy) knows besides addresses and CIDR ranges. */
const PROXY_RANGE_NAMES = ['loopback', 'linklocal', 'uniquelocal'];
/** Most proxies TRUST_PROXY may count in front of a node. */
const MAX_PROXY_HOPS = 10;

/** One entry of a TRUST_PROXY list: an IP address, `address/prefix`, or a named range. */
function isProxyRange(entry: string): boolean {
  if (PROXY_RANGE_NAMES.includes(entry)) return true;
  const [address = '', prefix, ...rest] = entry.split('/');
  const family = isIP(address);
  if (family === 0 || rest.length > 0) return false;
  if (prefix === undefined) return true;
  return /^\d{1,3}$/.test(prefix) && Number(prefix) <= (family === 4 ? 32 : 128);
}

/**
 * TRUST_PROXY: off (unset, 0, false, no, off), a hop count (1-10; true, yes and on are 1), or a
 * comma-separated list of proxy addresses, CIDR ranges and proxy-addr's named ranges.
 */
export function parseTrustProxy(value: string | null): { value: TrustProxy } | { problem: string } {
  if (value === null) return { value: false };
  const v = value.trim().toLowerCase();
  if (['0', 'false', 'no', 'off'].includes(v)) return { value: false };
  if (['true', 'yes', 'on'].includes(v)) return { value: 1 };
  if (/^\d+$/.test(v)) {
    const hops = Number(v);
    if (hops <= MAX_PROXY_HOPS) return { value: hops };
    return { problem: `TRUST_PROXY must count 1 to ${MAX_PROXY_HOPS} proxies (got "${value}")` };
  }
  const entries = v.split(',').map((e) => e.trim());
  const bad = entries.filter((e) => !isProxyRange(e));
  if (bad.length === 0) return { value: Object.freeze(entries) };
  return {
    problem:
      `TRUST_PROXY must be a hop count (1 = one proxy in front) or a comma-separated list of proxy ` +
      `addresses, CIDR ranges, loopback, linklocal or uniquelocal (got "${value}")`,
  };
}
