/**
 * The first TLS connection of a Deno process spends about 40 ms of CPU
 * initialising the crypto backend that rustls shares with WebCrypto's key
 * generation; a second connection, even on a new client, takes 3 ms. The
 * exec'd plugin that does the work itself starts that initialisation on a
 * worker thread before it loads its handlers and parses its config, so the
 * two overlap instead of adding up. An ECDH key pair is generated off the
 * calling thread (an HMAC key, say, is generated on it and would block it).
 */

/** Starts initialising the TLS crypto backend in the background; never throws. */
export function warmTlsCrypto(): void {
  crypto.subtle.generateKey({ name: "ECDH", namedCurve: "P-256" }, false, ["deriveBits"])
    .catch(() => {});
}
