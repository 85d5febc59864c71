/** The benchmark's milo-dev seed lives in `testing/seeds/bench.json`. */

export { BENCH_CLASSES, BENCH_SEED, BENCH_TOKEN } from "../testing/seeds.ts";
