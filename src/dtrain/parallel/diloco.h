// DiLoCo (Douillard et al., "DiLoCo: Distributed Low-Communication Training of Language
// Models", 2023): each replica (one rank) takes `sync_every` (H) steps of its own inner
// optimizer on its own data; then the replicas average their pseudo-gradients (the shared
// parameters at the round's start minus their current ones) and an outer optimizer
// (SGD with Nesterov momentum) moves the shared parameters by that average. Every replica
// then continues from the new shared parameters; its inner optimizer state stays its own.
//
// The outer average goes through dtrain's all-reduce: exact with codec `none`, else coded
// with the codec and error feedback (comm/coded_allreduce.h), each replica's residual
// carried into its next round. Floating-point buffers (BatchNorm statistics) are averaged
// exactly at every outer step; the others (counters) stay as they are.
//
// Collective over the group: every rank must construct it and call after_inner_step() and
// sync() the same number of times.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/compress/codec.h"
#include "dtrain/compress/error_feedback.h"

namespace dtrain::comm {
class Group;
}

namespace dtrain::parallel {

struct DilocoConfig {
  int64_t sync_every = 50;      // H: inner steps per outer step
  double outer_lr = 0.7;        // the paper's defaults
  double outer_momentum = 0.9;  // Nesterov
  compress::CodecSpec codec;    // of the outer all-reduce; none: exact
};

struct DilocoStats {
  int64_t outer_steps = 0;
  double sync_s = 0;       // time in outer steps (exchange and update)
  int64_t wire_bytes = 0;  // bytes this rank sent in outer exchanges
  int64_t fp32_bytes = 0;  // what an exact fp32 ring all-reduce would have sent
  int64_t inner_steps = 0;
};

class Diloco {
 public:
  // Starts every replica from rank 0's parameters and buffers (broadcast).
  Diloco(comm::Group& group, std::vector<at::Tensor> parameters, std::vector<at::Tensor> buffers,
         DilocoConfig config);
  ~Diloco();
  Diloco(const Diloco&) = delete;
  Diloco& operator=(const Diloco&) = delete;

  // After every inner optimizer step; runs the outer step after every H-th. True when it did.
  bool after_inner_step();
  // The outer step now, unless no inner step has run since the last one (every replica
  // then holds the shared parameters). False when there was nothing to do.
  bool sync();
  // Inner steps since the last outer step.
  int64_t pending_steps() const { return since_sync_; }
  // Seconds in outer steps since the last take_stats().
  double sync_seconds() const { return stats_.sync_s; }
  DilocoStats take_stats();
  const DilocoConfig& config() const { return config_; }

  // Checkpoints: the shared parameters, the outer momentum, the error-feedback residuals
  // and the inner steps since the last outer step, by name.
  std::map<std::string, at::Tensor> state() const;
  // Throws std::runtime_error saying why `saved` does not fit this run; changes nothing.
  void check_state(const std::map<std::string, at::Tensor>& saved) const;
  void restore_state(const std::map<std::string, at::Tensor>& saved);

 private:
  at::Tensor flat_parameters() const;
  void average(at::Tensor& pseudo_gradient);
  void average_buffers();

  comm::Group& group_;
  std::vector<at::Tensor> parameters_, buffers_;
  DilocoConfig config_;
  std::unique_ptr<compress::Codec> codec_;  // null: exact
  at::Tensor anchor_;                       // the shared parameters, flat float32
  at::Tensor momentum_;                     // the outer optimizer's
  std::vector<compress::ErrorFeedback> scatter_feedback_;
  compress::ErrorFeedback gather_feedback_;
  int64_t since_sync_ = 0;
  DilocoStats stats_;
};

}  // namespace dtrain::parallel
