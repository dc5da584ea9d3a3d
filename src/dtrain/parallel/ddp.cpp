#include "dtrain/parallel/ddp.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>

#include "dtrain/comm/armed_all_reduce.h"
#include "dtrain/comm/group.h"
#include "dtrain/comm/layout.h"
#include "dtrain/comm/tags.h"
#include "dtrain/comm/world.h"
#include "dtrain/compress/codec.h"
#include "dtrain/compress/error_feedback.h"
#include "dtrain/metrics/bandwidth.h"
#include "dtrain/metrics/timer.h"
#include "dtrain/metrics/trace.h"
#include "dtrain/parallel/bucket_assignment.h"
#include "dtrain/parallel/bucket_staging.h"
#include "dtrain/parallel/buffer_broadcast.h"
#include "dtrain/parallel/coded_feedback.h"
#include "dtrain/parallel/parameter_agreement.h"

namespace dtrain::parallel {
namespace {

using metrics::Clock;
using metrics::since;

// DDP's tag space (comm/tags.h): phase (0 reduce-scatter, 1 all-gather) and bucket.
int exchange_tag(int phase, size_t bucket) {
  static const comm::TagLayout layout(comm::TagSpace::kDdp, {{"phase", 1}, {"bucket", 23}});
  return layout.make({phase, static_cast<int64_t>(bucket)});
}
// The early buffer broadcast's messages: a bucket number no model reaches.
constexpr size_t kBufferBroadcastSlot = (size_t{1} << 23) - 1;

// Runs after autograd has accumulated a parameter's gradient into .grad (a post hook of
// its AccumulateGrad node, where PyTorch's reducer hooks in too): .grad then already holds
// the sum over no_sync steps, and may already be the bucket view itself.
class AfterAccumulation final : public torch::autograd::FunctionPostHook {
 public:
  explicit AfterAccumulation(std::function<void()> on_ready) : on_ready_(std::move(on_ready)) {}
  torch::autograd::variable_list operator()(
      const torch::autograd::variable_list& outputs,
      const torch::autograd::variable_list& /*inputs*/) override {
    on_ready_();
    return outputs;
  }

