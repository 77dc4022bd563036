#include "llm/decoder.h"

#include <gtest/gtest.h>

#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "accelerator/compute_threads.h"
#include "accelerator/emulated_device.h"
#include "accelerator/op_adapters_torch.h"
#include "common/malloc_tuning.h"
#include "common/prepare_counters.h"
#include "llm/checkpoint_maker.h"
#include "llm/claim_analysis.h"
#include "llm/conformance.h"
#include "llm/generator.h"
#include "llm/model_family.h"
#include "llm/rope.h"
#include "llm/tokenizer.h"
#include "tests/llm/test_model_family.h"
#include "tests/memory_support.h"
#include "tests/test_support.h"

namespace txscore::llm {
namespace {

float MaxDifference(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float worst = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
  return worst;
}

class DecoderTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    CheckpointSpec spec;
    spec.family = GetParam();
    auto made = MakeCheckpoint(spec, dir_.path());
    ASSERT_TRUE(made.ok()) << made.error().ToString();
    auto decoder = Decoder::Load(dir_.path());
    ASSERT_TRUE(decoder.ok()) << decoder.error().ToString();
    decoder_ = std::move(decoder).value();
  }

  // Logits after each new chunk, running one sequence alone.
  std::vector<std::vector<float>> Alone(const std::vector<std::vector<int32_t>>& chunks) {
    auto cache = decoder_->NewCache(1, 64);
    std::vector<std::vector<float>> out;
    for (const auto& chunk : chunks) {
      auto logits = decoder_->Forward(cache.get(), {chunk});
      EXPECT_TRUE(logits.ok()) << logits.error().ToString();
      out.push_back((*logits)[0]);
    }
    return out;
  }

  testing::TempDir dir_;
  std::unique_ptr<Decoder> decoder_;
};

TEST_P(DecoderTest, BatchOfDifferentLengthsEqualsEachSequenceAlone) {
  // Equal within 1e-4: batched and single-row matrix products round differently (measured up
  // to 1.3e-5 on logits of magnitude ~10). Three sequences: prefill of 5, 12 and 1 tokens, then decode steps in which
  // the third sequence sits one step out. Sliding-window families have a window of 8, so the longer sequences cross it.
  const std::vector<std::vector<int32_t>> a = {{1, 2, 3, 4, 5}, {6}, {7}};
  const std::vector<std::vector<int32_t>> b = {{10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120}, {130}, {140}};
  const std::vector<std::vector<int32_t>> c = {{200}, {}, {201}};
  auto cache = decoder_->NewCache(3, 64);
  std::vector<std::vector<std::vector<float>>> batched(3);
  for (size_t step = 0; step < 3; ++step) {
    auto logits = decoder_->Forward(cache.get(), {a[step], b[step], c[step]});
    ASSERT_TRUE(logits.ok()) << logits.error().ToString();
    for (size_t s = 0; s < 3; ++s) batched[s].push_back((*logits)[s]);
  }
  EXPECT_TRUE(batched[2][1].empty());  // no new tokens, no logits
  EXPECT_EQ(cache->lengths(), (std::vector<int64_t>{7, 14, 2}));

  const auto alone_a = Alone(a);
  const auto alone_b = Alone(b);
  const auto alone_c = Alone({c[0], c[2]});
  for (size_t step = 0; step < 3; ++step) {
    EXPECT_LE(MaxDifference(batched[0][step], alone_a[step]), 1e-4) << "sequence a, step " << step;
    EXPECT_LE(MaxDifference(batched[1][step], alone_b[step]), 1e-4) << "sequence b, step " << step;
  }
  EXPECT_LE(MaxDifference(batched[2][0], alone_c[0]), 1e-4);
  EXPECT_LE(MaxDifference(batched[2][2], alone_c[1]), 1e-4);
}

TEST_P(DecoderTest, PrefillEqualsTokenByTokenDecoding) {
  const std::vector<int32_t> prompt = {3, 14, 15, 92, 65, 35, 89, 79, 32, 38, 46};
  const auto at_once = Alone({prompt});
  std::vector<std::vector<int32_t>> one_by_one;
  for (int32_t id : prompt) one_by_one.push_back({id});
  EXPECT_LE(MaxDifference(at_once[0], Alone(one_by_one).back()), 1e-4);
}

TEST_P(DecoderTest, Bfloat16StaysCloseToFloat32) {
  auto bf16 = Decoder::Load(dir_.path(), {.dtype = accelerator::Dtype::kBFloat16});
  ASSERT_TRUE(bf16.ok()) << bf16.error().ToString();
  const std::vector<int32_t> prompt = {11, 22, 33, 44, 55, 66};
  auto cache32 = decoder_->NewCache(1, 16);
  auto cache16 = (*bf16)->NewCache(1, 16);
  const auto f32 = decoder_->Forward(cache32.get(), {prompt}).value()[0];
  const auto b16 = (*bf16)->Forward(cache16.get(), {prompt}).value()[0];
  double dot = 0, n32 = 0, n16 = 0;
  for (size_t i = 0; i < f32.size(); ++i) {
    dot += static_cast<double>(f32[i]) * b16[i];
    n32 += static_cast<double>(f32[i]) * f32[i];
    n16 += static_cast<double>(b16[i]) * b16[i];
  }
  EXPECT_GE(dot / std::sqrt(n32 * n16), 0.99);  // cosine similarity of the logits
}

