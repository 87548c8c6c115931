import { isHttpUrl, isOneLine, isVisible } from '@parlor/protocol';
import { Ajv } from 'ajv';
import addFormats, { type FormatsPlugin } from 'ajv-formats';
import type { FastifyInstance, FastifySchemaCompiler } from 'fastify';

const formats = addFormats as unknown as FormatsPlugin;
const rfc3339 = formats.get('date-time') as { validate: (text: string) => boolean };

/** The first and last instants a `date-time` input may name (UTC): see isStorableInstant. */
export const INSTANT_MIN_MS = Date.UTC(1970, 0, 1);
export const INSTANT_MAX_MS = Date.UTC(9999, 11, 31, 23, 59, 59, 999);

/**
 * The `date-time` format of every input: RFC 3339 text (as ajv-formats checks it) that also
 * names a real instant from 1970-01-01T00:00:00Z to 9999-12-31T23:59:59.999Z. RFC 3339 alone
 * lets through what `new Date` cannot read (a leap second, `23:59:60`; a `+01` offset), which
 * became an Invalid Date and a 500, and years (0000, or past 9999 once the offset is applied)
 * that PostgreSQL or the four-digit wire format cannot hold.
 */
export function isStorableInstant(text: string): boolean {
  if (!rfc3339.validate(text)) return false;
  const ms = Date.parse(text);
  return Number.isFinite(ms) && ms >= INSTANT_MIN_MS && ms <= INSTANT_MAX_MS;
}

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
  formats(ajv);
  ajv.addFormat('date-time', { type: 'string', validate: isStorableInstant });
  // An http(s) URL a browser can open (protocol isHttpUrl); the schemas' pattern alone lets
  // through text that is no URL (`http://[`, `http://%zz/`), which the room browser refuses.
  ajv.addFormat('http-url', { type: 'string', validate: isHttpUrl });
  // One line of visible text (protocol isOneLine): Unicode's format characters (U+200B, tags past
  // U+FFFF) are invisible, and a pattern spelling them all is kilobytes long.
  ajv.addFormat('one-line', { type: 'string', validate: isOneLine });
  // Visible text over any number of lines (protocol isVisible), for the same reason.
  ajv.addFormat('visible', { type: 'string', validate: isVisible });
  return ajv;
}

const bodyAjv = makeAjv(false);
const textAjv = makeAjv(true);

/** Half of a surrogate pair, which no UTF-8 text (so no SQL text column) can hold. */
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/**
 * Where (a JSON pointer) the first string holding a NUL or a lone surrogate is, or null: the
 * database refuses both, which would otherwise surface as a 500 instead of this 400 (or, for a
 * socket payload, this ERR_VALIDATION ack). Iterative, so deeply nested input cannot overflow the
 * stack.
 */
function unstorableAt(data: unknown): string | null {
  const stack: [unknown, string][] = [[data, '']];
  for (let item = stack.pop(); item !== undefined; item = stack.pop()) {
    const [value, at] = item;
    if (typeof value === 'string') {
      if (value.includes('\u0000') || LONE_SURROGATE.test(value)) return at;
    } else if (value !== null && typeof value === 'object') {
      for (const [k, v] of Object.entries(value)) stack.push([v, `${at}/${k}`]);
    }
  }
  return null;
}

/**
 * A validator that runs the schema, then refuses unstorable strings (unstorableAt); its `errors`
 * are ajv's, or one `text` error at the string that was refused. `emptyOk`: no data at all passes.
 * Fastify hands a body validator null for a request without a body (and for a zero-length JSON
 * one, which installJsonBodyParser makes none), so null passes here; a JSON `null` body is
 * refused by that parser before it could pass for none.
 */
