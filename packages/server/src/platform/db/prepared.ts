import type { Sql } from 'postgres';

/**
 * A postgres-js client whose statements are all prepared, however they are called.
 *
 * Drizzle runs a statement unprepared (`prepare: false`) unless the caller names it, and postgres-js
 * cannot send the values of an unprepared statement before it knows their types: it parses the
 * statement, waits for the server's parameter description, and only then binds and executes. Two
 * round trips for every statement with parameters, which is nearly every one. Prepared, the first
 * use of a statement on a connection parses, binds and executes in one round trip, and later uses
 * bind the statement by name (no parse at all).
 *
 * This wraps the client (and the clients of its transactions and savepoints) so every `unsafe`
 * call, which is how drizzle sends statements, asks for `prepare: true`. Each connection keeps its
 * prepared statements until it is closed; statement texts are parameterised, so they are few (one
 * per query shape; look-ups by a run-time list bind it as one array with `anyOf`, while a batch
 * insert of n rows is still one shape per n). postgres-js recycles connections after
 * 30 to 60 minutes (`max_lifetime`), which bounds them, and re-prepares a statement whose plan a
 * migration invalidated.
 */
export function alwaysPrepared<T extends Sql>(client: T): T {
  const unsafe: Sql['unsafe'] = (query, parameters, options) =>
    client.unsafe(query, parameters, { ...options, prepare: true });
  /** `begin` / `savepoint`: the callback (always the last argument) gets a wrapped client too. */
  const opening = (open: (...args: unknown[]) => unknown) => {
    return (...args: unknown[]) => {
      const fn = args.pop() as (tx: Sql) => unknown;
      return open(...args, (tx: Sql) => fn(alwaysPrepared(tx)));
    };
  };
  const begin = opening(client.begin as (...args: unknown[]) => unknown);
  const savepoint = 'savepoint' in client ? opening(client.savepoint as (...args: unknown[]) => unknown) : undefined;
  return new Proxy(client, {
    get(target, prop, receiver) {
      if (prop === 'unsafe') return unsafe;
      if (prop === 'begin') return begin;
      if (prop === 'savepoint' && savepoint) return savepoint;
      return Reflect.get(target, prop, receiver);
    },
  });
}