TEST_P(DecoderTest, RunsOnTheEmulatedDeviceCloseToTheCpu) {
  ASSERT_TRUE(accelerator::RegisterEmulatedDevice().ok());
  auto emulated = Decoder::Load(dir_.path(), {.dtype = accelerator::Dtype::kBFloat16, .device = "privateuseone:0"});
  ASSERT_TRUE(emulated.ok()) << emulated.error().ToString();
  accelerator::ResetEmulatedDeviceStats();
  auto cache32 = decoder_->NewCache(1, 24);
  auto cache_emulated = (*emulated)->NewCache(1, 24);
  std::vector<int32_t> step = {11, 22, 33, 44, 55, 66};
  int same_tokens = 0;
  for (int t = 0; t < 8; ++t) {
    const auto f32 = decoder_->Forward(cache32.get(), {step}).value()[0];
    const auto on_device = (*emulated)->Forward(cache_emulated.get(), {step}).value()[0];
    double dot = 0, n32 = 0, n16 = 0;
    for (size_t i = 0; i < f32.size(); ++i) {
      dot += static_cast<double>(f32[i]) * on_device[i];
      n32 += static_cast<double>(f32[i]) * f32[i];
      n16 += static_cast<double>(on_device[i]) * on_device[i];
    }
    EXPECT_GE(dot / std::sqrt(n32 * n16), 0.99) << "step " << t;
    const auto argmax = [](const std::vector<float>& v) {
      return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
    };
    same_tokens += argmax(f32) == argmax(on_device);
    step = {argmax(f32)};  // both follow the float32 path, so each step compares like with like
  }
  EXPECT_GE(same_tokens, 6);
  const accelerator::EmulatedDeviceStats stats = accelerator::EmulatedDeviceStatsSnapshot();
  EXPECT_GT(stats.native_ops, 0);
  EXPECT_EQ(stats.fallback_by_op.count("aten::index_select"), 1u);  // the embedding lookup ran on the host
  EXPECT_GT(stats.bytes_to_host, 0);                                // the logits of every step came back
  EXPECT_GT(stats.modeled_us, 0);
}

TEST_P(DecoderTest, OpAdaptersGiveTheSameLogits) {
  accelerator::OpAdapters all;
  all.rope_as_matmul = all.rms_norm_by_matmul = all.embedding_on_host = true;
  all.vocab_alignment = 100;    // no checkpoint here has a multiple of 100 rows
  all.head_dim_alignment = 24;  // nor a head_dim that is a multiple of 24
  ASSERT_NE(decoder_->config().head_dim % 24, 0);
  auto adapted = Decoder::Load(dir_.path(), {.adapters = all});
  ASSERT_TRUE(adapted.ok()) << adapted.error().ToString();
  const std::vector<int32_t> prompt = {11, 22, 33, 44, 55, 66};
  auto native_cache = decoder_->NewCache(1, 16);
  auto adapted_cache = (*adapted)->NewCache(1, 16);
  const auto native = decoder_->Forward(native_cache.get(), {prompt}).value()[0];
  const auto with_adapters = (*adapted)->Forward(adapted_cache.get(), {prompt}).value()[0];
  ASSERT_EQ(with_adapters.size(), native.size());  // the padding logits are cut off
  EXPECT_LE(MaxDifference(native, with_adapters), 1e-5);
}

TEST_P(DecoderTest, PaddedHeadDimGivesTheSameLogitsOverSeveralSteps) {
  // Alone, so a difference is this adapter's; over steps, so the padded KV cache is read back.
  accelerator::OpAdapters padded;
  padded.head_dim_alignment = 24;
  auto adapted = Decoder::Load(dir_.path(), {.adapters = padded});
  ASSERT_TRUE(adapted.ok()) << adapted.error().ToString();
  auto native_cache = decoder_->NewCache(2, 16);
  auto adapted_cache = (*adapted)->NewCache(2, 16);
  std::vector<std::vector<int32_t>> step = {{11, 22, 33, 44, 55}, {7, 8}};
  for (int t = 0; t < 4; ++t) {
    const auto native = decoder_->Forward(native_cache.get(), step).value();
    const auto with_padding = (*adapted)->Forward(adapted_cache.get(), step).value();
    for (size_t i = 0; i < native.size(); ++i)
      EXPECT_LE(MaxDifference(native[i], with_padding[i]), 1e-5) << "step " << t;
    step = {{static_cast<int32_t>(t + 3)}, {static_cast<int32_t>(t + 9)}};
  }
}

