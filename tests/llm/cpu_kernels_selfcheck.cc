// The CPU kernels checked with nothing but the kernels themselves: every set this CPU runs
// against plain double-precision loops. Built natively (a CTest) and cross-built for s390x
// and run under qemu (tests/llm/cpu_kernels_s390x_test.sh): the portable set is what a
// big-endian IBM Z runs, on the same worker pool. Prints one line per set and one for the
// pool; exit status 1 on any mismatch.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "llm/cpu_kernels/kernels.h"
#include "llm/cpu_kernels/worker_pool.h"

namespace {

using namespace txscore::llm::cpu;

int failures = 0;

void Check(bool ok, const std::string& what) {
  if (!ok) {
    ++failures;
    std::printf("FAIL: %s\n", what.c_str());
  }
}

// Deterministic values in about [-2, 2], exactly representable in bfloat16.
float Value(uint32_t i) {
  const uint32_t h = (i * 2654435761u) >> 16;
  return RoundToBf16((static_cast<float>(h % 4001) - 2000.0f) / 1000.0f);
}

}  // namespace

int main() {
  const uint16_t probe = 1;
  unsigned char first;
  std::memcpy(&first, &probe, 1);
  std::printf("byte order: %s\n", first == 1 ? "little-endian" : "big-endian");
  Check(FloatToBf16(1.0f) == 0x3f80 && Bf16ToFloat(0x3f80) == 1.0f, "1.0 is 0x3f80");
  Check(FloatToBf16(-2.5f) == 0xc020, "-2.5 is 0xc020");
  Check(RoundToBf16(1.0f + 1.0f / 256) == 1.0f, "a tie rounds to the even neighbour");
  Check(RoundToBf16(1.0f + 3.0f / 256) == 1.0f + 4.0f / 256, "a tie rounds to the even neighbour (up)");

  constexpr int64_t kRows = 37, kCols = 203, kBatch = 3;
  std::vector<float> w(kRows * kCols), x(kBatch * kCols);
  for (size_t i = 0; i < w.size(); ++i) w[i] = Value(static_cast<uint32_t>(i));
  for (size_t i = 0; i < x.size(); ++i) x[i] = Value(static_cast<uint32_t>(i + 100000));
  std::vector<Bf16> w16(w.size()), x16(x.size());
  for (size_t i = 0; i < w.size(); ++i) w16[i] = FloatToBf16(w[i]);
  for (size_t i = 0; i < x.size(); ++i) x16[i] = FloatToBf16(x[i]);
  std::vector<int8_t> wq(w.size());
  std::vector<float> w_scales(kRows), x_scales(kBatch);
  std::vector<int32_t> row_sums(kRows);
  QuantizeInt8Rows(w.data(), kRows, kCols, wq.data(), w_scales.data(), row_sums.data());
  std::vector<uint8_t> xq(x.size());
  QuantizeActivations(x16.data(), kBatch, kCols, xq.data(), x_scales.data());

  for (const KernelSet* set : AvailableKernels()) {
    const std::string name(IsaName(set->isa));
    const int before = failures;
    std::vector<float> out(kBatch * kRows);
    set->gemv_bf16({w16.data(), kRows, kCols}, x16.data(), kBatch, {.f32 = out.data(), .stride = kRows}, 0, kRows);
    for (int64_t m = 0; m < kBatch; ++m) {
      for (int64_t r = 0; r < kRows; ++r) {
        double exact = 0, magnitude = 0;
        for (int64_t k = 0; k < kCols; ++k) {
          exact += static_cast<double>(w[r * kCols + k]) * x[m * kCols + k];
          magnitude += std::fabs(static_cast<double>(w[r * kCols + k]) * x[m * kCols + k]);
        }
        Check(std::fabs(out[m * kRows + r] - exact) <= 2e-5 * magnitude,
              name + " bf16 product row " + std::to_string(r));
      }
    }
    set->gemv_int8({wq.data(), w_scales.data(), row_sums.data(), kRows, kCols},
                   {xq.data(), x_scales.data(), kBatch, kCols}, {.f32 = out.data(), .stride = kRows}, 0, kRows);
    for (int64_t m = 0; m < kBatch; ++m) {
      for (int64_t r = 0; r < kRows; ++r) {
        int64_t dot = 0;
        for (int64_t k = 0; k < kCols; ++k) dot += (static_cast<int64_t>(xq[m * kCols + k]) - 128) * wq[r * kCols + k];
        const float expected = static_cast<float>(dot) * w_scales[r] * x_scales[m];
        Check(out[m * kRows + r] == expected, name + " int8 product row " + std::to_string(r));
      }
    }
    std::vector<Bf16> dequantized(w.size());
    set->dequantize_int8({wq.data(), w_scales.data(), row_sums.data(), kRows, kCols}, 0, kRows, dequantized.data());
    for (int64_t r = 0; r < kRows; ++r) {
      for (int64_t k = 0; k < kCols; ++k) {
        // Exact in double (an int8 times a float fits), rounded to float as a float multiply
        // rounds it, then to bfloat16.
        const double exact = static_cast<double>(wq[r * kCols + k]) * w_scales[r];
        Check(dequantized[r * kCols + k] == FloatToBf16(static_cast<float>(exact)),
              name + " dequantized row " + std::to_string(r) + " column " + std::to_string(k));
      }
    }
    std::vector<float> weights(kRows), sum(64, 0.25f);
    for (int64_t t = 0; t < kRows; ++t) weights[t] = 1.0f / static_cast<float>(t + 1);
    set->weighted_sum_bf16(weights.data(), w16.data(), kRows, kCols, 64, sum.data());
    for (int64_t d = 0; d < 64; ++d) {
      double exact = 0.25;
      for (int64_t t = 0; t < kRows; ++t) exact += static_cast<double>(weights[t]) * w[t * kCols + d];
      Check(std::fabs(sum[d] - exact) <= 1e-5, name + " weighted sum " + std::to_string(d));
    }
    std::printf("%s: %s\n", name.c_str(), failures == before ? "ok" : "FAILED");
  }

  // The decode's products run on the pool in chunks: three threads, rows in chunks of 4, give
  // the same bits as one call over all rows, and every row is written once.
  {
    const int before = failures;
    const KernelSet& portable = *KernelsFor(Isa::kPortable);
    std::vector<float> whole(kBatch * kRows), chunked(kBatch * kRows, -1.0f);
    portable.gemv_bf16({w16.data(), kRows, kCols}, x16.data(), kBatch, {.f32 = whole.data(), .stride = kRows}, 0,
                       kRows);
    WorkerPool pool(3);
    std::vector<int> writes(kRows, 0);
    ParallelRanges(pool, kRows, 4, [&](int64_t begin, int64_t end) {
      portable.gemv_bf16({w16.data(), kRows, kCols}, x16.data(), kBatch, {.f32 = chunked.data(), .stride = kRows},
                         begin, end);
      for (int64_t r = begin; r < end; ++r) ++writes[r];  // chunks are disjoint: no race
    });
    Check(chunked == whole, "the pool's chunked product equals one call's");
    for (int64_t r = 0; r < kRows; ++r) Check(writes[r] == 1, "row " + std::to_string(r) + " written once");
    std::printf("worker pool (%d threads): %s\n", pool.threads(), failures == before ? "ok" : "FAILED");
  }
  return failures == 0 ? 0 : 1;
}
