/** CLI, TLS and seed formats of milo-dev. */

import assert from "node:assert/strict";
import { claimBody, miloApi, startMiloDev } from "../testing/milo_dev.ts";

const MAIN = new URL("../milo-dev/main.ts", import.meta.url).pathname;

async function runCli(
  args: string[],
  ms = 30_000,
): Promise<{ code: number; stdout: string; stderr: string }> {
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "--allow-all", MAIN, ...args],
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const timer = setTimeout(() => child.kill("SIGKILL"), ms);
  try {
    const out = await child.output();
    const dec = new TextDecoder();
    return { code: out.code, stdout: dec.decode(out.stdout), stderr: dec.decode(out.stderr) };
  } finally {
    clearTimeout(timer);
  }
}

Deno.test("milo-dev TLS: HTTPS with a throwaway CA", async () => {
  const dev = await startMiloDev({ tls: true });
  try {
    assert.match(dev.url, /^https:\/\/127\.0\.0\.1:\d+$/);
    const r = await miloApi(dev, "POST", "/namespaces/default/ipclaims", {
      body: claimBody("tls-1"),
    });
    assert.equal(r.status, 201);
    await assert.rejects(() => fetch(`${dev.url}/healthz`), "untrusted certificate is refused");
    const plain = dev.url.replace("https:", "http:");
    await assert.rejects(async () => {
      const res = await fetch(`${plain}/healthz`);
      await res.text();
      if (res.ok) throw new Error("unexpected");
    });
  } finally {
    await dev.stop();
  }
});

Deno.test("milo-dev CLI: one ready line, clean SIGTERM, YAML seed, loopback rule", async () => {
  const dir = await Deno.makeTempDir({ prefix: "milo-dev-cli-" });
  try {
    const yaml = `projects:
  - name: tenant-y
    tokens: [tok-y]
    ipClasses:
      - metadata: { name: hosts }
        spec: { ipFamily: IPv6, prefixLength: 128, visibility: consumer, consumers: [tenant-y] }
    ipPools:
      - metadata: { name: v6-hosts }
        spec:
          cidr: "2001:db8::/120"
          classNames: [hosts]
          reservations: { leading: 1 }
`;
    await Deno.writeTextFile(`${dir}/seed.yaml`, yaml);
    const child = new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "--allow-all",
        MAIN,
        "--seed",
        `${dir}/seed.yaml`,
        "--db",
        `${dir}/db`,
        "--listen",
        ":0",
      ],
      stdin: "null",
      stdout: "piped",
      stderr: "null",
    }).spawn();
    const timer = setTimeout(() => child.kill("SIGKILL"), 30_000);
    try {
      const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
      let buf = "";
      for (let i = 0; i < 1000 && !buf.includes("\n"); i++) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
      }
      const ready = JSON.parse(buf.split("\n")[0]);
      assert.deepEqual(Object.keys(ready), ["ready", "url", "admin", "pid"]);
      assert.equal(ready.ready, true);
      assert.match(ready.url, /^http:\/\/127\.0\.0\.1:\d+$/);
      assert.match(ready.admin, /^http:\/\/127\.0\.0\.1:\d+$/);
      assert.equal(ready.pid, child.pid);
      const res = await fetch(
        `${ready.url}/apis/ipam.miloapis.com/v1alpha1/namespaces/default/ipclaims`,
        {
          method: "POST",
          headers: { authorization: "Bearer tok-y", "content-type": "application/json" },
          body: JSON.stringify(claimBody("y1", { className: "hosts", scope: null })),
        },
      );
      const claim = await res.json();
      assert.equal(res.status, 201);
      assert.equal(claim.status.allocatedCIDR, "2001:db8::1/128");
      assert.equal(claim.status.address, "2001:db8::1");
      child.kill("SIGTERM");
      let rest = "";
      for (let i = 0; i < 1000; i++) {
        const { value, done } = await reader.read();
        if (done) break;
        rest += value;
      }
      const st = await child.status;
      assert.equal(st.code, 0);
      assert.equal(buf.slice(buf.indexOf("\n") + 1) + rest, "", "exactly one line on stdout");
    } finally {
      clearTimeout(timer);
      try {
        child.kill("SIGKILL");
      } catch { /* exited */ }
      await child.status;
    }

    const open = await runCli([
      "--seed",
      `${dir}/seed.yaml`,
      "--db",
      `${dir}/db2`,
      "--listen",
      "0.0.0.0:0",
    ]);
    assert.equal(open.code, 1);
    assert.match(open.stderr, /refusing plain HTTP on non-loopback/);
    assert.equal(open.stdout, "");
    await Deno.writeTextFile(
      `${dir}/bad.json`,
      JSON.stringify({ projects: [{ name: "x", tokens: ["t"] }, { name: "x" }] }),
    );
    const bad = await runCli(["--seed", `${dir}/bad.json`, "--db", `${dir}/db3`, "--listen", ":0"]);
    assert.equal(bad.code, 1);
    assert.match(bad.stderr, /duplicate project/);
    const usage = await runCli(["--db", `${dir}/db4`]);
    assert.equal(usage.code, 2);
    for (const n of ["-1", "1.5", "x", "1000001"]) {
      const r = await runCli([
        "--seed",
        `${dir}/seed.yaml`,
        "--db",
        `${dir}/db5`,
        "--listen",
        ":0",
        `--allocations-per-second=${n}`,
      ]);
      assert.equal(r.code, 2, n);
      assert.match(r.stderr, /--allocations-per-second must be an integer in 0\.\.1000000/, n);
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
