#include "dtrain/torch_backend/work.h"

#include <ATen/core/ivalue.h>

namespace dtrain::torch_backend {

BackendWork::BackendWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs,
                         uint64_t sequence)
    : c10d::Work(rank, type),
      outputs_(std::move(outputs)),
      future_(
          c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))),
      sequence_(sequence) {}

void BackendWork::complete() {
  finish();
  future_->markCompleted(c10::IValue(outputs_));
}

void BackendWork::fail(std::exception_ptr error) {
  finish(error);
  future_->setError(error);
}

}  // namespace dtrain::torch_backend
