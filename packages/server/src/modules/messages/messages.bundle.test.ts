import { INT32_MAX } from '@parlor/protocol';
import { encryptMessage, generateChatKey } from '@parlor/sdk';
import { describe, expect, it } from 'vitest';
import { BUNDLE_CT_MIN_BYTES, parseBundle } from './messages.bundle.js';

/** Canonical base64 of `n` zero bytes. */
const zeros = (n: number) => Buffer.alloc(n).toString('base64');
const CT = zeros(BUNDLE_CT_MIN_BYTES);
const content = (epoch: unknown, ct = CT) => `{"v":2,"epoch":${JSON.stringify(epoch)},"ct":"${ct}"}`;

describe('parseBundle', () => {
  it('takes what the SDK writes, the empty message (the shortest ct) included', () => {
    const chatKey = generateChatKey();
    for (const [epoch, plaintext] of [
      [1, ''],
      [7, 'hello'],
      [INT32_MAX, 'x'.repeat(3000)],
    ] as const) {
      expect(parseBundle(encryptMessage({ chatKey, chatId: 1, epoch, plaintext }))).toEqual({ epoch });
    }
    const [, ct] = /"ct":"([^"]*)"/.exec(encryptMessage({ chatKey, chatId: 1, epoch: 1, plaintext: '' })) ?? [];
    expect(Buffer.from(ct as string, 'base64')).toHaveLength(BUNDLE_CT_MIN_BYTES);
  });

  it(`takes a ct of ${BUNDLE_CT_MIN_BYTES} bytes (24-byte nonce + 16-byte tag) or more and refuses one byte less`, () => {
    expect(BUNDLE_CT_MIN_BYTES).toBe(40);
    for (const n of [BUNDLE_CT_MIN_BYTES, BUNDLE_CT_MIN_BYTES + 1, BUNDLE_CT_MIN_BYTES + 2, 3000]) {
      expect(parseBundle(content(1, zeros(n))), String(n)).toEqual({ epoch: 1 });
    }
    for (const n of [BUNDLE_CT_MIN_BYTES - 1, 3, 0]) expect(parseBundle(content(1, zeros(n))), String(n)).toBeNull();
  });

  it('takes epochs 1 to 2^31-1, the range of the column chats keep it in', () => {
    expect(parseBundle(content(1))).toEqual({ epoch: 1 });
    expect(parseBundle(content(INT32_MAX))).toEqual({ epoch: INT32_MAX });
  });

  it('refuses epochs outside it, or not written as a plain decimal integer', () => {
    for (const epoch of [0, -1, INT32_MAX + 1, 3_000_000_000, Number.MAX_SAFE_INTEGER, 1.5, '1', null]) {
      expect(parseBundle(content(epoch)), String(epoch)).toBeNull();
    }
    for (const epoch of ['1.0', '1e0', '1E0', '01', '-0', '+1', '2147483647.0', '1e400', '10000000000']) {
      expect(parseBundle(`{"v":2,"epoch":${epoch},"ct":"${CT}"}`), epoch).toBeNull();
    }
  });

  it('refuses a ct that is not canonical standard base64', () => {
    const body = CT.slice(0, -4); // 39 bytes in full quanta; the last byte goes in a padded quantum
    expect(parseBundle(content(1, `${body}AA==`))).toEqual({ epoch: 1 });
    for (const ct of [
      `${body}AB==`, // unused bits set
      `${body}AA`, // padding missing
      `${body}AA=`,
      `${body}AA===`,
      `${body}A===`,
      `${body}AA==AAAA`, // padding inside
      `${body}-_AA`, // base64url letters
      `${body}AA\\u003d\\u003d`, // escaped padding
      `${body}AA\\n==`,
      `${body} AA==`,
    ]) {
      expect(parseBundle(content(1, ct)), ct).toBeNull();
    }
  });

  it('refuses anything JSON would read as the same bundle but the SDK would not write', () => {
    for (const text of [
      `{"v":2.0,"epoch":1,"ct":"${CT}"}`,
      `{"v":2e0,"epoch":1,"ct":"${CT}"}`,
      `{"v":2,"epoch":999,"epoch":1,"ct":"${CT}"}`, // duplicate key (JSON.parse keeps the last)
      `{"v":2,"v":2,"epoch":1,"ct":"${CT}"}`,
      `{"\\u0076":2,"epoch":1,"ct":"${CT}"}`, // escaped key name
      `{"v":2,"epoch":1,"\\u0063t":"${CT}"}`,
      `{"ct":"${CT}","epoch":1,"v":2}`, // other key orders
      `{"epoch":1,"v":2,"ct":"${CT}"}`,
      ` {"v":2,"epoch":1,"ct":"${CT}"}`, // whitespace around or inside
      `{"v":2,"epoch":1,"ct":"${CT}"} `,
      `{"v":2,"epoch":1,"ct":"${CT}"}\n`,
      `{ "v": 2, "epoch": 1, "ct": "${CT}" }`,
      `{"v":2,"epoch":1,"ct":"${CT}","x":0}`, // other shapes
      `{"v":1,"epoch":1,"ct":"${CT}"}`,
      `{"v":"2","epoch":1,"ct":"${CT}"}`,
      `{"v":2,"epoch":1}`,
      `[{"v":2,"epoch":1,"ct":"${CT}"}]`,
      'not json',
      '',
    ]) {
      expect(parseBundle(text), text).toBeNull();
    }
  });
});
