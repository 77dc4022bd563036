#include "accelerator/compute_threads.h"

#include <dlfcn.h>
#include <torch/torch.h>

namespace txscore::accelerator {

void SetComputeThreads(int threads) {
  if (threads <= 0) return;
  torch::set_num_threads(threads);
  // Looked up at run time: the BLAS under libtorch is a packaging choice, not a link dependency.
  using SetBlasThreads = void (*)(int);
  if (auto set = reinterpret_cast<SetBlasThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) set(threads);
}

int ComputeThreads() { return torch::get_num_threads(); }

}  // namespace txscore::accelerator
