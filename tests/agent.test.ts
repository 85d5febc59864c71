/**
 * The agent in-process, against milo-dev: what it does with an ADD whose
 * caller hangs up while it is in flight. A caller that closes without a word
 * was killed (its runtime saw the ADD fail), so the agent undoes the ADD; a
 * caller that says it falls back took the call over and may hold the same
 * claims, so the agent leaves them, however its clock judges the timing.
 */
import assert from "node:assert/strict";
import { Agent } from "../lib/agent.ts";
import { KEYS } from "../lib/claims.ts";
import { readNodeConfig } from "../lib/config_file.ts";
import {
  type AgentFrame,
  FrameReader,
  type RequestHeader,
  writeJson,
  writeRequest,
} from "../lib/frames.ts";
import { type MiloDev, startMiloDev } from "../testing/milo_dev.ts";
import { PLUGIN_SEED, TOKEN } from "../testing/process.ts";
import { withTempDir } from "../testing/stub_invocation.ts";

const REQUEST_MS = 1_000;
const NET_CONF = {
  cniVersion: "1.1.0",
  name: "vpc-7b3e",
  type: "bridge",
  ipam: {
    type: "milo-ipam",
    classes: { ipv4: "vpc-pods-ipv4", ipv6: "vpc-pods-ipv6" },
    scope: { network: { apiGroup: "networking.datumapis.com", kind: "Network", name: "vpc-7b3e" } },
  },
};

const held = (milo: MiloDev, id: string) =>
  milo.listClaims("tenant-a", `${KEYS.containerId}=${id}`).then((c) => c.length);

/** Waits (bounded) until Milo holds both claims of `id`: the ADD's POSTs have committed. */
async function committed(milo: MiloDev, id: string): Promise<void> {
  for (let i = 0; i < 100 && await held(milo, id) < 2; i++) {
    await new Promise((r) => setTimeout(r, 10));
  }
  assert.equal(await held(milo, id), 2, `both POSTs of ${id} reached Milo`);
}

/**
 * Sends an ADD that started `ageMs` ago, reads the ack, waits until its POSTs
 * have committed (their answers still held back), and hangs up: closing
 * without a word (killed), or after a `fallback` frame (taking the call over).
 */
async function addThenHangUp(
  milo: MiloDev,
  socket: string,
  config: string,
  id: string,
  t: { ageMs: number; fallback: boolean },
) {
  const conn = await Deno.connect({ transport: "unix", path: socket });
  try {
    const env = {
      CNI_COMMAND: "ADD",
      CNI_CONTAINERID: id,
      CNI_IFNAME: "eth0",
      CNI_NETNS: "/var/run/netns/test",
      CNI_PATH: "/opt/cni/bin",
      // Each ADD in a namespace of its own: a flow of the node's limiter each, so an earlier
      // ADD's POSTs held by Milo hold none of its slots.
      CNI_ARGS: `K8S_POD_NAMESPACE=ns-${id};K8S_POD_NAME=pod-${id}`,
      MILO_IPAM_CONFIG: config,
    };
    const header: RequestHeader = { v: 1, env, started: Date.now() - t.ageMs };
    await writeRequest(conn, header, new TextEncoder().encode(JSON.stringify(NET_CONF)));
    const first = await new FrameReader(conn).json<AgentFrame>();
    assert.equal(first?.kind, "ack", "the agent acknowledges before Milo answers");
    await committed(milo, id);
    if (t.fallback) await writeJson(conn, { kind: "fallback" });
  } finally {
    conn.close();
  }
}

