/** Plain-text tables for the terminal (and for pasting into RESULTS.md as Markdown). */

export const fmt = {
  /** A rate or count with thousands separators, one decimal under 100. */
  num(v) {
    if (v === null || v === undefined || Number.isNaN(v)) return '—';
    if (Math.abs(v) < 100) return v.toFixed(1);
    return Math.round(v).toLocaleString('en-US');
  },
  ms(v) {
    if (v === null || v === undefined || Number.isNaN(v)) return '—';
    if (v < 0.1) return `${(v * 1000).toFixed(1)} µs`;
    return v < 10 ? `${v.toFixed(2)} ms` : `${v.toFixed(1)} ms`;
  },
  ratio(v) {
    if (v === null || v === undefined || Number.isNaN(v)) return '—';
    // Very small and very large ratios keep two significant digits instead of printing 0.00×.
    if (v !== 0 && Math.abs(v) < 0.01) return `${v.toPrecision(2)}×`;
    if (Math.abs(v) >= 1000) return `${Math.round(v).toLocaleString('en-US')}×`;
    return `${v.toFixed(2)}×`;
  },
};

/**
 * Prints a Markdown-compatible table: `columns` are header strings, `rows` arrays of cells.
 * The first column is left-aligned, the others right-aligned.
 */
export function printTable(title, columns, rows, out = console.log) {
  const cells = [columns, ...rows].map((r) => r.map((c) => String(c ?? '')));
  const widths = columns.map((_, i) => Math.max(3, ...cells.map((r) => r[i]?.length ?? 0)));
  const line = (r) => `| ${r.map((c, i) => (i === 0 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join(' | ')} |`;
  const rule = `|${widths.map((w, i) => (i === 0 ? `:${'-'.repeat(w + 1)}` : `${'-'.repeat(w + 1)}:`)).join('|')}|`;
  if (title) out(`\n${title}\n`);
  out(line(cells[0]));
  out(rule);
  for (const r of cells.slice(1)) out(line(r));
}