TEST_P(DecoderTest, AttentionInBlocksOfQueryRowsGivesTheSameLogits) {
  // A budget of one element per block makes every query row its own block (and masks built
  // per block); the default attends in one block. Two sequences of different lengths (so
  // padding rows and masks matter), 12 tokens (past the sliding window of 8), then decode steps.
  auto blocked = Decoder::Load(dir_.path(), {.attention_block_elements = 1});
  ASSERT_TRUE(blocked.ok()) << blocked.error().ToString();
  auto whole_cache = decoder_->NewCache(2, 32);
  auto blocked_cache = (*blocked)->NewCache(2, 32);
  std::vector<std::vector<int32_t>> step = {{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {40, 41, 42}};
  for (int t = 0; t < 3; ++t) {
    const auto whole = decoder_->Forward(whole_cache.get(), step).value();
    const auto in_blocks = (*blocked)->Forward(blocked_cache.get(), step).value();
    for (size_t i = 0; i < whole.size(); ++i) {
      EXPECT_LE(MaxDifference(whole[i], in_blocks[i]), 1e-5) << "sequence " << i << ", step " << t;
    }
    step = {{static_cast<int32_t>(t + 20)}, {static_cast<int32_t>(t + 50), static_cast<int32_t>(t + 60)}};
  }
}

TEST_P(DecoderTest, APrefillInGroupsGivesEachSequenceExactlyItsLogitsAlone) {
  // A budget of 8 rows puts each of these prompts in a group of its own, and a group of one
  // sequence is the same computation as that sequence alone: equal to the bit (a padded pass
  // over all four rounds differently, by up to about 1e-5). Sequence 3 has no tokens and
  // starts no group. Then a step where two sequences add two tokens (one group of 4 x 2 rows)
  // and a decode step, both reading the caches the groups filled.
  auto grouped = Decoder::Load(dir_.path(), {.cpu_prefill_group_rows = 8});
  ASSERT_TRUE(grouped.ok()) << grouped.error().ToString();
  const std::vector<std::vector<std::vector<int32_t>>> steps = {
      {{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {40, 41, 42}, {7, 8, 9, 10, 11}, {}},
      {{20}, {50, 60}, {9}, {30, 31}},
      {{21}, {51}, {10}, {32}}};
  ASSERT_EQ(PrefillGroups(steps[0], 8), (std::vector<SequenceRange>{{0, 1}, {1, 2}, {2, 3}}));
  ASSERT_EQ(PrefillGroups(steps[1], 8), (std::vector<SequenceRange>{{0, 4}}));
  auto cache = (*grouped)->NewCache(4, 64);
  std::vector<std::vector<std::vector<float>>> logits;
  for (const auto& step : steps) {
    auto out = (*grouped)->Forward(cache.get(), step);
    ASSERT_TRUE(out.ok()) << out.error().ToString();
    logits.push_back(std::move(out).value());
  }
  EXPECT_EQ(cache->lengths(), (std::vector<int64_t>{14, 6, 7, 3}));
  EXPECT_TRUE(logits[0][3].empty());
  for (size_t s : {0, 1, 2}) {
    EXPECT_EQ(logits[0][s], Alone({steps[0][s]})[0]) << "sequence " << s << ", its prefill";
  }
  // The later steps against one padded pass, step by step (no grouping: 0 rows).
  auto whole = Decoder::Load(dir_.path(), {.cpu_prefill_group_rows = 0});
  ASSERT_TRUE(whole.ok()) << whole.error().ToString();
  auto whole_cache = (*whole)->NewCache(4, 64);
  for (size_t t = 0; t < steps.size(); ++t) {
    const auto expected = (*whole)->Forward(whole_cache.get(), steps[t]).value();
    for (size_t s = 0; s < expected.size(); ++s) {
      EXPECT_LE(MaxDifference(logits[t][s], expected[s]), 1e-4) << "sequence " << s << ", step " << t;
    }
  }
}

TEST(Decoder, PrefillGroupsKeepEachGroupWithinItsRowsAndSkipEmptySequences) {
  const auto groups = [](const std::vector<size_t>& lengths, int64_t rows) {
    std::vector<std::vector<int32_t>> tokens;
    for (size_t n : lengths) tokens.emplace_back(n, 1);
    return PrefillGroups(tokens, rows);
  };
  // 3 then 9 would be 2 x 9 rows; 9 and the empty one 2 x 9; 4 and 7 are 2 x 7; the two
  // single tokens fit together.
  EXPECT_EQ(groups({3, 9, 0, 4, 7, 1, 1}, 10), (std::vector<SequenceRange>{{0, 1}, {1, 2}, {3, 4}, {4, 5}, {5, 7}}));
  EXPECT_EQ(groups({20}, 10), (std::vector<SequenceRange>{{0, 1}}));      // longer than the budget: alone
  EXPECT_EQ(groups({2, 0, 2}, 6), (std::vector<SequenceRange>{{0, 3}}));  // 3 x 2 rows, the empty one padding
  EXPECT_EQ(groups({2, 0, 2}, 5), (std::vector<SequenceRange>{{0, 2}, {2, 3}}));
  EXPECT_EQ(groups({0, 0}, 10), (std::vector<SequenceRange>{}));
  EXPECT_EQ(groups({4, 4, 4, 4}, 16), (std::vector<SequenceRange>{{0, 4}}));
}

TEST_P(DecoderTest, WithAdaptersTheEmulatedDeviceNeedsNoEmbeddingOrRopeFallbacks) {
  ASSERT_TRUE(accelerator::RegisterEmulatedDevice().ok());
  accelerator::OpAdapters all;
  all.rope_as_matmul = all.rms_norm_by_matmul = all.embedding_on_host = true;
  auto emulated = Decoder::Load(dir_.path(),
                                {.dtype = accelerator::Dtype::kBFloat16, .device = "privateuseone:0", .adapters = all});
  ASSERT_TRUE(emulated.ok()) << emulated.error().ToString();
  accelerator::ResetEmulatedDeviceStats();
  auto cache = (*emulated)->NewCache(1, 16);
  ASSERT_TRUE((*emulated)->Forward(cache.get(), {{11, 22, 33, 44}}).ok());
  const auto fallbacks = accelerator::EmulatedDeviceStatsSnapshot().fallback_by_op;
  EXPECT_EQ(fallbacks.count("aten::index_select"), 0u);
  EXPECT_EQ(fallbacks.count("aten::cat"), 0u);
}

TEST_P(DecoderTest, ConformanceOfADecoderWithItselfIsPerfectAndBfloat16PassesOnlyItsOwnThresholds) {
  const std::vector<int32_t> prompt = {11, 22, 33, 44};
  auto same = CompareDecoders(*decoder_, *decoder_, prompt, 8, ThresholdsFor(accelerator::Dtype::kFloat32));
  ASSERT_TRUE(same.ok()) << same.error().ToString();
  EXPECT_TRUE(same->passed);
  EXPECT_EQ(same->same_tokens, 8);
  EXPECT_EQ(same->max_abs, 0.0);
  ASSERT_EQ(same->cosine.size(), 8u);
  auto bf16 = Decoder::Load(dir_.path(), {.dtype = accelerator::Dtype::kBFloat16});
  ASSERT_TRUE(bf16.ok());
  auto strict = CompareDecoders(*decoder_, **bf16, prompt, 8, {.min_cosine = 0.9999999, .min_agreement = 1.0});
  ASSERT_TRUE(strict.ok());
  EXPECT_FALSE(strict->passed);
  EXPECT_EQ(strict->failure.rfind("cosine ", 0), 0u) << strict->failure;
  auto reduced = CompareDecoders(*decoder_, **bf16, prompt, 8, ThresholdsFor(accelerator::Dtype::kBFloat16));
  ASSERT_TRUE(reduced.ok());
  EXPECT_TRUE(reduced->passed) << reduced->failure;
}

TEST_P(DecoderTest, RefusesToOverflowTheCacheOrReadUnknownIds) {
  auto cache = decoder_->NewCache(1, 4);
  auto overflow = decoder_->Forward(cache.get(), {{1, 2, 3, 4, 5}});
  ASSERT_FALSE(overflow.ok());
  EXPECT_EQ(overflow.error().message, "sequence 0 would hold 5 tokens; the cache holds 4");
  auto unknown = decoder_->Forward(cache.get(), {{static_cast<int32_t>(decoder_->config().vocab_size)}});
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.error().message,
            "token id " + std::to_string(decoder_->config().vocab_size) + " is outside the vocabulary");
  EXPECT_EQ(cache->lengths(), (std::vector<int64_t>{0}));  // nothing was appended
}

INSTANTIATE_TEST_SUITE_P(Families, DecoderTest, ::testing::Values("llama", "qwen3", "granite", "gemma2", "gemma3"),
                         [](const auto& info) { return info.param; });

// Rewrites a checkpoint's model.safetensors through `edit`, which may change a tensor's bytes
// or return false to leave the tensor out.
void RewriteCheckpoint(const testing::TempDir& dir, const std::function<bool(const TensorInfo&, std::string*)>& edit) {
  auto file = SafetensorsFile::Open(dir.file("model.safetensors"));
  ASSERT_TRUE(file.ok());
  SafetensorsWriter writer;
  for (const TensorInfo& t : (*file)->tensors()) {
    const TensorView view = (*file)->View(t);
    std::string bytes(reinterpret_cast<const char*>(view.data), t.size_bytes);
    if (!edit(t, &bytes)) continue;
    ASSERT_TRUE(writer.Add(t.name, t.dtype, t.shape, bytes).ok());
  }
  file->reset();
  ASSERT_TRUE(writer.Write(dir.file("model.safetensors")).ok());
}

TEST(Decoder, NanWeightsAreRefusedAtLoadNamingTheTensor) {
  testing::TempDir dir;
  ASSERT_TRUE(MakeCheckpoint({.family = "llama"}, dir.path()).ok());
  RewriteCheckpoint(dir, [](const TensorInfo& t, std::string* bytes) {
    if (t.name == "model.layers.0.mlp.up_proj.weight") bytes->assign(bytes->size(), '\xff');  // all NaN
    return true;
  });
  auto decoder = Decoder::Load(dir.path());
  ASSERT_FALSE(decoder.ok());
  EXPECT_EQ(decoder.error().code, ErrorCode::kDataLoss);
  EXPECT_EQ(decoder.error().message, "tensor \"model.layers.0.mlp.up_proj.weight\" holds NaN or infinite values");
}

TEST(Decoder, MissingTensorIsNamed) {
  testing::TempDir dir;
  ASSERT_TRUE(MakeCheckpoint({.family = "llama"}, dir.path()).ok());
  // Rewrite the checkpoint without the final norm.
  RewriteCheckpoint(dir, [](const TensorInfo& t, std::string*) { return t.name != "model.norm.weight"; });
  auto decoder = Decoder::Load(dir.path());
  ASSERT_FALSE(decoder.ok());
  EXPECT_EQ(decoder.error().code, ErrorCode::kNotFound);
  EXPECT_EQ(decoder.error().message, "checkpoint " + dir.path() + " has no tensor \"model.norm.weight\"");
}

// Logits of one prompt, prefilled at once.
std::vector<float> PromptLogits(const Decoder& decoder, const std::vector<int32_t>& prompt) {
  auto cache = decoder.NewCache(1, 32);
  auto logits = decoder.Forward(cache.get(), {prompt});
  EXPECT_TRUE(logits.ok()) << logits.error().ToString();
  return logits.ok() ? (*logits)[0] : std::vector<float>{};
}

TEST(Decoder, ATestFamilysCheckpointLoadsThroughItsRegistryAndRunsTheSharedForwardPass) {
  ModelFamilyRegistry registry;
  ASSERT_TRUE(registry.Register(std::make_unique<TestModelFamily>()).ok());
  testing::TempDir dir;
  ASSERT_TRUE(MakeCheckpoint({.family = "txscore-test", .families = &registry}, dir.path()).ok());
  auto decoder = Decoder::Load(dir.path(), {.families = &registry});
  ASSERT_TRUE(decoder.ok()) << decoder.error().ToString();
  const ModelConfig& c = (*decoder)->config();
  EXPECT_EQ(c.family, registry.Find("txscore-test"));
  EXPECT_TRUE(c.qk_norm);
  EXPECT_EQ(c.rms_norm_eps, 1e-3);
  const std::vector<float> logits = PromptLogits(**decoder, {1, 2, 3, 4});
  ASSERT_EQ(static_cast<int64_t>(logits.size()), c.vocab_size);
  for (float v : logits) ASSERT_TRUE(std::isfinite(v));
  // Token by token, the same logits (the shared forward pass and its cache).
  auto cache = (*decoder)->NewCache(1, 32);
  std::vector<float> last;
  for (int32_t id : {1, 2, 3, 4}) last = (*(*decoder)->Forward(cache.get(), {{id}}))[0];
  float worst = 0;
  for (size_t i = 0; i < logits.size(); ++i) worst = std::max(worst, std::fabs(logits[i] - last[i]));
  EXPECT_LE(worst, 1e-4);
  // The built-in families do not include it.
  auto builtin = Decoder::Load(dir.path());
  ASSERT_FALSE(builtin.ok());
  EXPECT_EQ(builtin.error().message, dir.file("config.json") +
                                         ": model_type \"txscore_test\" is not supported "
                                         "(supported: llama, qwen3, granite, gemma2, gemma3_text, gemma3)");
}

TEST(Decoder, MultimodalGemma3CheckpointReadsTheLanguageModelWeightsUnderTheirPrefix) {
  testing::TempDir text_only, multimodal;
  ASSERT_TRUE(MakeCheckpoint({.family = "gemma3"}, text_only.path()).ok());
  ASSERT_TRUE(MakeCheckpoint({.family = "gemma3"}, multimodal.path()).ok());
  // The same model as Gemma3ForConditionalGeneration: the config nested in text_config, the
  // tensors under language_model.
  nlohmann::json text_config = nlohmann::json::parse(std::ifstream(text_only.file("config.json")));
  nlohmann::json config = {{"model_type", "gemma3"},
                           {"architectures", nlohmann::json::array({"Gemma3ForConditionalGeneration"})},
                           {"eos_token_id", text_config["eos_token_id"]},
                           {"text_config", text_config}};
  std::ofstream(multimodal.file("config.json")) << config.dump(2);
  {
    auto file = SafetensorsFile::Open(text_only.file("model.safetensors"));
    ASSERT_TRUE(file.ok());
    SafetensorsWriter writer;
    for (const TensorInfo& t : (*file)->tensors()) {
      const TensorView view = (*file)->View(t);
      ASSERT_TRUE(writer
                      .Add("language_model." + t.name, t.dtype, t.shape,
                           std::string(reinterpret_cast<const char*>(view.data), t.size_bytes))
                      .ok());
    }
    ASSERT_TRUE(writer.Write(multimodal.file("model.safetensors")).ok());
  }
  auto want = Decoder::Load(text_only.path());
  ASSERT_TRUE(want.ok()) << want.error().ToString();
  auto got = Decoder::Load(multimodal.path());
  ASSERT_TRUE(got.ok()) << got.error().ToString();
  EXPECT_EQ(PromptLogits(**got, {5, 6, 7}), PromptLogits(**want, {5, 6, 7}));
}

TEST(Decoder, LoadingAndRunningADecoderLeavesOtherThreadsComputeSettingsAlone) {
  testing::TempDir dir;
  ASSERT_TRUE(MakeCheckpoint({.family = "llama"}, dir.path()).ok());
  auto count_on_a_new_thread = [] {
    int count = 0;
    std::thread([&] { count = accelerator::ComputeThreads(); }).join();
    return count;
  };
  const int here = accelerator::ComputeThreads();
  const int new_threads = count_on_a_new_thread();
  const int blas = accelerator::BlasThreads();
  const int decoder_threads = std::max({here, new_threads, blas}) + 1;  // differs from every one of them

  auto decoder = Decoder::Load(dir.path(), {.threads = decoder_threads});
  ASSERT_TRUE(decoder.ok()) << decoder.error().ToString();
  EXPECT_EQ(PromptLogits(**decoder, {1, 2, 3}).size(), static_cast<size_t>((*decoder)->config().vocab_size));

  EXPECT_EQ(accelerator::ComputeThreads(), here);   // the loading thread's own, after the load and a Forward
  EXPECT_EQ(count_on_a_new_thread(), new_threads);  // what another stage's thread starts with
  EXPECT_EQ(accelerator::BlasThreads(), blas);      // OpenBLAS's pool, shared by every stage
}

}  // namespace
}  // namespace txscore::llm

