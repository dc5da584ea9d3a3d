#include "dtrain/parallel/pipeline/block_times.h"

#include <torch/torch.h>

#include "dtrain/base/device.h"
#include "dtrain/metrics/timer.h"

namespace dtrain::parallel::pipeline {

std::vector<double> measure_block_times(torch::nn::Sequential& model, const at::Tensor& input,
                                        int repeats) {
  const size_t n = model->size();
  std::vector<double> total(n, 0.0);
  const c10::Device device = input.device();
  for (int rep = 0; rep <= repeats; ++rep) {  // pass 0 warms up
    at::Tensor x = input;
    for (size_t b = 0; b < n; ++b) {
      const at::Tensor in = x.detach().requires_grad_(b > 0);
      synchronize(device);
      const auto t0 = metrics::Clock::now();
      const at::Tensor out = model->begin()[static_cast<std::ptrdiff_t>(b)].forward(in);
      out.backward(at::ones_like(out));
      synchronize(device);
      if (rep > 0) total[b] += metrics::since(t0);
      x = out;
    }
  }
  for (auto& t : total)
    t /= std::max(1, repeats);
  return total;
}

}  // namespace dtrain::parallel::pipeline
