import { claimName } from "./claims.ts";
import { settleAll } from "./errors.ts";
import { familiesOf, type Handler } from "./invocation.ts";

/**
 * DEL: release each family's claim in Milo. A claim already gone counts as
 * released; any other failure fails the DEL so the runtime retries it.
 */
export const del: Handler = async (inv) => {
  await settleAll(
    familiesOf(inv.cfg).map(async (family) => {
      const name = await claimName(inv.attachment, family);
      inv.touched.push(name);
      await inv.milo.deleteClaim(name);
    }),
  );
  return null;
};
