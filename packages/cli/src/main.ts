#!/usr/bin/env node
import { CommanderError } from 'commander';
import { ExitCode, processIo } from './io.js';
import { buildProgram } from './program.js';

const io = processIo();
try {
  await buildProgram(io).parseAsync(process.argv);
} catch (e) {
  if (e instanceof CommanderError) {
    // Help, version and usage errors: commander has already printed what it had to say.
    io.setExitCode(e.exitCode);
  } else {
    io.stderr(`error: unexpected failure: ${e instanceof Error ? e.message : String(e)}\n`);
    io.setExitCode(ExitCode.REFUSED);
  }
}