async function withAgent(
  fn: (milo: MiloDev, agent: Agent, config: string) => Promise<void>,
  nodeOver: Record<string, unknown> = {},
) {
  const milo = await startMiloDev({ seed: PLUGIN_SEED });
  try {
    await withTempDir(async (dir) => {
      await Deno.writeTextFile(`${dir}/token`, TOKEN + "\n");
      await Deno.mkdir(`${dir}/state`);
      const config = `${dir}/node.json`;
      await Deno.writeTextFile(
        config,
        JSON.stringify({
          milo: { url: milo.url, tokenFile: `${dir}/token` },
          cluster: "cluster-a",
          node: "node-a1",
          log: { file: `${dir}/milo-ipam.log`, level: "info" },
          resultsDirs: [`${dir}/results`],
          stateDir: `${dir}/state`,
          timeouts: { requestMs: REQUEST_MS, totalMs: 4_000 },
          agent: { socket: `${dir}/run/agent.sock`, reconcileIntervalS: 86_400 },
          allowScopes: [{ scope: NET_CONF.ipam.scope }],
          ...nodeOver,
        }),
      );
      const env = (n: string) => n === "MILO_IPAM_CONFIG" ? config : undefined;
      const agent = new Agent(await readNodeConfig(env), env);
      await agent.start();
      try {
        await fn(milo, agent, config);
      } finally {
        await agent.stop();
      }
    });
  } finally {
    await milo.stop();
  }
}

Deno.test("agent: an ADD whose caller was killed is undone; one whose caller took it over is kept", async () => {
  await withAgent(async (milo, agent, config) => {
    // POSTs commit, then their answers wait: the hang-up is seen while the ADD is in flight.
    await milo.setFaults({ hangRate: 1, hangMs: 600, faultPoint: "after", methods: ["POST"] });
    const at = (id: string, t: { ageMs: number; fallback: boolean }) =>
      addThenHangUp(milo, agent.socket, config, id, t);
    await at("killed", { ageMs: 0, fallback: false });
    // Started long ago (a process that waited for a CPU), killed just now.
    await at("killed-starved", { ageMs: 3 * REQUEST_MS, fallback: false });
    await at("took-over", { ageMs: 0, fallback: true });
    // stop() waits for the calls in flight, the undo included.
    await agent.stop();
    for (const id of ["killed", "killed-starved"]) {
      assert.equal(await held(milo, id), 0, `${id} undone: its runtime saw the ADD fail`);
    }
    assert.equal(await held(milo, "took-over"), 2, "kept: its caller leases the same claims");
  });
});

Deno.test("agent: a boot id file answering another value each read is warned about once, whatever the reconciles", async () => {
  await withAgent(async (_milo, agent, config) => {
    for (let i = 0; i < 3; i++) await agent.reconcileNow();
    const log = config.replace(/node\.json$/, "milo-ipam.log");
    const lines = (await Deno.readTextFile(log)).trim().split("\n").map((l) => JSON.parse(l));
    const runs = lines.filter((l) => l.verb === "RECONCILE" && Array.isArray(l.released));
    assert.equal(runs.length, 3, "three reconciles ran");
    const warned = lines.filter((l) => /^bootIdFile .* answered two values/.test(l.msg ?? ""));
    assert.equal(warned.length, 1, "one warning");
    assert.equal(warned[0].level, "warn");
  }, { bootIdFile: "/proc/sys/kernel/random/uuid" });
});

Deno.test("agent: stop removes the socket it bound, not the one a node config read since names", async () => {
  await withAgent(async (_milo, agent, config) => {
    const bound = agent.socket;
    const next = bound.replace(/agent\.sock$/, "next.sock");
    const node = JSON.parse(await Deno.readTextFile(config));
    await Deno.writeTextFile(
      config,
      JSON.stringify({ ...node, agent: { ...node.agent, socket: next } }),
    );
    await agent.reconcileNow(); // reads the node config again
    const successor = Deno.listen({ transport: "unix", path: next });
    try {
      assert.equal(agent.socket, bound, "it listens where it started");
      await agent.stop();
      assert.ok((await Deno.lstat(next)).isSocket, "the socket at the new path stays");
      await assert.rejects(Deno.lstat(bound), Deno.errors.NotFound, "its own socket is gone");
    } finally {
      successor.close();
    }
  });
});
