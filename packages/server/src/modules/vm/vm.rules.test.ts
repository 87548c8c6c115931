import { describe, expect, it } from 'vitest';
import { canGrant, canRunRoom, canStart, canStop, levelDecides } from './vm.rules.js';

const owned = { ownerUserId: 1, type: 'public' };
const direct = { ownerUserId: null, type: 'direct' };
const as = (userId: number, permissionLevel: number) => ({ userId, permissionLevel });

describe('room VM rules', () => {
  it('start: the chat owner or a platform Owner (spec 4.6 rule 4); direct chats: their members', () => {
    expect(canStart(as(1, 0), owned, true)).toBe(true);
    expect(canStart(as(2, 3), owned, false)).toBe(true);
    for (const level of [0, 1, 2]) expect(canStart(as(2, level), owned, true)).toBe(false);
    expect(canStart(as(2, 0), direct, true)).toBe(true);
    expect(canStart(as(2, 2), direct, false)).toBe(false);
  });

  it('stop: the chat owner or Admin and above; direct chats: their members', () => {
    expect(canStop(as(1, 0), owned, true)).toBe(true);
    expect(canStop(as(2, 2), owned, false)).toBe(true);
    expect(canStop(as(2, 1), owned, true)).toBe(false);
    expect(canStop(as(2, 0), direct, true)).toBe(true);
  });

  it('control hand-over: the chat owner or Moderator and above', () => {
    expect(canGrant(as(1, 0), owned)).toBe(true);
    expect(canGrant(as(2, 1), owned)).toBe(true);
    expect(canGrant(as(2, 0), owned)).toBe(false);
    expect(canGrant(as(2, 0), direct)).toBe(false);
  });

  it('reads no level for a caller the rule lets act at any level: the chat owner, a member of a direct chat', () => {
    expect(levelDecides((a) => canGrant(a, owned), as(1, 0))).toBe(false);
    expect(levelDecides((a) => canStop(a, direct, true), as(2, 0))).toBe(false);
    expect(levelDecides((a) => canStop(a, owned, true), as(2, 2))).toBe(true);
    expect(levelDecides((a) => canGrant(a, owned), as(2, 1))).toBe(true);
  });

  it('runs no room in an archived (read-only) direct chat', () => {
    expect(canRunRoom(direct)).toBe(true);
    expect(canRunRoom({ ...direct, archived: false })).toBe(true);
    expect(canRunRoom({ ...direct, archived: true })).toBe(false);
  });
});
