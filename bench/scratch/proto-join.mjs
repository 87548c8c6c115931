import { startMode } from '../lib/modes.mjs';
import { createBots, loginUsers, userClient, setLevel } from '../lib/accounts.mjs';
import { inWorker } from '../lib/worker.mjs';

const mode = process.argv[2] ?? 'cluster';
const N = Number(process.argv[3] ?? 200);
const started = await startMode(mode);
try {
  console.log(started.label, started.startMs.toFixed(0));
  const bots = await createBots(started.url, 4);
  const t0 = performance.now();
  const { users, seconds } = await loginUsers(started, N + 1, { botKeys: bots, concurrency: 16 });
  console.log(`logins ${N + 1} in ${seconds.toFixed(1)} s = ${((N + 1) / seconds).toFixed(0)}/s`);
  const admin = userClient(started.url, users[0]);
  const me = await admin.ok('GET', '/v1/users/me');
  await setLevel(started.url, me.user?.id ?? me.id, 2);
  const chat = await admin.ok('POST', '/v1/portal/chats/create', { name: 'fanout', type: 'public' });
  console.log('chat', chat.chat.id);
  const r = await inWorker(new URL('./proto-join-worker.mjs', import.meta.url), 'joinTask', {
    url: started.url, cookies: users.slice(1).map((u) => u.cookie), chatId: chat.chat.id, conc: Number(process.argv[4] ?? 10),
  });
  console.log(r);
} finally {
  await started.close();
}
