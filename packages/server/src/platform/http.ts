import type { FastifyRequest } from 'fastify';

export const SESSION_COOKIE = 'psession';

export function userAgent(request: FastifyRequest): string {
  return String(request.headers['user-agent'] ?? '').slice(0, 512);
}

export function retryAfterSeconds(ms: number): number {
  return Math.max(1, Math.ceil(ms / 1000));
}
