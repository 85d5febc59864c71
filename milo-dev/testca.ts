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
  const p = (name: string) => `${dir}/${name}`;
  const ext = p("server.ext");
  await Deno.writeTextFile(
    ext,
    [
      "basicConstraints=CA:FALSE",
      "keyUsage=digitalSignature,keyEncipherment",
      "extendedKeyUsage=serverAuth",
      `subjectAltName=${
        ["127.0.0.1", "::1", ...extraIps].map((ip) => `IP:${ip}`).join(",")
      },DNS:localhost`,
      "",
    ].join("\n"),
  );
  const clientExt = p("client.ext");
  await Deno.writeTextFile(
    clientExt,
    [
      "basicConstraints=CA:FALSE",
      "keyUsage=digitalSignature,keyEncipherment",
      "extendedKeyUsage=clientAuth",
      "",
    ].join("\n"),
  );
  const ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];
  await openssl([
    "req",
    "-x509",
    ...ec,
    "-nodes",
    "-days",
    "2",
    "-subj",
    "/CN=milo-dev test CA",
    "-keyout",
    "ca.key",
    "-out",
    "ca.pem",
  ], dir);
  for (
    const [name, cn, extFile] of [
      ["server", "localhost", ext],
      ["client", "milo-dev test client", clientExt],
    ]
  ) {
    await openssl([
      "req",
      ...ec,
      "-nodes",
      "-subj",
      `/CN=${cn}`,
      "-keyout",
      `${name}.key`,
      "-out",
      `${name}.csr`,
    ], dir);
    await openssl([
      "x509",
      "-req",
      "-in",
      `${name}.csr`,
      "-CA",
      "ca.pem",
      "-CAkey",
      "ca.key",
      "-CAcreateserial",
      "-days",
      "2",
      "-extfile",
      extFile,
      "-out",
      `${name}.pem`,
    ], dir);
  }
  return {
    caFile: p("ca.pem"),
    certFile: p("server.pem"),
    keyFile: p("server.key"),
    clientCertFile: p("client.pem"),
    clientKeyFile: p("client.key"),
  };
}