 private:
  std::function<void()> on_ready_;
};

}  // namespace

struct DistributedDataParallel::Bucket {
  std::vector<size_t> params;
  at::Tensor flat;  // float32, gradients of params in order, on the parameters' device
  std::unique_ptr<BucketStaging> staging;  // where it is reduced
  size_t pending = 0;
  bool submitted = false;
  // Compressed path: residuals of the pieces sent to each owner, and of the owned sum.
  FeedbackResiduals feedback;
  // Exact buckets on a long link: receives posted when backward starts (armed_all_reduce.h).
  std::unique_ptr<comm::ArmedAllReduce> armed;
};

DistributedDataParallel::DistributedDataParallel(comm::Group& group,
                                                 std::shared_ptr<torch::nn::Module> model,
                                                 DdpConfig config)
    : group_(group), model_(std::move(model)), config_(std::move(config)) {
  if (!(config_.bucket_mb > 0) || !(config_.first_bucket_mb > 0))
    throw std::invalid_argument("--bucket-mb must be positive");
  codec_ = compress::make_codec(config_.gradient_codec);
  std::vector<std::pair<std::string, at::Tensor>> named;
  for (const auto& p : model_->named_parameters())
    named.emplace_back(p.key(), p.value());
  check_same_parameters(group_, named);
  copy_rank0_state(named);
  for (auto& [name, p] : named)
    params_.push_back(p);
  // Long links change the schedule (below, and the contract in ddp.h). The ranks agree on
  // the longest link's round trip, as measured at connect.
  const bool measured_long = comm::on_a_long_link(group_);
  long_link_ = group_.size() > 1 &&
               (config_.link == LinkSchedule::kMeasured ? measured_long
                                                        : config_.link == LinkSchedule::kLong);
  bool buffers_on_cpu = true;
  for (const auto& b : model_->buffers())
    buffers_on_cpu = buffers_on_cpu && b.device().is_cpu();
  buffers_ = std::make_unique<BufferBroadcast>(
      group_, model_, config_.broadcast_buffers && long_link_ && buffers_on_cpu,
      exchange_tag(0, kBufferBroadcastSlot));
  make_buckets();
  hook_gradients();
  worker_ = std::thread([this] {
    metrics::trace::name_thread("ddp communication");
    communicate();
  });
}

void DistributedDataParallel::copy_rank0_state(
    const std::vector<std::pair<std::string, at::Tensor>>& named) {
  torch::NoGradGuard no_grad;
  for (const auto& [name, p] : named) {
    if (p.scalar_type() != at::kFloat)
      throw std::invalid_argument("DDP supports float32 parameters; '" + name + "' is not");
    if (p.device() != named.front().second.device())
      throw std::invalid_argument("DDP needs the whole model on one device; '" + name + "' is on " +
                                  p.device().str() + ", '" + named.front().first + "' on " +
                                  named.front().second.device().str());
    at::Tensor values = p;
    group_.native_broadcast(values, 0);
  }
  for (auto b : model_->buffers())
    if (b.numel() > 0) group_.native_broadcast(b, 0);
}

void DistributedDataParallel::make_buckets() {
  std::vector<int64_t> bytes;
  std::vector<bool> needs_grad;
  for (const auto& p : params_) {
    bytes.push_back(p.numel() * 4);
    needs_grad.push_back(p.requires_grad());
  }
  // A bucket of whole bytes reaches a cap of c MiB at ceil(c MiB) bytes.
  const auto cap = [](double mb) { return static_cast<int64_t>(std::ceil(mb * 1024 * 1024)); };
  // On a long link every bucket pays latency that backward cannot hide: there the first
  // bucket is not made small (one bucket fewer a step).
  const double first_mb =
      long_link_ ? std::max(config_.first_bucket_mb, config_.bucket_mb) : config_.first_bucket_mb;
  // There, too, Gloo's rendezvous would cost each message a round trip: exact buckets
  // reduced in host memory post their receives when backward starts (--algo auto only;
  // a codec that may change would share their tags).
  const bool arm_exact = long_link_ && config_.algorithm == comm::Algorithm::kAuto &&
                         config_.gradient_codec.id == compress::CodecId::kNone &&
                         !config_.codec_may_change;
  slots_.resize(params_.size());
  for (const auto& members :
       assign_buckets(bytes, needs_grad, cap(first_mb), cap(config_.bucket_mb))) {
    auto b = std::make_unique<Bucket>();
    int64_t elements = 0;
    for (const size_t k : members) {
      slots_[k] = {buckets_.size(), elements};
      b->params.push_back(k);
      elements += params_[k].numel();
    }
    b->flat = at::zeros({elements}, params_[members.front()].options().dtype(at::kFloat));
    const bool on_device = group_.reduces_on_device(b->flat);
    if (on_device && !comm::runs_off_cpu(config_.algorithm))
      throw std::invalid_argument("--algo " + comm::to_string(config_.algorithm) +
                                  " reduces host memory, and NCCL reduces these buckets on " +
                                  b->flat.device().str() +
                                  ": use --algo auto or native, or --backend gloo");
    // A bucket stays where it lies when NCCL reduces it there, or when every step codes it
    // (a fixed lossy codec): it is then coded on its GPU and only packets cross to the host.
    // Buckets whose steps may be exact over Gloo are staged in pinned host memory.
    const bool always_coded =
        config_.gradient_codec.id != compress::CodecId::kNone && !config_.codec_may_change;
    b->staging = BucketStaging::make(b->flat, on_device || always_coded);
    if (arm_exact && !on_device)
      b->armed = std::make_unique<comm::ArmedAllReduce>(
          group_, elements, exchange_tag(0, buckets_.size()), exchange_tag(1, buckets_.size()));
    b->pending = b->params.size();
    b->feedback.reset(group_.size());
    buckets_.push_back(std::move(b));
  }
}

void DistributedDataParallel::hook_gradients() {
  views_.resize(params_.size());
  for (size_t k = 0; k < params_.size(); ++k) {
    if (!params_[k].requires_grad()) continue;
    // The view has the parameter's strides (channels-last convolutions: models/
    // memory_format.h), so autograd accumulates into it without a layout change.
    const at::Tensor& p = params_[k];
    const at::Tensor piece =
        buckets_[slots_[k].bucket]->flat.narrow(0, slots_[k].offset, p.numel());
    views_[k] = (p.is_non_overlapping_and_dense() ? piece.as_strided(p.sizes(), p.strides())
                                                  : piece.view_as(p))
                    // Not an autograd view: LibTorch's zero_grad() detaches .grad in place,
                    // which it refuses for views.
                    .detach();
    // The variable holds its accumulator weakly: holding it here keeps the hook in place.
    auto accumulator = torch::autograd::impl::grad_accumulator(params_[k]);
    const uintptr_t key = accumulator->add_post_hook(
        std::make_unique<AfterAccumulation>([this, k] { on_accumulated(k); }));
    hooks_.push_back({std::move(accumulator), key});
  }
}

DistributedDataParallel::~DistributedDataParallel() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
  // Hooks capture `this`: a model that outlives us must not call them.
  for (const auto& hook : hooks_)
    hook.accumulator->del_post_hook(hook.key);
}

