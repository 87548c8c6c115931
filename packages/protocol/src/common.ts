import { type TSchema, Type } from '@sinclair/typebox';

/** `T | null`, as the spec writes "string or null". */
export const Nullable = <T extends TSchema>(schema: T) => Type.Union([schema, Type.Null()]);

/** ISO 8601 UTC timestamp string. */
export const Timestamp = Type.String({ format: 'date-time' });

export const ErrorBodySchema = Type.Object(
  {
    code: Type.String({ pattern: '^ERR_[A-Z_]+$' }),
    message: Type.String(),
    errors: Type.Optional(Type.Array(Type.Object({ path: Type.String(), message: Type.String() }))),
    retry_after: Type.Optional(Type.Integer({ minimum: 0 })),
    ttl: Type.Optional(Type.Integer({ minimum: 0 })),
  },
  { $id: 'ErrorBody', description: 'The body of every non-2xx answer.' },
);

export const OkSchema = Type.Object({ ok: Type.Boolean() });

/**
 * The largest value of an SQL `integer` column (2^31-1). Every integer a client sends that reaches
 * one (ids, epochs, offsets) is bounded by it, so a larger one is refused as invalid input instead
 * of failing in the database ("integer out of range", a 500).
 */
export const INT32_MAX = 2_147_483_647;

/** Integer path parameter (ids are positive integers, stored in `integer` columns). */
export const IdParam = Type.Integer({ minimum: 1, maximum: INT32_MAX });

/**
 * The body of POST routes that take no input: none at all, or `{}`; any field is rejected.
 * (`x-empty-body` lets the validator accept a request without a body.)
 */
export const EmptyBody = Type.Object({}, { additionalProperties: false, 'x-empty-body': true });
