#include "dtrain/train/inner_state.h"

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace dtrain::train {
namespace {

// One optimizer kind's state of one parameter: `slots` tensors shaped as the parameter after
// a leading counter (Adam's step, SGD's presence).
struct Layout {
  int slots = 0;
  bool counts_steps = false;  // the counter is a step count (Adam's)
  // Reads a parameter's state: its counter and its tensors (none where it has no state).
  std::function<double(const torch::optim::OptimizerParamState*, std::vector<at::Tensor>&)> read;
  // A state of `counter` holding `tensors`.
  std::function<std::unique_ptr<torch::optim::OptimizerParamState>(int64_t counter,
                                                                   std::vector<at::Tensor>)>
      make;
};

template <typename State>
Layout adam_layout() {
  Layout l;
  l.slots = 1;
  l.counts_steps = true;
  l.read = [](const torch::optim::OptimizerParamState* s, std::vector<at::Tensor>& out) {
    const auto& a = static_cast<const State&>(*s);
    out = {a.exp_avg_sq()};
    return static_cast<double>(a.step());
  };
  l.make = [](int64_t step, std::vector<at::Tensor> t) {
    auto s = std::make_unique<State>();
    s->step(step);
    s->exp_avg(at::zeros_like(t[0]));  // the first moments start afresh (inner_state.h)
    s->exp_avg_sq(std::move(t[0]));
    return std::unique_ptr<torch::optim::OptimizerParamState>(std::move(s));
  };
  return l;
}

Layout sgd_layout() {
  Layout l;
  l.slots = 1;
  l.read = [](const torch::optim::OptimizerParamState* s, std::vector<at::Tensor>& out) {
    out = {static_cast<const torch::optim::SGDParamState&>(*s).momentum_buffer()};
    return 1.0;
  };
  l.make = [](int64_t, std::vector<at::Tensor> t) {
    auto s = std::make_unique<torch::optim::SGDParamState>();
    s->momentum_buffer(std::move(t[0]));
    return std::unique_ptr<torch::optim::OptimizerParamState>(std::move(s));
  };
  return l;
}

// The layout of `optimizer`'s kind; slots 0 where it carries none.
Layout layout_of(const torch::optim::Optimizer& optimizer) {
  const auto& groups = optimizer.param_groups();
  if (dynamic_cast<const torch::optim::AdamW*>(&optimizer)) {
    for (const auto& g : groups)
      if (static_cast<const torch::optim::AdamWOptions&>(g.options()).amsgrad()) return {};
    return adam_layout<torch::optim::AdamWParamState>();
  }
  if (dynamic_cast<const torch::optim::Adam*>(&optimizer)) {
    for (const auto& g : groups)
      if (static_cast<const torch::optim::AdamOptions&>(g.options()).amsgrad()) return {};
    return adam_layout<torch::optim::AdamParamState>();
  }
  if (dynamic_cast<const torch::optim::SGD*>(&optimizer)) {
    for (const auto& g : groups)
      if (static_cast<const torch::optim::SGDOptions&>(g.options()).momentum() == 0) return {};
    return sgd_layout();
  }
  return {};
}

std::vector<at::Tensor> parameters_of(const torch::optim::Optimizer& optimizer) {
  std::vector<at::Tensor> out;
  for (const auto& g : optimizer.param_groups())
    for (const auto& p : g.params())
      out.push_back(p);
  return out;
}

}  // namespace

int64_t inner_state_values(const torch::optim::Optimizer& optimizer) {
  const Layout l = layout_of(optimizer);
  if (l.slots == 0) return 0;
  int64_t n = 0;
  for (const at::Tensor& p : parameters_of(optimizer))
    n += 1 + l.slots * p.numel();
  return n;
}

at::Tensor pack_inner_state(const torch::optim::Optimizer& optimizer) {
  const Layout l = layout_of(optimizer);
  at::Tensor out = at::zeros({inner_state_values(optimizer)}, at::kFloat);
  if (l.slots == 0) return out;
  const auto& states = optimizer.state();
  int64_t at_value = 0;
  for (const at::Tensor& p : parameters_of(optimizer)) {
    const int64_t n = p.numel();
    const auto it = states.find(p.unsafeGetTensorImpl());
    std::vector<at::Tensor> tensors;
    if (it != states.end()) {
      out[at_value] = l.read(it->second.get(), tensors);
      for (int s = 0; s < l.slots; ++s)
        if (tensors[static_cast<size_t>(s)].defined())
          out.narrow(0, at_value + 1 + s * n, n)
              .copy_(tensors[static_cast<size_t>(s)].detach().reshape({-1}));
    }
    at_value += 1 + l.slots * n;
  }
  return out;
}

int64_t inner_state_steps(const torch::optim::Optimizer& optimizer) {
  const Layout l = layout_of(optimizer);
  if (!l.counts_steps) return 0;
  for (const at::Tensor& p : parameters_of(optimizer)) {
    const auto it = optimizer.state().find(p.unsafeGetTensorImpl());
    std::vector<at::Tensor> tensors;
    if (it != optimizer.state().end())
      return static_cast<int64_t>(l.read(it->second.get(), tensors));
  }
  return 0;
}

void unpack_inner_state(torch::optim::Optimizer& optimizer, const at::Tensor& state) {
  const int64_t expected = inner_state_values(optimizer);
  if (!state.defined() || state.dim() != 1 || state.numel() != expected ||
      state.scalar_type() != at::kFloat)
    throw std::invalid_argument(
        "an inner optimizer state of " + std::to_string(state.defined() ? state.numel() : 0) +
        " values where this replica's optimizer holds " + std::to_string(expected));
  const Layout l = layout_of(optimizer);
  if (l.slots == 0) return;
  const at::Tensor values = state.contiguous();
  auto& states = optimizer.state();
  int64_t at_value = 0;
  for (const at::Tensor& p : parameters_of(optimizer)) {
    const int64_t n = p.numel();
    const auto counter = static_cast<int64_t>(values[at_value].item<float>());
    states.erase(p.unsafeGetTensorImpl());
    if (counter > 0) {
      std::vector<at::Tensor> tensors;
      for (int s = 0; s < l.slots; ++s)
        tensors.push_back(
            values.narrow(0, at_value + 1 + s * n, n).reshape(p.sizes()).to(p.options()).clone());
      states[p.unsafeGetTensorImpl()] = l.make(counter, std::move(tensors));
    }
    at_value += 1 + l.slots * n;
  }
}

}  // namespace dtrain::train
