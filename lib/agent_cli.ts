/** `milo-ipam agent`: the command line of the node agent (lib/agent.ts). */
import { Agent } from "./agent.ts";
import { parseFlags } from "./cli.ts";
import { readNodeConfig, withConfigFlag } from "./config_file.ts";

/** `milo-ipam agent [--config FILE]`; runs until SIGTERM or SIGINT. */
export async function agentCli(args: string[]): Promise<number> {
  const values = parseFlags(args, "usage: milo-ipam agent [--config FILE]", {
    config: { type: "string" },
  });
  const env = withConfigFlag(values.config);
  const agent = new Agent(await readNodeConfig(env), env, { stdout: true });
  await agent.start();
  console.error(`milo-ipam agent listening on ${agent.socket}`);
  const { promise, resolve } = Promise.withResolvers<string>();
  for (const sig of ["SIGTERM", "SIGINT"] as const) Deno.addSignalListener(sig, () => resolve(sig));
  const sig = await promise;
  console.error(`milo-ipam agent: ${sig}, finishing calls in flight`);
  await agent.stop();
  return 0;
}
