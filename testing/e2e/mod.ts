/** The e2e harness: every room, for tests that build on the {@link World}. */
export * from "./cache.ts";
export * from "./kubelet.ts";
export * from "./ledger.ts";
export * from "./milo.ts";
export * from "./netconf.ts";
export * from "./netns.ts";
export * from "./node_agent.ts";
export * from "./nodes.ts";
export * from "./pool.ts";
export * from "./runtime.ts";
export * from "./topology.ts";
export * from "./world.ts";
