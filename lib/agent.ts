/**
 * `milo-ipam agent`: one resident process per node. It answers the exec'd
 * plugin's invocations on a unix socket (lib/_agent_socket.ts) with the same
 * `invoke` the plugin runs itself, over one warm HTTP client (kept-alive
 * connections, no TLS handshake per call), runs the node reconcile on a
 * timer, serves Prometheus metrics and its readiness and liveness probes on
 * the port `agent.metrics` names, and writes what it logs to stdout as well.
 */
import { AgentSocket, type SocketCall } from "./_agent_socket.ts";
import { type NodeConfig, requireScrapeToken } from "./config.ts";
import { readNodeConfig } from "./config_file.ts";
import { markingDeletes } from "./late_deletes.ts";
import { errorText, toCniError } from "./errors.ts";
import { invoke, type InvokeDeps, type InvokeRequest, type Reply } from "./invoke.ts";
import { Logger } from "./log.ts";
import { Metrics } from "./metrics.ts";
import { type MetricsServer, serveMetrics } from "./metrics_server.ts";
import { createHttpClient, readTlsMaterial, readToken, tokenOf } from "./http.ts";
import { Holdings } from "./holdings.ts";
import { Journal } from "./journal.ts";
import { type CallLimiter, MiloLimiter, type Purpose, RECONCILE_ROUTE } from "./limiter.ts";
import { MiloClient } from "./milo.ts";
import { STATUS_PROBE } from "./milo_objects.ts";
import { requirePrivateDirs } from "./owned.ts";
import { Readiness, socketLiveness } from "./readiness.ts";
import { reconcile } from "./reconcile.ts";
import { FALLBACK_COUNTER } from "./run.ts";
import { within } from "./timers.ts";
import { RELEASE } from "./version.ts";
import { requireStateFormat } from "./state_format.ts";

/** How long an HTTP client replaced by new TLS material stays open for calls still using it. */
const RETIRE_CLIENT_MS = 300_000;

/** One HTTP client for as long as the node's TLS material and proxy stay the same. */
class WarmClient {
  #key: string | undefined;
  #client: Deno.HttpClient | undefined;

  async for(node: NodeConfig): Promise<Deno.HttpClient | undefined> {
    const material = await readTlsMaterial(node);
    const key = JSON.stringify(material);
    if (key !== this.#key) {
      const old = this.#client;
      if (old) Deno.unrefTimer(setTimeout(() => old.close(), RETIRE_CLIENT_MS));
      this.#client = createHttpClient(material);
      this.#key = key;
    }
    return this.#client;
  }

  close(): void {
    this.#client?.close();
    this.#client = undefined;
    this.#key = undefined;
  }
}

