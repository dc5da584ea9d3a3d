// The pipeline's wire: tagged point-to-point messages of one comm::Group between the ranks
// that run the stages. It owns the pipeline's tag space (kind, destination stage,
// micro-batch; see comm/tags.h), the codecs of each edge, the sends still in flight, the
// hand-off between two stages on the same rank, and the counters a rank reports
// (encode/decode time, waits, per-link bytes).
//
// Compression: activations use the activation codec and gradients the gradient codec on
// compressed edges (links touching rank 0, or every link); other edges carry "none".
// Sends are asynchronous: the packet stays alive until wait_sends().
//
// Messages. A packet crosses as one message whose size both ends compute: the codec of the
// link and direction (both know it, --compress auto included) applied to the shape
// [samples] + the boundary's per-sample shape. The first activation on each boundary
// teaches both ends that per-sample shape, so it alone goes length-first (two messages);
// later tensors must keep it (a sender whose tensor changes shape fails with an error
// saying so). Receives are posted ahead of need (expect_tensor): Gloo moves an unbound
// message only once the receiver has posted its buffer, so a receive posted late costs a
// round trip on the critical path.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <memory>
#include <optional>
#include <tuple>
#include <vector>

#include "dtrain/compress/codec.h"
#include "dtrain/parallel/pipeline/command.h"
#include "dtrain/parallel/pipeline/report.h"
#include "dtrain/parallel/pipeline/step_result.h"

namespace dtrain::comm {
class Group;
}

namespace dtrain::parallel::pipeline {

struct EdgeCodecs {
  compress::CodecSpec activations, gradients;
  bool all_edges = false;  // false: only links touching rank 0 are compressed
};

// One boundary tensor: activations go from stage v-1 to v, gradients from v+1 to v.
struct Transfer {
  int from_stage = 0, to_stage = 0, micro_batch = 0;
  bool gradient = false;
  int64_t samples = 0;  // the micro-batch's size: the tensor's first dimension
  // Not null: the codec of this one message instead of the link's (delta coding's warm-up
  // and evaluation messages, delta_cache.h); both ends must give the same one.
  const compress::Codec* codec = nullptr;
  int boundary() const { return from_stage > to_stage ? from_stage : to_stage; }
};

class StageTransport {
 public:
  StageTransport(comm::Group& group, std::vector<int> stage_rank, const EdgeCodecs& codecs);
  ~StageTransport();  // waits for sends in flight
  StageTransport(const StageTransport&) = delete;
  StageTransport& operator=(const StageTransport&) = delete;

  // The most stages and micro-batches the tag space can name.
  static int64_t max_stages();
  static int64_t max_micro_batches();

  // Boundary tensors between stages (activations forward, gradients backward). A tensor on
  // a GPU is coded there and only its packet is staged through host memory; a received
  // packet is decoded on `device` (compress/tensor_coding.h). With `decode_sent`,
  // send_tensor returns what the receiver will decode (on t's device), else an undefined
  // tensor.
  at::Tensor send_tensor(const at::Tensor& t, const Transfer& transfer, bool decode_sent = false);
  at::Tensor receive_tensor(const Transfer& transfer, const c10::Device& device);
  // Posts the receive of a tensor this rank will need, unless its packet size cannot be
  // known yet (the boundary's first activation). Idempotent; a no-op for a stage on this
  // rank. Every receive posted must be taken by receive_tensor in the same step.
  void expect_tensor(const Transfer& transfer);

  // Per-micro-batch tensors the driver hands out beside the boundary tensors, sent exact:
  // the labels (to the rank of the loss in a linear chain) and a text batch's attention
  // mask (to every rank that runs a forward), and under delta coding the whole batch's
  // sample indices (to every follower, as micro-batch 0). The receiver gives shape and dtype.
  enum class DriverData { kLabels, kMask, kIds };
  void send_driver_data(DriverData what, const at::Tensor& t, int to_rank, int micro_batch);
  at::Tensor receive_driver_data(DriverData what, at::IntArrayRef shape, at::ScalarType dtype,
                                 int micro_batch);
  // Posts it ahead, as expect_tensor.
  void expect_driver_data(DriverData what, at::IntArrayRef shape, at::ScalarType dtype,
                          int micro_batch);

