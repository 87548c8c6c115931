/** The environment loadConfig reads: variable name to value (process.env by default). */
export type Env = Record<string, string | undefined>;

/** A variable's value, null when unset or empty. */
type Str = (name: string) => string | null;

/**
 * The readers of single variables, each pushing what is wrong with its variable onto `problems`
 * and answering a default instead, so loadConfig can list every invalid variable at once.
 */
export function envReaders(env: Env, problems: string[]) {
  const str = (name: string) => {
    const v = env[name];
    return v === undefined || v === '' ? null : v;
  };
  return {
    str,
    int: intReader(str, problems),
    bool: boolReader(str, problems),
    url: urlReader(str, problems),
    baseUrl: baseUrlReader(str, problems),
  };
}

/** The readers loadConfig's steps share. */
export type EnvReaders = ReturnType<typeof envReaders>;

/**
 * A whole number in decimal digits and nothing else. Number() alone would read PORT=0x1F90 as
 * 8080, VM_MAX_PER_NODE=1e2 as 100, and take '8080.0', ' 8080 ' or '+8080': a value meaning
 * something other than what it looks like is refused, like any other invalid one. The value is
 * shown JSON-quoted, so the problem stays one line whatever it holds.
 */
function intReader(str: Str, problems: string[]) {
  return (name: string, def: number, min: number, max: number) => {
    const v = str(name);
    if (v === null) return def;
    const n = /^[0-9]+$/.test(v) ? Number(v) : Number.NaN;
    if (!Number.isSafeInteger(n) || n < min || n > max) {
      problems.push(
        `${name} must be an integer from ${min} to ${max}, in decimal digits only (got ${JSON.stringify(v)})`,
      );
      return def;
    }
    return n;
  };
}

/** 1/0, true/false, yes/no or on/off; unset is false. */
function boolReader(str: Str, problems: string[]) {
  return (name: string) => {
    const v = str(name);
    if (v === null) return false;
    if (['1', 'true', 'yes', 'on'].includes(v.toLowerCase())) return true;
    if (['0', 'false', 'no', 'off'].includes(v.toLowerCase())) return false;
    problems.push(`${name} must be 1/0, true/false, yes/no or on/off (got "${v}")`);
    return false;
  };
}

/** A URL of one of `protocols` (the stores'), given back as written. */
function urlReader(str: Str, problems: string[]) {
  return (name: string, protocols: string[]) => {
    const v = str(name);
    if (v === null) return null;
    try {
      const u = new URL(v);
      if (!protocols.includes(u.protocol)) throw new Error();
      return v;
    } catch {
      problems.push(`${name} must be a ${protocols.join(' or ')} URL`);
      return null;
    }
  };
}

/**
 * A base URL of this service (PUBLIC_URL, GUILD_API_URL): links are built by appending a path to
 * it (`${publicUrl}/avatars/…` in every avatar_url), so a user name or password would be handed
 * to every client, and a query or fragment would swallow the path appended after it. Both are
 * refused, never echoed (the value may hold a password). Answers the serialised origin and path,
 * without trailing slashes (an empty `?` or `#` goes with them).
 */
function baseUrlReader(str: Str, problems: string[]) {
  return (name: string) => {
    const v = str(name);
    if (v === null) return null;
    const u = URL.canParse(v) ? new URL(v) : null;
    if (u === null || !['http:', 'https:'].includes(u.protocol)) {
      problems.push(`${name} must be a http: or https: URL`);
      return null;
    }
    if (u.username !== '' || u.password !== '') {
      problems.push(`${name} must not carry a user name or password: links to this service are built from it`);
      return null;
    }
    if (u.search !== '' || u.hash !== '') {
      problems.push(
        `${name} must be a base URL like https://example.org or https://example.org/path: no query or fragment`,
      );
      return null;
    }
    return `${u.origin}${u.pathname}`.replace(/\/+$/, '');
  };
}
