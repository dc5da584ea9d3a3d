#include "dtrain/train/elastic_side_transfer.h"

#include <ATen/ATen.h>

#include <iostream>

#include "dtrain/base/crc32c.h"
#include "dtrain/comm/error.h"
#include "dtrain/comm/group.h"
#include "dtrain/comm/kv_store.h"
#include "dtrain/parallel/elastic_sync.h"

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

}  // namespace

std::unique_ptr<SideTransfer> SideTransfer::serve(Link link, RoundStart state, std::string who) {
  std::unique_ptr<SideTransfer> t(new SideTransfer);
  t->first_ = t->first_promise_.get_future();
  t->momentum_ = t->momentum_promise_.get_future();
  SideTransfer* self = t.get();
  t->thread_ = std::thread(
      [self, link = std::move(link), state = std::move(state), who = std::move(who)]() mutable {
        try {
          self->run(std::move(link), 0, [&](comm::Group& g) {
            send_part(g, state.first, state.words);
            self->first_sent_ = true;
            send_part(g, state.momentum, {});
            acknowledge(g);
          });
        } catch (const std::exception& e) {
          std::cerr << "elastic: " << who << ": " << e.what() << std::endl;
        }
      });
  return t;
}

std::unique_ptr<SideTransfer> SideTransfer::fetch(Link link) {
  std::unique_ptr<SideTransfer> t(new SideTransfer);
  t->first_ = t->first_promise_.get_future();
  t->momentum_ = t->momentum_promise_.get_future();
  SideTransfer* self = t.get();
  t->thread_ = std::thread([self, link = std::move(link)]() mutable {
    bool first_in = false;
    try {
      self->run(std::move(link), 1, [&](comm::Group& g) {
        RoundStart start;
        start.first = receive_part(g, start.words, "state");
        self->first_promise_.set_value(std::move(start));
        first_in = true;
        std::vector<int64_t> none;
        self->momentum_promise_.set_value(receive_part(g, none, "outer momentum"));
        acknowledge(g);
      });
    } catch (...) {
      if (!first_in) self->first_promise_.set_exception(std::current_exception());
      try {
        self->momentum_promise_.set_exception(std::current_exception());
      } catch (const std::future_error&) {  // it was set: the acknowledgement failed
      }
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
