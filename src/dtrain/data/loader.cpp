#include "dtrain/data/loader.h"
#include "dtrain/metrics/timer.h"
#include "dtrain/metrics/trace.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <chrono>

namespace dtrain::data {

EpochLoader::EpochLoader(const Dataset& dataset, std::vector<int64_t> indices, int64_t batch_size,
                         Normalization norm, Augment augment, uint64_t augment_seed, int prefetch,
                         int64_t skip)
    : dataset_(dataset),
      indices_(std::move(indices)),
      batch_size_(batch_size),
      norm_(std::move(norm)),
      augment_(augment),
      augment_seed_(augment_seed),
      prefetch_(static_cast<size_t>(std::max(1, prefetch))),
      skip_(skip),
      batches_((static_cast<int64_t>(indices_.size()) + batch_size - 1) / batch_size) {
  if (batch_size < 1) throw std::invalid_argument("batch size must be positive");
  if (skip < 0 || skip > batches_)
    throw std::invalid_argument("cannot skip " + std::to_string(skip) + " of " +
                                std::to_string(batches_) + " batches");
  worker_ = std::thread([this] { produce(); });
}

EpochLoader::~EpochLoader() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

void EpochLoader::produce() {
  try {
    // Batches are small; intra-op threads here would only steal the training threads'
    // cores (the OpenMP thread count is per calling thread).
    at::set_num_threads(1);
    at::Generator gen = at::detail::createCPUGenerator(augment_seed_);
    for (int64_t b = 0; b < batches_; ++b) {
      const int64_t begin = b * batch_size_;
      const int64_t end =
          std::min<int64_t>(begin + batch_size_, static_cast<int64_t>(indices_.size()));
      const at::Tensor idx =
          at::from_blob(indices_.data() + begin, {end - begin}, at::kLong).clone();
      Batch batch{make_batch(dataset_.images.index_select(0, idx), norm_, augment_, gen),
                  dataset_.labels.index_select(0, idx),
                  dataset_.masks.defined() ? dataset_.masks.index_select(0, idx) : at::Tensor(),
                  idx};
      if (b < skip_) continue;
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || ready_.size() < prefetch_; });
      if (stop_) return;
      ready_.push_back(std::move(batch));
      cv_.notify_all();
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    error_ = std::current_exception();
  }
  std::lock_guard<std::mutex> lock(mu_);
  done_ = true;
  cv_.notify_all();
}

std::optional<Batch> EpochLoader::next() {
  const auto t0 = metrics::Clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !ready_.empty() || done_; });
  wait_s_ += metrics::trace::span_since("data", "data wait", t0);
  if (!ready_.empty()) {
    Batch b = std::move(ready_.front());
    ready_.pop_front();
    cv_.notify_all();
    return b;
  }
  if (error_) std::rethrow_exception(error_);
  return std::nullopt;
}

}  // namespace dtrain::data
