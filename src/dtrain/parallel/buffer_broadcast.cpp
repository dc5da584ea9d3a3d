#include "dtrain/parallel/buffer_broadcast.h"

#include <torch/torch.h>

#include "dtrain/metrics/timer.h"

namespace dtrain::parallel {

using metrics::Clock;
using metrics::since;

BufferBroadcast::BufferBroadcast(comm::Group& group, std::shared_ptr<torch::nn::Module> model,
                                 bool early, int tag)
    : group_(group), model_(std::move(model)), early_(early && group.size() > 1), tag_(tag) {}

BufferBroadcast::~BufferBroadcast() = default;

std::vector<at::Tensor> BufferBroadcast::buffers() const {
  std::vector<at::Tensor> out;
  for (auto b : model_->buffers())
    if (b.numel() > 0) out.push_back(b);
  return out;
}

namespace {

// One message of every buffer's bytes (BatchNorm has float statistics and an int64
// counter): on a long link each message costs a round trip.
at::Tensor concatenated_bytes(const std::vector<at::Tensor>& buffers) {
  std::vector<at::Tensor> bytes;
  for (const auto& b : buffers)
    bytes.push_back(b.contiguous().view({-1}).view(at::kByte));
  return at::cat(bytes);
}

}  // namespace

void BufferBroadcast::apply(const at::Tensor& flat, const std::vector<at::Tensor>& buffers) const {
  torch::NoGradGuard no_grad;
  int64_t offset = 0;
  for (auto b : buffers) {
    const int64_t n = b.numel() * b.element_size();
    // A copy starts at offset 0: viewing bytes as a wider type needs aligned storage.
    b.copy_(flat.narrow(0, offset, n).clone().view(b.scalar_type()).view_as(b));
    offset += n;
  }
}

double BufferBroadcast::before_forward() {
  if (group_.size() == 1) return 0;
  if (delivered_) {  // construction copied rank 0's buffers, or the early broadcast has them
    delivered_ = false;
    if (staged_.defined()) apply(staged_, buffers());
    staged_ = at::Tensor();
    return 0;
  }
  const auto t0 = Clock::now();
  torch::NoGradGuard no_grad;
  const auto list = buffers();
  if (list.empty()) return 0;
  at::Tensor flat = concatenated_bytes(list);
  group_.native_broadcast(flat, 0);
  apply(flat, list);
  return since(t0);
}

void BufferBroadcast::start_early() {
  if (!early_ || !requests_.empty()) return;
  torch::NoGradGuard no_grad;
  const auto list = buffers();
  if (list.empty()) return;
  const int p = group_.size();
  if (group_.rank() == 0) {
    flat_ = concatenated_bytes(list);
    for (int j = 1; j < p; ++j)
      requests_.push_back(group_.isend(flat_, j, tag_));
  } else {
    int64_t bytes = 0;
    for (const auto& b : list)
      bytes += b.numel() * b.element_size();
    flat_ = at::empty({bytes}, at::kByte);
    requests_.push_back(group_.irecv(flat_, 0, tag_));
  }
}

double BufferBroadcast::finish() {
  if (requests_.empty()) return 0;
  const auto t0 = Clock::now();
  std::vector<comm::Request> pending = std::move(requests_);
  requests_.clear();
  for (auto& r : pending)
    r.wait();
  // Applied at the next forward, as the broadcast there would: an evaluation before it
  // runs with this rank's own statistics, as it does on a short link (and in PyTorch).
  if (group_.rank() != 0) staged_ = flat_;
  flat_ = at::Tensor();
  delivered_ = true;
  return since(t0);
}

}  // namespace dtrain::parallel
