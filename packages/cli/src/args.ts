import { InvalidArgumentError } from 'commander';

/** Parses a whole decimal number ≥ min, refusing "1.5", "1e3", "0x10" and unsafe integers. */
export function integerAtLeast(min: number): (value: string) => number {
  return (value) => {
    const n = /^\d+$/.test(value) ? Number(value) : Number.NaN;
    if (!Number.isSafeInteger(n) || n < min) throw new InvalidArgumentError(`Expected a whole number ≥ ${min}.`);
    return n;
  };
}

/** Ids of users, bots and guilds: integers from 1. */
export const parseId = integerAtLeast(1);

function isKeyOf<T extends object>(table: T, key: string): key is Extract<keyof T, string> {
  return Object.hasOwn(table, key);
}

/** Accepts exactly the names of `table` (e.g. PermissionNames) and returns the name, typed. */
export function nameIn<T extends object>(table: T): (value: string) => Extract<keyof T, string> {
  return (value) => {
    if (isKeyOf(table, value)) return value;
    throw new InvalidArgumentError(`Allowed choices are ${Object.keys(table).join(', ')}.`);
  };
}
