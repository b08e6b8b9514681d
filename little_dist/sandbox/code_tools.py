"""What a ``code.run`` program sees of its step's tools: ``little.callTool(name, args)``.

When the step has tools, the program does not run as its own entrypoint: a small module of
ours runs first (read-only at :data:`BRIDGE_TARGET`) and defines a frozen global ``little``,
then imports the program's entrypoint. ``little.callTool(name, args)`` writes one request on
the tool channel (:mod:`little_dist.sandbox.tool_channel`) and blocks until its answer: the
tool's result, or a thrown ``little.ToolCallError`` whose ``causeCode`` says why (upstream's
causes: ``permission_denied``, ``tool_error``, ``tool_input_error``,
``runtime_config_error``...). Calls are synchronous, one at a time, in the order the program
makes them — the order the memo keys them by (``callIndex``).

The program is granted exactly two Deno permissions more than without tools: reading its
answers pipe and writing its requests pipe, each named by its ``/dev/fd`` path.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Final

__all__ = ["BRIDGE_TARGET", "bridge_arguments", "write_bridge"]

BRIDGE_TARGET: Final = "/mnt/.runtime/little"

_TOOLS_TS: Final = """\
// little-dist: the tool bridge of a code.run program (generated; see code_tools.py).
const encoder = new TextEncoder();
const decoder = new TextDecoder();
let requests: Deno.FsFile | undefined;
let answers: Deno.FsFile | undefined;
let buffered = new Uint8Array(0);

class ToolCallError extends Error {
  causeCode: string;
  constructor(message: string, causeCode: string) {
    super(message);
    this.name = "ToolCallError";
    this.causeCode = causeCode;
  }
}

function readLine(): string {
  for (;;) {
    const at = buffered.indexOf(10);
    if (at >= 0) {
      const line = buffered.subarray(0, at);
      buffered = buffered.slice(at + 1);
      return decoder.decode(line);
    }
    const chunk = new Uint8Array(65536);
    const n = answers!.readSync(chunk);
    if (n === null) throw new ToolCallError("the tool channel is closed", "tool_error");
    const next = new Uint8Array(buffered.length + n);
    next.set(buffered);
    next.set(chunk.subarray(0, n), buffered.length);
    buffered = next;
  }
}

function callTool(name: string, args: Record<string, unknown> = {}): unknown {
  requests ??= Deno.openSync("/dev/fd/__REQUESTS__", { write: true });
  answers ??= Deno.openSync("/dev/fd/__ANSWERS__", { read: true });
  const data = encoder.encode(JSON.stringify({ tool: name, args }) + "\\n");
  let offset = 0;
  while (offset < data.length) offset += requests.writeSync(data.subarray(offset));
  const answer = JSON.parse(readLine());
  if (answer.ok === true) return answer.result;
  const error = answer.error ?? {};
  const message = String(error.message ?? "tool failed");
  throw new ToolCallError(message, String(error.causeCode ?? "tool_error"));
}

Object.defineProperty(globalThis, "little", {
  value: Object.freeze({ callTool, ToolCallError }),
  writable: false,
  configurable: false,
});
"""


def write_bridge(folder: Path, entry_target: str, answers_fd: int, requests_fd: int) -> str:
    """Write the bridge into ``folder`` (mounted at :data:`BRIDGE_TARGET`); returns the path
    (inside the sandbox) of the module to run instead of ``entry_target``."""
    tools = _TOOLS_TS.replace("__REQUESTS__", str(requests_fd)).replace(
        "__ANSWERS__", str(answers_fd)
    )
    (folder / "tools.ts").write_text(tools, encoding="utf-8")
    # Static imports, evaluated in order: the global exists before the program's first line.
    main = f'import "./tools.ts";\nimport {json.dumps(entry_target)};\n'
    (folder / "main.ts").write_text(main, encoding="utf-8")
    for name in ("tools.ts", "main.ts"):
        (folder / name).chmod(0o644)
    folder.chmod(0o755)
    return f"{BRIDGE_TARGET}/main.ts"


def bridge_arguments(answers_fd: int, requests_fd: int) -> list[str]:
    """The two Deno permissions the bridge needs: its pipes, by their ``/dev/fd`` paths."""
    return [f"--allow-read=/dev/fd/{answers_fd}", f"--allow-write=/dev/fd/{requests_fd}"]
