import { E2EError } from './errors.js';

/** Chat, session and epoch numbers are non-negative safe integers, written in decimal in AADs. */
export function assertId(name: string, value: number): void {
  if (!Number.isSafeInteger(value) || value < 0) {
    throw new E2EError('INVALID_INPUT', `${name} must be a non-negative safe integer`);
  }
}

/** Checks that `value` is a Uint8Array of exactly `length` bytes. */
export function assertBytes(name: string, value: Uint8Array, length: number): void {
  if (!(value instanceof Uint8Array) || value.length !== length) {
    throw new E2EError('INVALID_INPUT', `${name} must be ${length} bytes`);
  }
}
