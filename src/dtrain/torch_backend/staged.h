// Internal to torch_backend: a caller's tensor as comm moves it, contiguous in host memory.
// A contiguous CPU tensor is used as it is; another (CUDA, strided) is copied to the host at
// the call, on the caller's thread and CUDA stream, where the operation reads it, and back by
// write_back() once the operation is done.
#pragma once

#include <ATen/ATen.h>

#include <stdexcept>
#include <string>

namespace dtrain::torch_backend {

class Staged {
 public:
  Staged(const at::Tensor& user, bool read, const char* operation) : user_(user) {
    if (user.is_sparse())
      throw std::invalid_argument(std::string("dtrain backend: ") + operation +
                                  " of a sparse tensor is not supported");
    if (user.device().is_cpu() && user.is_contiguous())
      host_ = user;
    else if (read)
      host_ = user.to(at::kCPU).contiguous();
    else
      host_ = at::empty(user.sizes(), user.options().device(at::kCPU));
  }
  at::Tensor& host() { return host_; }
  void write_back() {
    if (!host_.is_same(user_)) user_.copy_(host_);
  }

 private:
  at::Tensor user_, host_;
};

}  // namespace dtrain::torch_backend
