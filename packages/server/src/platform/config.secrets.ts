// The rules the secrets keep: their lengths and, for those sent in a header, their characters.

/**
 * Shortest value each secret may have, whether given in the environment or kept in DATA_DIR
 * (secret-files.ts checks a stored one against the same minimum).
 */
export const SECRET_MIN_LENGTH = { PUBLIC_API_KEY: 16, OPERATOR_TOKEN: 24, VM_HOST_TOKEN: 32 } as const;

/**
 * Longest public API key and operator token: the header checks (auth.ts apiKeyHeader, bearer)
 * treat a longer one as missing, so a server started with one would answer every request that
 * carries it 401.
 */
export const HEADER_SECRET_MAX_LENGTH = 256;

/** The secrets clients send in a request header: the public API key and the operator token. */
export type HeaderSecret = 'PUBLIC_API_KEY' | 'OPERATOR_TOKEN';

/**
 * A header secret's rule, for messages. Visible ASCII only: the CLI sends nothing else (anything
 * else cannot travel in a header as the same bytes), and Node and the Bearer check trim what they
 * receive, so a secret with spaces at either end could never match.
 */
export function headerSecretRule(variable: HeaderSecret): string {
  return `${SECRET_MIN_LENGTH[variable]}-${HEADER_SECRET_MAX_LENGTH} visible ASCII characters (0x21-0x7E, no spaces)`;
}

/**
 * What keeps `secret` from ever authenticating (its length, or the kind of character it holds), or
 * null when it keeps headerSecretRule. Never repeats the secret. Also checks a stored one
 * (secret-files.ts).
 */
export function headerSecretFault(variable: HeaderSecret, secret: string): string | null {
  if (secret.length < SECRET_MIN_LENGTH[variable] || secret.length > HEADER_SECRET_MAX_LENGTH)
    return `${secret.length} characters`;
  if (!/^[\x21-\x7e]+$/.test(secret)) return 'a space, a control or a non-ASCII character';
  return null;
}
