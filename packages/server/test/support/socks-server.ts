import net from 'node:net';

const reply = (code: number) => Buffer.from([5, code, 0, 1, 0, 0, 0, 0, 0, 0]);
const SUCCEEDED = 0;
const HOST_UNREACHABLE = 4;
const COMMAND_NOT_SUPPORTED = 7;
const ADDRESS_TYPE_NOT_SUPPORTED = 8;

/**
 * A tiny SOCKS5 server on 127.0.0.1 standing in for Tor (VM_TOR_PROXY): no authentication,
 * CONNECT only, domain-name addresses only (what a client that leaves name resolution to the proxy
 * sends). It "resolves" names itself from `names` (host name → a port on 127.0.0.1), whatever port
 * was asked for; other names are unreachable. `hosts` records every name asked for, in order.
 */
export async function startSocksServer(names: Record<string, number>) {
  const hosts: string[] = [];
  const sockets = new Set<net.Socket>();
  const track = (s: net.Socket) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
    s.on('error', () => s.destroy());
  };
  const server = net.createServer((client) => {
    track(client);
    let buf = Buffer.alloc(0);
    let greeted = false;
    const onData = (chunk: Buffer) => {
      buf = Buffer.concat([buf, chunk]);
      if (!greeted) {
        // VER 5, NMETHODS, METHODS…: "no authentication" (0) is the only method offered back.
        if (buf.length < 2 || buf.length < 2 + (buf[1] as number)) return;
        const methods = buf.subarray(2, 2 + (buf[1] as number));
        buf = buf.subarray(2 + (buf[1] as number));
        greeted = true;
        if (!methods.includes(0)) return void client.end(Buffer.from([5, 0xff]));
        client.write(Buffer.from([5, 0]));
      }
      // VER 5, CMD, RSV, ATYP 3, LEN, NAME, PORT (2 bytes).
      if (buf.length < 5) return;
      if (buf[1] !== 1) return void client.end(reply(COMMAND_NOT_SUPPORTED));
      if (buf[3] !== 3) return void client.end(reply(ADDRESS_TYPE_NOT_SUPPORTED));
      const end = 5 + (buf[4] as number) + 2;
      if (buf.length < end) return;
      const name = buf.subarray(5, end - 2).toString('latin1');
      const rest = buf.subarray(end);
      client.off('data', onData);
      client.pause(); // until the pipe below: nothing may be lost in between
      hosts.push(name);
      const port = names[name];
      if (port === undefined) return void client.end(reply(HOST_UNREACHABLE));
      const upstream = net.connect(port, '127.0.0.1', () => {
        client.write(reply(SUCCEEDED));
        upstream.write(rest);
        client.pipe(upstream).pipe(client);
      });
      track(upstream);
      upstream.on('close', () => client.destroy());
      client.on('close', () => upstream.destroy());
    };
    client.on('data', onData);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as net.AddressInfo).port;
  return {
    port,
    url: `socks5://127.0.0.1:${port}`,
    hosts,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        for (const s of sockets) s.destroy();
      }),
  };
}
