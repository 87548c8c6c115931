import { describe, expect, it } from 'vitest';
import { isHostFrame } from './host-protocol.js';

describe('isHostFrame', () => {
  const frame = { roomId: '7', seq: 3, mime: 'image/jpeg', data: Buffer.from([0xff, 0xd8]), width: 4, height: 3 };

  it('accepts a frame as a host sends it (binary data as Buffer or Uint8Array)', () => {
    expect(isHostFrame(frame)).toBe(true);
    expect(isHostFrame({ ...frame, data: new Uint8Array([1]) })).toBe(true);
  });

  it('drops anything else: no object, a wrong field type, data as text, another image type', () => {
    for (const bad of [
      null,
      'frame',
      { ...frame, roomId: 7 },
      { ...frame, seq: '3' },
      { ...frame, seq: 1.5 },
      { ...frame, mime: 'image/png' },
      { ...frame, data: 'AAAA' },
      { ...frame, width: undefined },
    ]) {
      expect(isHostFrame(bad)).toBe(false);
    }
  });
});
