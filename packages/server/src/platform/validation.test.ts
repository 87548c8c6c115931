import { describe, expect, it } from 'vitest';
import { INSTANT_MAX_MS, INSTANT_MIN_MS, isStorableInstant } from './validation.js';

describe('isStorableInstant (the date-time format of inputs)', () => {
  it('accepts RFC 3339 instants from 1970 through 9999 (UTC), offsets included', () => {
    for (const text of [
      '1970-01-01T00:00:00Z',
      '9999-12-31T23:59:59.999Z',
      '2024-02-29T12:00:00+05:30',
      '1970-01-01T01:00:00+01:00',
      '2024-01-01t00:00:00z',
    ])
      expect(isStorableInstant(text), text).toBe(true);
    expect([new Date(INSTANT_MIN_MS).toISOString(), new Date(INSTANT_MAX_MS).toISOString()]).toEqual([
      '1970-01-01T00:00:00.000Z',
      '9999-12-31T23:59:59.999Z',
    ]);
  });

  it('refuses what no Date or column holds, and what is not RFC 3339', () => {
    for (const text of [
      '2016-12-31T23:59:60Z',
      '2024-01-01T00:00:00+01',
      '0000-01-01T00:00:00Z',
      '1969-12-31T23:59:59.999Z',
      '1970-01-01T00:59:59+01:00',
      '9999-12-31T23:59:59-00:01',
      '2023-02-29T00:00:00Z',
      '2024-01-01',
      '2024-01-01T00:00:00',
      'now',
    ])
      expect(isStorableInstant(text), text).toBe(false);
  });
});
