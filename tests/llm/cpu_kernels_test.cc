// The CPU decode kernels (llm/cpu_kernels/) against libtorch: each kernel of every set this
// CPU runs, then whole decode steps against the decoder's libtorch pass, per family.
//
// Tolerances, and why:
// - bfloat16 products accumulate in float32 in a different order than libtorch (and
//   vdpbf16ps adds pairs first): |ours - libtorch| <= 2e-5 * sum |x_k * w_k|, float32's
//   rounding over a few hundred terms, with room.
// - int8 products are integers: exact, and bit-identical in every set.
// - RMSNorm and RoPE round once where libtorch's bfloat16 ops round at each step: at most two
//   bfloat16 units in the last place (2^-7 relative).
// - A decode step's logits: cosine >= 0.999 with libtorch's step in bfloat16, the same greedy
//   token, and the largest difference within 5 % of the largest logit (cosine and argmax alone
//   would not see a scale such as Granite's logits_scaling go missing); int8 weights against
//   bfloat16: cosine >= 0.99 (the quantization's cost, which `txscore conformance` reports per
//   family).
#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>
#include <torch/torch.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "llm/checkpoint_maker.h"
#include "llm/cpu_kernels/decode_step.h"
#include "llm/cpu_kernels/kernels.h"
#include "llm/decoder.h"
#include "llm/rope.h"
#include "tests/test_support.h"

namespace txscore::llm::cpu {
namespace {

torch::Tensor RandomBf16(std::vector<int64_t> shape, uint64_t seed) {
  torch::manual_seed(seed);
  return torch::randn(shape, torch::kFloat32).to(torch::kBFloat16).contiguous();
}

const Bf16* Data(const torch::Tensor& t) { return reinterpret_cast<const Bf16*>(t.data_ptr<at::BFloat16>()); }

class KernelSetTest : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    kernels_ = KernelsFor(GetParam());
    if (kernels_ == nullptr) GTEST_SKIP() << "this CPU has no " << IsaName(GetParam()) << " kernels";
  }
  const KernelSet* kernels_ = nullptr;
};

// Odd sizes: every vector loop's tail runs, rows are not a multiple of four, and a batch of 7
// is a block of four activation rows and one of three.
constexpr int64_t kRows = 37, kCols = 203, kBatch = 7;

TEST_P(KernelSetTest, Bf16ProductEqualsLibtorchsFloat32LinearWithinRounding) {
  const torch::Tensor w = RandomBf16({kRows, kCols}, 1), x = RandomBf16({kBatch, kCols}, 2);
  std::vector<float> out(static_cast<size_t>(kBatch * kRows), -1.0f);
  // Two row ranges, as two threads would split it.
  kernels_->gemv_bf16({.values = Data(w), .rows = kRows, .cols = kCols}, Data(x), kBatch,
                      {.f32 = out.data(), .stride = kRows}, 0, 20);
  kernels_->gemv_bf16({.values = Data(w), .rows = kRows, .cols = kCols}, Data(x), kBatch,
                      {.f32 = out.data(), .stride = kRows}, 20, kRows);
  const torch::Tensor reference = torch::nn::functional::linear(x.to(torch::kFloat32), w.to(torch::kFloat32));
  const torch::Tensor magnitude = torch::matmul(x.to(torch::kFloat32).abs(), w.to(torch::kFloat32).abs().t());
  for (int64_t m = 0; m < kBatch; ++m) {
    for (int64_t r = 0; r < kRows; ++r) {
      const float expected = reference[m][r].item<float>();
      EXPECT_NEAR(out[static_cast<size_t>(m * kRows + r)], expected, 2e-5 * magnitude[m][r].item<float>())
          << "row " << r << " of activation " << m;
    }
  }
}

