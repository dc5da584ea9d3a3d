#include "dtrain/train/shard_state.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <cmath>
#include <set>
#include <stdexcept>

#include "dtrain/base/parse.h"
#include "dtrain/base/shape_text.h"

namespace dtrain::train {
namespace {

// The optimizer kinds a shard can hold, with their per-parameter state fields.
enum class OptimKind { kSgd, kAdam, kAdamW };

OptimKind kind_of(torch::optim::Optimizer& optimizer) {
  if (dynamic_cast<torch::optim::SGD*>(&optimizer)) return OptimKind::kSgd;
  if (dynamic_cast<torch::optim::AdamW*>(&optimizer)) return OptimKind::kAdamW;
  if (dynamic_cast<torch::optim::Adam*>(&optimizer)) return OptimKind::kAdam;
  throw std::invalid_argument("checkpoints hold SGD, Adam and AdamW state only");
}

const char* name_of(OptimKind kind) {
  switch (kind) {
    case OptimKind::kSgd:
      return "sgd";
    case OptimKind::kAdam:
      return "adam";
    case OptimKind::kAdamW:
      break;
  }
  return "adamw";
}

at::Tensor step_tensor(int64_t step) {
  return at::tensor({step}, at::kLong);
}

// Adam's and AdamW's states share their fields but not a base class.
template <typename State>
void put_adam_state(const State& s, const std::string& prefix,
                    std::map<std::string, at::Tensor>& out) {
  out[prefix + "exp_avg"] = s.exp_avg();
  out[prefix + "exp_avg_sq"] = s.exp_avg_sq();
  if (s.max_exp_avg_sq().defined()) out[prefix + "max_exp_avg_sq"] = s.max_exp_avg_sq();
  out[prefix + "step"] = step_tensor(s.step());
}

std::vector<at::Tensor> all_params(torch::optim::Optimizer& optimizer) {
  std::vector<at::Tensor> out;
  for (auto& group : optimizer.param_groups())
    for (const auto& p : group.params())
      out.push_back(p);
  return out;
}

const std::string kExtraPrefix = "extra/";

at::Tensor position_tensor(const Position& p) {
  return at::tensor({static_cast<double>(p.epoch), static_cast<double>(p.step), p.loss_sum,
                     static_cast<double>(p.correct), static_cast<double>(p.seen)},
                    at::kDouble);
}

// Reads `contents` with every lookup checked, and remembers what was used, so names left
// over (another model's tensors) are an error too.
class Reader {
 public:
  Reader(const ShardContents& contents, std::string where)
      : contents_(contents), where_(std::move(where)) {}

  bool has(const std::string& name) const { return contents_.tensors.count(name) != 0; }

  // The tensor `name`, which must have this dtype and shape.
  const at::Tensor& take(const std::string& name, at::ScalarType dtype, at::IntArrayRef shape) {
    const auto found = contents_.tensors.find(name);
    if (found == contents_.tensors.end()) fail("has no tensor '" + name + "'");
    const at::Tensor& t = found->second;
    if (t.scalar_type() != dtype || t.sizes() != shape)
      fail("tensor '" + name + "' is " + std::string(c10::toString(t.scalar_type())) + " " +
           shape_text(t.sizes()) + ", this run needs " + c10::toString(dtype) + " " +
           shape_text(shape));
    used_.insert(name);
    return t;
  }
  const at::Tensor& take_like(const std::string& name, const at::Tensor& like) {
    return take(name, like.scalar_type(), like.sizes());
  }
  // Every tensor whose name starts with `prefix`, by the rest of its name.
  std::map<std::string, at::Tensor> take_prefixed(const std::string& prefix) {
    std::map<std::string, at::Tensor> out;
    for (const auto& [name, t] : contents_.tensors) {
      if (name.compare(0, prefix.size(), prefix) != 0) continue;
      out[name.substr(prefix.size())] = t;
      used_.insert(name);
    }
    return out;
  }
  int64_t take_count(const std::string& name) {
    const int64_t v = take(name, at::kLong, {1}).item<int64_t>();
    if (v < 0) fail("tensor '" + name + "' is negative");
    return v;
  }

