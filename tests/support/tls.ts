/** Throwaway test CA (implemented in `milo-dev/testca.ts`). */

export { makeTestCA, type TestCA } from "../../milo-dev/testca.ts";
