import { INT32_MAX } from '@parlor/protocol';

/**
 * The outer shape of a message `content` (DESIGN.md 7): the JSON string
 * `{"v":2,"epoch":E,"ct":"<base64>"}` with exactly these keys. The server checks this and nothing
 * inside `ct`, which it cannot read. E is a positive integer within the `integer` column chats
 * keep their epoch in (like every epoch a client sends, protocol `Epoch`): a larger one is not a
 * bundle this server can hold (422), where it would otherwise reach SQL as out of range (a 500).
 */
export function parseBundle(content: string): { epoch: number } | null {
  let value: unknown;
  try {
    value = JSON.parse(content);
  } catch {
    return null;
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return null;
  const keys = Object.keys(value).sort();
  if (keys.length !== 3 || keys[0] !== 'ct' || keys[1] !== 'epoch' || keys[2] !== 'v') return null;
  const { v, epoch, ct } = value as { v: unknown; epoch: unknown; ct: unknown };
  if (v !== 2) return null;
  if (typeof epoch !== 'number' || !Number.isInteger(epoch) || epoch < 1 || epoch > INT32_MAX) return null;
  if (typeof ct !== 'string' || ct.length < 4 || ct.length % 4 !== 0 || !/^[A-Za-z0-9+/]+={0,2}$/.test(ct)) return null;
  return { epoch };
}
