import { randomBytes } from 'node:crypto';
import { generateKeyPair, publicKeyToBase64 } from '@parlor/sdk';
import { schema } from '../../src/platform/db/index.js';
import type { TestApp } from './app.js';

/** A session made straight in the database: its user, its id and its registered public key. */
export interface BulkSession {
  userId: number;
  sessionId: number;
  publicKey: string;
}

/**
 * Many members at once, written straight to the database (a login and a key registration each
 * through the API would take minutes): `users` users with `perUser` live sessions each, every
 * session with a registered X25519 key, all members of `chatId`. For tests of large key rings.
 */
export async function bulkMembers(
  app: TestApp,
  chatId: number,
  opts: { users: number; perUser: number },
): Promise<BulkSession[]> {
  const db = app.database.db;
  const now = new Date();
  const tag = randomBytes(4).toString('hex');
  const users = await db
    .insert(schema.users)
    .values(
      Array.from({ length: opts.users }, (_, i) => ({
        username: `bulk_${tag}_${i}`,
        lastActivityAt: now,
        createdAt: now,
        updatedAt: now,
      })),
    )
    .returning({ id: schema.users.id });
  await db.insert(schema.chatMembers).values(users.map((u) => ({ chatId, userId: u.id, joinedAt: now })));
  const sessions = await db
    .insert(schema.sessions)
    .values(
      users.flatMap((u) =>
        Array.from({ length: opts.perUser }, () => ({
          userId: u.id,
          tokenHash: randomBytes(32).toString('hex'),
          tokenSuffix: randomBytes(3).toString('hex'),
          createdAt: now,
          expiresAt: new Date(now.getTime() + 3600_000),
          clientIp: '203.0.113.1',
          userAgent: 'bulk',
          geo: {},
          lastSeenAt: now,
        })),
      ),
    )
    .returning({ id: schema.sessions.id, userId: schema.sessions.userId });
  const keyed = sessions.map((s) => ({
    userId: s.userId,
    sessionId: s.id,
    publicKey: publicKeyToBase64(generateKeyPair().publicKey),
  }));
  await db
    .insert(schema.sessionKeys)
    .values(keyed.map((k) => ({ sessionId: k.sessionId, userId: k.userId, publicKey: k.publicKey, updatedAt: now })));
  return keyed;
}
