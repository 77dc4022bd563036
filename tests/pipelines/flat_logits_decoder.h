// A decoder double for tests of the LLM stage without libtorch (tests/pipelines and the
// servers of tests/integration). Header-only.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/result.h"
#include "llm/decoder.h"
#include "llm/model_config.h"

namespace txscore::pipelines {

// A decoder double: every step returns flat logits, so tests control how long generation
// takes and when it runs without linking libtorch. Greedy decoding under the findings schema
// still writes valid findings from flat logits (the constraint picks the allowed tokens).
class FlatLogitsDecoder : public llm::Decoder {
 public:
  struct Control {
    std::atomic<int> forward_calls{0};
    std::chrono::milliseconds pause_per_step{0};
    // When set, the first Forward call waits until `release` is called.
    bool block_first_call = false;
    std::promise<void> entered;
    std::mutex mutex;
    std::condition_variable released_cv;
    bool released = false;
    std::string failing_device;  // decoders loaded on this device fail every Forward
    // How they fail: kUnavailable as a device runtime failing (the real decoder's), or
    // kInternal as a bug that another device would meet too.
    ErrorCode failure = ErrorCode::kUnavailable;
    std::atomic<int> failed_calls{0};
    std::vector<llm::DecoderOptions> loads;  // the options of every decoder loaded, in order
    // Called at each Forward with the cache it runs on (one cache per batch), before the step.
    std::function<void(const llm::DecoderCache*)> on_forward;
    void Release() {
      std::lock_guard<std::mutex> lock(mutex);
      released = true;
      released_cv.notify_all();
    }
  };

  FlatLogitsDecoder(llm::ModelConfig config, Control* control, bool failing = false)
      : config_(std::move(config)), control_(control), failing_(failing) {}

  const llm::ModelConfig& config() const override { return config_; }

  std::unique_ptr<llm::DecoderCache> NewCache(int batch, int max_tokens) const override {
    return std::make_unique<Cache>(batch, max_tokens);
  }

  Result<std::vector<std::vector<float>>> Forward(llm::DecoderCache* cache,
                                                  const std::vector<std::vector<int32_t>>& new_tokens) const override {
    if (failing_) {
      control_->failed_calls.fetch_add(1);
      return Error{control_->failure, "the device stopped responding", {}};
    }
    if (control_->forward_calls.fetch_add(1) == 0 && control_->block_first_call) {
      control_->entered.set_value();
      std::unique_lock<std::mutex> lock(control_->mutex);
      control_->released_cv.wait(lock, [&] { return control_->released; });
    }
    if (control_->pause_per_step.count() > 0) std::this_thread::sleep_for(control_->pause_per_step);
    if (control_->on_forward) control_->on_forward(cache);
    auto* c = static_cast<Cache*>(cache);
    std::vector<std::vector<float>> logits(new_tokens.size());
    for (size_t i = 0; i < new_tokens.size(); ++i) {
      if (new_tokens[i].empty()) continue;
      c->lengths_[i] += static_cast<int64_t>(new_tokens[i].size());
      logits[i].assign(static_cast<size_t>(config_.vocab_size), 0.0f);
    }
    return logits;
  }

 private:
  class Cache : public llm::DecoderCache {
   public:
    Cache(int batch, int max_tokens)
        : batch_(batch), max_tokens_(max_tokens), lengths_(static_cast<size_t>(batch), 0) {}
    int batch() const override { return batch_; }
    int max_tokens() const override { return max_tokens_; }
    const std::vector<int64_t>& lengths() const override { return lengths_; }
    void Reset(int index) override { lengths_[static_cast<size_t>(index)] = 0; }
    int batch_;
    int max_tokens_;
    std::vector<int64_t> lengths_;
  };

  llm::ModelConfig config_;
  Control* control_;
  bool failing_;
};

}  // namespace txscore::pipelines