void DistributedDataParallel::on_accumulated(size_t k) {
  if (!sync_) return;        // local accumulation: .grad keeps the running sum
  if (!backward_started_) {  // the step's first gradient: its receives can go out now
    backward_started_ = true;
    for (auto& b : buckets_)
      if (b->armed) b->armed->arm();
    buffers_->start_early();  // a no-op unless the early schedule was chosen
  }
  adopt_gradient(k);
  Slot& slot = slots_[k];
  slot.ready = true;
  if (--buckets_[slot.bucket]->pending == 0) mark_ready(slot.bucket);
}

void DistributedDataParallel::adopt_gradient(size_t k) {
  at::Tensor& grad = params_[k].mutable_grad();
  const at::Tensor& view = views_[k];
  if (grad.is_same(view)) return;  // autograd accumulated into the bucket in place
  if (grad.defined())
    view.copy_(grad);
  else
    view.zero_();
  grad = view;
}

void DistributedDataParallel::mark_ready(size_t bucket) {
  Bucket& b = *buckets_[bucket];
  b.staging->start_download();
  // An armed bucket on the CPU sends its contributions now, from this thread: the
  // communication thread may still be waiting for an earlier bucket's exchange, and the
  // link would idle a one-way delay per bucket. (Staged GPU buckets start in finish().)
  if (b.armed && b.flat.device().is_cpu()) b.armed->start(b.flat);
  {
    std::lock_guard<std::mutex> lock(mu_);
    buckets_[bucket]->submitted = true;
  }
  cv_.notify_all();
}

void DistributedDataParallel::communicate() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] {
      return stop_ || (next_to_reduce_ < buckets_.size() && buckets_[next_to_reduce_]->submitted);
    });
    if (stop_) return;
    const size_t index = next_to_reduce_;
    lock.unlock();
    const auto t0 = Clock::now();
    std::exception_ptr failure;
    int64_t sent = 0;
    try {
      BucketStaging& staging = *buckets_[index]->staging;
      at::Tensor& values = staging.wait_download();
      // Exact buckets on a GPU are reduced there by NCCL; coded ones are coded where they
      // lie (on the GPU: compress/tensor_coding.h) and their packets cross over Gloo.
      sent = codec_->spec().id == compress::CodecId::kNone ? reduce(index, values)
                                                           : reduce_compressed(index, values);
      staging.start_upload();
    } catch (...) {
      failure = std::current_exception();
    }
    const double took = metrics::trace::span_since("communication", "bucket all-reduce", t0,
                                                   static_cast<int64_t>(index), "bucket");
    lock.lock();
    stats_.comm_s += took;
    stats_.grad_bytes += buckets_[index]->flat.numel() * 4;
    stats_.wire_bytes += sent;
    stats_.reductions += 1;
    if (failure) {
      error_ = failure;
      next_to_reduce_ = reduced_ = buckets_.size();  // release finish_backward()
    } else {
      ++next_to_reduce_;
      ++reduced_;
    }
    cv_.notify_all();
  }
}

int64_t DistributedDataParallel::reduce(size_t index, at::Tensor& values) {
  if (buckets_[index]->armed) {
    buckets_[index]->armed->finish(values, comm::ReduceOp::kAvg);
    return metrics::ring_allreduce_traffic(values.numel() * 4, group_.size());
  }
  comm::AllReduceOptions o;
  o.op = comm::ReduceOp::kAvg;
  o.algorithm = config_.algorithm;
  comm::all_reduce(group_, values, o);
  // Bandwidth-optimal all-reduce traffic per rank (what ring sends: 2 bytes (p-1)/p).
  return metrics::ring_allreduce_traffic(values.numel() * 4, group_.size());
}

int64_t DistributedDataParallel::reduce_compressed(size_t index, at::Tensor& values) {
  return coded_mean_with_feedback(group_, values, *codec_, buckets_[index]->feedback,
                                  exchange_tag(0, index), exchange_tag(1, index));
}

void DistributedDataParallel::before_forward() {
  if (!config_.broadcast_buffers) return;
  const double took = buffers_->before_forward();
  std::lock_guard<std::mutex> lock(mu_);
  stats_.broadcast_s += took;
}

