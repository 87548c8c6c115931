import { isHttpUrl, Limits, StartUrl } from '@parlor/protocol';
import { describe, expect, it } from 'vitest';
import { compilePayload } from '../../platform/validation.js';
import { isOpenableUrl, resolveSettings } from './vm.settings.js';

/** The guild settings' schema, compiled as the server's body validation compiles it (platform/validation.ts). */
const schemaAccepts = compilePayload<string>(StartUrl);

describe('room start URLs', () => {
  const base = 'https://example.com/';
  /** A start URL of `n` characters (code points) ending in emoji: two UTF-16 units each. */
  const withEmoji = (n: number) => `${base}${'😀'.repeat(n - base.length)}`;

  it('opens a start URL of START_URL_MAX characters counted as the settings’ schema counts them (code points)', () => {
    const url = withEmoji(Limits.START_URL_MAX);
    expect(url.length).toBeGreaterThan(Limits.START_URL_MAX); // UTF-16 units
    expect(schemaAccepts(url)).toBe(true);
    expect(isOpenableUrl(url)).toBe(true);
    expect(resolveSettings({ start_url: url }).start_url).toBe(url);
  });

  it('opens about:blank instead of a start URL one character longer, which the schema refuses too', () => {
    const url = withEmoji(Limits.START_URL_MAX + 1);
    expect(schemaAccepts(url)).toBe(false);
    expect(isOpenableUrl(url)).toBe(false);
    expect(resolveSettings({ start_url: url }).start_url).toBe('about:blank');
    const ascii = `${base}${'a'.repeat(Limits.START_URL_MAX + 1 - base.length)}`;
    expect(isOpenableUrl(ascii)).toBe(false);
    expect(isOpenableUrl(ascii.slice(0, -1))).toBe(true);
  });

  it('opens only about:blank and absolute http(s) URLs', () => {
    for (const url of ['about:blank', 'http://example.com', 'https://example.com/a?b#c'])
      expect(isOpenableUrl(url), url).toBe(true);
    for (const url of ['file:///etc/passwd', 'javascript:alert(1)', 'https://', 'example.com', ''])
      expect(isOpenableUrl(url), url).toBe(false);
  });

  it('refuses text the pattern passes but no browser parses as a URL: in the schema (http-url, as vm:input navigate), and when opening a value stored before', () => {
    for (const url of ['http://[', 'http://%zz/', 'https://[::1/', 'http://a:99999/']) {
      expect(new RegExp(StartUrl.pattern ?? '').test(url), url).toBe(true);
      expect(schemaAccepts(url), url).toBe(false);
      expect(isOpenableUrl(url), url).toBe(false);
      expect(isHttpUrl(url), url).toBe(false);
      expect(resolveSettings({ start_url: url }).start_url).toBe('about:blank');
    }
    expect(isHttpUrl('http://[::1]:8080/a')).toBe(true);
  });
});
