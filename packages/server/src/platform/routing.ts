import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { ErrorBodySchema } from '@parlor/protocol';
import type {
  FastifyBaseLogger,
  FastifyInstance,
  RawReplyDefaultExpression,
  RawRequestDefaultExpression,
  RawServerDefault,
} from 'fastify';

/** The app as route files see it: TypeBox schemas type the handlers. */
export type App = FastifyInstance<
  RawServerDefault,
  RawRequestDefaultExpression,
  RawReplyDefaultExpression,
  FastifyBaseLogger,
  TypeBoxTypeProvider
>;

/** The error answers every route may give, for the OpenAPI document. */
export const errorResponses = {
  '4xx': { $ref: 'ErrorBody#' },
  '5xx': { $ref: 'ErrorBody#' },
} as const;

export { ErrorBodySchema };

/** Security requirements by caller kind, as named in the OpenAPI document. */
export const security = {
  publicKey: [{ publicKey: [] }],
  session: [{ session: [] }],
  bot: [{ botKey: [] }],
  operator: [{ operatorToken: [] }, { session: [] }],
  publicKeyOrSession: [{ publicKey: [] }, { session: [] }],
} as const;

/**
 * Runs `fn` once the answer has been handed to the connection (or the client went away first):
 * for events that must reach the client after the answer it asked for.
 */
export function afterAnswer(reply: { raw: RawReplyDefaultExpression }, fn: () => void): void {
  const res = reply.raw;
  if (res.writableFinished || res.destroyed) fn();
  else res.once('close', fn);
}