function checkedBy(validate: ((data: unknown) => boolean) & { errors?: unknown }, emptyOk = false) {
  let errors: unknown = null;
  const checked = (data: unknown) => {
    if (emptyOk && (data === undefined || data === null)) return true;
    if (!validate(data)) {
      errors = validate.errors;
      return false;
    }
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
}

/** Whether `schema` is the body schema of a route that takes no input (`x-empty-body`, protocol EmptyBody). */
const takesNoInput = (schema: unknown): boolean =>
  typeof schema === 'object' && schema !== null && (schema as Record<string, unknown>)['x-empty-body'] === true;

/** Decimal text as people write numbers: no sign but a leading `-` (not on 0), no leading zeros, spaces or exponent. */
const DECIMAL_TEXT = {
  integer: /^(?:0|-?[1-9][0-9]*)$/,
  number: /^(?:-?(?:0|[1-9][0-9]*)\.[0-9]+|0|-?[1-9][0-9]*)$/,
};

/**
 * A text part's validator that refuses a number written other than in plain decimal before Ajv
 * converts it: Ajv turns any text JavaScript reads as the number (`2.0`, `0x10`, `1e1`, ` 2`) into
 * it, so `/v1/bot/users/0x10` named user 16. The top-level properties the schema types as integer
 * or number are checked; the error is the one Ajv gives a value of the wrong type.
 */
function plainNumbers(schema: object, validate: ((data: unknown) => boolean) & { errors?: unknown }) {
  const properties = (schema as { properties?: Record<string, { type?: unknown }> }).properties ?? {};
  const numeric = Object.entries(properties).flatMap(([name, sub]) =>
    sub.type === 'integer' || sub.type === 'number' ? [[name, sub.type] as const] : [],
  );
  if (numeric.length === 0) return validate;
  let errors: unknown = null;
  const checked = (data: unknown) => {
    if (data !== null && typeof data === 'object') {
      for (const [name, type] of numeric) {
        const value = (data as Record<string, unknown>)[name];
        if (typeof value === 'string' && !DECIMAL_TEXT[type].test(value)) {
          errors = [{ instancePath: `/${name}`, keyword: 'type', params: { type }, message: `must be ${type}` }];
          return false;
        }
      }
    }
    const ok = validate(data);
    errors = validate.errors;
    return ok;
  };
  Object.defineProperty(checked, 'errors', { get: () => errors });
  return checked;
}

export const validatorCompiler: FastifySchemaCompiler<unknown> = ({ schema, httpPart }) => {
  if (httpPart !== 'body') return checkedBy(plainNumbers(schema as object, textAjv.compile(schema as object)));
  // Routes without input accept a request with no body at all.
  return checkedBy(bodyAjv.compile(schema as object), takesNoInput(schema));
};

/**
 * The validation error a JSON `null` body gets on a route that takes no input: the one its schema
 * gives any other body that is no object, and that any route with a body gives `null`.
 */
function nullBodyRefused(): Error {
  const validation = [{ instancePath: '', keyword: 'type', params: { type: 'object' }, message: 'must be object' }];
  return Object.assign(new Error('body must be object'), { statusCode: 400, validationContext: 'body', validation });
}

/**
 * JSON bodies as Fastify parses them (prototype and constructor poisoning refused), except that an
 * empty one counts as no body: many clients send `content-type: application/json` on every POST,
 * with or without a body, and Fastify's parser answers an empty one with 400 (ERR_INVALID_JSON).
 * The body schema then decides, as for a request without the header: routes without input
 * (`x-empty-body`) accept it, the others answer 400 ERR_VALIDATION. Only a zero-length body is
 * empty; whitespace is still not JSON, and a JSON `null` is a body: a route without input answers
 * it 400 ERR_VALIDATION, as it answers any body but `{}`. That is decided here, where the text is
 * known, because Fastify hands the validator null for a request without a body too.
 */
export function installJsonBodyParser(app: FastifyInstance): void {
  const parseJson = app.getDefaultJsonParser('error', 'error');
  app.removeContentTypeParser('application/json');
  // parseAs 'buffer': the bytes are decoded here, strictly: bytes that are not UTF-8 (which the
  // default decoding would turn into U+FFFD and store) answer 400 ERR_INVALID_JSON.
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (request, body, done) => {
    if (body.length === 0) return done(null, undefined);
    let text: string;
    try {
      text = strictUtf8.decode(body as Buffer);
    } catch {
      return done(notUtf8());
    }
    parseJson(request, text, (err, json) => {
      if (err === null && json === null && takesNoInput(request.routeOptions.schema?.body)) done(nullBodyRefused());
      else done(err, json);
    });
  });
}

/** UTF-8 that refuses malformed bytes instead of replacing them (a byte-order mark is dropped, as JSON.parse would refuse it). */
const strictUtf8 = new TextDecoder('utf-8', { fatal: true });

/** A JSON body that is not UTF-8: answered as Fastify's invalid JSON is (400 ERR_INVALID_JSON). */
function notUtf8(): Error {
  return Object.assign(new Error('Body is not valid UTF-8'), {
    statusCode: 400,
    code: 'FST_ERR_CTP_INVALID_JSON_BODY',
  });
}

/**
 * A strict validator for socket payloads, with the same rules as request bodies: the schema, and
 * no string holding a NUL or a lone surrogate anywhere in the payload (unstorableAt), which a
 * handler could otherwise pass on to the database or the room browser.
 */
export function compilePayload<T>(schema: object): ((data: unknown) => data is T) & { errors?: unknown } {
  return checkedBy(bodyAjv.compile(schema)) as unknown as ((data: unknown) => data is T) & { errors?: unknown };
}

/** The query string of a route that declares none: no parameter at all. */
const NO_QUERY = Object.freeze({ type: 'object', properties: {}, additionalProperties: false });

/**
 * Unknown query parameters are refused (docs/api.md, General): a route that declares no querystring
 * schema takes none, and any parameter answers 400 ERR_VALIDATION (`querystring/<name>`). Routes
 * hidden from the OpenAPI document are pages and assets, not the JSON API (the web app, the docs
 * page and its files, the default avatars, the document itself): a link or a cache may add a query
 * to those, which they ignore. Register before any route.
 */
export function refuseUndeclaredQuery(app: FastifyInstance): void {
  app.addHook('onRoute', (route) => {
    const schema = route.schema as Record<string, unknown> | undefined;
    if (schema?.querystring !== undefined || schema?.hide === true) return;
    // A new object: route files may share one schema object between routes.
    route.schema = { ...schema, querystring: NO_QUERY };
  });
}
