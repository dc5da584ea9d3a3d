// Internal to comm (kv_store.cpp, world.cpp): the c10d store behind a KeyValueStore, which
// world.cpp's connect_members hands to Gloo for a group's rendezvous.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "dtrain/comm/kv_store.h"

namespace dtrain::comm {

struct KeyValueStore::Impl {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::Store> server;  // host(): the TCPStore that serves the others
  c10::intrusive_ptr<c10d::Store> shared;  // in_memory(): the one store its clients share
  std::string etcd;  // etcd(): the cluster's address (etcd://...), for another client
};

}  // namespace dtrain::comm
