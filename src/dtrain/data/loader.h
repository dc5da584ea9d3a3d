// Mini-batches for one epoch, prepared by a background thread (bounded queue of
// `prefetch` batches) so data I/O stays off the training critical path. wait_s() is the
// time next() spent blocked: the data-wait column of the trainer.
#pragma once

#include <ATen/core/Tensor.h>

#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "dtrain/data/dataset.h"
#include "dtrain/data/transforms.h"

namespace dtrain::data {

struct Batch {
  at::Tensor inputs;  // float32 [B, C, H, W]; text: token ids int64 [B, T]
  at::Tensor labels;  // int64 [B]
  at::Tensor mask;    // text: uint8 [B, T] attention mask; undefined for images
  at::Tensor ids;     // int64 [B]: each sample's index in the dataset (delta coding's key)
};

class EpochLoader {
 public:
  // `indices` are this rank's samples in order; the last batch may be smaller. The first
  // `skip` batches are prepared and dropped (a resumed epoch: the augmentation generator
  // advances exactly as in a whole epoch), so next() starts with batch `skip`.
  EpochLoader(const Dataset& dataset, std::vector<int64_t> indices, int64_t batch_size,
              Normalization norm, Augment augment, uint64_t augment_seed, int prefetch = 4,
              int64_t skip = 0);
  ~EpochLoader();
  EpochLoader(const EpochLoader&) = delete;
  EpochLoader& operator=(const EpochLoader&) = delete;

  // Next batch, or nullopt at the end of the epoch. Rethrows a producer error.
  std::optional<Batch> next();
  int64_t batches() const { return batches_; }
  double wait_s() const { return wait_s_; }

 private:
  void produce();

  const Dataset& dataset_;
  std::vector<int64_t> indices_;
  int64_t batch_size_;
  Normalization norm_;
  Augment augment_;
  uint64_t augment_seed_;
  size_t prefetch_;
  int64_t skip_;
  int64_t batches_;
  double wait_s_ = 0;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Batch> ready_;
  bool done_ = false;
  bool stop_ = false;
  std::exception_ptr error_;
  std::thread worker_;
};

}  // namespace dtrain::data
