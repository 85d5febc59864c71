/**
 * Throwaway certificate authority for tests and development: a CA, a server
 * certificate for 127.0.0.1, ::1 and localhost, and a client certificate,
 * made with the `openssl` command. Never use these files for anything real.
 */

/** Paths of the PEM files that {@link makeTestCA} writes. */
export interface TestCA {
  caFile: string;
  certFile: string;
  keyFile: string;
  clientCertFile: string;
  clientKeyFile: string;
}

async function openssl(args: string[], cwd: string): Promise<void> {
  let out: Deno.CommandOutput;
  try {
    out = await new Deno.Command("openssl", {
      args,
      cwd,
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).output();
  } catch (err) {
    throw new Error(
      `cannot run openssl (install the Debian package "openssl"): ${err}`,
    );
  }
  if (!out.success) {
    const msg = new TextDecoder().decode(out.stderr);
    throw new Error(`openssl ${args[0]} failed: ${msg}`);
  }
}

/**
 * Writes a fresh CA, server certificate and client certificate into `dir`.
 * The server certificate names 127.0.0.1, ::1, localhost and any `extraIps`.
 */
export async function makeTestCA(dir: string, extraIps: string[] = []): Promise<TestCA> {
  await Deno.mkdir(dir, { recursive: true });
  const sans = ["127.0.0.1", "::1", ...extraIps].map((ip) => `IP:${ip}`).join(",");
  const usage = "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n";
  const serverExt = `extendedKeyUsage=serverAuth\nsubjectAltName=${sans},DNS:localhost\n`;
  await Deno.writeTextFile(`${dir}/server.ext`, usage + serverExt);
  await Deno.writeTextFile(`${dir}/client.ext`, `${usage}extendedKeyUsage=clientAuth\n`);
  const req = ["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
  const days = ["-days", "2"];
  const ca = ["-subj", "/CN=milo-dev test CA", "-keyout", "ca.key", "-out", "ca.pem"];
  await openssl([...req, "-x509", ...days, ...ca], dir);
  for (const [name, cn] of [["server", "localhost"], ["client", "milo-dev test client"]]) {
    await openssl(
      [...req, "-subj", `/CN=${cn}`, "-keyout", `${name}.key`, "-out", `${name}.csr`],
      dir,
    );
    const sign = ["-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", ...days];
    const out = ["-extfile", `${name}.ext`, "-out", `${name}.pem`];
    await openssl(["x509", "-req", "-in", `${name}.csr`, ...sign, ...out], dir);
  }
  const p = (name: string) => `${dir}/${name}`;
  return {
    caFile: p("ca.pem"),
    certFile: p("server.pem"),
    keyFile: p("server.key"),
    clientCertFile: p("client.pem"),
    clientKeyFile: p("client.key"),
  };
}
