// Data parallelism: every rank holds the whole model and a shard of each mini-batch; the
// gradients are averaged across ranks during backward.
//
// Contract
// - Construction is collective: ranks compare parameter shapes (a mismatch throws on every
//   rank, naming the first differing parameter) and copy parameters and buffers from
//   rank 0.
// - Parameters are grouped into buckets in reverse registration order (roughly the order
//   backward produces their gradients); a bucket closes once it reaches its cap (so it may
//   exceed it by one parameter); the first bucket's cap is small so communication starts
//   early, except where a link's round trip is long (comm::kLongRttSeconds, as measured at
//   connect, or DdpConfig::link): there every bucket costs round trips backward cannot
//   hide, so the first bucket takes the regular cap, and exact buckets reduced in host
//   memory (--algo auto) post their receives when backward starts (comm/armed_all_reduce.h).
//   Each parameter's .grad becomes a view into its bucket's flat buffer (PyTorch's
//   gradient_as_bucket_view): once autograd has accumulated a gradient, a hook moves it
//   into the view if it is not there already (a gradient allocated afresh after
//   zero_grad() is copied once; one accumulated into .grad in place costs nothing) and
//   points .grad at the view. A full bucket is handed to a communication thread that
//   all-reduces it in place (in bucket order, the same on every rank) while backward goes
//   on. finish_backward() waits for the rest: the averages are then in .grad, with no
//   copy out. .grad therefore shares memory with the bucket: assigning a new tensor to
//   .grad is fine (it is copied in at the next backward), and so is zero_grad() either way.
// - set_sync(false) turns the next backward into local accumulation (no communication),
//   like PyTorch's no_sync(); the next synchronized backward reduces the accumulated sum.
// - With a gradient codec other than "none", each bucket is reduced as a reduce-scatter of
//   codec packets (each rank owns 1/p of the bucket, decodes and sums the p pieces) and an
//   all-gather of the owners' re-encoded sums, with error feedback (a residual per bucket
//   and per owned piece) so what the codec drops is added back at the next step.
// - broadcast_buffers: every forward runs with rank 0's buffers (BatchNorm running
//   statistics) on every rank (PyTorch's default): copied before the forward, or on long
//   links (CPU buffers) sent when the previous synchronized backward starts
//   (buffer_broadcast.h). Models whose BatchNorms are SyncBatchNorm keep identical
//   statistics by construction and can turn this off.
// - Every rank must run the same number of synchronized backwards.
#pragma once

#include <torch/nn/module.h>

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dtrain/comm/allreduce.h"
#include "dtrain/compress/codec.h"

namespace torch::autograd {
struct Node;
}
namespace dtrain::comm {
class Group;
}
namespace dtrain::compress {
class Codec;
class ErrorFeedback;
}  // namespace dtrain::compress

namespace dtrain::parallel {

class BufferBroadcast;

// Whether DDP schedules for a long link (the contract above): as measured at connect, or
// as the caller says (tests; a link the probe misjudges).
enum class LinkSchedule { kMeasured, kShort, kLong };

struct DdpConfig {
  LinkSchedule link = LinkSchedule::kMeasured;
  double bucket_mb = 25;
  double first_bucket_mb = 1;
  comm::Algorithm algorithm = comm::Algorithm::kAuto;
  compress::CodecSpec gradient_codec;  // default: none (exact)
  // set_gradient_codec will be called between steps (--compress-grad auto).
  bool codec_may_change = false;
  bool broadcast_buffers = true;
};

// Communication done since the last take_stats().
struct DdpStats {
  double comm_s = 0;       // time the communication thread spent reducing buckets
  double exposed_s = 0;    // time finish_backward() waited for it (not hidden by backward)
  double broadcast_s = 0;  // buffer broadcasts
  int64_t grad_bytes = 0;  // float32 bytes of gradients reduced
  int64_t wire_bytes = 0;  // bytes this rank sent for them (exact path: ring/.. traffic)
  int64_t reductions = 0;  // buckets reduced
  double hidden_fraction() const {
    return comm_s > 0 ? 1.0 - std::min(1.0, exposed_s / comm_s) : 0;
  }
};

class DistributedDataParallel {
 public:
  DistributedDataParallel(comm::Group& group, std::shared_ptr<torch::nn::Module> model,
                          DdpConfig config);
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  void before_forward();
  void set_sync(bool sync) { sync_ = sync; }
  // After backward of a synchronized step: waits for every bucket, averaged gradients in
  // .grad. Rethrows a communication error.
  void finish_backward();