namespace txscore::llm {
namespace {

class GeneratorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(MakeCheckpoint({.family = "qwen3"}, dir_.path()).ok());
    decoder_ = Decoder::Load(dir_.path()).value();
    tokenizer_ = Tokenizer::FromFile(dir_.file("tokenizer.json")).value();
  }
  testing::TempDir dir_;
  std::unique_ptr<Decoder> decoder_;
  std::unique_ptr<Tokenizer> tokenizer_;
};

TEST_F(GeneratorTest, SchemaConstrainedSamplingAlwaysParses) {
  Generator generator(decoder_.get(), tokenizer_.get());
  const std::string schema = R"({"type": "object", "properties": {
      "risk_level": {"type": "string", "enum": ["low", "medium", "high"]},
      "summary": {"type": "string", "maxLength": 30}}, "required": ["risk_level", "summary"]})";
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    GenerationOptions options;
    options.schema = schema;
    options.max_new_tokens = 40;
    options.sampling = {.temperature = 1.5, .seed = seed};
    auto result = generator.Generate(tokenizer_->Encode("Claim: water damage"), options);
    ASSERT_TRUE(result.ok()) << result.error().ToString();
    EXPECT_EQ(result->finish_reason, llm::FinishReason::kSchemaComplete);
    const auto doc = nlohmann::json::parse(result->text, nullptr, false);
    ASSERT_FALSE(doc.is_discarded()) << result->text;
    EXPECT_LE(result->generated_ids.size(), 40u);
    EXPECT_EQ(result->token_us.size() + 1, result->generated_ids.size());
  }
}

