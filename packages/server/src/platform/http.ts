import type { FastifyRequest } from 'fastify';
import { appError } from './errors.js';

export const SESSION_COOKIE = 'psession';

export function userAgent(request: FastifyRequest): string {
  return String(request.headers['user-agent'] ?? '').slice(0, 512);
}

export function retryAfterSeconds(ms: number): number {
  return Math.max(1, Math.ceil(ms / 1000));
}

/** 429 ERR_RATE_LIMITED with `retry_after`: the whole seconds until `ms` from now, at least 1. */
export function rateLimited(ms: number, message?: string) {
  return appError('ERR_RATE_LIMITED', message, { retry_after: retryAfterSeconds(ms) });
}
