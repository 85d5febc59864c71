/**
 * milo-dev: a development and test server for the Milo IPAM API subset
 * (`ipam.miloapis.com/v1alpha1`) that milo-ipam uses. Never a production
 * backend. See milo-dev/README.md.
 *
 *   deno run --allow-all milo-dev/main.ts --seed FILE --db FILE
 *     [--listen HOST:PORT] [--cert FILE --key FILE] [--admin HOST:PORT]
 *     [--allocations-per-second N]
 *
 * Prints one JSON line to stdout when ready; logs go to stderr.
 */

import { parseArgs } from "node:util";
import { DEFAULT_ALLOCATIONS_PER_SECOND, MAX_ALLOCATIONS_PER_SECOND } from "./limits.ts";
import { startServer } from "./server.ts";

const USAGE =
  `usage: milo-dev --seed FILE --db FILE [--listen HOST:PORT] [--cert FILE --key FILE] [--admin HOST:PORT]
                [--allocations-per-second N]

  --seed FILE         tenants, tokens, IPClasses, IPPools (JSON, or YAML by .yaml/.yml)
  --db FILE           SQLite database (created when missing; claims survive restarts)
  --listen HOST:PORT  API listener (default 127.0.0.1:8443; :0 picks a free port)
  --cert/--key FILE   serve HTTPS; without them only loopback plain HTTP is allowed
  --admin HOST:PORT   fault/stats admin listener, loopback only (default 127.0.0.1:0)
  --allocations-per-second N
                      claim creates admitted per sliding second, beyond them 429
                      (default ${DEFAULT_ALLOCATIONS_PER_SECOND}, Milo's ceiling; 0: unlimited)
`;

async function main(): Promise<number> {
  let values;
  try {
    ({ values } = parseArgs({
      args: Deno.args,
      options: {
        seed: { type: "string" },
        db: { type: "string" },
        listen: { type: "string" },
        cert: { type: "string" },
        key: { type: "string" },
        admin: { type: "string" },
        "allocations-per-second": { type: "string" },
        help: { type: "boolean", short: "h" },
      },
      strict: true,
    }));
  } catch (err) {
    console.error(`milo-dev: ${err instanceof Error ? err.message : err}\n${USAGE}`);
    return 2;
  }
  if (values.help) {
    console.error(USAGE);
    return 0;
  }
  if (!values.seed || !values.db) {
    console.error(`milo-dev: --seed and --db are required\n${USAGE}`);
    return 2;
  }
  let allocationsPerSecond: number | undefined;
  const aps = values["allocations-per-second"];
  if (aps !== undefined) {
    allocationsPerSecond = /^\d+$/.test(aps) ? Number(aps) : NaN;
    if (!(allocationsPerSecond <= MAX_ALLOCATIONS_PER_SECOND)) {
      console.error(
        `milo-dev: --allocations-per-second must be an integer in 0..${MAX_ALLOCATIONS_PER_SECOND}\n${USAGE}`,
      );
      return 2;
    }
  }
  let server;
  try {
    server = await startServer({
      seedPath: values.seed,
      dbPath: values.db,
      listen: values.listen,
      certFile: values.cert,
      keyFile: values.key,
      admin: values.admin,
      allocationsPerSecond,
    });
  } catch (err) {
    console.error(`milo-dev: ${err instanceof Error ? err.message : err}`);
    return 1;
  }
  const { promise: stopped, resolve } = Promise.withResolvers<string>();
  for (const sig of ["SIGTERM", "SIGINT"] as const) Deno.addSignalListener(sig, () => resolve(sig));
  console.log(
    JSON.stringify({ ready: true, url: server.url, admin: server.adminUrl, pid: Deno.pid }),
  );
  const ceiling = server.ceiling.get().allocationsPerSecond;
  console.error(
    `milo-dev (development server, not for production) API ${server.url}, admin ${server.adminUrl}, page ${server.url}/, ${
      ceiling ? `ceiling ${ceiling} allocations/s` : "no allocation ceiling"
    }`,
  );
  const sig = await stopped;
  console.error(`milo-dev: ${sig}, shutting down`);
  await server.close();
  return 0;
}

Deno.exit(await main());
