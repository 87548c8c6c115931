import { lookup as dnsLookup } from 'node:dns/promises';
import { BlockList, isIP } from 'node:net';

/**
 * Addresses a room browser must not reach (DESIGN.md 9): "this host", loopback, private,
 * carrier-grade NAT, link-local (cloud metadata at 169.254.169.254 and fd00:ec2::254 included),
 * documentation, benchmarking, multicast and reserved ranges, in IPv4 and IPv6.
 */
const blocked = new BlockList();
for (const [net, prefix] of [
  ['0.0.0.0', 8],
  ['10.0.0.0', 8],
  ['100.64.0.0', 10],
  ['127.0.0.0', 8],
  ['169.254.0.0', 16],
  ['172.16.0.0', 12],
  ['192.0.0.0', 24],
  ['192.0.2.0', 24],
  ['192.88.99.0', 24],
  ['192.168.0.0', 16],
  ['198.18.0.0', 15],
  ['198.51.100.0', 24],
  ['203.0.113.0', 24],
  ['224.0.0.0', 4],
  ['240.0.0.0', 4],
] as const) {
  blocked.addSubnet(net, prefix, 'ipv4');
}
for (const [net, prefix] of [
  ['::', 128],
  ['::1', 128],
  ['100::', 64],
  ['2001:db8::', 32],
  ['fc00::', 7],
  ['fe80::', 10],
  ['fec0::', 10],
  ['ff00::', 8],
] as const) {
  blocked.addSubnet(net, prefix, 'ipv6');
}

/** The IPv4 address inside an IPv4-mapped, NAT64 or 6to4 IPv6 address, if it is one. */
function embeddedIpv4(address: string): string | null {
  const lower = address.toLowerCase();
  const dotted = /^(?:::ffff:|64:ff9b::)(\d+\.\d+\.\d+\.\d+)$/.exec(lower);
  if (dotted?.[1]) return dotted[1];
  const hex = /^(?:::ffff:|64:ff9b::)([0-9a-f]{1,4}):([0-9a-f]{1,4})$/.exec(lower);
  const sixToFour = /^2002:([0-9a-f]{1,4}):([0-9a-f]{1,4})(?::|$)/.exec(lower);
  const parts = hex ?? sixToFour;
  if (!parts?.[1] || !parts[2]) return null;
  const hi = Number.parseInt(parts[1], 16);
  const lo = Number.parseInt(parts[2], 16);
  return `${hi >> 8}.${hi & 255}.${lo >> 8}.${lo & 255}`;
}

/** Whether an IP address is on the public internet (false for anything the list above names). */
export function isPublicAddress(address: string): boolean {
  const family = isIP(address);
  if (family === 0) return false;
  if (family === 4) return !blocked.check(address, 'ipv4');
  const inner = embeddedIpv4(address);
  if (inner) return isPublicAddress(inner);
  // The rest of ::/96 (IPv4-compatible, deprecated) is not routable either.
  if (/^::[0-9a-f.:]*$/i.test(address) && address !== '::') return false;
  return !blocked.check(address, 'ipv6');
}

/** `localhost` and its subdomains (RFC 6761): loopback wherever they are resolved, the proxy's host included. */
export function isLoopbackName(host: string): boolean {
  const name = host.toLowerCase().replace(/\.$/, '');
  return name === 'localhost' || name.endsWith('.localhost');
}

export type HostVerdict = 'allowed' | 'blocked' | 'unresolved';
export type Lookup = (host: string) => Promise<string[]>;

/** The system resolver (getaddrinfo, as the browser would use): every A and AAAA record. */
export const systemLookup: Lookup = async (host) =>
  (await dnsLookup(host, { all: true, verbatim: true })).map((a) => a.address);

/** A host's verdict and, when it is allowed, the addresses that were checked (the only ones to connect to). */
export type CheckedHost = { verdict: 'allowed'; addresses: string[] } | { verdict: 'blocked' | 'unresolved' };

const BLOCKED: CheckedHost = { verdict: 'blocked' };
const UNRESOLVED: CheckedHost = { verdict: 'unresolved' };

/** An IPv6 literal as URLs write it (`[::1]`) without its brackets; anything else as it is. */
function unbracket(host: string): string {
  return host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host;
}

/**
 * The one check of a destination, shared by the request guard and the egress proxy
 * (egress-proxy.ts): an IP literal is checked as it is; a `localhost` name is refused without a
 * lookup; any other name is resolved once (every address) and refused if any address is not
 * public. The egress proxy connects to one of the returned addresses and never resolves again,
 * which is what closes DNS rebinding (docs/security.md).
 */
export async function checkHost(host: string, lookup: Lookup = systemLookup): Promise<CheckedHost> {
  const literal = unbracket(host);
  if (isIP(literal) !== 0) return isPublicAddress(literal) ? { verdict: 'allowed', addresses: [literal] } : BLOCKED;
  if (isLoopbackName(literal)) return BLOCKED;
  let addresses: string[];
  try {
    addresses = await lookup(literal);
  } catch {
    return UNRESOLVED;
  }
  if (addresses.length === 0) return UNRESOLVED;
  return addresses.every(isPublicAddress) ? { verdict: 'allowed', addresses } : BLOCKED;
}

/**
 * Decides, per URL, whether a room browser may fetch it: the host is resolved (every address) and
 * any non-public address blocks the request. Verdicts are cached briefly per host (a page loads
 * dozens of resources from one host). data:, blob: and about: pass; other non-network schemes fail.
 */
export function makeNetworkGuard(opts: { lookup?: Lookup; cacheMs?: number; now?: () => number } = {}) {
  const lookup = opts.lookup ?? systemLookup;
  const cacheMs = opts.cacheMs ?? 30_000;
  const now = opts.now ?? Date.now;
  const cache = new Map<string, { verdict: HostVerdict; until: number }>();

  const hostVerdict = async (host: string, resolve: boolean): Promise<HostVerdict> => {
    const literal = unbracket(host);
    if (isIP(literal) !== 0) return isPublicAddress(literal) ? 'allowed' : 'blocked';
    if (!resolve) return isLoopbackName(literal) ? 'blocked' : 'allowed';
    const hit = cache.get(literal);
    if (hit && hit.until > now()) return hit.verdict;
    const { verdict } = await checkHost(literal, lookup);
    if (cache.size > 1000) cache.clear();
    cache.set(literal, { verdict, until: now() + cacheMs });
    return verdict;
  };

  return {
    /**
     * `resolve: false` is for rooms whose proxy resolves names (Tor): the host name is not looked
     * up here, since a lookup would tell the local resolver which site the room visits and fails
     * for .onion names anyway. IP literals and localhost names, which need no lookup, are still
     * refused; what a name resolves to at the proxy is the proxy's business (docs/security.md).
     */
    async check(url: string, opts: { resolve?: boolean } = {}): Promise<HostVerdict> {
      let parsed: URL;
      try {
        parsed = new URL(url);
      } catch {
        return 'blocked';
      }
      if (['data:', 'blob:', 'about:'].includes(parsed.protocol)) return 'allowed';
      // file:, chrome: and the like would reach the browser host itself.
      if (!['http:', 'https:', 'ws:', 'wss:'].includes(parsed.protocol)) return 'blocked';
      return hostVerdict(parsed.hostname, opts.resolve ?? true);
    },
  };
}

export type NetworkGuard = ReturnType<typeof makeNetworkGuard>;
