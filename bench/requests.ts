/** Requests and connections milo-dev counted for single plugin calls (admin `/stats`). */
import type { MiloDev } from "../testing/milo_dev.ts";
import type { RequestCount } from "./model.ts";

/** Resets milo-dev's counters around each call and keeps what each verb's calls sent. */
export class RequestCounter {
  readonly #dev: MiloDev;
  readonly #by = new Map<string, { totals: Set<number>; methods: Set<string>; n: number }>();
  /** Connections and TLS handshakes of the calls made with `measured` set. */
  readonly steady = { calls: 0, adds: 0, connections: 0, tlsHandshakes: 0 };

  constructor(dev: MiloDev) {
    this.#dev = dev;
  }

  /** Runs one call between a reset and a read of the counters. */
  async count<R>(verb: string, measured: boolean, run: () => Promise<R>): Promise<R> {
    await this.#dev.resetStats();
    const r = await run();
    const s = await this.#dev.stats();
    const c = this.#by.get(verb) ?? { totals: new Set(), methods: new Set(), n: 0 };
    c.n++;
    c.totals.add(s.total);
    c.methods.add(
      Object.entries(s.byMethod).sort().map(([m, k]) => `${m}=${k}`).join(" ") || "none",
    );
    this.#by.set(verb, c);
    if (measured) {
      this.steady.calls++;
      if (verb === "ADD") this.steady.adds++;
      this.steady.connections += s.connections;
      this.steady.tlsHandshakes += s.tlsHandshakes ?? 0;
    }
    return r;
  }

  /** One row per verb counted. */
  rows(): RequestCount[] {
    return [...this.#by.entries()].map(([verb, c]) => ({
      verb,
      samples: c.n,
      families: verb === "STATUS" ? 1 : 2,
      totals: [...c.totals].sort((x, y) => x - y),
      methods: [...c.methods].sort(),
    }));
  }
}
