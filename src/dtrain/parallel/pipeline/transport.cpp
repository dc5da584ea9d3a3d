#include "dtrain/parallel/pipeline/transport.h"

#include <ATen/ATen.h>

#include <nlohmann/json.hpp>

#include "dtrain/comm/group.h"
#include "dtrain/comm/tags.h"
#include "dtrain/metrics/timer.h"
#include "dtrain/metrics/trace.h"

namespace dtrain::parallel::pipeline {
namespace {

using metrics::Clock;
using metrics::since;

// The pipeline's tag space (comm/tags.h): kind, destination stage, micro-batch.
enum TagKind {
  kActivationTag = 1,
  kGradientTag = 2,
  kLabelTag = 3,
  kResultTag = 4,
  kCommandTag = 5,
  kTuningTag = 6
};
const comm::TagLayout& tag_layout() {
  static const comm::TagLayout layout(comm::TagSpace::kPipeline,
                                      {{"kind", 3}, {"stage", 10}, {"micro-batch", 11}});
  return layout;
}
int tag(TagKind kind, int stage = 0, int micro_batch = 0) {
  return tag_layout().make({kind, stage, micro_batch});
}
constexpr int64_t kMaxReportBytes = int64_t{1} << 24;

}  // namespace

struct StageTransport::Pending {
  std::vector<uint8_t> bytes;
  at::Tensor tensor;
  comm::Request request;
};

StageTransport::StageTransport(comm::Group& group, std::vector<int> stage_rank,
                               const EdgeCodecs& codecs)
    : group_(group),
      stage_rank_(std::move(stage_rank)),
      all_edges_(codecs.all_edges),
      activation_codec_(compress::make_codec(codecs.activations)),
      gradient_codec_(compress::make_codec(codecs.gradients)),
      plain_codec_(compress::make_codec(compress::CodecSpec{})) {}

StageTransport::~StageTransport() {
  // Sends still in flight reference our buffers: let them finish (or fail) first.
  for (auto& p : pending_) {
    try {
      p->request.wait();
    } catch (...) {
    }
  }
}

int64_t StageTransport::max_stages() {
  return tag_layout().limit(1);
}

int64_t StageTransport::max_micro_batches() {
  return tag_layout().limit(2);
}

bool StageTransport::compresses(int to_rank) const {
  return all_edges_ || group_.rank() == 0 || to_rank == 0;
}

const compress::Codec& StageTransport::codec_for(int to_rank, bool gradient) const {
  if (!compresses(to_rank)) return *plain_codec_;
  const auto chosen = link_codecs_.find(to_rank);
  if (chosen != link_codecs_.end()) return *chosen->second;
  return gradient ? *gradient_codec_ : *activation_codec_;
}

void StageTransport::set_link_codec(int to_rank, const compress::CodecSpec& spec) {
  link_codecs_[to_rank] = compress::make_codec(spec);
}

int StageTransport::tuning_tag(int purpose) {
  return tag(kTuningTag, purpose);
}

void StageTransport::keep_sending(at::Tensor tensor, int to_rank, int tag) {
  auto p = std::make_unique<Pending>();
  p->tensor = std::move(tensor);
  p->request = group_.isend(p->tensor, to_rank, tag);
  pending_.push_back(std::move(p));
}

void StageTransport::send_tensor(const at::Tensor& t, int from_stage, int to_stage, int micro_batch,
                                 bool gradient) {
  const int to_rank = stage_rank_[static_cast<size_t>(to_stage)];
  if (to_rank == group_.rank()) {
    local_handoff_[{gradient, to_stage, micro_batch}] = t.detach();
    return;
  }
  auto pending = std::make_unique<Pending>();
  const auto t0 = Clock::now();
  try {
    pending->bytes = compress::encode(codec_for(to_rank, gradient), t.detach());
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(std::string(gradient ? "gradients" : "activations") + " of stage " +
                             std::to_string(from_stage) + ", micro-batch " +
                             std::to_string(micro_batch) + " cannot be sent: " + e.what() +
                             " (training diverged? lower --lr)");
  }
  const double encode_s =
      metrics::trace::span_since("codec", "encode", t0, micro_batch, "micro-batch");
  if (counting_) times_.encode_s += encode_s;
  if (counting_ && keep_samples_) {
    Sent& sent = sent_[{to_rank, gradient}];
    sent.sample = t.detach();
    ++sent.messages;
  }
  pending->request =
      group_.isend_bytes(pending->bytes, to_rank,
                         tag(gradient ? kGradientTag : kActivationTag, to_stage, micro_batch));
  pending_.push_back(std::move(pending));
}

at::Tensor StageTransport::receive_tensor(int from_stage, int to_stage, int micro_batch,
                                          bool gradient) {
  const int from_rank = stage_rank_[static_cast<size_t>(from_stage)];
  if (from_rank == group_.rank()) {
    auto it = local_handoff_.find({gradient, to_stage, micro_batch});
    at::Tensor t = it->second;
    local_handoff_.erase(it);
    return t;
  }
  auto t0 = Clock::now();
  const auto packet = group_.recv_bytes(
      from_rank, tag(gradient ? kGradientTag : kActivationTag, to_stage, micro_batch));
  const double waited =
      metrics::trace::span_since("communication", "receive wait", t0, micro_batch, "micro-batch");
  t0 = Clock::now();
  at::Tensor t = compress::decode(packet);
  const double decode_s =
      metrics::trace::span_since("codec", "decode", t0, micro_batch, "micro-batch");
  if (counting_) {
    times_.recv_wait_s += waited;
    times_.decode_s += decode_s;
    auto& link = links_[{from_rank, gradient}];
    link.src = from_rank;
    link.dst = group_.rank();
    link.direction = gradient ? "backward" : "forward";
    link.bytes += static_cast<int64_t>(packet.size());
    link.fp32_bytes += 4 * t.numel();
    link.messages += 1;
    link.recv_time_s += waited;
  }
  return t;
}

void StageTransport::send_labels(const at::Tensor& labels, int to_rank, int micro_batch) {
  keep_sending(labels.contiguous(), to_rank, tag(kLabelTag, 0, micro_batch));
}

at::Tensor StageTransport::receive_labels(int64_t samples, int micro_batch) {
  const auto t0 = Clock::now();
  at::Tensor y = at::empty({samples}, at::kLong);
  group_.recv(y, 0, tag(kLabelTag, 0, micro_batch));
  const double waited =
      metrics::trace::span_since("communication", "receive wait", t0, micro_batch, "micro-batch");
  if (counting_) times_.recv_wait_s += waited;
  return y;
}

void StageTransport::send_result(const std::vector<double>& values) {
  auto t = at::tensor(values, at::kDouble);
  group_.send(t, 0, tag(kResultTag));
}

std::vector<double> StageTransport::receive_result(int from_rank) {
  auto t = at::empty({3}, at::kDouble);
  group_.recv(t, from_rank, tag(kResultTag));
  return {t[0].item<double>(), t[1].item<double>(), t[2].item<double>()};
}

void StageTransport::send_command(const Command& command) {
  const at::Tensor message = to_message(command);
  for (int r = 1; r < group_.size(); ++r)
    keep_sending(message, r, tag(kCommandTag));
}

Command StageTransport::receive_command() {
  auto t = at::empty({kCommandValues}, at::kDouble);
  group_.recv(t, 0, tag(kCommandTag));
  return from_message(t, group_.describe() + " (from rank 0)");
}

void StageTransport::send_report(const RankReport& report) {
  const std::string text = nlohmann::json(report).dump();
  const std::vector<uint8_t> bytes(text.begin(), text.end());
  group_.isend_bytes(bytes, 0, comm::report_tag()).wait();
}

RankReport StageTransport::receive_report(int from_rank) {
  const auto bytes = group_.recv_bytes(from_rank, comm::report_tag(), kMaxReportBytes);
  RankReport rep;
  try {
    nlohmann::json::parse(bytes.begin(), bytes.end()).get_to(rep);
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error("corrupt pipeline report from rank " + std::to_string(from_rank) +
                             ": " + e.what());
  }
  if (rep.rank != from_rank) {
    throw std::runtime_error("pipeline report from rank " + std::to_string(from_rank) +
                             " says it is from rank " + std::to_string(rep.rank));
  }
  return rep;
}

void StageTransport::wait_sends() {
  const auto t0 = Clock::now();
  for (auto& p : pending_)
    p->request.wait();
  pending_.clear();
  const double waited = metrics::trace::span_since("communication", "send wait", t0);
  if (counting_) times_.send_wait_s += waited;
}

std::vector<LinkRecord> StageTransport::links() const {
  std::vector<LinkRecord> out;
  for (const auto& [key, link] : links_)
    out.push_back(link);
  return out;
}

void StageTransport::reset_counters() {
  times_ = StageTimes{};
  links_.clear();
  sent_.clear();
}

}  // namespace dtrain::parallel::pipeline
