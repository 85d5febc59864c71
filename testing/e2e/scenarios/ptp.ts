/**
 * Scenario 1b: the ptp master with IPv6 /96 blocks and a link-local gateway.
 */
import assert from "node:assert/strict";
import { addrsOf, delNetns, reaches } from "../netns.ts";
import { describe } from "../kubelet.ts";
import { normCidr } from "../ledger.ts";
import { NET_PTP6 } from "../netconf.ts";
import { assertLedger, claimOf, type Run } from "./run.ts";

export async function ptpIpv6(run: Run): Promise<void> {
  const { w } = run;
  const pods = [
    await w.rt.newPod("a2", { network: NET_PTP6 }),
    await w.rt.newPod("a2", { network: NET_PTP6 }),
  ];
  for (const p of pods) {
    const r = await w.rt.cni("ADD", p);
    assert.ok(r.ok, describe(r));
    assert.match(p.addresses![0], /^fd20:0?:?.*\/96$/);
    const onEth0 = (await addrsOf(p.netns, "eth0")).map(normCidr);
    assert.ok(onEth0.includes(normCidr(p.addresses![0])), `${onEth0}`);
  }
  const to = pods[1].addresses![0].split("/")[0];
  assert.ok(await reaches(pods[0].netns, pods[1].netns, to), `ptp pods reach ${to}`);
  for (const p of pods) {
    const c = await w.rt.cni("CHECK", p);
    assert.ok(c.ok, describe(c));
  }
  await assertLedger(run, "ptp ADD", 2);

  // IPv4 /32 through ptp: ptp (plugins 1.1.1) cannot install a default route via a
  // gateway it has not routed yet, so its ADD fails; it must then DEL the lease.
  const v4 = await w.rt.newPod("a2", { name: "ptp-v4" });
  const conf = w.rt.confOf(v4);
  const ptp4 = { ...conf, type: "ptp", ipam: { ...conf.ipam, gateways: { ipv4: "169.254.1.1" } } };
  const r4 = await w.rt.cni("ADD", v4, { conf: ptp4 });
  run.figures["ptp IPv4 /32 ADD"] = r4.ok ? "ok" : `fails in ptp: ${r4.msg}`;
  if (r4.ok) assert.ok((await w.rt.cni("DEL", v4, { conf: ptp4 })).ok);
  else assert.equal(claimOf(await w.milo.claims(), v4), undefined, "ptp released the lease");
  await delNetns(v4.netns);

  for (const p of pods) {
    assert.ok((await w.rt.cni("DEL", p)).ok);
    assert.ok((await w.rt.cni("DEL", p)).ok, "DEL twice");
    await delNetns(p.netns);
  }
  await assertLedger(run, "ptp", 0);
}
