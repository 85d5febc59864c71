/** The milo-dev seed of the containerd e2e: one tenant, IPv4 /32s from 10.214.0.0/24. */
import { runtimeSeed } from "../seeds.ts";

const cri = runtimeSeed("micri", "c", "10.214.0.0/24");
/** The seed. */
export const CRI_SEED = cri.seed;
/** The project of {@link CRI_SEED}. */
export const CRI_PROJECT = cri.project;
/** Bearer token of {@link CRI_SEED}. */
export const CRI_TOKEN = cri.token;
/** The IPClass the containerd network's ipam block asks for. */
export const CRI_CLASS = cri.className;
