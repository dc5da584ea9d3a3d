#include "dtrain/parallel/bucket_staging.h"

#include <stdexcept>

namespace dtrain::parallel {
namespace {

// A bucket reduced where it lies (on the CPU, or on its GPU by NCCL): nothing moves.
class InPlace final : public BucketStaging {
 public:
  explicit InPlace(at::Tensor flat) : flat_(std::move(flat)) {}
  void start_download() override {}
  at::Tensor& wait_download() override { return flat_; }
  void start_upload() override {}
  void finish() override {}

 private:
  at::Tensor flat_;
};

}  // namespace

std::unique_ptr<BucketStaging> BucketStaging::make(const at::Tensor& flat, bool reduced_on_device) {
  if (flat.is_cpu() || reduced_on_device) return std::make_unique<InPlace>(flat);
  if (flat.is_cuda()) return make_cuda_staging(flat);
  throw std::invalid_argument("DDP: gradient buckets on " + flat.device().str() +
                              " are not supported (cpu or cuda)");
}

}  // namespace dtrain::parallel
