// Joins the outputs of a claims job's shards (ClaimsShard, pipelines/claims_job.h) into one
// output in input order, as `txscore batch merge` does: the file one unsharded run writes, line
// for line (each line's "timings" aside, which every run measures anew).
//
// Checked first, and nothing is written when a check fails: each shard's OUTPUT.summary.json
// exists and says "done"; all are shards of the same input (path and SHA-256) and the same
// split (N, round robin or contiguous); every shard 0..N-1 is there exactly once; each output's
// lines are in input order, and no line is in two shards. The merged output is written to a
// temporary file, synced, and renamed over OUTPUT; OUTPUT.summary.json adds up the shards'
// counts (rows, errors, decisions, LLM findings and shortfalls) and lists the shards.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"

namespace txscore::pipelines {

struct ClaimsMergeSummary {
  int shards = 0;
  int64_t lines = 0;   // lines written
  int64_t errors = 0;  // of those, error lines
};

// kInvalidArgument naming the shard output at fault (field "shards"); kFailedPrecondition when
// OUTPUT (or its summary) exists and `replace_existing` is false (Default: refused, so a merge
// never overwrites a file without being told to); kInternal when OUTPUT cannot be written.
Result<ClaimsMergeSummary> MergeShardOutputs(const std::vector<std::string>& shard_outputs, const std::string& output,
                                             bool replace_existing = false);

}  // namespace txscore::pipelines