  DdpStats take_stats();
  // Replaces the gradient codec between steps (--compress-grad auto); throws
  // std::logic_error during a backward. Error-feedback residuals stay: what one lossy codec
  // dropped is still owed to the model and goes out with the next lossy step.
  void set_gradient_codec(const compress::CodecSpec& spec);
  // Elements per bucket, in reduction order.
  std::vector<int64_t> bucket_sizes() const;
  // Buckets whose receives are posted when backward starts (long links: the contract above).
  size_t armed_buckets() const;

  // Error-feedback residuals, for checkpoints, between steps: those a lossy codec has
  // filled (an exact run has none), named "bucket<b>/scatter<q>" (what the pieces sent to
  // rank q still owe) and "bucket<b>/gather" (what this rank's owned average owes).
  std::map<std::string, at::Tensor> residuals() const;
  // Throws std::runtime_error naming a residual this model's buckets and world size do not
  // have, or one of another dtype or shape.
  void check_residuals(const std::map<std::string, at::Tensor>& saved) const;
  // Replaces every residual with `saved` (checked); the ones it does not name start at zero.
  void restore_residuals(const std::map<std::string, at::Tensor>& saved);

 private:
  struct Bucket;
  // The constructor's steps: every rank takes rank 0's parameters and buffers; the buckets
  // (bucket_assignment.h), each staged where it is reduced; .grad views and their hooks.
  void copy_rank0_state(const std::vector<std::pair<std::string, at::Tensor>>& named);
  void make_buckets();
  void hook_gradients();
  void on_accumulated(size_t param);
  // Makes .grad the parameter's bucket view, moving what .grad held into it (zero if
  // nothing).
  void adopt_gradient(size_t param);
  void mark_ready(size_t bucket);
  // Every error-feedback residual a lossy step can fill, by its residuals() name, with the
  // length of the piece it belongs to.
  struct FeedbackSlot {
    compress::ErrorFeedback* feedback;
    int64_t length;
  };
  std::map<std::string, FeedbackSlot> feedback_slots() const;
  void communicate();
  // Both average a bucket's values in place (its host copy, or the bucket itself where it
  // stays on its GPU: NCCL's, or a fixed codec's) and return the bytes this rank sent.
  int64_t reduce(size_t bucket, at::Tensor& values);
  int64_t reduce_compressed(size_t bucket, at::Tensor& values);

  comm::Group& group_;
  std::shared_ptr<torch::nn::Module> model_;
  DdpConfig config_;
  std::vector<at::Tensor> params_;
  std::vector<at::Tensor> views_;  // per parameter: its gradient's place in its bucket
  struct Hook {
    std::shared_ptr<torch::autograd::Node> accumulator;
    uintptr_t key;
  };
  std::vector<Hook> hooks_;
  struct Slot {
    size_t bucket;
    int64_t offset;
    bool ready = false;
  };
  std::vector<Slot> slots_;
  std::vector<std::unique_ptr<Bucket>> buckets_;
  std::unique_ptr<compress::Codec> codec_;
  std::unique_ptr<BufferBroadcast> buffers_;
  bool long_link_ = false;  // some link's round trip >= comm::kLongRttSeconds (ranks agree)
  bool sync_ = true;
  bool backward_started_ = false;  // this step's first gradient has been accumulated

  std::mutex mu_;
  std::condition_variable cv_;
  size_t next_to_reduce_ = 0;  // communication thread's position this step
  size_t reduced_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  DdpStats stats_;
  std::thread worker_;
};

}  // namespace dtrain::parallel