TEST_F(GeneratorTest, GreedyIsRepeatableAndStopsAtTheBudgetOrAStopString) {
  Generator generator(decoder_.get(), tokenizer_.get());
  GenerationOptions options;
  options.max_new_tokens = 12;
  options.ignore_eos = true;
  const auto prompt = tokenizer_->Encode("The adjuster notes");
  auto first = generator.Generate(prompt, options);
  auto second = generator.Generate(prompt, options);
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(first->generated_ids, second->generated_ids);
  EXPECT_EQ(first->generated_ids.size(), 12u);
  EXPECT_EQ(first->finish_reason, llm::FinishReason::kMaxNewTokens);
  // Stop on the text of the third generated token: generation ends there, the stop text is cut.
  const std::string third =
      tokenizer_->Decode({first->generated_ids[0], first->generated_ids[1], first->generated_ids[2]});
  options.stop = {third.substr(third.size() - 1)};
  auto stopped = generator.Generate(prompt, options);
  ASSERT_TRUE(stopped.ok());
  EXPECT_EQ(stopped->finish_reason, llm::FinishReason::kStop);
  EXPECT_LE(stopped->generated_ids.size(), 3u);
}

TEST_F(GeneratorTest, AStopStringEndingInsideATokenCutsTheTextWhereItStarts) {
  Generator generator(decoder_.get(), tokenizer_.get());
  GenerationOptions options;
  options.max_new_tokens = 48;
  options.ignore_eos = true;
  options.sampling = {.temperature = 1.0, .seed = 3};  // varied tokens, the same each run
  const auto prompt = tokenizer_->Encode("The adjuster notes");
  const GenerationResult full = generator.Generate(prompt, options).value();
  // Where each token's text ends: a stop string ending elsewhere ends inside a token.
  std::set<size_t> token_ends;
  for (size_t n = 1; n <= full.generated_ids.size(); ++n) {
    token_ends.insert(
        tokenizer_->Decode({full.generated_ids.begin(), full.generated_ids.begin() + n}, {.skip_special = true})
            .size());
  }
  std::string stop;
  for (size_t k = 0; k + 2 <= full.text.size() && stop.empty(); ++k) {
    const std::string candidate = full.text.substr(k, 2);
    if (!std::isalnum(static_cast<unsigned char>(candidate[0])) ||
        !std::isalnum(static_cast<unsigned char>(candidate[1]))) {
      continue;
    }
    if (token_ends.count(full.text.find(candidate) + 2) == 0) stop = candidate;
  }
  ASSERT_FALSE(stop.empty()) << "every two characters end at a token's end in " << full.text;
  options.stop = {stop};
  const GenerationResult cut = generator.Generate(prompt, options).value();
  EXPECT_EQ(cut.finish_reason, llm::FinishReason::kStop);
  EXPECT_EQ(cut.text, full.text.substr(0, full.text.find(stop))) << "stop " << stop;
  // Streamed, the same text, and nothing of the stop string.
  std::string streamed;
  options.on_text = [&](const std::string& piece) {
    streamed += piece;
    return true;
  };
  EXPECT_EQ(generator.Generate(prompt, options).value().text, cut.text);
  EXPECT_EQ(streamed, cut.text);
}

