#include "dtrain/train/elastic_side_transfer.h"

#include <ATen/ATen.h>

#include <iostream>

#include "dtrain/base/crc32c.h"
#include "dtrain/comm/error.h"
#include "dtrain/comm/group.h"
#include "dtrain/comm/kv_store.h"
#include "dtrain/parallel/elastic_sync.h"
#include "dtrain/parallel/float_halves.h"

namespace dtrain::train {
namespace {

uint64_t checksum(const at::Tensor& t) {
  return crc32c(t.data_ptr(), static_cast<size_t>(t.nbytes()));
}

// One part from rank 0 to rank 1 (transfer_state's checks: its size, then the checksum here).
void send_part(comm::Group& group, at::Tensor part, std::vector<int64_t> words) {
  uint64_t sum = checksum(part);
  parallel::transfer_state(group, {0}, {1}, part, words, sum);
}

at::Tensor receive_part(comm::Group& group, std::vector<int64_t>& words, const char* what) {
  at::Tensor part;
  uint64_t sum = 0;
  parallel::transfer_state(group, {0}, {1}, part, words, sum);
  if (checksum(part) != sum)
    throw comm::CommError(std::string("the round's ") + what + " arrived damaged (CRC-32C)");
  return part;
}

void acknowledge(comm::Group& group) {
  at::Tensor ack = at::ones({1}, at::kFloat);
  std::vector<int64_t> none;
  uint64_t sum = 0;
  parallel::transfer_state(group, {1}, {0}, ack, none, sum);
}

// Whatever ended a transfer, for every part still awaited (a part already in keeps it).
template <typename T>
void fail(std::promise<T>& part, const std::exception_ptr& why) {
  try {
    part.set_exception(why);
  } catch (const std::future_error&) {
  }
}

}  // namespace

std::unique_ptr<SideTransfer> SideTransfer::make() {
  std::unique_ptr<SideTransfer> t(new SideTransfer);
  t->first_ = t->first_promise_.get_future();
  t->exact_ = t->exact_promise_.get_future();
  t->momentum_ = t->momentum_promise_.get_future();
  return t;
}

std::unique_ptr<SideTransfer> SideTransfer::serve(Link link, RoundStart state, std::string who) {
  std::unique_ptr<SideTransfer> t = make();
  SideTransfer* self = t.get();
  t->thread_ = std::thread(
      [self, link = std::move(link), state = std::move(state), who = std::move(who)]() mutable {
        try {
          self->run(std::move(link), 0, [&](comm::Group& g) {
            const at::Tensor first = state.first.contiguous();
            send_part(g, parallel::upper_halves(first), state.words);
            send_part(g, parallel::upper_halves(state.inner.contiguous()), {});
            self->first_sent_ = true;
            send_part(g, parallel::lower_halves(first), {});
            send_part(g, state.momentum, {});
            acknowledge(g);
          });
        } catch (const std::exception& e) {
          std::cerr << "elastic: " << who << ": " << e.what() << std::endl;
        }
      });
  return t;
}

std::unique_ptr<SideTransfer> SideTransfer::fetch(Link link, int64_t first_values,
                                                  int64_t inner_values) {
  std::unique_ptr<SideTransfer> t = make();
  SideTransfer* self = t.get();
  t->thread_ = std::thread([self, link = std::move(link), first_values, inner_values]() mutable {
    const auto fail_all = [self](const std::exception_ptr& why) {
      fail(self->first_promise_, why);
      fail(self->exact_promise_, why);
      fail(self->momentum_promise_, why);
    };
    try {
      self->run(std::move(link), 1, [&](comm::Group& g) {
        RoundStart start;
        const at::Tensor upper = receive_part(g, start.words, "state");
        start.first = parallel::join_halves(upper, {}, first_values);
        std::vector<int64_t> none;
        start.inner =
            parallel::join_halves(receive_part(g, none, "inner optimizer state"), {}, inner_values);
        self->first_promise_.set_value(std::move(start));
        const at::Tensor lower = receive_part(g, none, "exact state");
        self->exact_promise_.set_value(parallel::join_halves(upper, lower, first_values));
        self->momentum_promise_.set_value(receive_part(g, none, "outer momentum"));
        acknowledge(g);
      });
    } catch (const std::invalid_argument& e) {  // join_halves: a donor's model of another size
      fail_all(std::make_exception_ptr(comm::CommError(e.what())));
    } catch (...) {
      fail_all(std::current_exception());
    }
  });
  return t;
}

void SideTransfer::run(Link link, int rank, const std::function<void(comm::Group&)>& body) {
  std::unique_ptr<comm::Group> group;
  try {
    group =
        comm::connect_members(*link.store, link.name, rank, 2, link.world, link.connect_timeout);
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      if (aborted_) throw comm::CommError("the mid-round transfer was given up");
      group_ = group.get();
    }
    body(*group);
  } catch (...) {
    const std::lock_guard<std::mutex> lock(mutex_);
    group_ = nullptr;
    done_ = true;
    throw;
  }
  const std::lock_guard<std::mutex> lock(mutex_);
  group_ = nullptr;
  done_ = true;
}

bool SideTransfer::done() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return done_;
}

void SideTransfer::abort() {
  const std::lock_guard<std::mutex> lock(mutex_);
  aborted_ = true;
  if (group_) group_->abort("the mid-round transfer was given up");
}

SideTransfer::~SideTransfer() {
  abort();
  if (thread_.joinable()) thread_.join();
}

}  // namespace dtrain::train