  void check_all_used() const {
    for (const auto& [name, t] : contents_.tensors)
      if (!used_.count(name)) fail("holds tensor '" + name + "', which this run does not have");
  }

  // `what` the shard does ("has no tensor 'x'"); `reason` a whole clause of its own.
  [[noreturn]] void fail(const std::string& what) const { reject("it " + what); }
  [[noreturn]] void reject(const std::string& reason) const {
    throw std::runtime_error(where_ + ": not a checkpoint of this model and optimizer: " + reason);
  }

 private:
  const ShardContents& contents_;
  const std::string where_;
  std::set<std::string> used_;
};

Position position_of(Reader& in) {
  const at::Tensor& t = in.take("position", at::kDouble, {5});
  const double* v = t.data_ptr<double>();
  const auto count = [&](double x, const char* what) {
    const auto n = count_in_double(x);
    if (!n)
      in.fail(std::string("has an impossible position (") + what + " " + std::to_string(x) + ")");
    return *n;
  };
  if (!std::isfinite(v[2])) in.fail("has a non-finite loss sum in its position");
  return {count(v[0], "epoch"), count(v[1], "step"), v[2], count(v[3], "correct"),
          count(v[4], "seen")};
}

// The optimizer's per-parameter states the shard holds, checked against the parameters;
// nothing is changed yet.
std::vector<std::pair<void*, std::unique_ptr<torch::optim::OptimizerParamState>>>
take_optimizer_states(Reader& in, torch::optim::Optimizer& optimizer, OptimKind kind) {
  const auto params = all_params(optimizer);
  std::vector<std::pair<void*, std::unique_ptr<torch::optim::OptimizerParamState>>> states;
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string prefix = "optimizer/" + std::to_string(i) + "/";
    const at::Tensor& p = params[i];
    if (kind == OptimKind::kSgd) {
      if (!in.has(prefix + "momentum_buffer")) continue;
      auto s = std::make_unique<torch::optim::SGDParamState>();
      s->momentum_buffer(in.take_like(prefix + "momentum_buffer", p));
      states.emplace_back(p.unsafeGetTensorImpl(), std::move(s));
      continue;
    }
    if (!in.has(prefix + "step")) continue;
    const auto fill = [&](auto s) {
      s->step(in.take_count(prefix + "step"));
      s->exp_avg(in.take_like(prefix + "exp_avg", p));
      s->exp_avg_sq(in.take_like(prefix + "exp_avg_sq", p));
      if (in.has(prefix + "max_exp_avg_sq"))
        s->max_exp_avg_sq(in.take_like(prefix + "max_exp_avg_sq", p));
      states.emplace_back(p.unsafeGetTensorImpl(), std::move(s));
    };
    if (kind == OptimKind::kAdam)
      fill(std::make_unique<torch::optim::AdamParamState>());
    else
      fill(std::make_unique<torch::optim::AdamWParamState>());
  }
  return states;
}

}  // namespace

