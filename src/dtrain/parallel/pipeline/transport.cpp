#include "dtrain/parallel/pipeline/transport.h"

#include <ATen/ATen.h>

#include <nlohmann/json.hpp>

#include "dtrain/base/shape_text.h"
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
  kIdsTag = 0,
  kActivationTag = 1,
  kGradientTag = 2,
  kLabelTag = 3,
  kResultTag = 4,
  kCommandTag = 5,
  kTuningTag = 6,
  kMaskTag = 7
};
const comm::TagLayout& tag_layout() {
  static const comm::TagLayout layout(comm::TagSpace::kPipeline,
                                      {{"kind", 3}, {"stage", 10}, {"micro-batch", 11}});
  return layout;
}
int tag(TagKind kind, int stage = 0, int micro_batch = 0) {
  return tag_layout().make({kind, stage, micro_batch});
}
int tag(const Transfer& t) {
  return tag(t.gradient ? kGradientTag : kActivationTag, t.to_stage, t.micro_batch);
}
constexpr int64_t kMaxReportBytes = int64_t{1} << 24;

}  // namespace

struct StageTransport::Pending {
  std::vector<uint8_t> bytes;
  at::Tensor tensor;
  comm::Request request;
};

struct StageTransport::Inbound {
  at::Tensor buffer;  // the packet's bytes, or the labels
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

bool StageTransport::compresses(int a, int b) const {
  return all_edges_ || a == 0 || b == 0;
}

bool StageTransport::compresses(int peer) const {
  return compresses(group_.rank(), peer);
}

const compress::Codec& StageTransport::codec_for(int from_rank, int to_rank, bool gradient) const {
  if (!compresses(from_rank == group_.rank() ? to_rank : from_rank)) return *plain_codec_;
  const auto chosen = link_codecs_.find({from_rank, to_rank});
  if (chosen != link_codecs_.end()) return *chosen->second;
  return gradient ? *gradient_codec_ : *activation_codec_;
}

const compress::Codec& StageTransport::codec_of(const Transfer& transfer) const {
  if (transfer.codec != nullptr) return *transfer.codec;
  return codec_for(rank_of(transfer.from_stage), rank_of(transfer.to_stage), transfer.gradient);
}

void StageTransport::set_link_codec(int from_rank, int to_rank, const compress::CodecSpec& spec) {
  link_codecs_[{from_rank, to_rank}] = compress::make_codec(spec);
}

std::optional<size_t> StageTransport::packet_bytes(const Transfer& transfer) const {
  const auto known = sample_shapes_.find(transfer.boundary());
  if (known == sample_shapes_.end()) return std::nullopt;
  std::vector<int64_t> shape{transfer.samples};
  shape.insert(shape.end(), known->second.begin(), known->second.end());
  return compress::packet_size(codec_of(transfer), shape);
}

namespace {
std::string describe(const Transfer& t) {
  return std::string(t.gradient ? "gradients" : "activations") + " from stage " +
         std::to_string(t.from_stage) + " to " + std::to_string(t.to_stage) + ", micro-batch " +
         std::to_string(t.micro_batch);
}
}  // namespace

// Both ends learn a boundary's per-sample shape from its first tensor; later ones must
// match it, or the receiver's buffer would have the wrong size.
void StageTransport::learn_shape(const Transfer& transfer, const at::Tensor& t) {
  if (t.dim() < 1 || t.size(0) != transfer.samples) {
    throw std::runtime_error(describe(transfer) + " has shape " + shape_text(t.sizes()) +
                             ": a pipeline boundary tensor must have the micro-batch's " +
                             std::to_string(transfer.samples) + " samples as its first dimension");
  }
  const std::vector<int64_t> sample(t.sizes().begin() + 1, t.sizes().end());
  const auto [known, first] = sample_shapes_.emplace(transfer.boundary(), sample);
  if (!first && known->second != sample) {
    throw std::runtime_error(describe(transfer) + " has per-sample shape " + shape_text(sample) +
                             ", the boundary's first tensor had " + shape_text(known->second) +
                             ": pipeline boundaries must keep their shape");
  }
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

at::Tensor StageTransport::send_tensor(const at::Tensor& t, const Transfer& transfer,
                                       bool decode_sent) {
  const int to_rank = rank_of(transfer.to_stage);
  if (to_rank == group_.rank()) {
    local_handoff_[{transfer.gradient, transfer.to_stage, transfer.micro_batch}] = t.detach();
    return decode_sent ? t.detach() : at::Tensor();
  }
  const bool length_first = sample_shapes_.count(transfer.boundary()) == 0;
  learn_shape(transfer, t);
  auto pending = std::make_unique<Pending>();
  const auto t0 = Clock::now();
  const compress::Codec& codec = codec_of(transfer);
  at::Tensor decoded;
  try {
    // The packet with room for the wire check after it (comm::Group::Room).
    const auto size = static_cast<int64_t>(compress::packet_size(codec, t.sizes().vec()));
    pending->tensor = comm::Group::buffer_with_room(size);
    compress::encode_into(codec, t.detach(), pending->tensor.data_ptr<uint8_t>(),
                          static_cast<size_t>(size));
    if (decode_sent)
      decoded = compress::decode(pending->tensor.data_ptr<uint8_t>(), static_cast<size_t>(size), 1,
                                 t.device());
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(describe(transfer) + " cannot be sent: " + e.what() +
                             " (training diverged? lower --lr)");
  }
  const double encode_s =
      metrics::trace::span_since("codec", "encode", t0, transfer.micro_batch, "micro-batch");
  if (counting_) times_.encode_s += encode_s;
  if (counting_ && keep_samples_) {
    Sent& sent = sent_[{to_rank, transfer.gradient}];
    sent.sample = t.detach();
    ++sent.messages;
  }
  const int message_tag = tag(transfer);
  if (length_first) {
    const auto* data = pending->tensor.data_ptr<uint8_t>();
    pending->bytes.assign(data, data + pending->tensor.numel());
    pending->request = group_.isend_bytes(pending->bytes, to_rank, message_tag);
  } else {
    pending->request =
        group_.isend(pending->tensor, to_rank, message_tag, comm::Group::Room::kCheck);
  }
  pending_.push_back(std::move(pending));
  return decoded;
}

void StageTransport::post_receive(int message_tag, int from_rank, at::Tensor buffer,
                                  bool room_for_check) {
  Inbound in;
  in.buffer = std::move(buffer);
  in.request = group_.irecv(in.buffer, from_rank, message_tag,
                            room_for_check ? comm::Group::Room::kCheck : comm::Group::Room::kNone);
  inbound_.emplace(message_tag, std::move(in));
}

at::Tensor StageTransport::take_receive(int message_tag) {
  auto posted = inbound_.find(message_tag);
  posted->second.request.wait();
  at::Tensor buffer = std::move(posted->second.buffer);
  inbound_.erase(posted);
  return buffer;
}

void StageTransport::expect_tensor(const Transfer& transfer) {
  const int from_rank = rank_of(transfer.from_stage);
  if (from_rank == group_.rank() || inbound_.count(tag(transfer))) return;
  const auto bytes = packet_bytes(transfer);
  if (!bytes) return;
  const auto size = static_cast<int64_t>(*bytes);
  post_receive(tag(transfer), from_rank, comm::Group::buffer_with_room(size), true);
}

at::Tensor StageTransport::receive_tensor(const Transfer& transfer, const c10::Device& device) {
  const int from_rank = rank_of(transfer.from_stage);
  if (from_rank == group_.rank()) {
    auto it = local_handoff_.find({transfer.gradient, transfer.to_stage, transfer.micro_batch});
    at::Tensor t = it->second.to(device);
    local_handoff_.erase(it);
    return t;
  }
  const int message_tag = tag(transfer);
  expect_tensor(transfer);
  auto t0 = Clock::now();
  at::Tensor packet;
  if (inbound_.count(message_tag)) {
    packet = take_receive(message_tag);
  } else {  // the boundary's first activation: its length comes first
    auto bytes = group_.recv_bytes(from_rank, message_tag);
    packet = at::from_blob(bytes.data(), {static_cast<int64_t>(bytes.size())}, at::kByte).clone();
  }
  const double waited = metrics::trace::span_since("communication", "receive wait", t0,
                                                   transfer.micro_batch, "micro-batch");
  t0 = Clock::now();
  at::Tensor t =
      compress::decode(packet.data_ptr<uint8_t>(), static_cast<size_t>(packet.numel()), 1, device);
  const double decode_s =
      metrics::trace::span_since("codec", "decode", t0, transfer.micro_batch, "micro-batch");
  learn_shape(transfer, t);
  if (counting_) {
    times_.recv_wait_s += waited;
    times_.decode_s += decode_s;
    count_received(transfer, static_cast<size_t>(packet.numel()), t, waited);
  }
  return t;
}

void StageTransport::count_received(const Transfer& transfer, size_t bytes, const at::Tensor& t,
                                    double waited) {
  const int from_rank = rank_of(transfer.from_stage);
  auto& link = links_[{from_rank, transfer.gradient}];
  link.src = from_rank;
  link.dst = group_.rank();
  link.direction = transfer.gradient ? "backward" : "forward";
  link.bytes += static_cast<int64_t>(bytes);
  link.fp32_bytes += 4 * t.numel();
  link.messages += 1;
  link.recv_time_s += waited;
}

namespace {
int driver_data_tag(StageTransport::DriverData what, int micro_batch) {
  using Data = StageTransport::DriverData;
  const TagKind kind = what == Data::kLabels ? kLabelTag : what == Data::kMask ? kMaskTag : kIdsTag;
  return tag(kind, 0, micro_batch);
}
}  // namespace

void StageTransport::send_driver_data(DriverData what, const at::Tensor& t, int to_rank,
                                      int micro_batch) {
  keep_sending(t.contiguous(), to_rank, driver_data_tag(what, micro_batch));
}

void StageTransport::expect_driver_data(DriverData what, at::IntArrayRef shape,
                                        at::ScalarType dtype, int micro_batch) {
  const int message_tag = driver_data_tag(what, micro_batch);
  if (!inbound_.count(message_tag)) post_receive(message_tag, 0, at::empty(shape, dtype));
}

at::Tensor StageTransport::receive_driver_data(DriverData what, at::IntArrayRef shape,
                                               at::ScalarType dtype, int micro_batch) {
  expect_driver_data(what, shape, dtype, micro_batch);
  const auto t0 = Clock::now();
  at::Tensor y = take_receive(driver_data_tag(what, micro_batch));
  const double waited =
      metrics::trace::span_since("communication", "receive wait", t0, micro_batch, "micro-batch");
  if (counting_) times_.recv_wait_s += waited;
  return y;
}

void StageTransport::send_result(const StepResult& result) {
  group_.send(result.to_message(), 0, tag(kResultTag));
}

StepResult StageTransport::receive_result(int from_rank) {
  auto t = at::empty({StepResult::kValues}, at::kDouble);
  group_.recv(t, from_rank, tag(kResultTag));
  return StepResult::from_message(t, "rank " + std::to_string(from_rank));
}

void StageTransport::send_command(const Command& command) {
  const at::Tensor message = to_message(command);
  for (int r = 1; r < group_.size(); ++r)
    keep_sending(message, r, tag(kCommandTag));
}

// The next command's receive is posted as soon as this one is taken, so the driver's send
// finds it posted and goes straight out: a command sent before its receive was posted
// waited for the driver's I/O thread, which on busy cores runs only when the driver blocks
// (1.3 ms of every step in the bubble benchmark). Not after stop, and not after a wire-check
// switch: the next message's framing (comm/group.h) depends on the switch, which the
// follower makes only when it runs the command.
Command StageTransport::receive_command() {
  const int command_tag = tag(kCommandTag);
  const auto post_next = [&] {
    post_receive(command_tag, 0, at::empty({kCommandValues}, at::kDouble));
  };
  if (!inbound_.count(command_tag)) post_next();
  const Command command =
      from_message(take_receive(command_tag), group_.describe() + " (from rank 0)");
  if (command.kind != CommandKind::kStop && command.kind != CommandKind::kWireCheck) post_next();
  return command;
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

void StageTransport::set_counting(bool on) {
  if (on == counting_) return;
  if (on)
    check_s_at_start_ = group_.wire_check_seconds();
  else
    times_.wire_check_s += group_.wire_check_seconds() - check_s_at_start_;
  counting_ = on;
}

void StageTransport::reset_counters() {
  times_ = StageTimes{};
  check_s_at_start_ = group_.wire_check_seconds();
  links_.clear();
  sent_.clear();
}

}  // namespace dtrain::parallel::pipeline
