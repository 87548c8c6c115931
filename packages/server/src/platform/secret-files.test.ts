import { chmodSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  createOnce,
  loadOrCreateSecret,
  makePrivateDir,
  type SecretFileName,
  securePrivateDir,
} from './secret-files.js';

const root = mkdtempSync(path.join(tmpdir(), 'parlor-secret-files-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

let n = 0;
/** A path under the test's directory that does not exist yet. */
const fresh = () => path.join(root, `d${++n}`);
/** Permission bits (and sticky, set-id) of a path. */
const modeOf = (p: string) => statSync(p).mode & 0o7777;

/** Each stored secret: its file, prefix, the variable that replaces it and that variable's minimum. */
const SECRETS: [SecretFileName, string, string, number][] = [
  ['public-api-key', 'ppk_', 'PUBLIC_API_KEY', 16],
  ['operator-token', 'pop_', 'OPERATOR_TOKEN', 24],
  ['vm-host-token', 'vht_', 'VM_HOST_TOKEN', 32],
];

describe('loadOrCreateSecret', () => {
  it.each(SECRETS)(
    'makes %s once: prefixed, mode 0600, in a DATA_DIR of mode 0700, no temporary file left',
    (name, prefix) => {
      const dir = path.join(fresh(), 'data');
      const first = loadOrCreateSecret(null, dir, name, prefix);
      expect(first.file).toBe(path.join(dir, name));
      expect(first.value.startsWith(prefix)).toBe(true);
      expect(readFileSync(path.join(dir, name), 'utf8')).toBe(`${first.value}\n`);
      expect(modeOf(path.join(dir, name))).toBe(0o600);
      expect(modeOf(dir)).toBe(0o700);
      expect(readdirSync(dir)).toEqual([name]);
      // The next start reads the same one.
      expect(loadOrCreateSecret(null, dir, name, prefix)).toEqual(first);
      expect(readdirSync(dir)).toEqual([name]);
    },
  );

  it('takes the configured value and touches no file', () => {
    const dir = fresh();
    expect(loadOrCreateSecret('pop_configured_0123456789abcdef', dir, 'operator-token', 'pop_')).toEqual({
      value: 'pop_configured_0123456789abcdef',
      file: null,
    });
    expect(() => statSync(dir)).toThrow(/ENOENT/);
  });

  it('keeps a stored secret whose file another process made first (never replaced)', () => {
    const dir = fresh();
    mkdirSync(dir, { mode: 0o700 });
    const stored = `pop_${'s'.repeat(30)}`;
    writeFileSync(path.join(dir, 'operator-token'), `${stored}\n`, { mode: 0o644 });
    expect(loadOrCreateSecret(null, dir, 'operator-token', 'pop_').value).toBe(stored);
    // Tightened to 0600 on the way.
    expect(modeOf(path.join(dir, 'operator-token'))).toBe(0o600);
  });

  it.each(SECRETS)(
    'refuses a stored %s that is empty or shorter than its minimum, naming the file and the variable',
    (name, prefix, variable, min) => {
      for (const stored of ['', '\n', `${'x'.repeat(min - 1)}\n`]) {
        const dir = fresh();
        mkdirSync(dir, { mode: 0o700 });
        const file = path.join(dir, name);
        writeFileSync(file, stored, { mode: 0o600 });
        let message = '';
        try {
          loadOrCreateSecret(null, dir, name, prefix);
        } catch (e) {
          message = (e as Error).message;
        }
        expect(message).toBe(
          `${file} holds ${stored.trim().length} characters; ${variable} needs at least ${min}: delete the file to have a new one made, or set ${variable}`,
        );
        // Left as it was for the operator to look at.
        expect(readFileSync(file, 'utf8')).toBe(stored);
      }
    },
  );

  const HEADER_SECRETS = SECRETS.filter(([, , variable]) => variable !== 'VM_HOST_TOKEN');
  it.each(
    HEADER_SECRETS.flatMap(([name, prefix, variable, min]) =>
      [
        ['over 256 characters', `${prefix}${'a'.repeat(253)}`, '257 characters'],
        ['a space inside', `${prefix}correct horse battery staple`, 'a space, a control or a non-ASCII character'],
        ['a non-ASCII character', `${prefix}0123456789abcdef01234é`, 'a space, a control or a non-ASCII character'],
      ].map(([what, stored, fault]) => [name, what, stored, fault, prefix, variable, min] as const),
    ),
  )(
    'refuses a stored %s with %s, naming the file and the variable, never the secret',
    (name, _case, stored, fault, prefix, variable, min) => {
      const dir = fresh();
      mkdirSync(dir, { mode: 0o700 });
      const file = path.join(dir, name);
      writeFileSync(file, `${stored}\n`, { mode: 0o600 });
      expect(() => loadOrCreateSecret(null, dir, name, prefix)).toThrow(
        new Error(
          `${file} holds ${fault}; ${variable} must be ${min}-256 visible ASCII characters (0x21-0x7E, no spaces): delete the file to have a new one made, or set ${variable}`,
        ),
      );
      expect(readFileSync(file, 'utf8')).toBe(`${stored}\n`);
    },
  );

  it.each(HEADER_SECRETS)('accepts a stored %s of 256 characters', (name, prefix) => {
    const dir = fresh();
    mkdirSync(dir, { mode: 0o700 });
    writeFileSync(path.join(dir, name), `${prefix}${'a'.repeat(252)}\n`, { mode: 0o600 });
    expect(loadOrCreateSecret(null, dir, name, prefix).value).toBe(`${prefix}${'a'.repeat(252)}`);
  });

  it.each(SECRETS)('accepts a stored %s of exactly its minimum length', (name, prefix, _variable, min) => {
    const dir = fresh();
    mkdirSync(dir, { mode: 0o700 });
    writeFileSync(path.join(dir, name), `${'x'.repeat(min)}\n`, { mode: 0o600 });
    expect(loadOrCreateSecret(null, dir, name, prefix).value).toBe('x'.repeat(min));
  });
});

describe('createOnce', () => {
  const failing = (code: string) => () => {
    throw Object.assign(new Error(`link: ${code}`), { code });
  };

  it.each(['EPERM', 'ENOTSUP', 'EXDEV'])(
    'writes the file itself, mode 0600, where the file system makes no hard links (%s), no temporary file left',
    (code) => {
      const dir = fresh();
      makePrivateDir(dir);
      const file = path.join(dir, 'operator-token');
      createOnce(file, 'pop_secret\n', failing(code));
      expect(readFileSync(file, 'utf8')).toBe('pop_secret\n');
      expect(modeOf(file)).toBe(0o600);
      expect(readdirSync(dir)).toEqual(['operator-token']);
      // Never replaced: a second one leaves the first.
      createOnce(file, 'pop_other\n', failing(code));
      expect(readFileSync(file, 'utf8')).toBe('pop_secret\n');
    },
  );

  it('throws other link errors, leaving no file', () => {
    const dir = fresh();
    makePrivateDir(dir);
    const file = path.join(dir, 'operator-token');
    expect(() => createOnce(file, 'pop_secret\n', failing('EIO'))).toThrow(/EIO/);
    expect(readdirSync(dir)).toEqual([]);
  });
});

describe('makePrivateDir and securePrivateDir', () => {
  it('makes a new directory, parents included, with mode 0700 and says nothing', () => {
    const parent = fresh();
    const dir = path.join(parent, 'a', 'data');
    const lines: string[] = [];
    securePrivateDir(dir, (l) => lines.push(l));
    expect([modeOf(parent), modeOf(dir)]).toEqual([0o700, 0o700]);
    expect(lines).toEqual([]);
  });

  it.each([
    ['0755', 0o755, 0o700],
    ['0775', 0o775, 0o700],
    ['0777', 0o777, 0o700],
    ['0750', 0o750, 0o700],
    ['0705', 0o705, 0o700],
    ['02755', 0o2755, 0o2700],
  ])(
    'takes group and other access away from an existing directory of mode %s, in one line',
    (_label, before, after) => {
      const dir = fresh();
      mkdirSync(dir);
      chmodSync(dir, before);
      const lines: string[] = [];
      securePrivateDir(dir, (l) => lines.push(l));
      expect(modeOf(dir)).toBe(after);
      expect(lines).toEqual([
        `took group and other access away from ${dir} (mode 0${before.toString(8)} → 0${after.toString(8)})`,
      ]);
      // Done once: the next start finds it private.
      expect(makePrivateDir(dir)).toEqual({ kind: 'kept' });
    },
  );

  it('leaves a shared (sticky) directory such as /tmp as it is, and says so', () => {
    const dir = fresh();
    mkdirSync(dir);
    chmodSync(dir, 0o1777);
    const lines: string[] = [];
    securePrivateDir(dir, (l) => lines.push(l));
    expect(modeOf(dir)).toBe(0o1777);
    expect(lines).toEqual([expect.stringMatching(/^left .* at mode 01777: a shared directory \(sticky bit\)/)]);
  });
});