TEST_P(KernelSetTest, Bf16ProductRoundsItsBfloat16OutputToNearestEven) {
  const torch::Tensor w = RandomBf16({kRows, kCols}, 3), x = RandomBf16({1, kCols}, 4);
  std::vector<float> wide(kRows);
  std::vector<Bf16> narrow(kRows);
  const Bf16Matrix matrix{.values = Data(w), .rows = kRows, .cols = kCols};
  kernels_->gemv_bf16(matrix, Data(x), 1, {.f32 = wide.data(), .stride = kRows}, 0, kRows);
  kernels_->gemv_bf16(matrix, Data(x), 1, {.bf16 = narrow.data(), .stride = kRows}, 0, kRows);
  for (int64_t r = 0; r < kRows; ++r) {
    const float libtorch_rounded = torch::tensor(wide[static_cast<size_t>(r)]).to(torch::kBFloat16).item<float>();
    EXPECT_EQ(Bf16ToFloat(narrow[static_cast<size_t>(r)]), libtorch_rounded) << "row " << r;
  }
}

TEST_P(KernelSetTest, Int8ProductIsTheExactIntegerProductScaled) {
  const torch::Tensor w = RandomBf16({kRows, kCols}, 5).to(torch::kFloat32).contiguous();
  const torch::Tensor x = RandomBf16({kBatch, kCols}, 6);
  torch::Tensor values = torch::empty({kRows, kCols}, torch::kInt8), scales = torch::empty({kRows}),
                row_sums = torch::empty({kRows}, torch::kInt32);
  QuantizeInt8Rows(w.data_ptr<float>(), kRows, kCols, values.data_ptr<int8_t>(), scales.data_ptr<float>(),
                   row_sums.data_ptr<int32_t>());
  torch::Tensor x_values = torch::empty({kBatch, kCols}, torch::kUInt8), x_scales = torch::empty({kBatch});
  QuantizeActivations(Data(x), kBatch, kCols, x_values.data_ptr<uint8_t>(), x_scales.data_ptr<float>());
  std::vector<float> out(static_cast<size_t>(kBatch * kRows));
  const Int8Matrix matrix{.values = values.data_ptr<int8_t>(),
                          .scales = scales.data_ptr<float>(),
                          .row_sums = row_sums.data_ptr<int32_t>(),
                          .rows = kRows,
                          .cols = kCols};
  const QuantizedActivations activations{
      .values = x_values.data_ptr<uint8_t>(), .scales = x_scales.data_ptr<float>(), .rows = kBatch, .cols = kCols};
  kernels_->gemv_int8(matrix, activations, {.f32 = out.data(), .stride = kRows}, 0, 9);
  kernels_->gemv_int8(matrix, activations, {.f32 = out.data(), .stride = kRows}, 9, kRows);
  // libtorch in int64: (x - 128) . w, then times the weight row's and the activation's scale.
  const torch::Tensor dots = torch::matmul(x_values.to(torch::kInt64) - 128, values.to(torch::kInt64).t());
  const torch::Tensor expected = dots.to(torch::kFloat32) * scales.unsqueeze(0) * x_scales.unsqueeze(1);
  for (int64_t m = 0; m < kBatch; ++m) {
    for (int64_t r = 0; r < kRows; ++r) {
      EXPECT_EQ(out[static_cast<size_t>(m * kRows + r)], expected[m][r].item<float>()) << "row " << r;
    }
  }
}

