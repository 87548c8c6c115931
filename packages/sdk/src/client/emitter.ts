/** A minimal typed event emitter that runs the same in browsers and Node. */
export class TypedEmitter<Events extends { [K in keyof Events]: (arg: never) => void }> {
  readonly #listeners = new Map<keyof Events, Set<(arg: never) => void>>();

  /** Adds a listener; returns a function that removes it. */
  on<K extends keyof Events>(event: K, listener: Events[K]): () => void {
    let set = this.#listeners.get(event);
    if (!set) {
      set = new Set();
      this.#listeners.set(event, set);
    }
    set.add(listener);
    return () => this.off(event, listener);
  }

  off<K extends keyof Events>(event: K, listener: Events[K]): void {
    this.#listeners.get(event)?.delete(listener);
  }

  /** Calls every listener; a listener that throws does not stop the others. */
  protected emit<K extends keyof Events>(event: K, arg: Parameters<Events[K]>[0]): void {
    for (const listener of [...(this.#listeners.get(event) ?? [])]) {
      try {
        (listener as (a: typeof arg) => void)(arg);
      } catch {
        // A failing listener is the caller's bug; it must not break delivery to the others.
      }
    }
  }

  protected removeAllListeners(): void {
    this.#listeners.clear();
  }
}

/**
 * A bounded push queue read as an async iterator: `push` never blocks (the oldest item is dropped
 * beyond `max`), `end` finishes every pending and future `next()`.
 */
export class AsyncQueue<T> implements AsyncIterableIterator<T> {
  readonly #items: T[] = [];
  readonly #waiting: ((r: IteratorResult<T>) => void)[] = [];
  #ended = false;

  constructor(
    readonly max = 10_000,
    private readonly onReturn: () => void = () => {},
    private readonly accept: (item: T) => boolean = () => true,
  ) {}

  /** Queues an item (or hands it to a waiting `next()`); items the filter refuses are ignored. */
  push(item: T): void {
    if (this.#ended || !this.accept(item)) return;
    const waiter = this.#waiting.shift();
    if (waiter) {
      waiter({ value: item, done: false });
      return;
    }
    this.#items.push(item);
    if (this.#items.length > this.max) this.#items.shift();
  }

  end(): void {
    this.#ended = true;
    for (const waiter of this.#waiting.splice(0)) waiter({ value: undefined, done: true });
  }

  next(): Promise<IteratorResult<T>> {
    const item = this.#items.shift();
    if (item !== undefined) return Promise.resolve({ value: item, done: false });
    if (this.#ended) return Promise.resolve({ value: undefined, done: true });
    return new Promise((resolve) => this.#waiting.push(resolve));
  }

  return(): Promise<IteratorResult<T>> {
    this.end();
    this.#items.length = 0;
    this.onReturn();
    return Promise.resolve({ value: undefined, done: true });
  }

  [Symbol.asyncIterator](): AsyncIterableIterator<T> {
    return this;
  }
}
