import os from 'node:os';

/** One line about where the figures come from; every scenario prints it first. */
export function machineLine() {
  const cpus = os.cpus();
  const model = cpus[0]?.model?.replace(/\s+/g, ' ').trim() ?? 'unknown CPU';
  const load = os
    .loadavg()
    .map((l) => l.toFixed(2))
    .join(' ');
  return `${os.availableParallelism?.() ?? cpus.length} cores (${model}), ${Math.round(os.totalmem() / 2 ** 30)} GiB, Node ${process.version}, ${os.platform()} ${os.release()}, load ${load}, ${new Date().toISOString()}`;
}
