#include "dtrain/parallel/diloco.h"

#include <ATen/ATen.h>

#include <stdexcept>

#include "dtrain/comm/allreduce.h"
#include "dtrain/comm/coded_allreduce.h"
#include "dtrain/comm/group.h"
#include "dtrain/comm/tags.h"
#include "dtrain/metrics/bandwidth.h"
#include "dtrain/metrics/timer.h"
#include "dtrain/metrics/trace.h"

namespace dtrain::parallel {
namespace {

int outer_tag(int phase) {
  static const comm::TagLayout layout(comm::TagSpace::kOuter, {{"phase", 1}});
  return layout.make({phase});
}

}  // namespace

Diloco::Diloco(comm::Group& group, std::vector<at::Tensor> parameters,
               std::vector<at::Tensor> buffers, DilocoConfig config)
    : group_(group),
      parameters_(std::move(parameters)),
      config_(std::move(config)),
      scatter_feedback_(static_cast<size_t>(group.size())) {
  if (config_.sync_every < 1) throw std::invalid_argument("--sync-every must be at least 1");
  if (!(config_.outer_lr > 0)) throw std::invalid_argument("--outer-lr must be positive");
  if (!(config_.outer_momentum >= 0 && config_.outer_momentum < 1))
    throw std::invalid_argument("--outer-momentum must be in [0, 1)");
  if (parameters_.empty()) throw std::invalid_argument("DiLoCo: the model has no parameters");
  for (const auto& p : parameters_)
    if (p.scalar_type() != at::kFloat)
      throw std::invalid_argument("DiLoCo: parameters must be float32");
  for (auto& b : buffers)
    if (b.is_floating_point() && b.numel() > 0) buffers_.push_back(b);
  if (config_.codec != compress::CodecSpec{}) codec_ = compress::make_codec(config_.codec);
  // Every replica starts where rank 0 does.
  const at::NoGradGuard no_grad;
  for (auto& t : parameters_) {
    at::Tensor host = t.detach().to(at::kCPU).contiguous();
    group_.native_broadcast(host, 0);
    t.detach().copy_(host);
  }
  for (auto& t : buffers_) {
    at::Tensor host = t.to(at::kCPU).contiguous();
    group_.native_broadcast(host, 0);
    t.copy_(host);
  }
  anchor_ = flat_parameters();
  momentum_ = at::zeros_like(anchor_);
}

Diloco::~Diloco() = default;

at::Tensor Diloco::flat_parameters() const {
  std::vector<at::Tensor> parts;
  for (const auto& p : parameters_)
    parts.push_back(p.detach().reshape({-1}));
  return at::cat(parts);
}

bool Diloco::after_inner_step() {
  ++since_sync_;
  ++stats_.inner_steps;
  return since_sync_ >= config_.sync_every && sync();
}

void Diloco::average(at::Tensor& values) {
  const int64_t fp32 = metrics::ring_allreduce_traffic(values.numel() * 4, group_.size());
  stats_.fp32_bytes += fp32;
  if (!codec_) {
    // The ring, not --algo auto: auto times every algorithm on a kind's first call, which
    // rare outer steps never pay back (on a 20 Mbit/s link that calibration took 12 s).
    comm::AllReduceOptions o;
    o.op = comm::ReduceOp::kAvg;
    o.algorithm = comm::Algorithm::kRing;
    comm::all_reduce(group_, values, o);
    stats_.wire_bytes += fp32;
    return;
  }
  comm::PieceCoding coding;
  coding.encode = [&](comm::CodedPhase phase, int peer, const at::Tensor& piece,
                      at::Tensor& decoded) {
    return phase == comm::CodedPhase::kScatter
               ? scatter_feedback_[static_cast<size_t>(peer)].encode(*codec_, piece)
               : gather_feedback_.encode(*codec_, piece, decoded);
  };
  coding.decode = [device = values.device()](const std::vector<uint8_t>& bytes) {
    return compress::decode(bytes.data(), bytes.size(), 1, device);
  };
  coding.packet_bytes = [&](int64_t n) {
    return static_cast<int64_t>(compress::packet_size(*codec_, {n}));
  };
  stats_.wire_bytes +=
      comm::coded_all_reduce_mean(group_, values, coding, outer_tag(0), outer_tag(1));
}

// One all-reduce for all of them: on a long link each message costs a round trip.
void Diloco::average_buffers() {
  if (buffers_.empty()) return;
  std::vector<at::Tensor> parts;
  for (const auto& b : buffers_)
    parts.push_back(b.to(at::kCPU, at::kFloat).reshape({-1}));
  at::Tensor flat = at::cat(parts);
  comm::AllReduceOptions o;
  o.op = comm::ReduceOp::kAvg;
  o.algorithm = comm::Algorithm::kRing;
  comm::all_reduce(group_, flat, o);
  int64_t offset = 0;
  for (auto& b : buffers_) {
    b.copy_(flat.narrow(0, offset, b.numel()).view_as(b));
    offset += b.numel();
  }
}

// Outer SGD with Nesterov momentum on the averaged pseudo-gradient g, as torch.optim.SGD
// does it: m = mu m + g; anchor -= lr (g + mu m).
bool Diloco::sync() {
  if (since_sync_ == 0) return false;
  const auto t0 = metrics::Clock::now();
  const at::NoGradGuard no_grad;
  at::Tensor g = (anchor_ - flat_parameters()).to(at::kCPU).contiguous();
  if (!g.isfinite().all().item<bool>())
    throw std::runtime_error(group_.describe() +
                             ": DiLoCo's pseudo-gradient is not finite (training diverged? "
                             "lower --lr or --outer-lr)");
  average(g);
  g = g.to(anchor_.device());
  const double mu = config_.outer_momentum;
  momentum_.mul_(mu).add_(g);
  anchor_.sub_(g.add(momentum_, mu), config_.outer_lr);
  int64_t offset = 0;
  for (auto& p : parameters_) {
    p.detach().copy_(anchor_.narrow(0, offset, p.numel()).view_as(p));
    offset += p.numel();
  }
  average_buffers();
  since_sync_ = 0;
  ++stats_.outer_steps;
  stats_.sync_s += metrics::trace::span_since("communication", "outer step", t0);
  return true;
}

std::map<std::string, at::Tensor> Diloco::state() const {
  std::map<std::string, at::Tensor> out{{"anchor", anchor_},
                                        {"momentum", momentum_},
                                        {"since_sync", at::tensor({since_sync_}, at::kLong)}};
  for (size_t peer = 0; peer < scatter_feedback_.size(); ++peer)
    if (scatter_feedback_[peer].residual().defined())
      out["residual/scatter/" + std::to_string(peer)] = scatter_feedback_[peer].residual();
  if (gather_feedback_.residual().defined()) out["residual/gather"] = gather_feedback_.residual();
  return out;
}

void Diloco::check_state(const std::map<std::string, at::Tensor>& saved) const {
  const auto fail = [&](const std::string& why) {
    throw std::runtime_error("the checkpoint's DiLoCo state " + why);
  };
  for (const char* name : {"anchor", "momentum", "since_sync"})
    if (!saved.count(name)) fail(std::string("lacks '") + name + "'");
  for (const char* name : {"anchor", "momentum"}) {
    const at::Tensor& t = saved.at(name);
    if (t.scalar_type() != at::kFloat || t.numel() != anchor_.numel())
      fail(std::string("'") + name + "' has " + std::to_string(t.numel()) + " values, this model " +
           std::to_string(anchor_.numel()));
  }
  const at::Tensor& since = saved.at("since_sync");
  if (since.scalar_type() != at::kLong || since.numel() != 1 || since.item<int64_t>() < 0 ||
      since.item<int64_t>() >= config_.sync_every)
    fail("has inner steps since its last outer step that --sync-every " +
         std::to_string(config_.sync_every) + " does not allow");
  for (const auto& [name, t] : saved) {
    if (name.rfind("residual/", 0) != 0) continue;
    if (!codec_) fail("holds error-feedback residuals, and this run's outer exchange is exact");
    bool known = name == "residual/gather";
    for (size_t peer = 0; peer < scatter_feedback_.size(); ++peer)
      known |= name == "residual/scatter/" + std::to_string(peer);
    if (!known) fail("holds residual '" + name + "', which this group has no place for");
    if (t.scalar_type() != at::kFloat) fail("holds residual '" + name + "' of another dtype");
  }
}

void Diloco::restore_state(const std::map<std::string, at::Tensor>& saved) {
  check_state(saved);
  anchor_.copy_(saved.at("anchor"));
  momentum_.copy_(saved.at("momentum"));
  since_sync_ = saved.at("since_sync").item<int64_t>();
  for (size_t peer = 0; peer < scatter_feedback_.size(); ++peer) {
    const auto it = saved.find("residual/scatter/" + std::to_string(peer));
    if (it != saved.end()) scatter_feedback_[peer].restore(it->second.clone());
  }
  if (const auto it = saved.find("residual/gather"); it != saved.end())
    gather_feedback_.restore(it->second.clone());
}

DilocoStats Diloco::take_stats() {
  const DilocoStats out = stats_;
  stats_ = DilocoStats{};
  return out;
}

}  // namespace dtrain::parallel