void DistributedDataParallel::finish_backward() {
  if (!sync_) return;
  // Parameters that took no part in this backward: reduce what .grad holds (or zero).
  torch::NoGradGuard no_grad;
  for (size_t bi = 0; bi < buckets_.size(); ++bi) {
    Bucket& b = *buckets_[bi];
    if (b.pending == 0) continue;
    for (size_t k : b.params) {
      if (slots_[k].ready) continue;
      adopt_gradient(k);
      slots_[k].ready = true;
    }
    b.pending = 0;
    mark_ready(bi);
  }
  const auto t0 = Clock::now();
  std::exception_ptr failure;
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return reduced_ == buckets_.size(); });
    stats_.exposed_s += since(t0);
    failure = error_;
    error_ = nullptr;
    next_to_reduce_ = reduced_ = 0;
    for (auto& b : buckets_) {
      b->submitted = false;
      b->pending = b->params.size();
    }
  }
  for (auto& s : slots_)
    s.ready = false;
  backward_started_ = false;
  if (failure) std::rethrow_exception(failure);
  const double buffers_s = buffers_->finish();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.broadcast_s += buffers_s;
  }
  // .grad is the bucket view of every parameter: the averages are in place (on a GPU, once
  // the training stream has waited for their copy back).
  for (auto& b : buckets_)
    b->staging->finish();
}

size_t DistributedDataParallel::armed_buckets() const {
  return static_cast<size_t>(std::count_if(buckets_.begin(), buckets_.end(),
                                           [](const auto& b) { return b->armed != nullptr; }));
}

DdpStats DistributedDataParallel::take_stats() {
  std::lock_guard<std::mutex> lock(mu_);
  const DdpStats out = stats_;
  stats_ = DdpStats{};
  return out;
}

std::vector<int64_t> DistributedDataParallel::bucket_sizes() const {
  std::vector<int64_t> out;
  for (const auto& b : buckets_)
    out.push_back(b->flat.numel());
  return out;
}

std::map<std::string, DistributedDataParallel::FeedbackSlot>
DistributedDataParallel::feedback_slots() const {
  const int me = group_.rank(), world = group_.size();
  std::map<std::string, FeedbackSlot> slots;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    Bucket& bucket = *buckets_[b];
    const ResidualLengths lengths = residual_lengths(bucket.flat.numel(), world, me);
    const std::string prefix = "bucket" + std::to_string(b) + "/";
    for (int q = 0; q < world; ++q) {
      const int64_t length = lengths.scatter[static_cast<size_t>(q)];
      if (length >= 0)
        slots[prefix + "scatter" + std::to_string(q)] = {
            &bucket.feedback.scatter[static_cast<size_t>(q)], length};
    }
    slots[prefix + "gather"] = {&bucket.feedback.gather, lengths.gather};
  }
  return slots;
}

std::map<std::string, at::Tensor> DistributedDataParallel::residuals() const {
  std::map<std::string, at::Tensor> out;
  for (const auto& [name, slot] : feedback_slots())
    if (slot.feedback->residual().defined()) out[name] = slot.feedback->residual();
  return out;
}

void DistributedDataParallel::check_residuals(
    const std::map<std::string, at::Tensor>& saved) const {
  const auto slots = feedback_slots();
  for (const auto& [name, t] : saved) {
    const auto slot = slots.find(name);
    if (slot == slots.end())
      throw std::runtime_error(
          "the checkpoint holds error-feedback residual '" + name + "', which " +
          std::to_string(buckets_.size()) + " gradient buckets over " +
          std::to_string(group_.size()) +
          " ranks do not have (another --bucket-mb, or a checkpoint of a dtrain "
          "before 2-rank buckets were coded whole?)");
    if (t.scalar_type() != at::kFloat || t.dim() != 1 || t.size(0) != slot->second.length)
      throw std::runtime_error("the checkpoint holds error-feedback residual '" + name + "' of " +
                               std::to_string(t.numel()) + " values, this run's piece has " +
                               std::to_string(slot->second.length) + " float32 values");
  }
}

void DistributedDataParallel::restore_residuals(const std::map<std::string, at::Tensor>& saved) {
  for (const auto& [name, slot] : feedback_slots()) {
    const auto found = saved.find(name);
    if (found == saved.end())
      slot.feedback->reset();
    else
      slot.feedback->restore(found->second.clone());
  }
}

void DistributedDataParallel::set_gradient_codec(const compress::CodecSpec& spec) {
  std::lock_guard<std::mutex> lock(mu_);       // the communication thread reads codec_
  if (spec == config_.gradient_codec) return;  // a runoff asks before every step
  for (const auto& b : buckets_)
    if (b->submitted) throw std::logic_error("DDP: the gradient codec changed during a backward");
  config_.gradient_codec = spec;
  codec_ = compress::make_codec(spec);
}

}  // namespace dtrain::parallel
