import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';

/**
 * The viewer-token key of a deployment, the same on every node: derived (HMAC-SHA256, a fixed
 * label) from the operator token, which every node of a cluster is configured with
 * (docs/operations.md). The token itself cannot be recovered from the key.
 */
export function viewerTokenKey(operatorToken: string): Buffer {
  return createHmac('sha256', operatorToken).update('parlor room VM viewer-token key v1').digest();
}

export interface ViewerClaims {
  chatId: number;
  userId: number;
  expiresAt: Date;
}

/**
 * Viewer tokens: `<chat>.<user>.<expiry ms>.<HMAC-SHA256 of those, base64url>`. Any node checks
 * them when it shares the key (`viewerTokenKey`); the default, a random key, suits one process.
 */
export function makeViewerTokens(key: Buffer = randomBytes(32)) {
  const mac = (body: string) => createHmac('sha256', key).update(`parlor-vm-viewer.${body}`).digest();

  return {
    issue(claims: ViewerClaims): string {
      const body = `${claims.chatId}.${claims.userId}.${claims.expiresAt.getTime()}`;
      return `${body}.${mac(body).toString('base64url')}`;
    },

    /** The claims of a well-formed, authentic token that has not expired; null otherwise. */
    verify(token: string, now: Date): ViewerClaims | null {
      const m = /^(\d{1,10})\.(\d{1,10})\.(\d{1,15})\.([A-Za-z0-9_-]{43})$/.exec(token);
      if (!m) return null;
      const [, chat, user, expiry, signature] = m as unknown as [string, string, string, string, string];
      const expected = mac(`${chat}.${user}.${expiry}`);
      const given = Buffer.from(signature, 'base64url');
      if (given.length !== expected.length || !timingSafeEqual(given, expected)) return null;
      const expiresAt = new Date(Number(expiry));
      if (expiresAt.getTime() <= now.getTime()) return null;
      return { chatId: Number(chat), userId: Number(user), expiresAt };
    },
  };
}

export type ViewerTokens = ReturnType<typeof makeViewerTokens>;