  // The loss rank's result to the driver (step_result.h).
  void send_result(const StepResult& result);
  StepResult receive_result(int from_rank);

  // Driver: one command to every follower; follower: the next command from the driver.
  void send_command(const Command& command);
  Command receive_command();

  // Follower: this rank's report to the driver; driver: rank r's report.
  void send_report(const RankReport& report);
  RankReport receive_report(int from_rank);

  void wait_sends();

  // --compress auto (link_tuner.h). The codec of every message from_rank sends to to_rank
  // (activations and gradients) on a compressed edge, replacing the edge codecs. Both ends
  // of the link must set it (the receiver sizes its buffers with it).
  void set_link_codec(int from_rank, int to_rank, const compress::CodecSpec& spec);
  // Whether messages between ranks a and b are compressed at all (links touching rank 0,
  // or all); compresses(peer): between this rank and `peer`.
  bool compresses(int a, int b) const;
  bool compresses(int peer) const;
  // With keep_samples(true) (the tuner's): the last tensor this rank sent to each (rank,
  // gradient?) while counting, and how many were sent since reset_counters(), so the tuner
  // can code them with each candidate. Off otherwise: no tensor is kept past its send.
  void keep_samples(bool on) { keep_samples_ = on; }
  struct Sent {
    at::Tensor sample;
    int64_t messages = 0;
  };
  const std::map<std::pair<int, bool>, Sent>& sent() const { return sent_; }
  // Tags of the tuner's own messages (probes, calibration reports, codec settings).
  static int tuning_tag(int purpose);
  comm::Group& group() { return group_; }

  // Counting is on during training steps only.
  void set_counting(bool on);
  bool counting() const { return counting_; }
  StageTimes& times() { return times_; }
  std::vector<LinkRecord> links() const;
  void reset_counters();

 private:
  const compress::Codec& codec_for(int from_rank, int to_rank, bool gradient) const;
  const compress::Codec& codec_of(const Transfer& transfer) const;
  int rank_of(int stage) const { return stage_rank_[static_cast<size_t>(stage)]; }
  // The exact packet size of `transfer`, once its boundary's per-sample shape is known.
  std::optional<size_t> packet_bytes(const Transfer& transfer) const;
  void learn_shape(const Transfer& transfer, const at::Tensor& t);
  // Receives posted ahead, by tag: post one into `buffer`, or wait for it and take its buffer.
  // `room_for_check`: the buffer's allocation has comm::Group::kCheckRoom bytes after it.
  void post_receive(int message_tag, int from_rank, at::Tensor buffer, bool room_for_check = false);
  at::Tensor take_receive(int message_tag);
  void keep_sending(at::Tensor tensor, int to_rank, int tag);
  void count_received(const Transfer& transfer, size_t bytes, const at::Tensor& t, double waited);

  comm::Group& group_;
  std::vector<int> stage_rank_;
  bool all_edges_;
  std::unique_ptr<compress::Codec> activation_codec_, gradient_codec_, plain_codec_;
  struct Pending;
  std::vector<std::unique_ptr<Pending>> pending_;
  std::map<std::tuple<bool, int, int>, at::Tensor> local_handoff_;
  struct Inbound;                                      // a receive posted ahead
  std::map<int, Inbound> inbound_;                     // by tag
  std::map<int, std::vector<int64_t>> sample_shapes_;  // boundary -> per-sample shape
  StageTimes times_;
  std::map<std::tuple<int, bool>, LinkRecord> links_;
  std::map<std::pair<int, int>, std::unique_ptr<compress::Codec>> link_codecs_;
  std::map<std::pair<int, bool>, Sent> sent_;
  bool keep_samples_ = false;
  bool counting_ = false;
  double check_s_at_start_ = 0;  // group_.wire_check_seconds() when counting began
};

}  // namespace dtrain::parallel::pipeline