// Against libtorch's float32 product rounded to bfloat16, bit for bit: random rows, two rows
// whose products are exact ties (1 * (1 + 2^-8) lies halfway between two bfloat16 values and
// rounds down to the even one; 1 * (1 + 3 * 2^-8) rounds up to it: so rounding half down and
// half up both fail), a subnormal scale (rounded, not flushed to zero), a zero scale and a
// NaN one whose payload is all ones (rounding its bits as a number's would carry into the
// sign: -0); NaN's payload is not compared, libtorch's differs between its own paths. The
// buffer has a guard after it.
TEST_P(KernelSetTest, DequantizedInt8RowsAreLibtorchsBfloat16RoundingOfValuesTimesScales) {
  const torch::Tensor w = RandomBf16({kRows, kCols}, 8).to(torch::kFloat32).contiguous();
  torch::Tensor values = torch::empty({kRows, kCols}, torch::kInt8), scales = torch::empty({kRows}),
                row_sums = torch::empty({kRows}, torch::kInt32);
  QuantizeInt8Rows(w.data_ptr<float>(), kRows, kCols, values.data_ptr<int8_t>(), scales.data_ptr<float>(),
                   row_sums.data_ptr<int32_t>());
  constexpr int64_t kTieDownRow = 3, kSubnormalRow = 4, kZeroRow = 5, kNanRow = 6, kTieUpRow = 7;
  float* scale_data = scales.data_ptr<float>();
  scale_data[kTieDownRow] = 1.0f + 1.0f / 256;
  scale_data[kTieUpRow] = 1.0f + 3.0f / 256;
  scale_data[kSubnormalRow] = 1e-40f;
  scale_data[kZeroRow] = 0.0f;
  const uint32_t nan_bits = 0x7fffffff;  // written as bits: nothing on the way may quiet it
  std::memcpy(&scale_data[kNanRow], &nan_bits, sizeof nan_bits);
  constexpr int64_t kGuard = 32;
  constexpr Bf16 kUnwritten = 0xdead;
  std::vector<Bf16> out(static_cast<size_t>(kRows * kCols + kGuard), kUnwritten);
  const Int8Matrix matrix{.values = values.data_ptr<int8_t>(),
                          .scales = scales.data_ptr<float>(),
                          .row_sums = row_sums.data_ptr<int32_t>(),
                          .rows = kRows,
                          .cols = kCols};
  // Rows 9.. one at a time, last first, then 0..8 in one call: a row is written after the
  // one that follows it, so a row whose tail spills into the next one is seen.
  for (int64_t r = kRows - 1; r >= 9; --r) kernels_->dequantize_int8(matrix, r, r + 1, out.data());
  kernels_->dequantize_int8(matrix, 0, 9, out.data());
  const torch::Tensor expected = (values.to(torch::kFloat32) * scales.unsqueeze(1)).to(torch::kBFloat16).contiguous();
  const Bf16* expected_bits = Data(expected);
  const auto* value_bytes = values.data_ptr<int8_t>();
  int ties_down = 0, ties_up = 0;
  for (int64_t i = 0; i < kRows * kCols; ++i) {
    const auto at = static_cast<size_t>(i);
    if (i / kCols == kNanRow) {
      EXPECT_TRUE(std::isnan(Bf16ToFloat(out[at]))) << "element " << i;
      continue;
    }
    EXPECT_EQ(out[at], expected_bits[i]) << "row " << i / kCols << ", column " << i % kCols;
    // The premise: libtorch rounds these ties to even, down in one row and up in the other.
    if (value_bytes[i] == 1 && i / kCols == kTieDownRow) {
      ++ties_down;
      EXPECT_EQ(expected_bits[i], 0x3f80);
    }
    if (value_bytes[i] == 1 && i / kCols == kTieUpRow) {
      ++ties_up;
      EXPECT_EQ(expected_bits[i], 0x3f82);
    }
  }
  for (int64_t i = kRows * kCols; i < kRows * kCols + kGuard; ++i) {
    EXPECT_EQ(out[static_cast<size_t>(i)], kUnwritten) << "written past the matrix at " << i;
  }
  EXPECT_GT(ties_down, 0) << "the tie rows must hold a 1 for the ties to be tested";
  EXPECT_GT(ties_up, 0) << "the tie rows must hold a 1 for the ties to be tested";
  EXPECT_GT(expected[kSubnormalRow].abs().max().item<float>(), 0.0f) << "the subnormal row must not be all zero";
}

TEST_P(KernelSetTest, WeightedSumOfValuesEqualsLibtorchsProduct) {
  // A cache row longer than the head; 75 dimensions: every set's scalar tail runs.
  constexpr int64_t kTokens = 19, kDims = 75, kStride = 80;
  const torch::Tensor v = RandomBf16({kTokens, kStride}, 7);
  const torch::Tensor weights = torch::softmax(torch::randn({kTokens}), 0).contiguous();
  std::vector<float> out(kDims, 0.5f);  // the kernel adds to what is there
  kernels_->weighted_sum_bf16(weights.data_ptr<float>(), Data(v), kTokens, kStride, kDims, out.data());
  const torch::Tensor expected = torch::matmul(weights, v.narrow(1, 0, kDims).to(torch::kFloat32)) + 0.5f;
  for (int64_t d = 0; d < kDims; ++d) EXPECT_NEAR(out[static_cast<size_t>(d)], expected[d].item<float>(), 1e-5);
}

