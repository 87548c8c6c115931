import { describe, expect, it } from 'vitest';
import { makeViewerTokens, viewerTokenKey } from './vm.tokens.js';

describe('viewer tokens', () => {
  const tokens = makeViewerTokens();
  const now = new Date('2026-01-01T00:00:00Z');
  const claims = { chatId: 12, userId: 34, expiresAt: new Date(now.getTime() + 60_000) };

  it('verifies what it issued until it expires', () => {
    const token = tokens.issue(claims);
    expect(tokens.verify(token, now)).toEqual(claims);
    expect(tokens.verify(token, new Date(now.getTime() + 59_999))).toEqual(claims);
    expect(tokens.verify(token, claims.expiresAt)).toBeNull();
  });

  it('refuses tampered claims, foreign keys and malformed tokens', () => {
    const token = tokens.issue(claims);
    const [, user, expiry, mac] = token.split('.');
    expect(tokens.verify(`13.${user}.${expiry}.${mac}`, now)).toBeNull();
    expect(tokens.verify(`12.35.${expiry}.${mac}`, now)).toBeNull();
    expect(tokens.verify(`12.${user}.${Number(expiry) + 1000}.${mac}`, now)).toBeNull();
    expect(makeViewerTokens().verify(token, now)).toBeNull();
    for (const bad of ['', 'a.b.c.d', `${token}x`, token.slice(0, -1), `${token}.1`])
      expect(tokens.verify(bad, now)).toBeNull();
  });

  it('with the key derived from one operator token, any node verifies what another issued', () => {
    const nodeA = makeViewerTokens(viewerTokenKey('pop_same_operator_token_0123456789'));
    const nodeB = makeViewerTokens(viewerTokenKey('pop_same_operator_token_0123456789'));
    const other = makeViewerTokens(viewerTokenKey('pop_another_operator_token_012345678'));
    const token = nodeA.issue(claims);
    expect(nodeB.verify(token, now)).toEqual(claims);
    expect(other.verify(token, now)).toBeNull();
    expect(viewerTokenKey('pop_same_operator_token_0123456789').toString('hex')).not.toContain(
      Buffer.from('pop_same').toString('hex'),
    );
  });
});
