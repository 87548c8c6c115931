import type { ActiveSession, Geo, SessionHistoryEntry } from '@parlor/protocol';
import { EMPTY_GEO } from '../../platform/geo.js';
import type { SessionRow } from './sessions.store.js';

const geoOf = (row: SessionRow): Geo => ({ ...EMPTY_GEO, ...(row.geo as Partial<Geo>) });

export function toActiveSession(row: SessionRow, currentId: number): ActiveSession {
  return {
    token_suffix: row.tokenSuffix,
    created_at: row.createdAt.toISOString(),
    expires_at: row.expiresAt.toISOString(),
    client_ip: row.clientIp,
    user_agent: row.userAgent,
    geo: geoOf(row),
    is_current: row.id === currentId,
  };
}

export function toHistoryEntry(row: SessionRow): SessionHistoryEntry {
  return {
    token_suffix: row.tokenSuffix,
    created_at: row.createdAt.toISOString(),
    client_ip: row.clientIp,
    user_agent: row.userAgent,
    geo: geoOf(row),
  };
}
