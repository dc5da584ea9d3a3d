// One thread that runs submitted jobs in order, for work that must go on beside training
// (an outer exchange) and show up in the trace on one track of its own.
//
// Contract
// - submit() returns the job's future; the job's exception, if any, comes out of get().
// - The destructor lets the jobs already submitted finish, then joins: a job may use
//   whatever outlives the worker (declare the worker after what its jobs touch).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace dtrain::parallel {

class BackgroundWorker {
 public:
  // `track` names the thread in traces.
  explicit BackgroundWorker(std::string track);
  ~BackgroundWorker();
  BackgroundWorker(const BackgroundWorker&) = delete;
  BackgroundWorker& operator=(const BackgroundWorker&) = delete;

  template <class Job>
  auto submit(Job job) -> std::future<decltype(job())> {
    auto task = std::make_shared<std::packaged_task<decltype(job())()>>(std::move(job));
    auto result = task->get_future();
    push([task] { (*task)(); });
    return result;
  }

 private:
  void push(std::function<void()> job);
  void loop(const std::string& track);

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::thread thread_;  // last: starts after the queue exists
};

}  // namespace dtrain::parallel