ShardContents shard_contents(const Position& at, const RankState& state) {
  ShardContents out;
  for (const auto& p : state.module->named_parameters())
    out.tensors["model/" + p.key()] = p.value();
  for (const auto& b : state.module->named_buffers())
    out.tensors["model/" + b.key()] = b.value();
  const OptimKind kind = kind_of(state.optimizer);
  out.metadata["optimizer"] = name_of(kind);
  const auto& groups = state.optimizer.param_groups();
  for (size_t g = 0; g < groups.size(); ++g)
    out.tensors["optimizer/lr/" + std::to_string(g)] =
        at::tensor({groups[g].options().get_lr()}, at::kDouble);
  const auto& states = state.optimizer.state();
  const auto params = all_params(state.optimizer);
  for (size_t i = 0; i < params.size(); ++i) {
    const auto found = states.find(params[i].unsafeGetTensorImpl());
    if (found == states.end()) continue;
    const std::string prefix = "optimizer/" + std::to_string(i) + "/";
    const auto* s = found->second.get();
    if (kind == OptimKind::kSgd) {
      const auto& sgd = static_cast<const torch::optim::SGDParamState&>(*s);
      if (sgd.momentum_buffer().defined())
        out.tensors[prefix + "momentum_buffer"] = sgd.momentum_buffer();
    } else if (kind == OptimKind::kAdam) {
      put_adam_state(static_cast<const torch::optim::AdamParamState&>(*s), prefix, out.tensors);
    } else {
      put_adam_state(static_cast<const torch::optim::AdamWParamState&>(*s), prefix, out.tensors);
    }
  }
  out.tensors["rng"] = at::detail::getDefaultCPUGenerator().get_state();
  out.tensors["position"] = position_tensor(at);
  if (state.extra) {
    for (const auto& [name, t] : state.extra->save())
      out.tensors[kExtraPrefix + name] = t;
  }
  if (state.replica) {
    for (auto it = out.tensors.begin(); it != out.tensors.end();)
      it = is_replicated(it->first) ? out.tensors.erase(it) : std::next(it);
  }
  return out;
}

bool is_replicated(const std::string& tensor_name) {
  const auto starts = [&](const char* prefix) { return tensor_name.rfind(prefix, 0) == 0; };
  return starts("model/") || (starts("optimizer/") && !starts("optimizer/lr/"));
}

Position restore_shard_contents(const ShardContents& contents, const RankState& state,
                                const std::string& where) {
  Reader in(contents, where);
  const OptimKind kind = kind_of(state.optimizer);
  const auto optimizer = contents.metadata.find("optimizer");
  if (optimizer == contents.metadata.end() || optimizer->second != name_of(kind))
    in.fail(std::string("holds the state of optimizer '") +
            (optimizer == contents.metadata.end() ? "?" : optimizer->second) + "', this run uses " +
            name_of(kind));
  // Everything is checked and gathered first; only then is the model or optimizer changed.
  std::vector<std::pair<at::Tensor, at::Tensor>> copies;  // destination, source
  for (const auto& p : state.module->named_parameters())
    copies.emplace_back(p.value(), in.take_like("model/" + p.key(), p.value()));
  for (const auto& b : state.module->named_buffers())
    copies.emplace_back(b.value(), in.take_like("model/" + b.key(), b.value()));
  auto& groups = state.optimizer.param_groups();
  std::vector<double> lrs;
  for (size_t g = 0; g < groups.size(); ++g) {
    const double lr = in.take("optimizer/lr/" + std::to_string(g), at::kDouble, {1}).item<double>();
    if (!std::isfinite(lr) || lr < 0) in.fail("has an impossible learning rate");
    lrs.push_back(lr);
  }
  auto states = take_optimizer_states(in, state.optimizer, kind);
  at::Generator generator = at::detail::getDefaultCPUGenerator();  // a handle: shared state
  const at::Tensor& rng = in.take("rng", at::kByte, generator.get_state().sizes());
  const Position position = position_of(in);
  std::map<std::string, at::Tensor> extra;
  if (state.extra) {
    extra = in.take_prefixed(kExtraPrefix);
    try {
      state.extra->check(extra);
    } catch (const std::runtime_error& e) {
      in.reject(e.what());  // the mode's own sentence ("the checkpoint's DiLoCo state ...")
    }
  }
  in.check_all_used();

  try {
    generator.set_state(rng);  // first: the one step that may still refuse
  } catch (const c10::Error& e) {
    const std::string what = e.what();
    in.fail("holds an unusable generator state (" + what.substr(0, what.find('\n')) + ")");
  }
  {
    at::NoGradGuard no_grad;
    for (auto& [destination, source] : copies)
      destination.copy_(source);
  }
  for (size_t g = 0; g < groups.size(); ++g)
    groups[g].options().set_lr(lrs[g]);
  auto& live = state.optimizer.state();
  live.clear();
  for (auto& [key, s] : states)
    live[key] = std::move(s);
  if (state.extra) state.extra->restore(extra);
  return position;
}

}  // namespace dtrain::train
