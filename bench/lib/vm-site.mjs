/**
 * What the `vm` scenario shows and measures around the room browsers:
 *   - a one-page site on 127.0.0.1 (`startVmSite`): a full-viewport gradient with a counter that
 *     animates (every animation frame) while `window.__pause(false)`, under a screenful of body
 *     text (so frames weigh what a text-heavy page's do, not a flat gradient's), and a page that changes only
 *     when a key is pressed while paused (input-to-frame latency: the next frame is the answer);
 *   - `treeCpuSeconds(pid)`: user + system CPU seconds of a process and its session (a browser
 *     and its renderer, GPU, network and utility processes), from /proc.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import http from 'node:http';

const PAGE = `<!doctype html><html><head><title>vm bench</title></head><body style="margin:0">
<div id="box" style="position:absolute;inset:0;width:1280px;height:720px;font:120px sans-serif;color:#fff;display:flex;align-items:center;justify-content:center"></div>
<p id="text" style="position:absolute;inset:0;margin:8px;font:13px/16px serif;color:#000;opacity:.55;overflow:hidden;height:704px"></p>
<script>
let n = 0, paused = true, flip = false;
const box = document.getElementById('box');
// Body text over the gradient, as a real page has: frames of about the size of a text-heavy site.
const words = 'shared browser room frame viewer control screencast parlor chat guild member stream'.split(' ');
let t = ''; for (let i = 0; i < 2600; i++) t += words[(i * 7 + (i >> 3)) % words.length] + (i % 13 ? ' ' : '. ');
document.getElementById('text').textContent = t;
window.__pause = (p) => { paused = p; };
function paint() {
  box.style.background = 'linear-gradient(' + (n * 3 % 360) + 'deg, hsl(' + (n * 7 % 360) + ',80%,50%), hsl(' + ((n * 7 + 180) % 360) + ',80%,30%))';
  box.textContent = n + (flip ? ' #' : ' .');
}
paint();
(function tick() { if (!paused) { n++; paint(); } requestAnimationFrame(tick); })();
addEventListener('keydown', () => { flip = !flip; paint(); });
</script></body></html>`;

export async function startVmSite() {
  const server = http.createServer((req, res) => {
    res.writeHead(req.url === '/' ? 200 : 404, { 'content-type': 'text/html; charset=utf-8' });
    res.end(req.url === '/' ? PAGE : 'not found');
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}/`,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

const CLK_TCK = 100;

/** CPU seconds (user + system) used so far by `pid`'s session: the browser and every child it spawned. */
export function treeCpuSeconds(pid) {
  let pids = [];
  try {
    pids = execFileSync('ps', ['-o', 'pid=', '-s', String(pid)])
      .toString()
      .split('\n')
      .map((l) => l.trim())
      .filter(Boolean);
  } catch {
    return 0;
  }
  let ticks = 0;
  for (const p of pids) {
    try {
      // Fields after the command (which may hold spaces) start after the last ')'.
      const rest = readFileSync(`/proc/${p}/stat`, 'utf8').split(') ').at(-1).split(' ');
      ticks += Number(rest[11]) + Number(rest[12]); // utime, stime (fields 14, 15)
    } catch {
      // gone meanwhile
    }
  }
  return ticks / CLK_TCK;
}
