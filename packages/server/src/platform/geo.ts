import { createRequire } from 'node:module';
import { isIP } from 'node:net';
import type { Geo } from '@parlor/protocol';

/** The geo port: where a client address is. Private and loopback addresses give empty geo. */
export interface GeoLookup {
  lookup(ip: string): Promise<Geo>;
}

export const EMPTY_GEO: Geo = Object.freeze({
  city: '',
  region_name: '',
  country_code: '',
  lat: 0,
  lon: 0,
  isp: '',
  org: '',
  is_mobile: false,
  is_proxy: false,
  is_hosting: false,
});

/** True for loopback, private, link-local, CGNAT, unique-local and unspecified addresses. */
export function isNonPublicIp(ip: string): boolean {
  const v = ip.startsWith('::ffff:') ? ip.slice(7) : ip;
  const kind = isIP(v);
  if (kind === 4) {
    const [a = 0, b = 0] = v.split('.').map(Number);
    return (
      a === 0 ||
      a === 10 ||
      a === 127 ||
      (a === 169 && b === 254) ||
      (a === 172 && b >= 16 && b <= 31) ||
      (a === 192 && b === 168) ||
      (a === 100 && b >= 64 && b <= 127) ||
      a >= 224
    );
  }
  if (kind === 6) {
    const l = v.toLowerCase();
    return (
      l === '::' ||
      l === '::1' ||
      l.startsWith('fc') ||
      l.startsWith('fd') ||
      l.startsWith('fe8') ||
      l.startsWith('fe9') ||
      l.startsWith('fea') ||
      l.startsWith('feb') ||
      l.startsWith('ff')
    );
  }
  return true;
}

interface GeoipLiteModule {
  lookup(ip: string): { country: string; region: string; city: string; ll: [number, number] } | null;
}

/**
 * Offline lookup with geoip-lite's shipped database (city, region, country, lat/lon). It knows
 * nothing of ISPs or proxies, so those fields stay empty/false. Its data (about 100 MB) is loaded
 * on the first public address, not at start.
 */
export class GeoipLiteLookup implements GeoLookup {
  private mod: GeoipLiteModule | null = null;

  async lookup(ip: string): Promise<Geo> {
    if (isNonPublicIp(ip)) return EMPTY_GEO;
    if (!this.mod) this.mod = createRequire(import.meta.url)('geoip-lite') as GeoipLiteModule;
    const hit = this.mod.lookup(ip.startsWith('::ffff:') ? ip.slice(7) : ip);
    if (!hit) return EMPTY_GEO;
    return {
      ...EMPTY_GEO,
      city: hit.city ?? '',
      region_name: hit.region ?? '',
      country_code: hit.country ?? '',
      lat: hit.ll?.[0] ?? 0,
      lon: hit.ll?.[1] ?? 0,
    };
  }
}