TEST_F(GeneratorTest, RefusesABudgetTooSmallForTheSchema) {
  Generator generator(decoder_.get(), tokenizer_.get());
  GenerationOptions options;
  options.schema = R"({"type": "string", "enum": ["a-long-option"]})";
  options.max_new_tokens = 3;
  auto result = generator.Generate({1, 2}, options);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.error().message, "the schema needs at least 15 tokens; max_new_tokens is 3");
}

}  // namespace
}  // namespace txscore::llm

namespace txscore::llm {
namespace {

TEST_F(GeneratorTest, ClaimAnalysisGivesWellFormedFindings) {
  Generator generator(decoder_.get(), tokenizer_.get());
  ClaimFields claim{"C-1",
                    "P-9",
                    "water damage",
                    "2026-03-03",
                    "2026-04-20",
                    "4200.50 EUR",
                    "5000 EUR",
                    3,
                    "R-17",
                    "Water came through the ceiling; the plumber's invoice is dated before the leak.",
                    "Claimant pressed for a quick settlement."};
  GenerationOptions options;
  options.max_new_tokens = 120;
  auto findings = ClaimAnalysisTask::Analyze(generator, *tokenizer_, claim, options, "tiny-qwen3");
  ASSERT_TRUE(findings.ok()) << findings.error().ToString();
  ASSERT_FALSE(findings->flags.empty());
  for (const std::string& flag : findings->flags) {
    EXPECT_NE(std::find(ClaimAnalysisTask::Flags().begin(), ClaimAnalysisTask::Flags().end(), flag),
              ClaimAnalysisTask::Flags().end());
  }
  EXPECT_EQ(findings->model_id, "tiny-qwen3");
}

TEST_F(GeneratorTest, TransactionReviewGivesWellFormedFindingsOrStopsAtTheDeadline) {
  Generator generator(decoder_.get(), tokenizer_.get());
  TransactionCase tx{
      "r-1", "2026-01-01T10:00:00Z",         "4250.00 USD", "m-7", "5967", "RO", "US", "ECOMMERCE", "MANUAL_KEYED",
      0.71,  {"amount_zscore = 6.1 (+2.30)"}};
  GenerationOptions options;
  options.max_new_tokens = 120;
  auto findings = TransactionReviewTask::Analyze(generator, *tokenizer_, tx, options, "tiny-qwen3");
  ASSERT_TRUE(findings.ok()) << findings.error().ToString();
  EXPECT_FALSE(findings->flags.empty());
  // A deadline already past: one step runs (it is checked between steps), then it stops.
  options.deadline = std::chrono::steady_clock::now();
  auto cut = TransactionReviewTask::Analyze(generator, *tokenizer_, tx, options, "tiny-qwen3");
  ASSERT_FALSE(cut.ok());
  EXPECT_EQ(cut.error().code, ErrorCode::kDeadlineExceeded);
  EXPECT_EQ(cut.error().message, "the deadline cut the findings short after 1 tokens");
  // The deadline is read on the options' clock: a minute away on the steady clock, but an
  // hour past on the clock given.
  options.deadline = std::chrono::steady_clock::now() + std::chrono::minutes(1);
  options.clock = [] { return std::chrono::steady_clock::now() + std::chrono::hours(1); };
  auto late = TransactionReviewTask::Analyze(generator, *tokenizer_, tx, options, "tiny-qwen3");
  ASSERT_FALSE(late.ok());
  EXPECT_EQ(late.error().message, "the deadline cut the findings short after 1 tokens");
}

}  // namespace
}  // namespace txscore::llm

