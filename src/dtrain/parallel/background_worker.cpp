#include "dtrain/parallel/background_worker.h"

#include "dtrain/metrics/trace.h"

namespace dtrain::parallel {

BackgroundWorker::BackgroundWorker(std::string track)
    : thread_([this, track = std::move(track)] { loop(track); }) {}

BackgroundWorker::~BackgroundWorker() {
  {
    const std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

void BackgroundWorker::push(std::function<void()> job) {
  {
    const std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(std::move(job));
  }
  cv_.notify_one();
}

void BackgroundWorker::loop(const std::string& track) {
  metrics::trace::name_thread(track);
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopping, and nothing left
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job();  // a packaged task: its exception goes to the future
  }
}

}  // namespace dtrain::parallel
