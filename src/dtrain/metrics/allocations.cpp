#include "dtrain/metrics/allocations.h"

#include <c10/core/CPUAllocator.h>

#include <atomic>
#include <mutex>

namespace dtrain::metrics {
namespace {

std::atomic<int64_t> current{0};
std::atomic<int64_t> peak{0};

struct Held {
  c10::DataPtr original;
  int64_t bytes;
};

void release(void* context) {
  auto* held = static_cast<Held*>(context);
  current -= held->bytes;
  delete held;  // frees through the original allocator's deleter
}

class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* base) : base_(base) {}
  c10::DataPtr allocate(size_t n) override {
    c10::DataPtr original = base_->allocate(n);
    void* data = original.get();
    const c10::Device device = original.device();
    auto* held = new Held{std::move(original), static_cast<int64_t>(n)};
    const int64_t now = current += held->bytes;
    int64_t seen = peak.load();
    while (now > seen && !peak.compare_exchange_weak(seen, now)) {
    }
    return {data, held, &release, device};
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

 private:
  c10::Allocator* base_;
};

}  // namespace

void track_allocations() {
  static std::once_flag once;
  std::call_once(once, [] {
    static CountingAllocator counting(c10::GetCPUAllocator());
    c10::SetCPUAllocator(&counting, /*priority=*/100);
  });
}

int64_t allocated_bytes() {
  return current.load();
}
int64_t peak_allocated_bytes() {
  return peak.load();
}
void reset_peak_allocated() {
  peak.store(current.load());
}

}  // namespace dtrain::metrics