namespace txscore::llm {
namespace {

TEST_F(GeneratorTest, BatchGenerationEqualsOneByOne) {
  Generator generator(decoder_.get(), tokenizer_.get());
  GenerationOptions options;
  options.max_new_tokens = 10;
  options.ignore_eos = true;
  const std::vector<std::vector<int32_t>> prompts = {tokenizer_->Encode("Claim C-1 water damage"),
                                                     tokenizer_->Encode("Card transaction"),
                                                     tokenizer_->Encode("The adjuster notes the invoice")};
  auto batch = generator.GenerateBatch(prompts, options);
  ASSERT_TRUE(batch.ok()) << batch.error().ToString();
  ASSERT_EQ(batch->size(), 3u);
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto alone = generator.Generate(prompts[i], options);
    ASSERT_TRUE(alone.ok());
    EXPECT_EQ((*batch)[i].generated_ids, alone->generated_ids) << "prompt " << i;
    EXPECT_EQ((*batch)[i].token_us.size(), 9u);
  }
}

TEST_F(GeneratorTest, BatchWithSchemaFinishesEverySequenceWithValidJson) {
  Generator generator(decoder_.get(), tokenizer_.get());
  GenerationOptions options;
  options.max_new_tokens = 60;
  options.schema = ClaimAnalysisTask::Schema();
  options.sampling = {.temperature = 1.0, .seed = 11};
  auto batch = generator.GenerateBatch({{1, 2, 3}, {4}, {5, 6, 7, 8, 9, 10}}, options);
  ASSERT_TRUE(batch.ok()) << batch.error().ToString();
  for (const GenerationResult& r : *batch) {
    EXPECT_EQ(r.finish_reason, llm::FinishReason::kSchemaComplete);
    EXPECT_TRUE(ClaimAnalysisTask::ParseFindings(r.text).ok()) << r.text;
  }
}

TEST_F(GeneratorTest, EachSequenceOfABatchKeepsItsOwnOptionsAndStreamsItsText) {
  Generator generator(decoder_.get(), tokenizer_.get());
  GenerationOptions plain;
  plain.max_new_tokens = 9;
  plain.ignore_eos = true;
  GenerationOptions findings;
  findings.max_new_tokens = 60;
  findings.schema = ClaimAnalysisTask::Schema();
  std::string streamed;
  int pieces = 0;
  GenerationOptions streaming = plain;
  streaming.max_new_tokens = 5;
  streaming.on_text = [&](const std::string& piece) {
    streamed += piece;
    ++pieces;
    return true;
  };
  const std::vector<std::vector<int32_t>> prompts = {{1, 2, 3}, {4, 5}, {6}};
  auto each = generator.GenerateEach(prompts, {plain, findings, streaming});
  ASSERT_TRUE(each.ok()) << each.error().ToString();
  // Alone, each gives the same tokens as in the mixed batch.
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerationOptions alone = i == 0 ? plain : i == 1 ? findings : plain;
    if (i == 2) alone.max_new_tokens = 5;
    EXPECT_EQ(generator.Generate(prompts[i], alone).value().generated_ids, (*each)[i].generated_ids) << i;
  }
  EXPECT_EQ((*each)[0].generated_ids.size(), 9u);
  EXPECT_EQ((*each)[1].finish_reason, FinishReason::kSchemaComplete);
  EXPECT_EQ((*each)[2].generated_ids.size(), 5u);
  EXPECT_EQ(streamed, (*each)[2].text);
  EXPECT_GE(pieces, 1);
}

TEST_F(GeneratorTest, OnTextReturningFalseCancelsOnlyThatSequence) {
  Generator generator(decoder_.get(), tokenizer_.get());
  GenerationOptions keep;
  keep.max_new_tokens = 8;
  keep.ignore_eos = true;
  GenerationOptions cancel = keep;
  int calls = 0;
  cancel.on_text = [&](const std::string&) { return ++calls < 2; };
  auto each = generator.GenerateEach({{1, 2}, {3, 4}}, {keep, cancel});
  ASSERT_TRUE(each.ok());
  EXPECT_EQ((*each)[0].generated_ids.size(), 8u);
  EXPECT_EQ((*each)[1].finish_reason, FinishReason::kCancelled);
  EXPECT_LT((*each)[1].generated_ids.size(), 8u);
}

TEST_F(GeneratorTest, RequestSchemasAreKeptUpToALimitAndPreparedOnesStay) {
  Generator generator(decoder_.get(), tokenizer_.get());
  ASSERT_TRUE(generator.Prepare(ClaimAnalysisTask::Schema()).ok());
  const auto schema = [](size_t i) { return R"({"type": "string", "enum": ["v)" + std::to_string(i) + R"("]})"; };
  const auto builds_for = [&](const std::string& s) {
    const uint64_t before = PrepareCountersNow().graph_builds;
    GenerationOptions options;
    options.schema = s;
    options.max_new_tokens = 60;
    EXPECT_TRUE(generator.Generate({1, 2}, options).ok());
    return PrepareCountersNow().graph_builds - before;
  };
  for (size_t i = 0; i < Generator::kMaxRequestConstraints + 4; ++i) EXPECT_EQ(builds_for(schema(i)), 1u) << i;
  EXPECT_EQ(builds_for(schema(Generator::kMaxRequestConstraints + 3)), 0u);  // recent: kept
  EXPECT_EQ(builds_for(schema(0)), 1u);                                      // the oldest went
  EXPECT_EQ(builds_for(ClaimAnalysisTask::Schema()), 0u);                    // prepared: stays
}

}  // namespace
}  // namespace txscore::llm

