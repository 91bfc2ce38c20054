// Other sweeps that ride on the compaction schedule (the store's TTL sweep, the cache's), run
// after compaction on each database: { name, run(target, env, run) -> figures }. A sweep's
// figures (or its failure) go into the run's JSON log line under its name, per database:
//
//   export const SWEEPS = [{ name: "store_ttl", run: async ({ db, databaseId }, env, run) => ({ ... }) }];
//
// Their statements come from d1saver's catalogue through compaction.generated.js, as
// compaction's do (compaction/gateway.py). None yet.
export const SWEEPS = [];