// One head's attention against the decoder's formula computed in double: scale, then
// softcap, softmax, the weighted sum of values. The scores here reach past the cap, so a
// missing or misplaced cap, or a scale a few percent off, moves the output by more than the
// two bfloat16 units the rounding allows.
TEST_P(KernelSetTest, AttentionOfOneHeadIsTheDecodersScaledCappedSoftmaxOfValues) {
  constexpr int64_t kTokens = 37, kDims = 72;
  const torch::Tensor q = RandomBf16({kDims}, 11), keys = RandomBf16({kTokens, kDims}, 12),
                      values = RandomBf16({kTokens, kDims}, 13);
  for (const float cap : {0.0f, 3.0f}) {
    const float scale = 0.3f;
    std::vector<float> scratch;
    std::vector<Bf16> out(kDims);
    AttendHead(*kernels_, Data(q), Data(keys), Data(values), kTokens, kDims, scale, cap, scratch, out.data());
    torch::Tensor scores = torch::matmul(keys.to(torch::kFloat64), q.to(torch::kFloat64)) * scale;
    if (cap > 0) scores = torch::tanh(scores / cap) * cap;
    EXPECT_GT(scores.abs().max().item<double>(), 2.5) << "the scores must reach the cap for the cap to be tested";
    const torch::Tensor expected = torch::matmul(torch::softmax(scores, 0), values.to(torch::kFloat64));
    for (int64_t d = 0; d < kDims; ++d) {
      const float e = static_cast<float>(expected[d].item<double>());
      EXPECT_NEAR(Bf16ToFloat(out[static_cast<size_t>(d)]), e, std::max(std::ldexp(std::fabs(e), -6), 1e-4f))
          << "dimension " << d << ", cap " << cap;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Sets, KernelSetTest, ::testing::Values(Isa::kPortable, Isa::kAvx2, Isa::kAvx512),
                         [](const ::testing::TestParamInfo<Isa>& info) { return std::string(IsaName(info.param)); });

TEST(CpuKernels, TheBestSetIsTheWidestThisCpuRuns) {
  const std::vector<const KernelSet*> sets = AvailableKernels();
  ASSERT_FALSE(sets.empty());
  EXPECT_EQ(sets.front()->isa, Isa::kPortable);
  EXPECT_EQ(&BestKernels(), sets.back());
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512vnni")) {
    EXPECT_EQ(BestKernels().isa, Isa::kAvx512);
  }
#endif
}

TEST(CpuKernels, QuantizedRowsComeBackWithinHalfAStep) {
  const torch::Tensor w = torch::randn({5, 64});
  torch::Tensor values = torch::empty({5, 64}, torch::kInt8), scales = torch::empty({5}),
                row_sums = torch::empty({5}, torch::kInt32);
  w[2].zero_();  // an all-zero row quantizes to zeros with scale 0
  QuantizeInt8Rows(w.data_ptr<float>(), 5, 64, values.data_ptr<int8_t>(), scales.data_ptr<float>(),
                   row_sums.data_ptr<int32_t>());
  EXPECT_EQ(scales[2].item<float>(), 0.0f);
  for (int64_t r = 0; r < 5; ++r) {
    const float scale = scales[r].item<float>();
    if (r != 2) {
      EXPECT_FLOAT_EQ(scale, w[r].abs().max().item<float>() / 127.0f);
    }
    EXPECT_EQ(row_sums[r].item<int32_t>(), values[r].to(torch::kInt64).sum().item<int64_t>());
    EXPECT_LE(values[r].abs().max().item<int>(), 127);
    const float worst = (values[r].to(torch::kFloat32) * scale - w[r]).abs().max().item<float>();
    EXPECT_LE(worst, scale / 2 * 1.0001f) << "row " << r;
  }
}

// The row's largest magnitude (127) makes the scale 1, so each value's quantized form is the
// value itself rounded half to even, +128; a NaN (a broken model) becomes 0.
TEST(CpuKernels, ActivationsQuantizeToTheNearestStepTiesToEven) {
  const std::vector<float> row = {127, 2.5f, 3.5f, -2.5f, -0.5f, 0.5f, 1.5f, -126.5f, std::nanf("")};
  std::vector<Bf16> x;
  for (float value : row) x.push_back(FloatToBf16(value));
  std::vector<uint8_t> values(row.size());
  float scale = 0;
  QuantizeActivations(x.data(), 1, static_cast<int64_t>(x.size()), values.data(), &scale);
  EXPECT_EQ(scale, 1.0f);
  EXPECT_EQ(values, (std::vector<uint8_t>{255, 130, 132, 126, 128, 128, 130, 2, 128}));
}

TEST(CpuKernels, BfloatRoundingIsNearestEvenAsLibtorchRounds) {
  const torch::Tensor x = torch::randn({4096}) * 1000;
  for (int64_t i = 0; i < x.size(0); ++i) {
    const float value = x[i].item<float>();
    EXPECT_EQ(RoundToBf16(value), x[i].to(torch::kBFloat16).item<float>()) << value;
  }
  EXPECT_EQ(RoundToBf16(1.0f + 1.0f / 256), 1.0f);  // a tie goes to the even neighbour
  EXPECT_EQ(RoundToBf16(1.0f + 3.0f / 256), 1.0f + 4.0f / 256);
  EXPECT_TRUE(std::isnan(RoundToBf16(std::nanf(""))));
}

// Two bfloat16 units in the last place of `expected`.
float TwoUlps(float expected) { return std::ldexp(std::max(std::fabs(expected), 1e-30f), -6); }

TEST(CpuKernels, RmsNormEqualsTheDecodersLibtorchFormula) {
  constexpr int64_t kFeatures = 96;
  const torch::Tensor x = RandomBf16({2, kFeatures}, 8).to(torch::kFloat32).contiguous();
  const torch::Tensor weight = RandomBf16({kFeatures}, 9).to(torch::kFloat32).contiguous();
  for (bool plus_one : {false, true}) {
    std::vector<Bf16> out(2 * kFeatures);
    RmsNormRows(x.data_ptr<float>(), 2, kFeatures, weight.data_ptr<float>(), plus_one, 1e-6, out.data());
    const torch::Tensor normed = x * torch::rsqrt(x.pow(2).mean(-1, true) + 1e-6);
    const torch::Tensor expected = plus_one ? (normed * (1.0 + weight)).to(torch::kBFloat16)
                                            : weight.to(torch::kBFloat16) * normed.to(torch::kBFloat16);
    for (int64_t i = 0; i < 2 * kFeatures; ++i) {
      const float want = expected.view({-1})[i].item<float>();
      EXPECT_NEAR(Bf16ToFloat(out[static_cast<size_t>(i)]), want, TwoUlps(want)) << i << (plus_one ? " (1 + w)" : "");
    }
  }
}

TEST(CpuKernels, RopeEqualsTheDecodersLibtorchRotation) {
  constexpr int64_t kHeads = 3, kHeadDim = 16, kPosition = 37;
  const torch::Tensor inv_freq = RopeInverseFrequencies(RopeConfig{}, kHeadDim).contiguous();
  const torch::Tensor x = RandomBf16({1, kHeads, 1, kHeadDim}, 10);
  const torch::Tensor tables = RopeTables(inv_freq, torch::tensor({{kPosition}}, torch::kInt64)).to(torch::kBFloat16);
  const torch::Tensor rotated =
      torch::cat({-x.narrow(-1, kHeadDim / 2, kHeadDim / 2), x.narrow(-1, 0, kHeadDim / 2)}, -1);
  const torch::Tensor expected = ApplyRope(x, tables[0], tables[1], rotated).view({-1});
  torch::Tensor ours = x.clone();
  ApplyRopeInPlace(reinterpret_cast<Bf16*>(ours.data_ptr<at::BFloat16>()), kHeads, kHeadDim, inv_freq.data_ptr<float>(),
                   kPosition);
  ours = ours.view({-1});
  // libtorch rounds x * cos and rotated * sin before adding them: where they nearly cancel, its
  // error is relative to the terms, not to the sum.
  const torch::Tensor terms = (x.to(torch::kFloat32) * tables[0].to(torch::kFloat32)).abs() +
                              (rotated.to(torch::kFloat32) * tables[1].to(torch::kFloat32)).abs();
  for (int64_t i = 0; i < kHeads * kHeadDim; ++i) {
    const float want = expected[i].item<float>();
    EXPECT_NEAR(ours[i].item<float>(), want, TwoUlps(terms.view({-1})[i].item<float>())) << i;
  }
}

// Whole decode steps: txscore's kernels against the decoder's libtorch pass.
constexpr float kInt8WorstLogitDifference = 0.15f;  // seen: at most 0.053
class CpuDecodeStepTest : public ::testing::TestWithParam<std::string> {
 protected:
  // "llama_untied_biased": llama with its own lm_head.weight and q/k/v biases, paths real
  // checkpoints take (Qwen2's biases, Llama 3.1 8B's untied head) that no built-in family does.
  void SetUp() override {
    CheckpointSpec spec{.family = GetParam()};
    if (GetParam() == "llama_untied_biased") {
      spec.family = "llama";
      spec.tie_word_embeddings = false;
      spec.attention_bias = true;
    }
    ASSERT_TRUE(MakeCheckpoint(spec, dir_.path()).ok());
  }

  std::unique_ptr<Decoder> Load(bool cpu_kernels, DecoderOptions::Quantization quantization,
                                std::optional<int64_t> prefill_group_rows = std::nullopt) {
    auto decoder = Decoder::Load(dir_.path(), {.dtype = accelerator::Dtype::kBFloat16,
                                               .cpu_prefill_group_rows = prefill_group_rows,
                                               .quantization = quantization,
                                               .cpu_kernels = cpu_kernels});
    EXPECT_TRUE(decoder.ok()) << decoder.error().ToString();
    return decoder.ok() ? std::move(decoder).value() : nullptr;
  }

  // Two sequences: a prompt each (prefill, libtorch either way), then decode steps where the
  // second sequence sits out every third step, so positions differ. Logits of every step.
  static std::vector<std::vector<float>> Steps(const Decoder& decoder) {
    auto cache = decoder.NewCache(2, 64);
    std::vector<std::vector<float>> out;
    auto prefill = decoder.Forward(cache.get(), {{5, 17, 3, 99, 42}, {7, 8}});
    EXPECT_TRUE(prefill.ok());
    for (int step = 0; step < 12; ++step) {
      const int32_t a = 1 + (step * 13) % 200, b = 2 + (step * 29) % 200;
      std::vector<std::vector<int32_t>> tokens = {{a},
                                                  step % 3 == 2 ? std::vector<int32_t>{} : std::vector<int32_t>{b}};
      auto logits = decoder.Forward(cache.get(), tokens);
      EXPECT_TRUE(logits.ok()) << logits.error().ToString();
      if (!logits.ok()) break;
      EXPECT_EQ((*logits)[1].empty(), step % 3 == 2);
      for (const auto& row : *logits) {
        if (!row.empty()) out.push_back(row);
      }
    }
    EXPECT_EQ(cache->lengths(), (std::vector<int64_t>{5 + 12, 2 + 8}));
    return out;
  }

  static double Cosine(const std::vector<float>& a, const std::vector<float>& b) {
    double dot = 0, na = 0, nb = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      dot += static_cast<double>(a[i]) * b[i];
      na += static_cast<double>(a[i]) * a[i];
      nb += static_cast<double>(b[i]) * b[i];
    }
    return dot / std::sqrt(na * nb);
  }

  static size_t Argmax(const std::vector<float>& v) {
    return static_cast<size_t>(std::max_element(v.begin(), v.end()) - v.begin());
  }

  testing::TempDir dir_;
};

