#include "dtrain/torch_backend/process_group.h"

#include <atomic>
#include <cstdlib>
#include <list>
#include <optional>
#include <thread>

#include "dtrain/comm/error.h"
#include "dtrain/comm/group.h"
#include "dtrain/comm/kv_store.h"
#include "dtrain/comm/tags.h"
#include "dtrain/comm/world.h"
#include "dtrain/parallel/background_worker.h"
#include "dtrain/torch_backend/backend.h"
#include "dtrain/torch_backend/staged.h"

namespace dtrain::torch_backend {
namespace {

// The user's send / recv tag inside dtrain's tag space for them (comm/tags.h).
int user_tag(int tag) {
  static const comm::TagLayout layout(comm::TagSpace::kTorch, {{"tag", 24}});
  if (tag < 0 || tag >= layout.limit(0))
    throw std::invalid_argument("dtrain backend: send / recv tags are 0.." +
                                std::to_string(layout.limit(0) - 1) + ", not " +
                                std::to_string(tag));
  return layout.make({tag});
}

// Unset: ProcessGroupDtrain::default_algorithm. Not auto: a PyTorch script's collectives
// come in many kinds (each DDP bucket size, each op and dtype), and auto calibrates every
// kind over its first calls. In a 10-step ResNet-18 run that cost 1.3x on loopback and 5x at
// 1 Gbit/s + 25 ms (the calibration's candidates each cross the long link).
std::optional<comm::Algorithm> algorithm_from_env() {
  const char* name = std::getenv("DTRAIN_ALGO");
  if (name == nullptr || *name == '\0') return std::nullopt;
  try {
    return comm::parse_algorithm(name);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("DTRAIN_ALGO: ") + e.what());
  }
}

}  // namespace

// One thread per pending send or receive, waiting for it and completing its Work: a send's
// Work must complete while an earlier receive still waits (a user may wait on the send, then
// send what lets the peer answer the receive). Joined as they finish and at shutdown.
class Waiters {
 public:
  ~Waiters() { join_all(); }
  void add(std::function<void()> wait) {
    const std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = running_.begin(); it != running_.end();) {
      if (*it->done) {
        it->thread.join();
        it = running_.erase(it);
      } else {
        ++it;
      }
    }
    auto done = std::make_shared<std::atomic<bool>>(false);
    running_.push_back({std::thread([wait = std::move(wait), done] {
                          wait();
                          *done = true;
                        }),
                        done});
  }
  void join_all() {
    std::list<Running> all;
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      all.swap(running_);
    }
    for (auto& r : all)
      r.thread.join();
  }

 private:
  struct Running {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::mutex mutex_;
  std::list<Running> running_;
};

ProcessGroupDtrain::ProcessGroupDtrain(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                       int size, std::chrono::milliseconds timeout)
    : c10d::Backend(rank, size), algorithm_(algorithm_from_env()), timeout_(timeout) {
  comm::WorldConfig config = comm::world_from_env();
  config.rank = rank;
  config.world_size = size;
  config.timeout = timeout;
  store_ = comm::KeyValueStore::adopt(store, timeout);
  group_ = comm::connect_members(*store_, "dtrain", rank, size, config, timeout);
  group_->keep_explaining_failures();  // abortable for abort(); no membership explains them
  waiters_ = std::make_unique<Waiters>();
  queue_ = std::make_unique<parallel::BackgroundWorker>("dtrain backend");
}

ProcessGroupDtrain::~ProcessGroupDtrain() {
  shutdown();
}

void ProcessGroupDtrain::shutdown() {
  queue_.reset();  // lets the jobs already called finish
  if (waiters_) waiters_->join_all();
}

void ProcessGroupDtrain::abort() {
  group_->abort("the process group was aborted");
  shutdown();
}

void ProcessGroupDtrain::check_rank(int64_t rank, const char* what) const {
  if (rank < 0 || rank >= getSize())
    throw std::invalid_argument(std::string("dtrain backend: ") + what + " rank " +
                                std::to_string(rank) + " is not a rank of a group of " +
                                std::to_string(getSize()));
}

ProcessGroupDtrain::WorkPtr ProcessGroupDtrain::enqueue(c10d::OpType type, Tensors outputs,
                                                        std::function<void()> job) {
  const std::lock_guard<std::mutex> lock(mutex_);
  if (!queue_) throw comm::CommError("dtrain backend: the process group was shut down");
  auto work = c10::make_intrusive<BackendWork>(getRank(), type, std::move(outputs), ++sequence_);
  queue_->submit([work, job = std::move(job)] {
    try {
      job();
      work->complete();
    } catch (...) {
      work->fail(std::current_exception());
    }
  });
  return work;
}

