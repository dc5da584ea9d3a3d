// DiLoCo's state in checkpoints (parallel/diloco.h): what a resumed run needs to continue
// exactly where the stopped one was, an exchange in flight included.
#include <ATen/ATen.h>

#include <algorithm>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>

#include "dtrain/parallel/diloco.h"

namespace dtrain::parallel {
namespace {

std::string residual_name(size_t fragment, const std::string& phase) {
  return "residual/" + std::to_string(fragment) + "/" + phase;
}

// The exchanges in flight, in the order they land: the first's fields as "pending/FIELD"
// (as when one at most could be), the next ones' as "pending/I/FIELD".
std::string pending_name(size_t i, const char* field) {
  return i == 0 ? std::string("pending/") + field : "pending/" + std::to_string(i) + "/" + field;
}

size_t pending_count(const std::map<std::string, at::Tensor>& saved) {
  size_t n = 0;
  while (saved.count(pending_name(n, "fragment")) != 0)
    ++n;
  return n;
}

template <class Fail>
compress::CodecSpec parse_saved_codec(const at::Tensor& bytes, const Fail& fail) {
  if (bytes.scalar_type() != at::kByte || bytes.dim() != 1 || bytes.numel() > 256)
    fail("holds a malformed outer codec");
  const at::Tensor host = bytes.contiguous();
  const std::string name(reinterpret_cast<const char*>(host.data_ptr<uint8_t>()),
                         static_cast<size_t>(host.numel()));
  try {
    return compress::parse_codec(name);
  } catch (const std::invalid_argument& e) {
    fail("holds an outer codec that does not parse: " + std::string(e.what()));
  }
  return {};
}

}  // namespace

std::map<std::string, at::Tensor> Diloco::state() {
  settle();
  std::vector<int64_t> since, countdown;
  for (const auto& f : fragments_) {
    since.push_back(f.since);
    countdown.push_back(f.countdown);
  }
  std::map<std::string, at::Tensor> out{{"anchor", anchor_},
                                        {"momentum", momentum_},
                                        {"since_sync", at::tensor(since, at::kLong)},
                                        {"countdown", at::tensor(countdown, at::kLong)}};
  for (size_t i = 0; i < fragments_.size(); ++i) {
    const Fragment& f = fragments_[i];
    for (size_t peer = 0; peer < f.feedback.scatter.size(); ++peer)
      if (f.feedback.scatter[peer].residual().defined())
        out[residual_name(i, "scatter/" + std::to_string(peer))] =
            f.feedback.scatter[peer].residual();
    if (f.feedback.gather.residual().defined())
      out[residual_name(i, "gather")] = f.feedback.gather.residual();
  }
  if (config_.auto_codec && !codec_pending_) {
    // The choice travels with the residuals it made: a resumed run does not choose again.
    const std::string name = compress::to_string(config_.codec);
    out["outer_codec"] = at::tensor(std::vector<uint8_t>(name.begin(), name.end()), at::kByte);
  }
  for (size_t i = 0; i < in_flight_.size(); ++i) {
    const InFlight& e = in_flight_[i];
    const Averaged& a = *e.settled;
    out[pending_name(i, "fragment")] = at::tensor({static_cast<int64_t>(e.fragment)}, at::kLong);
    out[pending_name(i, "steps_left")] = at::tensor({e.steps_left}, at::kLong);
    out[pending_name(i, "pseudo_gradient")] = a.pseudo_gradient;
    if (a.buffers.defined()) out[pending_name(i, "buffers")] = a.buffers;
  }
  return out;
}

void Diloco::check_state(const std::map<std::string, at::Tensor>& saved) const {
  const auto fail = [&](const std::string& why) {
    throw std::runtime_error("the checkpoint's DiLoCo state " + why);
  };
  for (const char* name : {"anchor", "momentum", "since_sync", "countdown"})
    if (!saved.count(name)) fail(std::string("lacks '") + name + "'");
  for (const char* name : {"anchor", "momentum"}) {
    const at::Tensor& t = saved.at(name);
    if (t.scalar_type() != at::kFloat || t.numel() != anchor_.numel())
      fail(std::string("'") + name + "' has " + std::to_string(t.numel()) + " values, this model " +
           std::to_string(anchor_.numel()));
  }
  const auto fragments = static_cast<int64_t>(fragments_.size());
  for (const char* name : {"since_sync", "countdown"}) {
    const at::Tensor& t = saved.at(name);
    if (t.scalar_type() != at::kLong || t.numel() != fragments)
      fail("has " + std::to_string(t.numel()) + " fragments, this run --fragments " +
           std::to_string(fragments));
    // An outer step due in an epoch's last steps waits up to H/2 steps for its end.
    const int64_t wait = config_.sync_every / 2;
    const bool countdown = name == std::string("countdown");
    const int64_t low = countdown ? 1 - wait : 0;
    const int64_t high = countdown ? config_.sync_every : config_.sync_every + wait;
    if (t.min().item<int64_t>() < low || t.max().item<int64_t>() > high)
      fail("has inner steps since its last outer step that --sync-every " +
           std::to_string(config_.sync_every) + " does not allow");
  }
  std::optional<compress::CodecSpec> chosen;
  if (const auto it = saved.find("outer_codec"); it != saved.end()) {
    if (!config_.auto_codec)
      fail("holds a codec chosen by --compress-outer auto, and this run's is fixed");
    chosen = parse_saved_codec(it->second, fail);
  }
  // Before auto's choice the exchanges go with its lossiest candidate (Diloco::decide_codec).
  const bool coded =
      codec_ != nullptr || (chosen ? *chosen != compress::CodecSpec{} : codec_pending_);
  for (const auto& [name, t] : saved) {
    if (name.rfind("residual/", 0) != 0) continue;
    if (!coded) fail("holds error-feedback residuals, and this run's outer exchange is exact");
    bool known = false;
    for (size_t i = 0; i < fragments_.size(); ++i) {
      known |= name == residual_name(i, "gather");
      for (size_t peer = 0; peer < fragments_[i].feedback.scatter.size(); ++peer)
        known |= name == residual_name(i, "scatter/" + std::to_string(peer));
    }
    if (!known) fail("holds residual '" + name + "', which this group has no place for");
    if (t.scalar_type() != at::kFloat) fail("holds residual '" + name + "' of another dtype");
  }
  check_pending(saved, fail);
}

void Diloco::check_pending(const std::map<std::string, at::Tensor>& saved,
                           const std::function<void(const std::string&)>& fail) const {
  const size_t count = pending_count(saved);
  if (count == 0) return;
  if (workers_.empty()) fail("holds an exchange in flight, and this run has no --sync-delay");
  if (static_cast<int64_t>(count) > exchanges_in_flight(config_))
    fail("holds " + std::to_string(count) + " exchanges in flight, more than this run's " +
         "--sync-delay keeps");
  std::vector<bool> seen(fragments_.size(), false);
  int64_t previous_steps = 0;
  for (size_t i = 0; i < count; ++i) {
    const at::Tensor& fragment = saved.at(pending_name(i, "fragment"));
    const int64_t f = fragment.numel() == 1 ? fragment.item<int64_t>() : -1;
    if (f < 0 || f >= static_cast<int64_t>(fragments_.size()) || seen[static_cast<size_t>(f)])
      fail("holds an exchange in flight for a fragment this run lacks, or twice");
    seen[static_cast<size_t>(f)] = true;
    const auto steps = saved.find(pending_name(i, "steps_left"));
    const auto g = saved.find(pending_name(i, "pseudo_gradient"));
    // They land in order: each no sooner than the one before.
    if (steps == saved.end() || g == saved.end() || steps->second.numel() != 1 ||
        steps->second.item<int64_t>() < std::max<int64_t>(1, previous_steps) ||
        steps->second.item<int64_t>() > config_.sync_delay ||
        g->second.scalar_type() != at::kFloat ||
        g->second.numel() != fragments_[static_cast<size_t>(f)].size)
      fail("holds an exchange in flight that does not fit this run's fragments and delay");
    previous_steps = steps->second.item<int64_t>();
    const auto b = saved.find(pending_name(i, "buffers"));
    if (b != saved.end() && (f != 0 || b->second.numel() != flat_buffers().numel()))
      fail("holds averaged buffers that do not fit this model");
  }
}

void Diloco::restore_state(const std::map<std::string, at::Tensor>& saved) {
  check_state(saved);
  if (const auto it = saved.find("outer_codec"); it != saved.end()) {
    config_.codec = parse_saved_codec(it->second, [](const std::string&) {});
    codec_ = config_.codec == compress::CodecSpec{} ? nullptr : compress::make_codec(config_.codec);
    codec_pending_ = false;
  }
  anchor_.copy_(saved.at("anchor"));
  momentum_.copy_(saved.at("momentum"));
  const at::Tensor since = saved.at("since_sync"), countdown = saved.at("countdown");
  for (size_t i = 0; i < fragments_.size(); ++i) {
    Fragment& f = fragments_[i];
    f.since = since[static_cast<int64_t>(i)].item<int64_t>();
    f.countdown = countdown[static_cast<int64_t>(i)].item<int64_t>();
    for (size_t peer = 0; peer < f.feedback.scatter.size(); ++peer) {
      const auto it = saved.find(residual_name(i, "scatter/" + std::to_string(peer)));
      if (it != saved.end()) f.feedback.scatter[peer].restore(it->second.clone());
    }
    if (const auto it = saved.find(residual_name(i, "gather")); it != saved.end())
      f.feedback.gather.restore(it->second.clone());
  }
  in_flight_.clear();
  const size_t pending = pending_count(saved);
  for (size_t i = 0; i < pending; ++i) {
    InFlight& e = in_flight_.emplace_back();
    e.fragment = static_cast<size_t>(saved.at(pending_name(i, "fragment")).item<int64_t>());
    e.steps_left = saved.at(pending_name(i, "steps_left")).item<int64_t>();
    Averaged a;
    a.pseudo_gradient = saved.at(pending_name(i, "pseudo_gradient")).clone();
    if (const auto b = saved.find(pending_name(i, "buffers")); b != saved.end())
      a.buffers = b->second.clone();
    e.settled = std::move(a);
  }
}

}  // namespace dtrain::parallel