/** A running agent. */
export class Agent {
  readonly metrics = new Metrics();
  readonly #env: (name: string) => string | undefined;
  readonly #warm = new WarmClient();
  /** One limiter of Milo requests for every call and the reconcile, by flow (lib/limiter.ts). */
  readonly #limiter = new MiloLimiter({ onEvent: (e) => this.metrics.throttled.add({ event: e }) });
  readonly #logger: Logger;
  /** The socket the plugins call (lib/_agent_socket.ts), its calls answered by this agent. */
  readonly #socket = new AgentSocket({
    call: (c) => this.#call(c),
    answered: (reply, started) => this.#record(reply, started),
    failed: (err) =>
      this.#logger.write("error", { msg: "agent connection failed", error: errorText(err) }),
  });
  #metricsServer: MetricsServer | undefined;
  #timer: ReturnType<typeof setInterval> | undefined;
  #first: ReturnType<typeof setTimeout> | undefined;
  /** The socket path it bound (a node config read later may name another). */
  #bound: string | undefined;
  #reconciling: Promise<void> | undefined;
  /** Reconcile warnings logged already: each once per agent. */
  readonly #warned = new Set<string>();
  /** Why the scrape token was last unreadable (logged once), or undefined while it reads. */
  #scrapeTokenWhy: string | undefined;
  #node: NodeConfig;
  /** The readiness probe (lib/readiness.ts), fed by every answer of Milo. */
  readonly #ready = new Readiness(() => this.#checkMilo());

  /** `stdout`: every record logged is written to stdout too (`kubectl logs`). */
  constructor(
    node: NodeConfig,
    env: (name: string) => string | undefined,
    o: { stdout?: boolean } = {},
  ) {
    this.#node = node;
    this.#env = env;
    this.#logger = new Logger(undefined, "info", { stdout: o.stdout });
    this.#logger.configure(node.log.file, node.log.level);
    this.metrics.release = RELEASE;
  }

  /** The socket path it listens on: the node config's when it started. */
  get socket(): string {
    return this.#bound ?? this.#node.agent.socket;
  }

  /** Binds the socket (0600 in a 0700 directory), the metrics port and the reconcile timer. */
  async start(): Promise<void> {
    requireScrapeToken(this.#node.agent);
    requirePrivateDirs(this.#node);
    requireStateFormat(this.#node.stateDir);
    const path = this.#node.agent.socket;
    await this.#socket.listen(path);
    this.#bound = path;
    const { metrics: m, metricsTokenFile: tokenFile } = this.#node.agent;
    if (m) {
      const at = m.lastIndexOf(":");
      this.#metricsServer = serveMetrics(
        m.slice(0, at).replace(/^\[|\]$/g, ""),
        Number(m.slice(at + 1)),
        () => this.#renderMetrics(),
        {
          ready: () => this.#ready.probe(),
          live: () => Promise.resolve(socketLiveness(this.socket)),
        },
        tokenFile ? () => this.#scrapeToken(tokenFile) : undefined,
      );
    }
    const every = this.#node.agent.reconcileIntervalS * 1000;
    this.#timer = setInterval(() => this.reconcileNow(), every);
    // A node without a record of its claims lists them in Milo once: at a random moment of the
    // first interval, so a fleet's agents starting together do not list together.
    const listing = new Holdings(this.#node.stateDir).listedAt() === undefined;
    if (listing) this.#first = setTimeout(() => this.reconcileNow(), Math.random() * every);
    else this.reconcileNow();
  }

  /**
   * The bearer token a scrape must send, read at each scrape (a rotated
   * Secret counts at once), or null when the file holds none: every scrape is
   * then refused, and the agent says why once until it holds one again.
   */
  async #scrapeToken(file: string): Promise<string | null> {
    let why: string;
    try {
      const token = tokenOf(await Deno.readTextFile(file));
      if (token) {
        this.#scrapeTokenWhy = undefined;
        return token;
      }
      why = "it does not hold one token (one line of visible ASCII)";
    } catch (err) {
      why = errorText(err);
    }
    if (why !== this.#scrapeTokenWhy) {
      this.#scrapeTokenWhy = why;
      await this.#logger.write("warn", {
        msg: `agent.metricsTokenFile ${file}: ${why}; every scrape of /metrics is refused (401)`,
      });
    }
    return null;
  }

  /**
   * Stops accepting, removes the socket, and lets the calls in flight finish
   * for as long as one call may take (the node's totalMs and the watchdog's
   * grace): their plugins give up by then anyway. Calling it again is harmless.
   */
  async stop(): Promise<void> {
    clearInterval(this.#timer);
    clearTimeout(this.#first);
    this.#socket.close();
    if (this.#bound) await Deno.remove(this.#bound).catch(() => {});
    const finishing = Promise.allSettled([...this.#socket.inflight, this.#reconciling]);
    await within<unknown>(finishing, this.#node.timeouts.totalMs + 1_000, () => undefined);
    const metrics = this.#metricsServer;
    this.#metricsServer = undefined;
    await metrics?.close();
    this.#warm.close();
  }

  /**
   * One call, or nothing when its caller left before its turn. An ADD whose
   * caller is gone without taking the call over is undone (a DEL of the same
   * attachment): its runtime saw it fail. The undo releases nothing unless
   * this ADD is still the attachment's last recorded one (lib/del.ts): a
   * caller that fell back, or a runtime's retry, may hold the same claims.
   */
  async #call({ header, stdin, gone, caller, send }: SocketCall): Promise<Reply | undefined> {
    if (gone.aborted) return undefined;
    const env = (k: string) => Object.hasOwn(header.env, k) ? header.env[k] : undefined;
    const callId = crypto.randomUUID();
    const reply = await this.#invoke({ env, stdin, started: header.started, callId }, {
      nodeConfig: () => readNodeConfig(env),
      onDeadline: (deadline, cniVersion) => send({ kind: "ack", deadline, cniVersion }),
    }, gone);
    const node = reply.node;
    if (node && gone.aborted && !caller.tookOver && reply.record.verb === "ADD") {
      const del = (k: string) => k === "CNI_COMMAND" ? "DEL" : env(k);
      const undo = await this.#invoke({ env: del, stdin, started: Date.now(), undoOf: callId }, {
        nodeConfig: () => Promise.resolve(node),
      });
      await this.#record(undo, Date.now(), "undo: the ADD's caller is gone");
    }
    return reply;
  }

  /** One invocation over the warm client and the node's limiter; its slots end with it. */
  async #invoke(
    req: InvokeRequest,
    deps: Omit<InvokeDeps, "openMilo">,
    signal?: AbortSignal,
  ): Promise<Reply> {
    const calls: CallLimiter[] = [];
    try {
      return await invoke(req, {
        ...deps,
        openMilo: (node, requestMs, deadline, flow) => {
          const call = this.#limiter.forCall(flow.route);
          calls.push(call);
          return this.#open(node, requestMs, deadline, call, flow.purpose, signal);
        },
      });
    } finally {
      for (const c of calls) c.close();
    }
  }

  async #record(reply: Reply, started: number, why?: string): Promise<void> {
    const verb = String(reply.record.verb ?? "none");
    const code = String(reply.exitCode === 0 ? 0 : reply.stdout?.code ?? 1);
    this.metrics.calls.add({ verb, code });
    const duplicates = Array.isArray(reply.record.duplicates) ? reply.record.duplicates.length : 0;
    if (duplicates) this.metrics.duplicates.add({ via: "release" }, duplicates);
    this.metrics.latency.observe({ verb }, (Date.now() - started) / 1000);
    if (!reply.node) return;
    this.#logger.configure(reply.node.log.file, reply.node.log.level);
    if (reply.node.warning) await this.#logger.write("warn", { msg: reply.node.warning });
    await this.#logger.write(reply.exitCode === 0 && !duplicates ? "info" : "error", {
      ...reply.record,
      via: "agent",
      ...(why ? { why } : {}),
    });
  }

  async #open(
    node: NodeConfig,
    requestMs: number,
    deadline: number,
    limiter: CallLimiter,
    purpose: Purpose,
    signal?: AbortSignal,
  ): Promise<MiloClient> {
    const [token, client] = await Promise.all([
      readToken(node).catch((err) => {
        this.metrics.tokenReloadFailures.add();
        throw err;
      }),
      this.#warm.for(node),
    ]);
    return new MiloClient({
      baseUrl: node.milo.url.replace(/\/+$/, ""),
      namespace: node.milo.namespace,
      token,
      requestMs,
      deadline,
      client,
      signal,
      limiter,
      purpose,
      deletes: markingDeletes(node),
      onRequest: (e) => {
        this.metrics.miloRequests.add({ method: e.method, status: String(e.status) });
        if (e.attempt > 1) this.metrics.retries.add({ method: e.method });
        this.#ready.observe(e.status);
      },
    });
  }

  /** Runs one node reconcile now (skipped while one is running). */
  reconcileNow(): Promise<void> {
    if (this.#reconciling) return this.#reconciling;
    this.#reconciling = this.#reconcile().finally(() => this.#reconciling = undefined);
    return this.#reconciling;
  }

  async #reconcile(): Promise<void> {
    const startedAt = Date.now();
    try {
      const node = await readNodeConfig(this.#env);
      this.#node = node;
      const t = node.timeouts;
      const call = this.#limiter.forCall(RECONCILE_ROUTE);
      const milo = await this.#open(node, t.requestMs, Date.now() + t.totalMs, call, "release");
      const r = await reconcile({
        node,
        milo,
        graceMs: node.reconcile.graceS * 1000,
        dryRun: false,
      }).finally(() => call.close());
      const waiting = r.kept.filter((k) => /absent|younger/.test(k.reason)).length;
      this.metrics.reconcileCandidates.add({}, waiting + r.released.length);
      for (const x of r.released) this.metrics.reconcileReleases.add({ via: x.via });
      if (r.brake) this.metrics.reconcileBrakes.add({ reason: r.brake.reason });
      this.metrics.otherHostClaims.set(r.otherHosts.reduce((n, h) => n + h.claims, 0));
      for (const x of r.remade) this.metrics.leaseRepairs.add({ outcome: x.outcome });
      if (r.duplicates.length) {
        this.metrics.leaseRepairs.add({ outcome: "duplicate" }, r.duplicates.length);
        this.metrics.duplicates.add({ via: "reconcile" }, r.duplicates.length);
      }
      if (r.missing.length) this.metrics.leaseRepairs.add({ outcome: "failed" }, r.missing.length);
      if (r.verified) {
        this.metrics.duplicateAddresses.set(r.duplicates.length);
        this.metrics.liveWithoutClaim.set(r.missing.length);
      }
      for (const msg of r.warnings.filter((w) => !this.#warned.has(w))) {
        this.#warned.add(msg);
        await this.#logger.write("warn", { verb: "RECONCILE", msg });
      }
      const odd = r.brake || r.otherHosts.length || r.remade.length;
      const bad = r.errors.length || r.duplicates.length || r.missing.length;
      const level = bad ? "error" : odd ? "warn" : "info";
      await this.#logger.write(level, {
        verb: "RECONCILE",
        node: r.node,
        released: r.released.map((x) => ({
          claim: x.claim,
          ...(x.pod ? { pod: x.pod } : {}),
          ...(x.address ? { address: x.address } : {}),
          via: x.via,
        })),
        kept: r.kept.length,
        ...(r.brake ? { brake: r.brake } : {}),
        ...(r.otherHosts.length ? { otherHosts: r.otherHosts } : {}),
        ...(r.remade.length ? { remade: r.remade } : {}),
        ...(r.duplicates.length ? { duplicates: r.duplicates } : {}),
        ...(r.missing.length ? { missing: r.missing } : {}),
        journal: r.journal,
        errors: r.errors,
        durationMs: Date.now() - startedAt,
      });
    } catch (err) {
      const e = toCniError(err);
      await this.#logger.write("error", { verb: "RECONCILE", code: e.code, msg: e.message });
    }
  }

  async #renderMetrics(): Promise<string> {
    const size = await Deno.stat(`${this.#node.stateDir}/${FALLBACK_COUNTER}`)
      .then((s) => s.size, () => 0);
    this.metrics.rateLimit.set(this.#limiter.rate);
    this.metrics.concurrencyLimit.set(this.#limiter.concurrency);
    const journal = new Journal(this.#node.stateDir);
    this.metrics.journalOwed.set(await journal.owed().catch(() => NaN));
    this.metrics.journalMax.set(journal.max);
    this.metrics.ready.set(await this.#ready.probe() === null ? 1 : 0);
    return this.metrics.render(size);
  }

  /**
   * Asks Milo with the node's token, as STATUS does: one GET of a claim name
   * milo-ipam never makes (a tenant cannot read Milo's IPClasses).
   */
  async #checkMilo(): Promise<string | null> {
    try {
      const node = await readNodeConfig(this.#env);
      const t = node.timeouts;
      // The node's own flow, as its reconcile's: a probe never takes a tenant's turn.
      const call = this.#limiter.forCall(RECONCILE_ROUTE);
      const milo = await this.#open(node, t.requestMs, Date.now() + t.totalMs, call, "release");
      await milo.getClaim(STATUS_PROBE).finally(() => call.close());
      return null;
    } catch (err) {
      return `Milo is not usable with the node's token: ${toCniError(err).message}`;
    }
  }
}
