import { describe, expect, it } from 'vitest';
import { canModerateChat, canMute, canRestrictInChat, canTarget } from './moderation.rules.js';

const OWNER_ID = 100;
const ACTOR_ID = 7;

describe('canModerateChat (spec 4.6 rule 2)', () => {
  // Rows: actor level 0-3; columns: chat owner's level 0-3. The chat owner itself is always allowed.
  const publicOrOfficial = [
    [false, false, false, false],
    [true, false, false, false],
    [true, true, false, false],
    [true, true, true, false],
  ];
  const privateChat = [
    [false, false, false, false],
    [false, false, false, false],
    [true, true, true, true],
    [true, true, true, true],
  ];
  for (const type of ['public', 'official', 'private'] as const) {
    const table = type === 'private' ? privateChat : publicOrOfficial;
    for (let actor = 0; actor <= 3; actor++) {
      for (let owner = 0; owner <= 3; owner++) {
        const expected = table[actor]?.[owner];
        it(`${type} chat: a level-${actor} actor over a level-${owner} owner → ${expected}`, () => {
          expect(
            canModerateChat({ userId: ACTOR_ID, level: actor }, { type, ownerId: OWNER_ID, ownerLevel: owner }),
          ).toBe(expected);
        });
      }
    }
  }

  it('always lets the chat owner moderate, whatever the type and level', () => {
    for (const type of ['public', 'official', 'private']) {
      expect(canModerateChat({ userId: OWNER_ID, level: 0 }, { type, ownerId: OWNER_ID, ownerLevel: 0 })).toBe(true);
    }
  });

  it('lets Moderators and above moderate ownerless (direct) chats', () => {
    const chat = { type: 'direct', ownerId: null, ownerLevel: 0 };
    expect([0, 1, 2, 3].map((level) => canModerateChat({ userId: ACTOR_ID, level }, chat))).toEqual([
      false,
      true,
      true,
      true,
    ]);
  });
});

describe('canMute: mute and unmute (spec 4.6 rule 3)', () => {
  it('allows the chat owner and Admins and above, in any chat, whatever the owner’s level', () => {
    for (const type of ['public', 'official', 'private', 'direct']) {
      for (let owner = 0; owner <= 3; owner++) {
        const chat = { type, ownerId: OWNER_ID, ownerLevel: owner };
        expect([0, 1, 2, 3].map((level) => canMute({ userId: ACTOR_ID, level }, chat))).toEqual([
          false,
          false,
          true,
          true,
        ]);
        expect(canMute({ userId: OWNER_ID, level: 0 }, chat)).toBe(true);
      }
    }
  });

  it('refuses a Moderator in a public chat whose owner it outranks (unlike kick)', () => {
    const chat = { type: 'public', ownerId: OWNER_ID, ownerLevel: 0 };
    const moderator = { userId: ACTOR_ID, level: 1 };
    expect([canModerateChat(moderator, chat), canMute(moderator, chat)]).toEqual([true, false]);
  });

  it('refuses Moderators in ownerless (direct) chats; Admins may', () => {
    const chat = { type: 'direct', ownerId: null, ownerLevel: 0 };
    expect([0, 1, 2, 3].map((level) => canMute({ userId: ACTOR_ID, level }, chat))).toEqual([false, false, true, true]);
  });
});

describe('canTarget', () => {
  it('never targets oneself; reaches only lower levels, Owners everyone', () => {
    const grid = [0, 1, 2, 3].map((actor) =>
      [0, 1, 2, 3].map((target) => canTarget({ userId: 1, level: actor }, { userId: 2, level: target })),
    );
    expect(grid).toEqual([
      [true, false, false, false],
      [true, false, false, false],
      [true, true, false, false],
      [true, true, true, true],
    ]);
    expect(canTarget({ userId: 1, level: 3 }, { userId: 1, level: 0 })).toBe(false);
  });
});

describe("canRestrictInChat: kick, ban and mute never take the chat's owner", () => {
  it("refuses the chat's owner as the target, and allows anyone else and any member of an ownerless chat", () => {
    expect([
      canRestrictInChat({ ownerId: OWNER_ID }, OWNER_ID),
      canRestrictInChat({ ownerId: OWNER_ID }, ACTOR_ID),
      canRestrictInChat({ ownerId: null }, OWNER_ID),
    ]).toEqual([false, true, true]);
  });
});
