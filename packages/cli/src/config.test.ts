import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ConfigError, operatorToken, serverUrl } from './config.js';

const dir = mkdtempSync(path.join(tmpdir(), 'parlor-cli-config-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('serverUrl', () => {
  it('defaults to http://127.0.0.1:8080/ and treats an empty PARLOR_URL as unset', () => {
    expect(serverUrl({}).href).toBe('http://127.0.0.1:8080/');
    expect(serverUrl({ PARLOR_URL: '' }).href).toBe('http://127.0.0.1:8080/');
  });

  it('keeps a path prefix and ends it with a slash', () => {
    expect(serverUrl({ PARLOR_URL: 'https://chat.example/parlor' }).href).toBe('https://chat.example/parlor/');
  });

  it.each([
    ['not a url', /not a valid URL/],
    ['ftp://host', /http:\/\/ or https:\/\//],
    ['http://host/?x=1', /query string/],
  ])('refuses %s', (value, message) => {
    expect(() => serverUrl({ PARLOR_URL: value })).toThrow(message);
  });

  it('refuses credentials in the URL without repeating them', () => {
    let error: unknown;
    try {
      serverUrl({ PARLOR_URL: 'http://admin:hunter2@host' });
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(ConfigError);
    expect(String(error)).not.toContain('hunter2');
  });

  it.each([
    ['https://admin:s3cretPass@parlor.example.org:99999/', 'https://…@parlor.example.org:99999/'],
    ['https://admin:s3cret@Pass@parlor example.org/', 'https://…@parlor example.org/'],
    ['https://admin:s3cret/Pass@parlor.example.org:99999/', 'https://…@parlor.example.org:99999/'],
  ])('refuses the invalid URL %s without repeating its user name or password', (value, shown) => {
    let error: unknown;
    try {
      serverUrl({ PARLOR_URL: value });
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(ConfigError);
    expect(String(error)).toContain(`not a valid URL (got "${shown}")`);
    expect(String(error)).not.toMatch(/admin|s3cret|Pass/);
  });
});

describe('operatorToken', () => {
  it('takes OPERATOR_TOKEN first', () => {
    expect(operatorToken({ OPERATOR_TOKEN: 'pop_from_env', DATA_DIR: dir }, '/')).toBe('pop_from_env');
  });

  it('reads and trims DATA_DIR/operator-token, DATA_DIR relative to cwd', () => {
    writeFileSync(path.join(dir, 'operator-token'), '  pop_from_file\n');
    expect(operatorToken({ DATA_DIR: dir }, '/')).toBe('pop_from_file');
    expect(operatorToken({ DATA_DIR: path.basename(dir) }, path.dirname(dir))).toBe('pop_from_file');
  });

  it('says which file is missing', () => {
    expect(() => operatorToken({ DATA_DIR: path.join(dir, 'none') }, '/')).toThrow(
      path.join(dir, 'none', 'operator-token'),
    );
  });

  it('refuses an empty file and a token that cannot travel in a header, without printing it', () => {
    const empty = mkdtempSync(path.join(dir, 'empty-'));
    writeFileSync(path.join(empty, 'operator-token'), '\n');
    expect(() => operatorToken({ DATA_DIR: empty }, '/')).toThrow(/is empty/);
    expect(() => operatorToken({ OPERATOR_TOKEN: 'pop secret' }, '/')).toThrow(ConfigError);
    expect(() => operatorToken({ OPERATOR_TOKEN: 'pop secret' }, '/')).not.toThrow(/secret/);
  });
});