TEST_P(CpuDecodeStepTest, Bfloat16StepsAgreeWithLibtorchsSteps) {
  const auto ours = Steps(*Load(true, DecoderOptions::Quantization::kNone));
  const auto theirs = Steps(*Load(false, DecoderOptions::Quantization::kNone));
  auto float32 = Decoder::Load(dir_.path());
  ASSERT_TRUE(float32.ok());
  const auto exact = Steps(**float32);
  ASSERT_EQ(ours.size(), theirs.size());
  ASSERT_EQ(ours.size(), 20u);
  // The kernels round differently from libtorch: bit-identical logits would mean the step
  // fell back to libtorch's ops and nothing here tested the kernels.
  EXPECT_NE(ours, theirs);
  double ours_to_float32 = 0, theirs_to_float32 = 0;
  for (size_t i = 0; i < ours.size(); ++i) {
    EXPECT_GE(Cosine(ours[i], theirs[i]), 0.999) << "step row " << i;
    EXPECT_EQ(Argmax(ours[i]), Argmax(theirs[i])) << "step row " << i;
    float largest = 0, worst = 0;
    for (size_t v = 0; v < ours[i].size(); ++v) {
      largest = std::max(largest, std::fabs(theirs[i][v]));
      worst = std::max(worst, std::fabs(ours[i][v] - theirs[i][v]));
    }
    EXPECT_LE(worst, 0.05f * largest) << "step row " << i;
    ours_to_float32 += Cosine(ours[i], exact[i]) / ours.size();
    theirs_to_float32 += Cosine(theirs[i], exact[i]) / ours.size();
  }
  // Both are bfloat16 approximations of the float32 pass: printed for the record, not checked
  // (they differ by less than either's distance from float32).
  std::printf("mean cosine with the float32 pass: kernels %.6f, libtorch bfloat16 %.6f\n", ours_to_float32,
              theirs_to_float32);
}

