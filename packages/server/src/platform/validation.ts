import { Ajv } from 'ajv';
import addFormats from 'ajv-formats';
import type { FastifySchemaCompiler } from 'fastify';

/**
 * Two compilers: bodies are validated strictly (no coercion, unknown fields rejected by the
 * schemas' additionalProperties: false), while query strings and path parameters, which arrive
 * as text, are coerced to the declared number/boolean types.
 */
function makeAjv(coerce: boolean) {
  const ajv = new Ajv({
    coerceTypes: coerce,
    useDefaults: true,
    removeAdditional: false,
    allErrors: false,
    strict: false,
  });
  (addFormats as unknown as (a: Ajv) => void)(ajv);
  return ajv;
}

const bodyAjv = makeAjv(false);
const textAjv = makeAjv(true);

export const validatorCompiler: FastifySchemaCompiler<unknown> = ({ schema, httpPart }) => {
  const ajv = httpPart === 'body' ? bodyAjv : textAjv;
  const validate = ajv.compile(schema as object);
  if (httpPart !== 'body' || !(schema as Record<string, unknown>)['x-empty-body']) return validate;
  // Routes without input accept a request with no body at all.
  const optional = (data: unknown) => data === undefined || data === null || validate(data);
  Object.defineProperty(optional, 'errors', { get: () => validate.errors });
  return optional;
};
