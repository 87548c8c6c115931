import { execFile, execFileSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';

/**
 * The `parlor` bin. README: `npm install` links it, `npx parlor --help` runs the CLI once built. npm
 * links a bin only when its file exists at install time ("if the script isn't there, just ignore
 * it"), and dist/ is git-ignored and built afterwards, so the bin must be a tracked file outside dist/.
 */
const cliDir = fileURLToPath(new URL('..', import.meta.url));
const repo = path.resolve(cliDir, '../..');
const pkg = JSON.parse(readFileSync(path.join(cliDir, 'package.json'), 'utf8')) as {
  name: string;
  version: string;
  bin: Record<string, string>;
};
const scratchDirs: string[] = [];
function scratchDir(): string {
  const dir = mkdtempSync(path.join(tmpdir(), 'parlor-bin-'));
  scratchDirs.push(dir);
  return dir;
}
afterAll(() => {
  for (const dir of scratchDirs) rmSync(dir, { recursive: true, force: true });
});

/** Whether git leaves the file out of the repository (dist/, node_modules/, …): a fresh clone lacks it. */
function ignoredByGit(file: string): boolean {
  try {
    execFileSync('git', ['check-ignore', '--quiet', file], { cwd: repo, stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

function node(file: string, args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [file, ...args], { timeout: 20_000 }, (error, stdout, stderr) => {
      resolve({ code: error ? Number(error.code) : 0, stdout, stderr });
    });
  });
}

describe('the parlor bin', () => {
  it('is linked into node_modules/.bin by `npm install` on a fresh clone, and says to build before the build', async () => {
    // A workspace with the CLI's package.json and only the files a clone has, installed offline.
    const root = scratchDir();
    const ws = path.join(root, 'packages', 'cli');
    mkdirSync(ws, { recursive: true });
    writeFileSync(
      path.join(root, 'package.json'),
      JSON.stringify({ name: 'fresh-clone', private: true, workspaces: ['packages/cli'] }),
    );
    // Dependencies left out: they do not change how bins are linked, and keep the install offline.
    writeFileSync(
      path.join(ws, 'package.json'),
      JSON.stringify({ name: pkg.name, version: pkg.version, type: 'module', bin: pkg.bin }),
    );
    for (const target of Object.values(pkg.bin)) {
      const rel = path.join('packages/cli', target);
      if (ignoredByGit(rel)) continue;
      mkdirSync(path.dirname(path.join(root, rel)), { recursive: true });
      copyFileSync(path.join(repo, rel), path.join(root, rel));
    }
    execFileSync('npm', ['install', '--offline', '--ignore-scripts', '--no-audit', '--no-fund'], {
      cwd: root,
      stdio: 'ignore',
      timeout: 120_000,
    });
    const linked = path.join(root, 'node_modules', '.bin', 'parlor');
    expect(existsSync(linked)).toBe(true);
    const run = await node(linked, ['--help']);
    expect(run.code).toBe(1);
    expect(run.stdout).toBe('');
    expect(run.stderr).toMatch(/^error: the parlor CLI is not built .*dist\/main\.js is missing.*run `npm run build`/);
  }, 150_000);

  it('runs the built CLI', async () => {
    const run = await node(path.join(cliDir, pkg.bin.parlor ?? ''), ['--version']);
    expect(run).toEqual({ code: 0, stdout: `${pkg.version}\n`, stderr: '' });
  });
});
