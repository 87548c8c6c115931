import { appError } from '../errors.js';
import type { VmInput } from './provider.js';

const MOUSE_BUTTON_BITS = { left: 1, right: 2, middle: 4 } as const;
const MODIFIER_BITS: Record<string, number> = { Alt: 1, Control: 2, Meta: 4, Shift: 8 };
const ALT = 1;
const CONTROL_OR_META = 2 | 4;
const SHIFT = 8;

/**
 * Browser shortcuts kept from the room browser (docs/api.md, "Control"): they would close the
 * room's only tab or window, open tabs and windows nobody sees, quit, or move the room's tab
 * (back, forward, reload, home) around `navigate`, which kiosk rooms refuse. Letters and arrows
 * are matched by the virtual key code the browser is sent (what its shortcuts match); the keys
 * sent without one (F4, F5, the browser keys) by name, should they ever get one.
 */
const SHORTCUTS_WITH_CONTROL_OR_META = new Set([
  87, // W: close the tab (with Shift: the window)
  84, // T: new tab (with Shift: reopen a closed one)
  78, // N: new window (with Shift: incognito)
  81, // Q: quit
  82, // R: reload (with Shift: without the cache)
]);
const SHORTCUTS_WITH_ALT = new Set([37, 39, 36]); // ArrowLeft: back, ArrowRight: forward, Home: home page
const SHORTCUT_KEYS = new Set(['F5', 'BrowserBack', 'BrowserForward', 'BrowserRefresh', 'BrowserHome']);

/** Whether a key event, with `modifiers` held, is one of the browser shortcuts above. */
export function isBrowserShortcut(key: string, code: string, modifiers: number): boolean {
  if (SHORTCUT_KEYS.has(key) || SHORTCUT_KEYS.has(code)) return true;
  const vk = virtualKeyCode(key, code);
  if (modifiers & CONTROL_OR_META && SHORTCUTS_WITH_CONTROL_OR_META.has(vk)) return true;
  if (modifiers & ALT && SHORTCUTS_WITH_ALT.has(vk)) return true;
  return (modifiers & (ALT | CONTROL_OR_META)) !== 0 && (key === 'F4' || code === 'F4');
}
/** Windows virtual key codes of the keys that act without producing text. */
const KEY_CODES: Record<string, number> = {
  Backspace: 8,
  Tab: 9,
  Enter: 13,
  Shift: 16,
  Control: 17,
  Alt: 18,
  Escape: 27,
  ' ': 32,
  PageUp: 33,
  PageDown: 34,
  End: 35,
  Home: 36,
  ArrowLeft: 37,
  ArrowUp: 38,
  ArrowRight: 39,
  ArrowDown: 40,
  Delete: 46,
  Meta: 91,
};

function virtualKeyCode(key: string, code: string): number {
  const known = KEY_CODES[key];
  if (known !== undefined) return known;
  const letter = /^Key([A-Z])$/.exec(code)?.[1];
  if (letter) return letter.charCodeAt(0);
  const digit = /^Digit([0-9])$/.exec(code)?.[1];
  if (digit) return digit.charCodeAt(0);
  return key.length === 1 ? key.toUpperCase().charCodeAt(0) : 0;
}

/** A DevTools command, as the browser is sent it. */
export interface InputCommand {
  method: string;
  params: Record<string, unknown>;
}

/**
 * Turns the controller's input into DevTools `Input.*` commands, keeping what the browser expects
 * to be told on every event: the mouse buttons held and the modifier keys held.
 */
export class InputMapper {
  private buttons = 0;
  private modifiers = 0;
  /** The `code` each held modifier key was pressed with (its release names it again). */
  private readonly modifierCodes = new Map<string, string>();
  /** Where the pointer was last sent (a held button is released there). */
  private pointer = { x: 0, y: 0 };

  /** A new browser: nothing is held. */
  reset(): void {
    this.buttons = 0;
    this.modifiers = 0;
    this.modifierCodes.clear();
  }

  /**
   * Lets go of everything held: a mouse-up for each held button (where the pointer is), then a
   * key-up for each held modifier key, as if the controller had released them; nothing is held
   * after. Control changed hands: the next controller's keys and clicks must not carry them.
   */
  release(): InputCommand[] {
    const commands: InputCommand[] = [];
    for (const [button, bit] of Object.entries(MOUSE_BUTTON_BITS) as [keyof typeof MOUSE_BUTTON_BITS, number][])
      if (this.buttons & bit) commands.push(this.toCommand({ kind: 'mouse', type: 'up', ...this.pointer, button }));
    for (const [key, bit] of Object.entries(MODIFIER_BITS))
      if (this.modifiers & bit)
        commands.push(
          this.toCommand({ kind: 'key', type: 'up', key, code: this.modifierCodes.get(key) ?? `${key}Left` }),
        );
    this.reset();
    return commands;
  }

  toCommand(i: VmInput): InputCommand {
    if (i.kind === 'mouse' || i.kind === 'wheel') this.pointer = { x: i.x, y: i.y };
    switch (i.kind) {
      case 'mouse': {
        const button = i.button ?? 'left';
        if (i.type === 'down') this.buttons |= MOUSE_BUTTON_BITS[button];
        if (i.type === 'up') this.buttons &= ~MOUSE_BUTTON_BITS[button];
        const type = i.type === 'move' ? 'mouseMoved' : i.type === 'down' ? 'mousePressed' : 'mouseReleased';
        return {
          method: 'Input.dispatchMouseEvent',
          params: {
            type,
            x: i.x,
            y: i.y,
            button: i.type === 'move' ? 'none' : button,
            buttons: this.buttons,
            clickCount: i.type === 'move' ? 0 : 1,
            modifiers: this.modifiers,
          },
        };
      }
      case 'wheel':
        return {
          method: 'Input.dispatchMouseEvent',
          params: { type: 'mouseWheel', x: i.x, y: i.y, deltaX: i.dx, deltaY: i.dy, modifiers: this.modifiers },
        };
      case 'key':
        return { method: 'Input.dispatchKeyEvent', params: this.key(i) };
      case 'text':
        return { method: 'Input.insertText', params: { text: i.text } };
    }
  }

  private key(i: Extract<VmInput, { kind: 'key' }>): Record<string, unknown> {
    const bit = MODIFIER_BITS[i.key];
    if (bit !== undefined) {
      this.modifiers = i.type === 'down' ? this.modifiers | bit : this.modifiers & ~bit;
      if (i.type === 'down') this.modifierCodes.set(i.key, i.code);
    } else if (isBrowserShortcut(i.key, i.code, this.modifiers))
      throw appError(
        'ERR_FORBIDDEN',
        'Browser shortcuts (closing or opening tabs and windows, quitting, back, forward, reload, home) do not reach the room browser.',
      );
    // A key that types: one character (or Enter) without Control/Alt/Meta held.
    const text = i.key === 'Enter' ? '\r' : i.key.length === 1 ? i.key : null;
    const types = text !== null && (this.modifiers & ~SHIFT) === 0;
    const code = virtualKeyCode(i.key, i.code);
    return {
      type: i.type === 'up' ? 'keyUp' : types ? 'keyDown' : 'rawKeyDown',
      key: i.key,
      code: i.code,
      windowsVirtualKeyCode: code,
      nativeVirtualKeyCode: code,
      modifiers: this.modifiers,
      ...(i.type === 'down' && types ? { text } : {}),
    };
  }
}
