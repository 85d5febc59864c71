import { CniError, toCniError } from "./errors.ts";
import { familiesOf, type Handler } from "./invocation.ts";

/**
 * STATUS: one authenticated request proves Milo reachable, the token accepted
 * and every configured class present; otherwise code 50 with the reason.
 */
export const status: Handler = async (inv) => {
  let names: string[];
  try {
    names = await inv.milo.listClassNames();
  } catch (err) {
    const e = toCniError(err);
    throw new CniError("unavailable", `Milo is not usable: ${e.message}`, e.details);
  }
  const net = inv.conf.network;
  const missing = familiesOf(net).map((f) => net.classes[f]!).filter((c) => !names.includes(c));
  if (missing.length) {
    throw new CniError(
      "unavailable",
      `IPClass ${missing.join(", ")} not found in Milo`,
      `classes present: ${names.join(", ") || "none"}`,
    );
  }
  return { claims: [] };
};
