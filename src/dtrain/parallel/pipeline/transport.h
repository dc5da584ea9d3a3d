// The pipeline's wire: tagged point-to-point messages of one comm::Group between the ranks
// that run the stages. It owns the pipeline's tag space (kind, destination stage,
// micro-batch; see comm/tags.h), the codecs of each edge, the sends still in flight, the
// hand-off between two stages on the same rank, and the counters a rank reports
// (encode/decode time, waits, per-link bytes).
//
// Compression: activations use the activation codec and gradients the gradient codec on
// compressed edges (links touching rank 0, or every link); other edges carry "none".
// Sends are asynchronous: the packet stays alive until wait_sends().
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "dtrain/compress/codec.h"
#include "dtrain/parallel/pipeline/command.h"
#include "dtrain/parallel/pipeline/report.h"

namespace dtrain::comm {
class Group;
}

namespace dtrain::parallel::pipeline {

struct EdgeCodecs {
  compress::CodecSpec activations, gradients;
  bool all_edges = false;  // false: only links touching rank 0 are compressed
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

  // Boundary tensors between stages (activations forward, gradients backward).
  void send_tensor(const at::Tensor& t, int from_stage, int to_stage, int micro_batch,
                   bool gradient);
  at::Tensor receive_tensor(int from_stage, int to_stage, int micro_batch, bool gradient);

  // Labels from the driver to the rank of the loss (the linear chain).
  void send_labels(const at::Tensor& labels, int to_rank, int micro_batch);
  at::Tensor receive_labels(int64_t samples, int micro_batch);

  // The loss rank's [loss sum, correct, samples] to the driver.
  void send_result(const std::vector<double>& values);
  std::vector<double> receive_result(int from_rank);

  // Driver: one command to every follower; follower: the next command from the driver.
  void send_command(const Command& command);
  Command receive_command();

  // Follower: this rank's report to the driver; driver: rank r's report.
  void send_report(const RankReport& report);
  RankReport receive_report(int from_rank);

  void wait_sends();

  // --compress auto (link_tuner.h). A codec for every message this rank sends to `to_rank`
  // (activations and gradients) on a compressed edge, replacing the edge codecs.
  void set_link_codec(int to_rank, const compress::CodecSpec& spec);
  // Whether messages to `to_rank` are compressed at all (links touching rank 0, or all).
  bool compresses(int to_rank) const;
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
  void set_counting(bool on) { counting_ = on; }
  bool counting() const { return counting_; }
  StageTimes& times() { return times_; }
  std::vector<LinkRecord> links() const;
  void reset_counters();

 private:
  const compress::Codec& codec_for(int to_rank, bool gradient) const;
  void keep_sending(at::Tensor tensor, int to_rank, int tag);

  comm::Group& group_;
  std::vector<int> stage_rank_;
  bool all_edges_;
  std::unique_ptr<compress::Codec> activation_codec_, gradient_codec_, plain_codec_;
  struct Pending;
  std::vector<std::unique_ptr<Pending>> pending_;
  std::map<std::tuple<bool, int, int>, at::Tensor> local_handoff_;
  StageTimes times_;
  std::map<std::tuple<int, bool>, LinkRecord> links_;
  std::map<int, std::unique_ptr<compress::Codec>> link_codecs_;
  std::map<std::pair<int, bool>, Sent> sent_;
  bool keep_samples_ = false;
  bool counting_ = false;
};

}  // namespace dtrain::parallel::pipeline