namespace txscore::llm {
namespace {

// One rotation worked out by hand: head_dim 4, theta 10000, so the inverse frequencies are
// 1 / 10000^(0/4) = 1 and 1 / 10000^(2/4) = 0.01. At position 3, the pair (x0, x2) turns by
// 3 radians and (x1, x3) by 0.03: x0' = x0 cos 3 - x2 sin 3, x2' = x2 cos 3 + x0 sin 3, and
// likewise for (x1, x3) with 0.03. A sign or a pairing mistake changes these numbers.
TEST(Rope, OneRotationMatchesTheValuesWorkedOutByHand) {
  const torch::Tensor inv = RopeInverseFrequencies(RopeConfig{}, 4);
  ASSERT_EQ(inv.numel(), 2);
  EXPECT_FLOAT_EQ(inv[0].item<float>(), 1.0f);
  EXPECT_FLOAT_EQ(inv[1].item<float>(), 0.01f);
  const torch::Tensor tables = RopeTables(inv, torch::tensor({{3}}, torch::kInt64));  // [2, 1, 1, 1, 4]
  const torch::Tensor cos = tables[0], sin = tables[1];
  const torch::Tensor x = torch::tensor({1.0f, 2.0f, 3.0f, 4.0f}).view({1, 1, 1, 4});
  const double x0 = 1, x1 = 2, x2 = 3, x3 = 4;
  const std::vector<double> expected = {
      x0 * std::cos(3.0) - x2 * std::sin(3.0), x1 * std::cos(0.03) - x3 * std::sin(0.03),
      x2 * std::cos(3.0) + x0 * std::sin(3.0), x3 * std::cos(0.03) + x1 * std::sin(0.03)};
  // The decoder's two ways of rotating half a head (accelerator/op_adapters.h) give the same.
  for (const torch::Tensor& rotated :
       {accelerator::RotateHalfBySlicing(x),
        accelerator::RotateHalfByMatmul(x, accelerator::RotateHalfMatrix(4, torch::kFloat32))}) {
    const torch::Tensor out = ApplyRope(x, cos, sin, rotated).flatten();
    for (int i = 0; i < 4; ++i) EXPECT_NEAR(out[i].item<float>(), expected[static_cast<size_t>(i)], 1e-5) << i;
  }
  // Position 0 leaves the vector as it is.
  const torch::Tensor at_zero = RopeTables(inv, torch::tensor({{0}}, torch::kInt64));
  EXPECT_TRUE(torch::equal(ApplyRope(x, at_zero[0], at_zero[1], accelerator::RotateHalfBySlicing(x)), x));
}

// A checkpoint's weight file rewritten in place while a decoder loads it (a writer patching the
// live file during a reload) is refused: the weights read may mix two versions. Written
// anew and renamed into place, it loads.
TEST(Decoder, AWeightFileRewrittenInPlaceDuringTheLoadIsRefused) {
  testing::TempDir dir;
  ASSERT_TRUE(MakeCheckpoint({.family = "qwen3", .size = "small", .dtype = DType::kF32}, dir.path()).ok());
  const std::string weights = dir.file("model.safetensors");
  const auto rewrite_last_byte_in_place = [&] {
    std::fstream file(weights, std::ios::in | std::ios::out | std::ios::binary);
    file.seekg(-1, std::ios::end);
    const char last = static_cast<char>(file.get());
    file.seekp(-1, std::ios::end);
    file.put(static_cast<char>(last ^ 0x01));  // same size, new bytes
  };
  DecoderOptions options;
  options.after_weights_read = rewrite_last_byte_in_place;
  EXPECT_TRUE(testing::IsError(Decoder::Load(dir.path(), options), ErrorCode::kUnavailable,
                               weights +
                                   " changed while it was read (rewritten in place?); nothing read from it is used. "
                                   "Update a checkpoint by writing its files anew and renaming them (or the "
                                   "directory) into place"));
  options.after_weights_read = [&] {
    const std::string fresh = dir.file("model.safetensors.new");
    std::filesystem::copy_file(weights, fresh);
    std::filesystem::rename(fresh, weights);  // a new file: the one being read is untouched
  };
  EXPECT_TRUE(Decoder::Load(dir.path(), options).ok());
}

TEST(Decoder, ADecodersFreedWeightsGoBackToTheSystemWhicheverThreadLoadedThem) {
  // The heap settings `txscore serve` runs with: freed memory is kept for reuse.
  KeepFreedHeapMemory();
  testing::TempDir dir;
  ASSERT_TRUE(MakeCheckpoint({.family = "qwen3", .size = "small", .dtype = DType::kF32}, dir.path()).ok());
  const uintmax_t weight_bytes = std::filesystem::file_size(dir.file("model.safetensors"));
  // Each load on a thread of its own heap, the last decoder freed after the next is loaded, as
  // a reload replaces a pipeline: without the pages given back, each thread's heap keeps a
  // freed copy of the weights that the loads on the other threads cannot reuse.
  std::vector<std::unique_ptr<testing::LongLivedThread>> threads;
  for (int i = 0; i < 4; ++i) threads.push_back(std::make_unique<testing::LongLivedThread>());
  std::unique_ptr<Decoder> serving;
  size_t resident_after_first = 0;
  for (int load = 0; load < 12; ++load) {
    std::unique_ptr<Decoder> loaded;
    threads[load % threads.size()]->Run([&] {
      auto decoder = Decoder::Load(dir.path());
      ASSERT_TRUE(decoder.ok()) << decoder.error().ToString();
      loaded = std::move(decoder).value();
    });
    ASSERT_NE(loaded, nullptr);
    serving = std::move(loaded);  // the replaced decoder is freed here, on this thread
    ASSERT_TRUE(testing::Eventually([] { return HeapTrimsInFlight() == 0; }));
    if (load == 0) resident_after_first = testing::ResidentBytes();
  }
  std::cout << "weights " << weight_bytes << " bytes; resident after the first load " << resident_after_first
            << ", after the last " << testing::ResidentBytes() << "\n";
  testing::ExpectResidentGrowthBelow(resident_after_first, weight_bytes);
}

}  // namespace
}  // namespace txscore::llm
