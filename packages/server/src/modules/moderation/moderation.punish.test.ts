import { describe, expect, it } from 'vitest';
import { humanDuration } from './moderation.punish.js';

describe('humanDuration (the duration a ban or timeout notification names)', () => {
  it.each([
    [undefined, 'permanently'],
    [1, '1 minute'],
    [60, '1 minute'],
    [61, '2 minutes'],
    [3_600, '1 hour'],
    [5_400, '1 hour 30 minutes'],
    [86_400, '1 day'],
    [90_060, '1 day 1 hour 1 minute'],
    [172_800 + 7_200, '2 days 2 hours'],
    [2_592_000, '30 days'],
  ])('%s s reads %s', (seconds, text) => {
    expect(humanDuration(seconds)).toBe(text);
  });
});
