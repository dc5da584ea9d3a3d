// Delta coding of a pipeline boundary's activations (AQ-SGD: Wang et al., "Fine-tuning
// Language Models over Slow Networks using Activation Compression with Guarantees",
// NeurIPS 2022). Both ends of a boundary keep, per training sample, the last value the
// receiver decoded for it. Once every sample of a micro-batch has one, the sender codes
// only the change (its activation minus the cached value) and both ends add the same
// decoded change to the same cached value: the two caches stay equal bit for bit, so the
// error of one step is corrected by the next one's change instead of accumulating.
//
// DeltaCache is one end's cache of one boundary: [samples, per-sample values] in host
// memory at a stated dtype, and which samples have a value yet. It is keyed by the
// loader's sample index (data::Batch::ids).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "dtrain/compress/codec.h"

namespace dtrain::parallel::pipeline {

// --delta: the activations of every compressed edge between two ranks are delta-coded
// with the edge's activation codec during training. A micro-batch with a sample that has
// no cached value yet (the first epoch: the warm-up) goes with `warmup` instead, and so
// does evaluation, which never reads or writes a cache.
struct DeltaOptions {
  compress::CodecSpec warmup;
  // One sample of the model's input (batch 1): sizes the caches before training.
  at::Tensor sample_input;
  // The samples' index range [0, samples): the training set's size.
  int64_t samples = 0;
  // The cache's dtype (float32, bfloat16 or float16): what one cached value costs.
  at::ScalarType dtype = at::kBFloat16;
  // The most bytes one rank's caches may hold together; checked when the pipeline is built.
  int64_t limit_bytes = int64_t{8} << 30;
};

class DeltaCache {
 public:
  DeltaCache(int64_t samples, std::vector<int64_t> sample_shape, at::ScalarType dtype);

  static int64_t bytes_for(int64_t samples, int64_t sample_numel, at::ScalarType dtype);

  // Whether every sample in `ids` (int64, any device) has a cached value. Throws
  // std::out_of_range for an index outside [0, samples).
  bool all_seen(const at::Tensor& ids) const;
  // The cached values of `ids` as float32 [ids, sample shape...] on `device`.
  at::Tensor gather(const at::Tensor& ids, const c10::Device& device) const;
  // Stores `values` ([ids, sample shape...], any device and floating dtype) rounded to the
  // cache's dtype, and marks the samples seen.
  void store(const at::Tensor& ids, const at::Tensor& values);
  // The stored values, for tests comparing the two ends.
  const at::Tensor& values() const { return values_; }

 private:
  at::Tensor host_ids(const at::Tensor& ids) const;

  std::vector<int64_t> sample_shape_;
  at::Tensor values_;  // [samples, per-sample numel] at the cache's dtype, host memory
  std::vector<uint8_t> seen_;
};

}  // namespace dtrain::parallel::pipeline
