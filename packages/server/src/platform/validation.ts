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

/** A NUL, or half of a surrogate pair: text that SQL cannot store (a 500 there, so a 400 here). */
const UNSTORABLE = /\u0000|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** Where (a JSON pointer) the first string with unstorable text is, or null. */
function unstorableAt(data: unknown, at = ''): string | null {
  if (typeof data === 'string') return UNSTORABLE.test(data) ? at : null;
  if (data === null || typeof data !== 'object') return null;
  for (const [k, v] of Object.entries(data)) {
    const found = unstorableAt(v, `${at}/${k}`);
    if (found !== null) return found;
  }
  return null;
}

export const validatorCompiler: FastifySchemaCompiler<unknown> = ({ schema, httpPart }) => {
  const ajv = httpPart === 'body' ? bodyAjv : textAjv;
  const validate = ajv.compile(schema as object);
  const emptyBodyOk = httpPart === 'body' && (schema as Record<string, unknown>)['x-empty-body'] === true;
  let errors: unknown = null;
  const checked = (data: unknown) => {
    // Routes without input accept a request with no body at all.
    if (emptyBodyOk && (data === undefined || data === null)) return true;
    if (!validate(data)) {
      errors = validate.errors;
      return false;
    }
    // Valid data is bounded by its schema, so this walk is too.
    const at = unstorableAt(data);
    if (at === null) {
      errors = null;
      return true;
    }
    errors = [
      { instancePath: at, keyword: 'text', message: 'must not contain NUL or unpaired surrogates', params: {} },
    ];
    return false;
  };
  Object.defineProperty(checked, 'errors', { get: () => errors });
  return checked;
};

/** A strict validator for socket payloads (same rules as request bodies). */
export function compilePayload<T>(schema: object): ((data: unknown) => data is T) & { errors?: unknown } {
  return bodyAjv.compile(schema) as unknown as ((data: unknown) => data is T) & { errors?: unknown };
}