TEST(CpuDecodeStep, TheKernelsThreadsRunInTheSchedulingClassOfTheThreadThatDecodesFirst) {
  testing::TempDir dir;
  ASSERT_TRUE(MakeCheckpoint({.family = "qwen3"}, dir.path()).ok());
  auto decoder = Decoder::Load(dir.path(), {.dtype = accelerator::Dtype::kBFloat16, .threads = 2});
  ASSERT_TRUE(decoder.ok()) << decoder.error().ToString();
  auto tasks = [] {
    std::set<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) {
      names.insert(entry.path().filename().string());
    }
    return names;
  };
  const std::set<std::string> before = tasks();
  // As a claims job's batcher does (pipelines/dynamic_batcher.h): idle priority, then decode.
  std::thread batcher([&] {
    sched_param param{};
    ASSERT_EQ(pthread_setschedparam(pthread_self(), SCHED_IDLE, &param), 0);
    auto cache = (*decoder)->NewCache(1, 8);
    ASSERT_TRUE((*decoder)->Forward(cache.get(), {{5}}).ok());
  });
  batcher.join();
  int started = 0;
  for (const std::string& task : tasks()) {
    if (before.count(task) != 0) continue;
    ++started;
    EXPECT_EQ(sched_getscheduler(std::stoi(task)), SCHED_IDLE) << "thread " << task;
  }
  EXPECT_EQ(started, 1);  // the pool's one worker (2 threads: the caller is the other)
}

