import type { Readable, Writable } from 'node:stream';

/** A DevTools protocol event: method, params, and the flat session it came from (if any). */
export interface CdpEvent {
  method: string;
  params: Record<string, unknown>;
  sessionId?: string;
}

interface Pending {
  method: string;
  resolve(result: Record<string, unknown>): void;
  reject(err: Error): void;
  timer: NodeJS.Timeout;
}

/** Commands that do not answer in time fail instead of hanging a request or a socket ack. */
const COMMAND_TIMEOUT_MS = 15_000;

/**
 * A minimal Chrome DevTools protocol client over the browser's `--remote-debugging-pipe`
 * (fd 3: commands in, fd 4: answers and events out, each message JSON ended by a NUL byte).
 * The pipe, unlike a TCP port, is reachable by nobody else on the host, and the browser exits by
 * itself when the pipe closes, so a crashed or killed server leaves no browser behind.
 * Sessions are "flat": commands for a page carry its `sessionId`.
 */
export class CdpPipe {
  private nextId = 1;
  private readonly pending = new Map<number, Pending>();
  private readonly listeners = new Set<(e: CdpEvent) => void>();
  private chunks: Buffer[] = [];
  private closedError: Error | null = null;

  constructor(
    private readonly input: Writable,
    output: Readable,
  ) {
    output.on('data', (chunk: Buffer) => this.receive(chunk));
    output.on('close', () => this.fail(new Error('the DevTools pipe closed')));
    output.on('error', (err: Error) => this.fail(err));
    input.on('error', (err: Error) => this.fail(err));
  }

  get closed(): boolean {
    return this.closedError !== null;
  }

  /** Sends a command; resolves with its result, rejects with the protocol's error message. */
  send(method: string, params: Record<string, unknown> = {}, sessionId?: string): Promise<Record<string, unknown>> {
    if (this.closedError) return Promise.reject(this.closedError);
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new Error(`DevTools command ${method} timed out`));
      }, COMMAND_TIMEOUT_MS);
      timer.unref();
      this.pending.set(id, { method, resolve, reject, timer });
      this.input.write(`${JSON.stringify({ id, method, params, ...(sessionId ? { sessionId } : {}) })}\0`);
    });
  }

  /** Subscribes to every event; returns the unsubscribe function. */
  onEvent(listener: (e: CdpEvent) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Fails every pending command; later sends reject at once. */
  fail(err: Error): void {
    if (this.closedError) return;
    this.closedError = err;
    for (const p of this.pending.values()) {
      clearTimeout(p.timer);
      p.reject(err);
    }
    this.pending.clear();
  }

  private receive(chunk: Buffer): void {
    let start = 0;
    let end = chunk.indexOf(0);
    while (end !== -1) {
      this.chunks.push(chunk.subarray(start, end));
      const text = Buffer.concat(this.chunks).toString('utf8');
      this.chunks = [];
      this.dispatch(text);
      start = end + 1;
      end = chunk.indexOf(0, start);
    }
    if (start < chunk.length) this.chunks.push(chunk.subarray(start));
  }

  private dispatch(text: string): void {
    let message: {
      id?: number;
      result?: Record<string, unknown>;
      error?: { message?: string };
      method?: string;
      params?: Record<string, unknown>;
      sessionId?: string;
    };
    try {
      message = JSON.parse(text);
    } catch {
      return;
    }
    if (typeof message.id === 'number') {
      const p = this.pending.get(message.id);
      if (!p) return;
      this.pending.delete(message.id);
      clearTimeout(p.timer);
      if (message.error) p.reject(new Error(`${p.method}: ${message.error.message ?? 'DevTools error'}`));
      else p.resolve(message.result ?? {});
      return;
    }
    if (typeof message.method === 'string') {
      const event: CdpEvent = { method: message.method, params: message.params ?? {}, sessionId: message.sessionId };
      for (const l of this.listeners) l(event);
    }
  }
}
