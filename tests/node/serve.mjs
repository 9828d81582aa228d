// Start `pagoda serve` for a node test: PAGODA_CMD (a JSON list: the
// binary, or qemu + its options + the binary) + `serve` + args, on --port 0;
// resolves when the server prints PORT=N. Shared by the tests of this
// folder (run.sh copies it next to the test).
import { spawn } from 'node:child_process';

export const CMD = JSON.parse(process.env.PAGODA_CMD ?? '["pagoda"]');

// { proc, port, baseURL } of a started server (on `port`, default 0: any
// free port); rejects with its stderr when it exits first.
export function startServer(args, port = 0) {
  let stderr = '';
  const proc = spawn(CMD[0], [...CMD.slice(1), 'serve', ...args, '--port', String(port)],
    { stdio: ['ignore', 'pipe', 'pipe'] });
  proc.stderr.on('data', (d) => { stderr += d; });
  return new Promise((resolve, reject) => {
    let out = '';
    proc.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/^PORT=(\d+)$/m);
      if (m) {
        const port = Number(m[1]);
        resolve({ proc, port, baseURL: `http://127.0.0.1:${port}/v1` });
      }
    });
    proc.on('exit', (code) => reject(new Error(`server exited (${code}): ${stderr}`)));
  });
}

// SIGTERM a server and wait for it to exit.
export async function stopServer(proc) {
  const done = new Promise((r) => proc.once('exit', r));
  proc.kill('SIGTERM');
  await done;
}
