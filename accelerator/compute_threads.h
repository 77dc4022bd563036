// How many threads the host's tensor math uses: libtorch's intra-op pool and the BLAS library
// under it. Debian's libtorch multiplies matrices with OpenBLAS, which keeps its own thread
// pool that torch::set_num_threads does not reach; its idle workers spin (sched_yield) for a
// while after every product, so a model told to use one thread still kept a second core busy.
#pragma once

namespace txscore::accelerator {

// threads > 0: libtorch and (when loaded) OpenBLAS use that many. 0 leaves both as they are.
void SetComputeThreads(int threads);
int ComputeThreads();  // libtorch's current intra-op thread count

}  // namespace txscore::accelerator
