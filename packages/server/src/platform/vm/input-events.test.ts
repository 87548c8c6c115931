import { describe, expect, it } from 'vitest';
import { InputMapper } from './input-events.js';

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
});
