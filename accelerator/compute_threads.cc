#include "accelerator/compute_threads.h"

#include <ATen/Config.h>
#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <torch/torch.h>

// With the OpenMP backend (Debian's libtorch), libtorch's intra-op count is OpenMP's
// nthreads-var, which each thread holds for itself; ScopedComputeThreads relies on that.
#if !AT_PARALLEL_OPENMP
#error "ScopedComputeThreads needs libtorch's OpenMP parallel backend (per-thread intra-op thread counts)"
#endif

namespace txscore::accelerator {
namespace {

using SetThreads = void (*)(int);
using GetThreads = int (*)();

// Looked up at run time: the BLAS under libtorch is a packaging choice, and libgomp comes with
// libtorch; neither is a link dependency of ours.
template <typename F>
F Lookup(const char* symbol) {
  return reinterpret_cast<F>(dlsym(RTLD_DEFAULT, symbol));
}

// This thread's OpenMP count only (at::set_num_threads would also change what new threads
// start with).
void SetThisThreadsCount(int threads) {
  static const SetThreads set = Lookup<SetThreads>("omp_set_num_threads");
  if (set != nullptr) set(threads);
}

}  // namespace

void SetComputeThreads(int threads) {
  if (threads <= 0) return;
  torch::set_num_threads(threads);
  if (auto set = Lookup<SetThreads>("openblas_set_num_threads")) set(threads);
}

int ComputeThreads() { return torch::get_num_threads(); }

int BlasThreads() {
  auto get = Lookup<GetThreads>("openblas_get_num_threads");
  return get != nullptr ? get() : 0;
}

ScopedComputeThreads::ScopedComputeThreads(int threads) {
  if (threads <= 0) return;
  // Also gives this thread libtorch's start-up count if it has run no tensor work yet, so that
  // its first parallel op cannot replace ours with it.
  const int current = at::get_num_threads();
  if (current == threads) return;
  SetThisThreadsCount(threads);
  previous_ = current;
}

ScopedComputeThreads::~ScopedComputeThreads() {
  if (previous_ > 0) SetThisThreadsCount(previous_);
}

}  // namespace txscore::accelerator
