import type { SwaggerTransformObject } from '@fastify/swagger';
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

/** An OpenAPI operation as far as `requestBodyOptional` reads it. */
type Operation = { requestBody?: { required?: boolean; content?: Record<string, { schema?: object }> } };

/**
 * The OpenAPI document's `transformObject`: @fastify/swagger marks every request body required,
 * but a route whose body schema is `x-empty-body` (it takes no input) accepts a request without
 * one (platform/validation.ts, docs/api.md General), so its body is not required.
 */
export const requestBodyOptional: SwaggerTransformObject = (doc) => {
  if (!('openapiObject' in doc)) return doc.swaggerObject;
  for (const item of Object.values(doc.openapiObject.paths ?? {}) as Record<string, Operation>[]) {
    for (const op of Object.values(item ?? {})) {
      const body = op?.requestBody;
      if (!body?.content) continue;
      const schemas = Object.values(body.content).map((media) => media.schema as Record<string, unknown> | undefined);
      if (schemas.length > 0 && schemas.every((s) => s?.['x-empty-body'] === true)) body.required = false;
    }
  }
  return doc.openapiObject;
};
