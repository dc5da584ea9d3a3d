// The rendezvous host's socket: bound to the address it was given only, and a clear error
// when its port is taken.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cerrno>

#include "../support/sockets.h"
#include "dtrain/comm/error.h"
#include "dtrain/comm/launch.h"
#include "dtrain/comm/rendezvous.h"

namespace dtrain {
namespace {

// Every 127.x.y.z address reaches this host: a socket on all interfaces would accept a
// connection to 127.0.0.2, one bound to 127.0.0.1 alone refuses it.
TEST(RendezvousTest, ListensOnlyOnTheGivenAddress) {
  const int port = comm::pick_free_port();
  const int fd = comm::listen_only_on("127.0.0.1", port);
  EXPECT_EQ(testing::connect_error("127.0.0.1", port), 0);
  EXPECT_EQ(testing::connect_error("127.0.0.2", port), ECONNREFUSED);
  try {
    comm::listen_only_on("127.0.0.1", port);
    ADD_FAILURE() << "a second listener on a taken port";
  } catch (const comm::CommError& e) {
    EXPECT_NE(std::string(e.what()).find("already in use"), std::string::npos) << e.what();
  }
  close(fd);
  EXPECT_THROW(comm::listen_only_on("192.0.2.1", port), comm::CommError);  // not this host's
}

}  // namespace
}  // namespace dtrain