TEST_P(CpuDecodeStepTest, Int8WeightsStayCloseToBfloat16ThroughPrefillAndDecodeSteps) {
  // The decode steps read the caches the int8 prefill filled, so a prefill that lost its
  // weights' scales fails the bounds below too.
  const auto bf16 = Steps(*Load(false, DecoderOptions::Quantization::kNone));
  const auto int8 = Steps(*Load(true, DecoderOptions::Quantization::kInt8));
  const auto int8_libtorch = Steps(*Load(false, DecoderOptions::Quantization::kInt8));
  ASSERT_EQ(int8.size(), bf16.size());
  // The kernels quantize activations, libtorch's pass does not: identical logits would mean
  // the steps fell back to libtorch and nothing here tested the int8 kernels.
  EXPECT_NE(int8, int8_libtorch);
  for (size_t i = 0; i < int8.size(); ++i) {
    EXPECT_GE(Cosine(int8[i], bf16[i]), 0.99) << "step row " << i;
    // libtorch's int8 pass multiplies by the dequantized weights with unquantized activations:
    // close to the kernels', which quantize activations too.
    EXPECT_GE(Cosine(int8[i], int8_libtorch[i]), 0.99) << "step row " << i;
    // Cosine ignores scale: a scale lost on the int8 output head would multiply every logit
    // by one constant and pass it. The largest difference is bounded as well.
    float largest = 0, worst = 0;
    for (size_t v = 0; v < int8[i].size(); ++v) {
      largest = std::max(largest, std::fabs(int8_libtorch[i][v]));
      worst = std::max(worst, std::fabs(int8[i][v] - int8_libtorch[i][v]));
    }
    EXPECT_LE(worst, kInt8WorstLogitDifference * largest) << "step row " << i;
  }
}