// The queue runs `works` in order: one more job after them ends when all of them have.
ProcessGroupDtrain::WorkPtr ProcessGroupDtrain::after_all(Tensors outputs,
                                                          std::vector<WorkPtr> works) {
  return enqueue(c10d::OpType::COALESCED, std::move(outputs), [works = std::move(works)] {
    for (const auto& w : works)
      w->wait();
  });
}

// An empty message: nothing crosses (both ends know its size).
ProcessGroupDtrain::WorkPtr ProcessGroupDtrain::done_now(c10d::OpType type, Tensors tensors) {
  auto work = c10::make_intrusive<BackendWork>(getRank(), type, std::move(tensors), 0);
  work->complete();
  return work;
}

ProcessGroupDtrain::WorkPtr ProcessGroupDtrain::send(Tensors& tensors, int dst, int tag) {
  return point_to_point(c10d::OpType::SEND, tensors, dst, tag);
}

ProcessGroupDtrain::WorkPtr ProcessGroupDtrain::recv(Tensors& tensors, int src, int tag) {
  return point_to_point(c10d::OpType::RECV, tensors, src, tag);
}

// Posted at once; a waiter of its own completes the Work (a receive's after writing back).
// `peer` -1: a receive from whichever rank sends first.
ProcessGroupDtrain::WorkPtr ProcessGroupDtrain::point_to_point(c10d::OpType type, Tensors& tensors,
                                                               int peer, int tag) {
  const bool sending = type == c10d::OpType::SEND;
  const char* what = sending ? "send" : "recv";
  if (tensors.size() != 1)
    throw std::invalid_argument(std::string("dtrain backend: ") + what + " takes one tensor");
  if (peer != -1 || sending) check_rank(peer, sending ? "send to" : "recv from");
  auto staged = std::make_shared<Staged>(tensors[0], /*read=*/sending, what);
  if (staged->host().numel() == 0) {
    if (peer == -1)
      throw std::invalid_argument(
          "dtrain backend: recv from any source of an empty tensor (nothing crosses to say "
          "who sent it)");
    return done_now(type, tensors);
  }
  const int wire_tag = user_tag(tag);
  auto request = std::make_shared<comm::Request>(
      sending      ? group_->isend(staged->host(), peer, wire_tag)
      : peer == -1 ? group_->irecv_from_any(staged->host(), wire_tag)
                   : group_->irecv(staged->host(), peer, wire_tag));
  auto work = c10::make_intrusive<BackendWork>(getRank(), type, tensors, 0);
  if (!sending && peer != -1) work->set_source(peer);
  waiters_->add([work, request, staged, sending, peer] {
    try {
      request->wait();
      if (!sending) staged->write_back();
      if (peer == -1) work->set_source(request->source());  // known once its message came
      work->complete();
    } catch (...) {
      work->fail(std::current_exception());
    }
  });
  return work;
}

ProcessGroupDtrain::WorkPtr ProcessGroupDtrain::recvAnysource(Tensors& tensors, int tag) {
  return point_to_point(c10d::OpType::RECVANYSOURCE, tensors, -1, tag);
}

ProcessGroupDtrain::WorkPtr ProcessGroupDtrain::barrier(const c10d::BarrierOptions& /*opts*/) {
  return enqueue(c10d::OpType::BARRIER, {}, [this] {
    at::Tensor token = at::zeros({1}, at::kInt);
    comm::AllReduceOptions o;
    o.algorithm = comm::Algorithm::kNative;  // one tiny message: no tuning
    comm::all_reduce(*group_, token, o);
  });
}

c10::intrusive_ptr<c10d::Backend> make_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                               int rank, int size,
                                               std::chrono::milliseconds timeout) {
  return c10::make_intrusive<ProcessGroupDtrain>(store, rank, size, timeout);
}

std::string all_reduce_algorithm(const c10::intrusive_ptr<c10d::Backend>& backend) {
  const auto* dtrain = dynamic_cast<const ProcessGroupDtrain*>(backend.get());
  if (dtrain == nullptr)
    throw std::invalid_argument("not a dtrain backend: " +
                                (backend ? backend->getBackendName() : std::string("none")));
  return comm::to_string(dtrain->all_reduce_algorithm());
}

}  // namespace dtrain::torch_backend
