// Delta coding of activations (delta_cache.h): which boundaries carry it, their caches,
// and the two ends of one delta-coded message.
#include <ATen/ATen.h>
#include <torch/nn/modules/container/sequential.h>

#include "dtrain/comm/group.h"
#include "dtrain/metrics/timer.h"
#include "dtrain/metrics/trace.h"
#include "dtrain/models/registry.h"
#include "dtrain/parallel/pipeline/pipeline.h"
#include "dtrain/parallel/pipeline/pipeline_step.h"

namespace dtrain::parallel::pipeline {
namespace {

std::string mib(int64_t bytes) {
  return std::to_string((bytes + (int64_t{1} << 20) - 1) >> 20) + " MiB";
}

}  // namespace

// Every rank sizes every rank's caches from the model (one sample through it), so an
// over-limit configuration fails on every rank before training, naming the rank.
void Pipeline::make_delta_caches(torch::nn::Sequential& model) {
  const DeltaOptions& d = *config_.delta;
  if (config_.auto_compress)
    throw std::invalid_argument("--delta codes with a fixed codec: not with --compress auto");
  if (d.samples < 1) throw std::invalid_argument("--delta needs the training set's size");
  warmup_codec_ = compress::make_codec(d.warmup);
  const auto blocks = models::describe(model, d.sample_input);
  std::vector<int64_t> rank_bytes(static_cast<size_t>(group_.size()), 0);
  std::map<int, std::vector<int64_t>> mine;
  const auto& stages = config_.partition.stages;
  for (size_t v = 1; v < stages.size(); ++v) {
    const int from = stage_rank_[v - 1], to = stage_rank_[v];
    if (from == to || !wire_->compresses(from, to)) continue;
    const auto& shape = blocks.at(static_cast<size_t>(stages[v].begin - 1)).output_shape;
    int64_t numel = 1;
    for (const int64_t n : shape)
      numel *= n;
    const int64_t bytes = DeltaCache::bytes_for(d.samples, numel, d.dtype);
    rank_bytes[static_cast<size_t>(from)] += bytes;
    rank_bytes[static_cast<size_t>(to)] += bytes;
    if (from == group_.rank() || to == group_.rank()) mine[static_cast<int>(v)] = shape;
  }
  for (size_t r = 0; r < rank_bytes.size(); ++r) {
    if (rank_bytes[r] > d.limit_bytes)
      throw std::invalid_argument(
          "--delta: rank " + std::to_string(r) + "'s caches need " + mib(rank_bytes[r]) + " (" +
          std::to_string(d.samples) + " samples at " + std::string(c10::toString(d.dtype)) +
          "), over --delta-cache-mb " + std::to_string(d.limit_bytes >> 20) +
          ": raise it, pick --delta-cache-dtype bfloat16, or place the boundaries where the "
          "activations are smaller");
  }
  for (auto& [boundary, shape] : mine)
    delta_caches_.emplace(boundary, DeltaCache(d.samples, shape, d.dtype));
}

void Pipeline::check_ids(int64_t batch, const at::Tensor& ids) const {
  if (!ids.defined() || ids.dim() != 1 || ids.size(0) != batch || ids.scalar_type() != at::kLong)
    throw std::invalid_argument("pipeline: delta coding needs the batch's " +
                                std::to_string(batch) + " sample indices (int64)");
  const at::Tensor host = ids.to(at::kCPU);
  if (batch > 0 &&
      (host.min().item<int64_t>() < 0 || host.max().item<int64_t>() >= config_.delta->samples))
    throw std::invalid_argument("pipeline: a sample index is outside the training set's " +
                                std::to_string(config_.delta->samples) + " samples");
}

// The driver sends the whole batch's indices to every follower at the step's start.
at::Tensor Pipeline::share_ids(const Step& step, const at::Tensor& ids) {
  using Data = StageTransport::DriverData;
  at::Tensor all;
  if (group_.rank() == 0) {
    all = ids.to(at::kCPU).contiguous();
    for (int r = 1; r < group_.size(); ++r)
      wire_->send_driver_data(Data::kIds, all, r, 0);
  } else {
    all = wire_->receive_driver_data(Data::kIds, {step.batch}, at::kLong, 0);
  }
  return all;
}

bool Pipeline::delta_coded(const Transfer& t) const {
  if (!config_.delta || t.gradient) return false;
  const int from = stage_rank_[static_cast<size_t>(t.from_stage)];
  const int to = stage_rank_[static_cast<size_t>(t.to_stage)];
  return from != to && wire_->compresses(from, to);
}

// Both ends decide alike: their caches mark the same samples seen (a batch's samples are
// distinct, so a step's earlier micro-batches never change a later one's answer).
const compress::Codec* Pipeline::codec_override(const Step& step, const Transfer& t) const {
  if (!delta_coded(t)) return nullptr;
  if (!step.training) return warmup_codec_.get();
  const auto& ids = step.id_chunks.at(static_cast<size_t>(t.micro_batch));
  return delta_caches_.at(t.boundary()).all_seen(ids) ? nullptr : warmup_codec_.get();
}

// The sender codes its activation minus the cached value and keeps what the receiver will
// decode: the cached value plus the decoded change.
void Pipeline::send_activation(Step& step, const at::Tensor& output, const Transfer& plain) {
  Transfer t = plain;
  t.codec = codec_override(step, t);
  if (!step.training || !delta_coded(t)) {
    wire_->send_tensor(output, t);
    return;
  }
  DeltaCache& cache = delta_caches_.at(t.boundary());
  const at::Tensor& ids = step.id_chunks.at(static_cast<size_t>(t.micro_batch));
  const torch::NoGradGuard no_grad;
  at::Tensor base;
  if (t.codec == nullptr) base = cache.gather(ids, output.device());
  const at::Tensor decoded =
      wire_->send_tensor(base.defined() ? output.detach() - base : output, t, true);
  const auto t0 = metrics::Clock::now();
  cache.store(ids, base.defined() ? base + decoded : decoded);
  const double s =
      metrics::trace::span_since("codec", "delta cache", t0, t.micro_batch, "micro-batch");
  if (wire_->counting()) wire_->times().encode_s += s;
}

at::Tensor Pipeline::delta_received(Step& step, const Transfer& t, at::Tensor decoded) {
  const auto t0 = metrics::Clock::now();
  DeltaCache& cache = delta_caches_.at(t.boundary());
  const at::Tensor& ids = step.id_chunks.at(static_cast<size_t>(t.micro_batch));
  at::Tensor value = std::move(decoded);
  if (t.codec == nullptr) value = cache.gather(ids, value.device()) + value;
  cache.store(ids, value);
  const double s =
      metrics::trace::span_since("codec", "delta cache", t0, t.micro_batch, "micro-batch");
  if (wire_->counting()) wire_->times().decode_s += s;
  return value;
}

}  // namespace dtrain::parallel::pipeline
