// How many threads the host's tensor math uses: libtorch's intra-op pool and the BLAS library
// under it. Debian's libtorch multiplies matrices with OpenBLAS, which keeps its own thread
// pool that torch::set_num_threads does not reach; its idle workers spin (sched_yield) for a
// while after every product, so a model told to use one thread still kept a second core busy.
//
// What is process-wide and what is per thread (libtorch 1.13, OpenMP backend; checked by
// tests/accelerator/compute_threads_test.cc): OpenBLAS's count is one for the whole process;
// libtorch's count is kept per thread, but at::set_num_threads also sets the count every thread
// that has not yet run tensor work will start with. So the process-wide settings belong to the
// program, set once at start-up from its configuration (SetComputeThreads); a stage that wants
// its own count for its own work uses ScopedComputeThreads on its own thread.
#pragma once

namespace txscore::accelerator {

// Process-wide. threads > 0: libtorch (this thread, and every thread that has not yet run
// tensor work) and (when loaded) OpenBLAS use that many. 0 leaves both as they are. Called by
// the program at start-up (service/commands/pipeline_setup.cc) and by calibration, which puts
// the previous count back; never by a stage behind the others' backs.
void SetComputeThreads(int threads);
int ComputeThreads();  // libtorch's intra-op thread count on the calling thread
int BlasThreads();     // OpenBLAS's (process-wide) thread count; 0 when the BLAS is not OpenBLAS

// Sets the calling thread's libtorch intra-op thread count for the guard's lifetime and puts
// the previous count back when it ends. Other threads, threads started later and OpenBLAS's
// pool are untouched. threads <= 0: changes nothing. Must end on the thread it began on.
class ScopedComputeThreads {
 public:
  explicit ScopedComputeThreads(int threads);
  ~ScopedComputeThreads();
  ScopedComputeThreads(const ScopedComputeThreads&) = delete;
  ScopedComputeThreads& operator=(const ScopedComputeThreads&) = delete;

 private:
  int previous_ = 0;  // 0: nothing to put back
};

}  // namespace txscore::accelerator
