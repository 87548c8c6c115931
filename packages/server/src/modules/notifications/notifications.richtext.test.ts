import { describe, expect, it } from 'vitest';
import { linkTargets, richTextProblem } from './notifications.richtext.js';

describe('richTextProblem (admin-written bodies)', () => {
  it.each([
    'Plain text, no markup at all.',
    'Some **bold** words.',
    'See [the docs](https://parlor.example/docs) or [status](http://status.example:8080/a?b=c#d).',
    'Upper-case scheme: [x](HTTPS://parlor.example/)',
    'An escaped marker is text: \\](javascript:alert(1))',
    'A bracket [without a target] and a lone ( parenthesis.',
    'Angle brackets are text too: <script>alert(1)</script>',
  ])('accepts %j', (body) => {
    expect(richTextProblem(body)).toBeNull();
  });

  it.each([
    ['a javascript: link', '[click](javascript:alert(1))'],
    ['a data: link', '[x](data:text/html;base64,PHNjcmlwdD4=)'],
    ['a relative link', '[x](/admin)'],
    ['a protocol-relative link', '[x](//evil.example)'],
    ['a mailto: link', '[mail](mailto:a@b.example)'],
    ['a target with a space', '[x](https://a.example/b c)'],
    ['a target with a backslash', '[x](https://a.example\\@evil.example/)'],
    ['an empty target', '[x]()'],
    ['a scheme without a host', '[x](https://)'],
    ['a second, bad link after a good one', '[ok](https://a.example) and [bad](ftp://b.example)'],
    ['a "](" without a "["', 'text](javascript:void 0)'],
  ])('refuses %s', (_name, body) => {
    expect(richTextProblem(body)).toMatch(/http/);
  });

  it.each([
    ['a link hidden after a "](" inside a good target', '[a](https://ok.example/[b](javascript:alert%281%29)'],
    ['a "(" in a target', '[x](https://en.wikipedia.example/wiki/A_(b))'],
    ['a "[" in a target', '[x](https://a.example/[y)'],
    ['a "]" in a target', '[x](https://a.example/y])'],
  ])('refuses %s: brackets and "(" in a target must be percent-encoded', (_name, body) => {
    expect(richTextProblem(body)).toBe('link targets must not contain "[", "]" or "(" (write %5B, %5D, %28)');
  });

  it('accepts brackets and parentheses percent-encoded in a target', () => {
    expect(
      richTextProblem('[x](https://en.wikipedia.example/wiki/A_%28b%29) [y](https://a.example/%5Bz%5D)'),
    ).toBeNull();
  });

  it('refuses a link that is never closed', () => {
    expect(richTextProblem('[x](https://a.example')).toBe('has a link without its closing ")"');
  });
});

describe('linkTargets', () => {
  it('lists every unescaped "](" target in order, skipping escaped ones', () => {
    expect(linkTargets('[a](https://1.example) \\](x) [b](https://2.example)')).toEqual([
      'https://1.example',
      'https://2.example',
    ]);
  });

  it('checks a "](" inside the target of another: the scan goes on after each "](", not after its target', () => {
    expect(linkTargets('[a](https://ok.example/[b](javascript:alert%281%29)')).toEqual([
      'https://ok.example/[b](javascript:alert%281%29',
      'javascript:alert%281%29',
    ]);
  });

  it('answers null for an unclosed target', () => {
    expect(linkTargets('[a](https://x')).toEqual([null]);
  });
});