TEST_P(CpuDecodeStepTest, APrefillInGroupsOfSeveralSequencesMatchesOnePassInBfloat16AndInt8) {
  // A budget of 8 rows: the prompts form groups {0, 2} and {3, 5} (sequence 2 has none); the
  // next pass, two tokens for sequence 2 and one for the others, groups {0, 4} and {4, 5},
  // the last a one-token group that runs the kernels' decode step on a slice of the cache at
  // an offset. Then plain decode steps over the caches the groups filled.
  const std::vector<std::vector<std::vector<int32_t>>> steps = {{{5, 17, 3}, {7, 8}, {}, {40, 41, 42, 43}, {9}},
                                                                {{1}, {}, {6, 7}, {11}, {12}},
                                                                {{2}, {3}, {4}, {5}, {6}},
                                                                {{21}, {22}, {23}, {24}, {25}}};
  ASSERT_EQ(PrefillGroups(steps[0], 8), (std::vector<SequenceRange>{{0, 2}, {3, 5}}));
  ASSERT_EQ(PrefillGroups(steps[1], 8), (std::vector<SequenceRange>{{0, 4}, {4, 5}}));
  const auto run = [&](const Decoder& decoder) {
    auto cache = decoder.NewCache(5, 32);
    std::vector<std::vector<float>> rows;
    for (const auto& step : steps) {
      auto logits = decoder.Forward(cache.get(), step);
      EXPECT_TRUE(logits.ok()) << logits.error().ToString();
      if (!logits.ok()) break;
      for (size_t i = 0; i < step.size(); ++i) {
        EXPECT_EQ((*logits)[i].empty(), step[i].empty());
        rows.push_back((*logits)[i]);
      }
    }
    EXPECT_EQ(cache->lengths(), (std::vector<int64_t>{6, 4, 4, 7, 4}));
    return rows;
  };
  for (const auto quantization : {DecoderOptions::Quantization::kNone, DecoderOptions::Quantization::kInt8}) {
    const bool int8 = quantization == DecoderOptions::Quantization::kInt8;
    const auto grouped = run(*Load(true, quantization, 8));
    const auto whole = run(*Load(true, quantization, 0));
    ASSERT_EQ(grouped.size(), whole.size());
    for (size_t i = 0; i < grouped.size(); ++i) {
      if (whole[i].empty()) continue;
      // Groups multiply fewer rows at a time (with int8, few enough for the int8 kernel
      // instead of the dequantized weights), so they round differently.
      EXPECT_GE(Cosine(grouped[i], whole[i]), int8 ? 0.99 : 0.999) << (int8 ? "int8" : "bfloat16") << ", row " << i;
    }
    // That the groups ran: the prompts' first group, {0, 2}, is the same computation as those
    // two sequences alone in one pass, to the bit.
    auto alone_decoder = Load(true, quantization, 0);
    auto alone_cache = alone_decoder->NewCache(2, 32);
    const auto alone = alone_decoder->Forward(alone_cache.get(), {steps[0][0], steps[0][1]});
    ASSERT_TRUE(alone.ok()) << alone.error().ToString();
    EXPECT_EQ(grouped[0], (*alone)[0]) << (int8 ? "int8" : "bfloat16");
    EXPECT_EQ(grouped[1], (*alone)[1]) << (int8 ? "int8" : "bfloat16");
    // With int8 the whole batch's 20 rows take the dequantized weights and the group's 6 the
    // int8 kernel: the check above tells the two apart.
    if (int8) EXPECT_NE(whole[0], (*alone)[0]);
  }
}

INSTANTIATE_TEST_SUITE_P(Families, CpuDecodeStepTest,
                         ::testing::Values("llama", "qwen3", "granite", "gemma2", "gemma3", "llama_untied_biased"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

TEST(CpuDecodeStep, Int8NeedsBfloat16OnTheCpu) {
  testing::TempDir dir;
  ASSERT_TRUE(MakeCheckpoint({.family = "qwen3"}, dir.path()).ok());
  auto decoder = Decoder::Load(dir.path(), {.quantization = DecoderOptions::Quantization::kInt8});
  ASSERT_FALSE(decoder.ok());
  EXPECT_EQ(decoder.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(decoder.error().field, "quantization");
}

}  // namespace
}  // namespace txscore::llm::cpu
