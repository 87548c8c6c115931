/**
 * The rich text of notification bodies (spec 2.7: "bold and links"), a deliberately tiny subset:
 *
 *   **text**          bold
 *   [label](url)      a link; url is an absolute http:// or https:// URL without spaces, "\",
 *                     "[", "]", "(" or ")" (percent-encode those: %5B %5D %28 %29)
 *   \c                the character c itself (escapes * _ [ ] ( ) ` < > and \)
 *
 * Everything else is literal text: clients never interpret HTML. Automated bodies put values in
 * with `plain()` (notifications.templates), so a username cannot add a link. Admin-written bodies
 * are checked with `richTextProblem`: every link target must be an http or https URL.
 */

/** The first thing wrong with a body's links, as a message for the `errors` entry, or null. */
export function richTextProblem(body: string): string | null {
  for (const target of linkTargets(body)) {
    if (target === null) return 'has a link without its closing ")"';
    if (!isWebUrl(target)) return 'links must be absolute http:// or https:// URLs';
    // A bracket or "(" in a target could start a link of its own for a renderer that nests links
    // or balances parentheses; refused, the first ")" ends a link for every reader alike.
    if (/[[\]()]/.test(target)) return 'link targets must not contain "[", "]" or "(" (write %5B, %5D, %28)';
  }
  return null;
}

/**
 * The target of every unescaped `](` in the text, whether or not a `[` opened it: a renderer may
 * be lenient about labels, so every place that could become a link is checked. null means the
 * target has no closing `)`.
 */
export function linkTargets(text: string): (string | null)[] {
  const targets: (string | null)[] = [];
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === '\\') {
      i++;
      continue;
    }
    if (c !== ']' || text[i + 1] !== '(') continue;
    const start = i + 2;
    const end = text.indexOf(')', start);
    if (end < 0) {
      targets.push(null);
      break;
    }
    targets.push(text.slice(start, end));
    // Go on right after this `](`, not after its target: a `](` inside the target
    // (`[a](https://ok.example/[b](javascript:…)`) is one more place a link could start.
    i = start - 1;
  }
  return targets;
}

function isWebUrl(target: string): boolean {
  // No spaces and no backslashes: a target means exactly what it says, with nothing to unescape.
  if (!/^https?:\/\/[^\s\\]+$/i.test(target)) return false;
  try {
    const url = new URL(target);
    return (url.protocol === 'http:' || url.protocol === 'https:') && url.hostname.length > 0;
  } catch {
    return false;
  }
}
