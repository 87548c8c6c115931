import { INT32_MAX } from '@parlor/protocol';
import { InvalidArgumentError } from 'commander';

/** Parses a whole decimal number ≥ min, refusing "1.5", "1e3", "0x10" and unsafe integers. */
export function integerAtLeast(min: number): (value: string) => number {
  return integerBetween(min, Number.MAX_SAFE_INTEGER);
}

/** Parses a whole decimal number from min to max (the range the server takes), as integerAtLeast. */
export function integerBetween(min: number, max: number): (value: string) => number {
  const range = max === Number.MAX_SAFE_INTEGER ? `≥ ${min}` : `from ${min} to ${max}`;
  return (value) => {
    const n = /^\d+$/.test(value) ? Number(value) : Number.NaN;
    if (!Number.isSafeInteger(n) || n < min || n > max)
      throw new InvalidArgumentError(`Expected a whole number ${range}.`);
    return n;
  };
}

/** Ids of users, bots, chats and the rest: integers from 1 to INT32_MAX, as the server stores them. */
export const parseId = integerBetween(1, INT32_MAX);

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
