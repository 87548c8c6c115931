import type { FastifyRequest } from 'fastify';

export const SESSION_COOKIE = 'psession';

/**
 * The client address: the socket's peer, or with TRUST_PROXY Fastify's reading of
 * X-Forwarded-For (configured at app creation). Always a plain string.
 */
export function clientIp(request: FastifyRequest): string {
  const ip = request.ip ?? '';
  return ip.startsWith('::ffff:') ? ip.slice(7) : ip;
}

export function userAgent(request: FastifyRequest): string {
  return String(request.headers['user-agent'] ?? '').slice(0, 512);
}

export function retryAfterSeconds(ms: number): number {
  return Math.max(1, Math.ceil(ms / 1000));
}
