import { describe, expect, it } from 'vitest';
import { InputMapper } from './input-events.js';

type Key = { key: string; code: string };

describe('InputMapper', () => {
  it('maps a click to pressed/released with the held buttons', () => {
    const m = new InputMapper();
    expect(m.toCommand({ kind: 'mouse', type: 'down', x: 5, y: 6, button: 'left' }).params).toMatchObject({
      type: 'mousePressed',
      button: 'left',
      buttons: 1,
      clickCount: 1,
    });
    expect(m.toCommand({ kind: 'mouse', type: 'move', x: 7, y: 8 }).params).toMatchObject({
      type: 'mouseMoved',
      button: 'none',
      buttons: 1,
    });
    expect(m.toCommand({ kind: 'mouse', type: 'up', x: 7, y: 8 }).params).toMatchObject({ buttons: 0 });
  });

  it('types printable keys and Enter, and holds modifiers for later events', () => {
    const m = new InputMapper();
    expect(m.toCommand({ kind: 'key', type: 'down', key: 'a', code: 'KeyA' }).params).toMatchObject({
      type: 'keyDown',
      text: 'a',
      windowsVirtualKeyCode: 65,
    });
    expect(m.toCommand({ kind: 'key', type: 'down', key: 'Enter', code: 'Enter' }).params).toMatchObject({
      type: 'keyDown',
      text: '\r',
      windowsVirtualKeyCode: 13,
    });
    m.toCommand({ kind: 'key', type: 'down', key: 'Control', code: 'ControlLeft' });
    const copy = m.toCommand({ kind: 'key', type: 'down', key: 'c', code: 'KeyC' }).params;
    expect(copy).toMatchObject({ type: 'rawKeyDown', modifiers: 2, windowsVirtualKeyCode: 67 });
    expect(copy.text).toBeUndefined();
    expect(m.toCommand({ kind: 'wheel', x: 1, y: 1, dx: 0, dy: 3 }).params).toMatchObject({ modifiers: 2 });
    m.toCommand({ kind: 'key', type: 'up', key: 'Control', code: 'ControlLeft' });
    expect(m.toCommand({ kind: 'key', type: 'up', key: 'c', code: 'KeyC' }).params).toMatchObject({ modifiers: 0 });
    m.toCommand({ kind: 'key', type: 'down', key: 'Shift', code: 'ShiftLeft' });
    expect(m.toCommand({ kind: 'key', type: 'down', key: 'A', code: 'KeyA' }).params).toMatchObject({ text: 'A' });
    m.reset();
    expect(m.toCommand({ kind: 'text', text: 'hé' })).toEqual({ method: 'Input.insertText', params: { text: 'hé' } });
  });

  it('lets go of the held buttons and modifier keys, where the pointer is and with the codes pressed; nothing is held after', () => {
    const m = new InputMapper();
    expect(m.release()).toEqual([]);
    m.toCommand({ kind: 'key', type: 'down', key: 'Control', code: 'ControlRight' });
    m.toCommand({ kind: 'key', type: 'down', key: 'Shift', code: 'ShiftLeft' });
    m.toCommand({ kind: 'key', type: 'up', key: 'Shift', code: 'ShiftLeft' });
    m.toCommand({ kind: 'mouse', type: 'down', x: 5, y: 6, button: 'right' });
    m.toCommand({ kind: 'mouse', type: 'move', x: 40, y: 50 });
    expect(m.release().map((c) => c.params)).toEqual([
      expect.objectContaining({ type: 'mouseReleased', x: 40, y: 50, button: 'right', buttons: 0, modifiers: 2 }),
      expect.objectContaining({ type: 'keyUp', key: 'Control', code: 'ControlRight', modifiers: 0 }),
    ]);
    expect(m.release()).toEqual([]);
    // The next controller's `w` is a plain key, not Ctrl+W; their moves drag nothing.
    expect(m.toCommand({ kind: 'key', type: 'down', key: 'w', code: 'KeyW' }).params).toMatchObject({
      type: 'keyDown',
      text: 'w',
      modifiers: 0,
    });
    expect(m.toCommand({ kind: 'mouse', type: 'move', x: 1, y: 1 }).params).toMatchObject({ buttons: 0 });
  });

  /** Presses `held` modifiers, then `key`; answers the key's refusal code (or 'sent'), then releases all. */
  const press = (m: InputMapper, held: Key[], key: Key): string => {
    for (const h of held) m.toCommand({ kind: 'key', type: 'down', ...h });
    const outcome = (type: 'down' | 'up') => {
      try {
        m.toCommand({ kind: 'key', type, ...key });
        return 'sent';
      } catch (err) {
        return (err as { code?: string }).code ?? 'thrown';
      }
    };
    const down = outcome('down');
    expect(outcome('up'), `${key.key} up`).toBe(down);
    for (const h of [...held].reverse()) m.toCommand({ kind: 'key', type: 'up', ...h });
    return down;
  };
  const CONTROL = { key: 'Control', code: 'ControlLeft' };
  const META = { key: 'Meta', code: 'MetaLeft' };
  const SHIFT = { key: 'Shift', code: 'ShiftLeft' };
  const ALT = { key: 'Alt', code: 'AltLeft' };
  const letter = (c: string) => ({ key: c, code: `Key${c.toUpperCase()}` });

  it('refuses the browser shortcuts that close, open or quit tabs and windows, or navigate (ERR_FORBIDDEN)', () => {
    const m = new InputMapper();
    const refused: [Key[], Key][] = [
      ...['w', 't', 'n', 'q', 'r'].map((c): [Key[], Key] => [[CONTROL], letter(c)]),
      ...['W', 'T', 'N', 'Q', 'R'].map((c): [Key[], Key] => [[CONTROL, SHIFT], letter(c)]),
      [[META], letter('w')],
      [[CONTROL], { key: 'x', code: 'KeyW' }], // the browser matches the key code, which comes from `code`
      [[ALT], { key: 'ArrowLeft', code: 'ArrowLeft' }],
      [[ALT], { key: 'ArrowRight', code: 'ArrowRight' }],
      [[ALT], { key: 'Home', code: 'Home' }],
      [[ALT], { key: 'F4', code: 'F4' }],
      [[CONTROL], { key: 'F4', code: 'F4' }],
      [[], { key: 'F5', code: 'F5' }],
      [[CONTROL], { key: 'F5', code: 'F5' }],
      [[], { key: 'BrowserBack', code: 'BrowserBack' }],
      [[], { key: 'BrowserForward', code: 'BrowserForward' }],
      [[], { key: 'BrowserRefresh', code: 'BrowserRefresh' }],
      [[], { key: 'BrowserHome', code: 'BrowserHome' }],
    ];
    for (const [held, key] of refused)
      expect(press(m, held, key), [...held.map((h) => h.key), key.key].join('+')).toBe('ERR_FORBIDDEN');
  });

  it('sends every other key and combination, and keeps the modifiers it was told of', () => {
    const m = new InputMapper();
    const sent: [Key[], Key][] = [
      [[], letter('w')],
      [[SHIFT], letter('W')],
      [[CONTROL], letter('c')],
      [[CONTROL], letter('v')],
      [[CONTROL], letter('z')],
      [[CONTROL], letter('l')], // the address bar's shortcut: the room browser has none
      [[CONTROL, SHIFT], letter('L')], // pages' own shortcuts (an editor's "align left")
      [[CONTROL], { key: '[', code: 'BracketLeft' }],
      [[ALT], letter('d')],
      [[CONTROL], { key: 'ArrowLeft', code: 'ArrowLeft' }],
      [[], { key: 'ArrowLeft', code: 'ArrowLeft' }],
      [[], { key: 'F4', code: 'F4' }],
      [[], { key: 'Home', code: 'Home' }],
    ];
    for (const [held, key] of sent) expect(press(m, held, key), key.key).toBe('sent');
    // A refused key changes nothing held: Control stays down until its own key up.
    m.toCommand({ kind: 'key', type: 'down', ...CONTROL });
    expect(() => m.toCommand({ kind: 'key', type: 'down', ...letter('w') })).toThrow(/shortcut/i);
    expect(m.toCommand({ kind: 'key', type: 'down', ...letter('a') }).params).toMatchObject({ modifiers: 2 });
    m.toCommand({ kind: 'key', type: 'up', ...CONTROL });
    expect(m.toCommand({ kind: 'key', type: 'down', ...letter('w') }).params).toMatchObject({
      modifiers: 0,
      text: 'w',
    });
  });
});
