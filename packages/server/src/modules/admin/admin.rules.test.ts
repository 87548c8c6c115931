import { describe, expect, it } from 'vitest';
import {
  type ActorLevel,
  canActOn,
  canManageOfficial,
  canSetLevel,
  maxAssignableLevel,
  mayAdminister,
} from './admin.rules.js';

/**
 * The level rules of spec 2.11, written out by hand as the expected answer for every actor ×
 * target level × new level (5 × 4 × 4 = 80 cases). Levels: 0 User, 1 Moderator, 2 Admin, 3 Owner.
 *
 * In each grid a row is the target's current level (0..3 from top to bottom) and a column is the
 * level to assign (0..3 from left to right); `Y` means allowed, `.` refused.
 */
const SET_LEVEL: Record<string, readonly string[]> = {
  // User: no admin abilities at all.
  '0': [
    '....', // target User
    '....', // target Moderator
    '....', // target Admin
    '....', // target Owner
  ],
  // Moderator: abilities "not shown" by the spec; grants none.
  '1': [
    '....', //
    '....',
    '....',
    '....',
  ],
  // Admin: acts only on users below own level (User, Moderator); may assign up to User.
  '2': [
    'Y...', // User → User only
    'Y...', // Moderator → User (demotion) only
    '....', // another Admin: not below own level
    '....', // an Owner: not below own level
  ],
  // Owner: acts on everyone, other Owners included; may assign up to Admin.
  '3': [
    'YYY.', //
    'YYY.',
    'YYY.',
    'YYY.', // another Owner may be demoted, but nobody is made Owner
  ],
  // The operator (CLI) may do anything, making Owners included.
  operator: [
    'YYYY', //
    'YYYY',
    'YYYY',
    'YYYY',
  ],
};

/** Whether the actor may act on a target at all, by target level 0..3. */
const ACT_ON: Record<string, string> = {
  '0': '....',
  '1': '....',
  '2': 'YY..',
  '3': 'YYYY',
  operator: 'YYYY',
};

/** Who manages official bots and chats: Owners and the operator only. */
const MANAGES_OFFICIAL: Record<string, boolean> = { '0': false, '1': false, '2': false, '3': true, operator: true };

/** Who may use the admin surface at all (asked again under the caller's row lock). */
const ADMINISTERS: Record<string, boolean> = { '0': false, '1': false, '2': true, '3': true, operator: true };

/** The highest level each actor may assign; -1 means none. */
const MAX_ASSIGNABLE: Record<string, number> = { '0': -1, '1': -1, '2': 0, '3': 2, operator: 3 };

const ACTORS: ActorLevel[] = [0, 1, 2, 3, 'operator'];
const LEVELS = [0, 1, 2, 3] as const;

/** Reads one `Y`/`.` cell of a table line; a missing cell is a mistake in the table, not a `false`. */
function cell(line: string | undefined, index: number): boolean {
  const c = line?.[index];
  if (c !== 'Y' && c !== '.') throw new Error(`expected-table cell missing at ${index} of "${line}"`);
  return c === 'Y';
}

const setLevelCases = ACTORS.flatMap((actor) =>
  LEVELS.flatMap((target) =>
    LEVELS.map((next) => ({ actor, target, next, allowed: cell(SET_LEVEL[String(actor)]?.[target], next) })),
  ),
);

describe('admin rules (spec 2.11)', () => {
  it('has an expected answer for all 80 actor × target × new-level cases', () => {
    expect(setLevelCases).toHaveLength(80);
    // The grids are not vacuous: both answers occur, and each actor's count is as the spec implies.
    const allowedBy = (a: ActorLevel) => setLevelCases.filter((c) => c.actor === a && c.allowed).length;
    expect(ACTORS.map(allowedBy)).toEqual([0, 0, 2, 12, 16]);
  });

  it.each(setLevelCases)(
    'canSetLevel($actor, target $target, new $next) is $allowed',
    ({ actor, target, next, allowed }) => {
      expect(canSetLevel(actor, target, next)).toBe(allowed);
    },
  );

  it.each(
    ACTORS.flatMap((actor) =>
      LEVELS.map((target) => ({ actor, target, allowed: cell(ACT_ON[String(actor)], target) })),
    ),
  )('canActOn($actor, target $target) is $allowed', ({ actor, target, allowed }) => {
    expect(canActOn(actor, target)).toBe(allowed);
  });

  it.each(ACTORS.map((actor) => ({ actor, max: MAX_ASSIGNABLE[String(actor)] })))(
    'maxAssignableLevel($actor) is $max',
    ({ actor, max }) => {
      expect(maxAssignableLevel(actor)).toBe(max);
    },
  );

  it('never lets an Admin touch an equal or higher level, whatever level is asked for', () => {
    for (const next of [-1, 0, 1, 2, 3, 4]) {
      expect(canSetLevel(2, 2, next)).toBe(false);
      expect(canSetLevel(2, 3, next)).toBe(false);
    }
  });

  it('never lets an Owner create another Owner', () => {
    for (const target of LEVELS) expect(canSetLevel(3, target, 3)).toBe(false);
  });

  it.each(ACTORS.map((actor) => ({ actor, allowed: MANAGES_OFFICIAL[String(actor)] })))(
    'canManageOfficial($actor) is $allowed',
    ({ actor, allowed }) => {
      expect(canManageOfficial(actor)).toBe(allowed);
    },
  );

  it.each(ACTORS.map((actor) => ({ actor, allowed: ADMINISTERS[String(actor)] })))(
    'mayAdminister($actor) is $allowed: the operator, Admins and Owners',
    ({ actor, allowed }) => {
      expect(mayAdminister(actor)).toBe(allowed);
    },
  );
});
